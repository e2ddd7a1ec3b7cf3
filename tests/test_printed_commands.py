"""Commands the course prints for a learner to copy work as printed: pasted into a shell, each path is one word,
even a Colab Drive folder with spaces in it ("My Drive/hp run")."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from hp_mlm.config import get_settings
from hp_mlm.ops.handout import make_handout
from hp_mlm.ops.push import PushError, upload_model


def words_a_shell_sees(message: str, program: str) -> list[str]:
    """The words the command in backticks of ``message`` (starting with ``program``) gives ``program``, run by bash
    with ``program`` a stand-in that prints each of its arguments on a line."""
    (command,) = [c for c in re.findall(r"`([^`]+)`", message) if c.startswith(f"{program} ")]
    if shutil.which("bash") is None:
        pytest.skip("no bash here to paste the command into")
    stand_in = f"{program}() {{ printf '%s\\n' \"$@\"; }}\n{command}"
    return subprocess.run(["bash", "-c", stand_in], capture_output=True, text=True, check=True).stdout.splitlines()


def test_the_upload_later_command_of_a_failed_push_keeps_a_drive_path_one_word(tmp_path, monkeypatch):
    import httpx
    import huggingface_hub

    class DeadApi:
        def __init__(self, token=None):
            self.token = token

        def create_repo(self, repo_id, exist_ok=False):
            raise httpx.ConnectError("[Errno 111] Connection refused")

    monkeypatch.setattr(huggingface_hub, "HfApi", DeadApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake_token")
    model_dir = tmp_path / "My Drive" / "hp run" / "model"
    model_dir.mkdir(parents=True)
    with pytest.raises(PushError) as failed:
        upload_model(model_dir, "someone/x")
    assert words_a_shell_sees(str(failed.value), "hf") == ["upload", "someone/x", str(model_dir)]


def test_the_train_command_a_handout_asks_for_names_the_folder_as_one_word(tmp_path):
    output_dir = tmp_path / "My Drive" / "hp run"
    settings = get_settings("smoke", environ={}, output_dir=str(output_dir))
    with pytest.raises(FileNotFoundError) as refused:  # no model trained there yet
        make_handout(settings)
    said = words_a_shell_sees(str(refused.value), "python")
    assert said == ["-m", "hp_mlm", "train", "--profile", "smoke", "--output-dir", str(output_dir)]
