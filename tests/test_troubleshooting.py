"""docs/troubleshooting.md has an entry for every error the package raises on purpose, and the
command line's one-line errors point at it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers import github_anchor

from hp_mlm.ops import cli
from hp_mlm.ops.troubleshooting import BY_TYPE, ENTRIES, PAGE, entry_for

ROOT = Path(__file__).resolve().parents[1]
PAGE_TEXT = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


def raising_functions() -> set[str]:
    """``module.function`` of every function in hp_mlm whose body raises a call (``raise X(...)``)."""
    found = set()
    for path in (ROOT / "hp_mlm").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT / "hp_mlm").with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = {
                    id(n)
                    for f in ast.walk(function)
                    if f is not function and isinstance(f, ast.FunctionDef)
                    for n in ast.walk(f)
                }
                if any(
                    isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and id(n) not in inner
                    for n in ast.walk(function)
                ):
                    found.add(f"{module}.{function.name}")
    return found


def entries_on_the_page() -> dict[str, set[str]]:
    """Anchor -> the functions its "Raised by:" line names."""
    entries = {}
    for block in re.split(r"^## ", PAGE_TEXT, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        raised = re.search(r"^Raised by: (.+?)(?:\n\n|\n\*)", body, re.S | re.M)
        assert raised, f"entry {heading!r} says where it is raised"
        entries[github_anchor(heading)] = set(re.findall(r"`([\w.]+)`", raised.group(1)))
    return entries


def test_the_scan_finds_raising_functions_of_every_kind():
    found = raising_functions()
    assert {"training.check_finite", "common.out_of_memory_in", "hub.require_hub", "course.checking.run"} <= found
    assert "ops.job.run_job" not in found


def test_every_raising_function_has_an_entry_and_every_entry_a_raising_function():
    listed = {function for functions in ENTRIES.values() for function in functions}
    assert raising_functions() - listed == set(), "add these to hp_mlm/ops/troubleshooting.py and the page"
    assert listed - raising_functions() == set(), "these no longer raise: remove them"


def test_the_page_and_the_table_name_the_same_entries_and_functions():
    page = entries_on_the_page()
    assert page == {anchor: set(functions) for anchor, functions in ENTRIES.items()}
    assert set(BY_TYPE.values()) <= set(page)
    assert PAGE.endswith("docs/troubleshooting.md")


@pytest.mark.parametrize(
    ("argv", "anchor"),
    [
        (["train", "--profile", "smoke", "--split", "train[:x]"], "the-split-selects-no-rows-or-is-malformed"),
        (["train", "--profile", "smoke", "--batch-size", "0"], "a-setting-is-out-of-range-or-unknown"),
        (["train", "--profile", "smoke", "--dataset", "no/such/file.txt"], "the-data-cannot-be-read"),
        (["predict", "no mask here", "--model", "hp_mlm:smoke-bert"], "fill-mask-and-targets"),
        (["evaluate", "--profile", "smoke", "--model", "./no_such_model"], "the-model-cannot-be-loaded"),
        (["evaluate", "--model", "hp_mlm:smoke-bert", "--dataset", "./no_such_data.txt"], "the-data-cannot-be-read"),
        (["train", "--profile", "smoke", "--probes", "no_such_probes.jsonl"], "the-probes-file-or-the-examples-file"),
        (
            ["predict", "Harry [MASK].", "--profile", "smoke", "--trained-model", "no_such.zip"],
            "a-handed-out-trained-model",
        ),
        (["handout", "--profile", "smoke"], "a-handed-out-trained-model"),
    ],
)
def test_a_deliberate_error_at_the_command_line_ends_with_its_entry(argv, anchor, tmp_path, capsys):
    status = cli.main([*argv, "--output-dir", str(tmp_path)] if argv[0] in ("train", "handout") else argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert err[0].endswith(f" (help: {PAGE}#{anchor})"), err[0]


def test_an_error_of_a_kind_is_matched_by_its_type_wherever_it_is_raised():
    from hp_mlm.common import OutOfMemory
    from hp_mlm.hub import HubUnavailableError

    assert entry_for(HubUnavailableError("no network")) == "the-hub-cannot-be-reached"
    assert entry_for(OutOfMemory("out of memory")) == "out-of-memory"
    assert entry_for(ValueError("raised outside the package")) is None
