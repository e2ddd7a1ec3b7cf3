"""Push a saved model to the Hugging Face Hub (``--push-to-hub``): the token check, then the upload.

Operations: the main job checks the token and that the Hub answers before training (so a missing
login or a dead network fails at once, not after an hour), writes everything the run produced, then
uploads the model folder, model card included; an upload that fails ends in one line that says the
run is kept and how to upload it later.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from hp_mlm.hub import HubUnavailableError


class PushError(HubUnavailableError):
    """The model cannot go to the Hub, or its upload failed; the local run is kept."""


def hub_token(repo_id: str) -> str:
    """The Hugging Face token to upload with (``HF_TOKEN`` or ``hf auth login``).

    Raises:
        ValueError: no token is available (says how to log in), or ``repo_id`` is not ``user/name``.
    """
    from huggingface_hub import get_token

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"push_to_hub needs a repository id like 'your-name/hp-mlm-bert', got {repo_id!r}")
    token = get_token()
    if not token:
        raise ValueError(f"push_to_hub {repo_id}: no Hugging Face token found; run `hf auth login` or set HF_TOKEN")
    return token


def check_push(repo_id: str) -> None:
    """Before training: a token (:func:`hub_token`) and a Hub that answers (``hub.hub_reachable``).

    Raises:
        ValueError: no token, or a bad ``repo_id``.
        PushError: offline mode is set, or the Hub does not answer (a proxy, no network).
    """
    from hp_mlm.hub import hub_reachable

    hub_token(repo_id)
    if not hub_reachable():
        raise PushError(
            f"push_to_hub {repo_id}: the Hugging Face Hub cannot be reached (no network, a proxy that does not "
            "answer, or HF_HUB_OFFLINE set); train without push_to_hub and upload the saved model later"
        )


def upload_model(model_dir: Path, repo_id: str) -> str:
    """Upload a saved model folder to the Hub repository ``repo_id`` (created if missing) with
    ``huggingface_hub``; returns the repository URL.

    Raises:
        PushError: the upload failed (the network, or the Hub refused it); the folder stays
            as it was and the message gives the command that uploads it later (each path one word of the
            shell, quoted where it holds a space: Colab's ``My Drive``).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from hp_mlm.common import error_summary
    from hp_mlm.hub import _network_errors

    api = HfApi(token=hub_token(repo_id))
    try:
        url = api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(
            folder_path=str(model_dir), repo_id=repo_id, commit_message="Upload a model fine-tuned with hp-mlm"
        )
    except (*_network_errors(), HfHubHTTPError) as error:
        raise PushError(
            f"push_to_hub {repo_id}: the upload failed ({error_summary(error)}); the run is saved in "
            f"{str(model_dir.parent)!r}: upload it later with `{shlex.join(['hf', 'upload', repo_id, str(model_dir)])}`"
        ) from error
    return str(url)
