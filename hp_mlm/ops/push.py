"""Push a saved model to the Hugging Face Hub (``--push-to-hub``): the token check, then the upload.

Operations: the main job checks the token before training (so a missing login fails at once, not
after an hour) and uploads the model folder, model card included, at the end.
"""

from __future__ import annotations

from pathlib import Path


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


def upload_model(model_dir: Path, repo_id: str) -> str:
    """Upload a saved model folder to the Hub repository ``repo_id`` (created if missing) with
    ``huggingface_hub``; returns the repository URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=hub_token(repo_id))
    url = api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(
        folder_path=str(model_dir), repo_id=repo_id, commit_message="Upload a model fine-tuned with hp-mlm"
    )
    return str(url)
