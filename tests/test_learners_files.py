"""A learner's own files never break the tests: after the notebooks were opened and run in JupyterLab (a
``.ipynb_checkpoints/`` folder of copies, notebooks executed in place with their outputs and widget state
autosaved), the checks about what the repository holds still read what git holds, and pytest collects no
copy. Run over a copy of the repository that has such files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, _tracked, committed, committed_notebook, committed_text

#: The checks that read the committed notebooks and pages, run in the copy (those that need no model).
CHECKS = [
    "tests/test_links.py",
    "tests/test_notebooks.py",
    "tests/test_notebook_files.py",
    "tests/test_plots.py::test_no_checked_notebook_cell_compares_a_figure_and_no_widget_is_saved",
    "tests/test_house_rules.py::test_no_fault_number_from_outside_the_repository",
    "tests/test_versions.py::test_colab_installs_the_package_with_its_dependencies",
    "tests/test_architecture.py::test_the_architecture_page_names_what_each_notebook_imports",
]
WIDGET_OUTPUT = {
    "output_type": "display_data",
    "metadata": {},
    "data": {
        "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0, "model_id": "ab12"},
        "text/plain": "  0%|          | 0/480 [00:00<?, ?it/s]",
    },
}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def learners_copy(tmp_path_factory) -> Path:
    """The repository's files in a git checkout of their own, then what JupyterLab leaves: notebook 03
    executed in place (a progress-bar widget output and the widgets' state autosaved, a traceback) and a
    checkpoint copy of every notebook under ``notebooks/.ipynb_checkpoints/``.

    The files copied are git's, as the tests read them (``helpers.committed_text``): every notebook as git's
    index holds it, never as a session in this checkout left it (a learner who ran notebooks 03 and 04 in
    JupyterLab here has them autosaved with outputs and widget state); the other tracked files from disk."""
    if _tracked(ROOT) is None:
        pytest.skip("not a git checkout: the committed files cannot be told from a learner's")
    copy = tmp_path_factory.mktemp("learner") / "hp-mlm"
    for name in _tracked(ROOT):
        source, target = ROOT / name, copy / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.suffix == ".ipynb":
                target.write_text(committed_text(source), encoding="utf-8")
            else:
                shutil.copy2(source, target)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    notebooks = copy / "notebooks"
    saved = notebooks / ".ipynb_checkpoints"
    saved.mkdir()
    for path in sorted(notebooks.glob("*.ipynb")):
        shutil.copy2(path, saved / f"{path.stem}-checkpoint.ipynb")
    ran = notebooks / "03_training.ipynb"
    nb = json.loads(ran.read_text(encoding="utf-8"))
    training = next(
        c for c in nb["cells"] if c["cell_type"] == "code" and "history = train(plan" in "".join(c["source"])
    )
    training["outputs"] = [WIDGET_OUTPUT, *training["outputs"]]
    training["execution_count"] = 7
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    first["outputs"] = [{"output_type": "error", "ename": "KeyboardInterrupt", "evalue": "", "traceback": []}]
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    ran.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    shutil.copy2(ran, saved / "03_training-checkpoint.ipynb")
    (notebooks / "Untitled.ipynb").write_text(json.dumps({**nb, "cells": []}), encoding="utf-8")
    return copy


def test_the_committed_notebooks_are_git_s_not_the_learner_s(learners_copy):
    found = committed("notebooks/**/*.ipynb", learners_copy)
    assert found and not any(".ipynb_checkpoints" in p.parts or p.name == "Untitled.ipynb" for p in found)
    assert [p.name for p in committed("notebooks/*.ipynb", learners_copy)] == sorted(
        p.name for p in (ROOT / "notebooks").glob("0*.ipynb")
    )
    held = committed_notebook(learners_copy / "notebooks" / "03_training.ipynb", learners_copy)
    assert "widgets" not in held["metadata"]  # the autosaved state is the learner's, not the repository's


def test_the_checks_pass_in_a_copy_a_learner_ran_in_jupyterlab(learners_copy):
    env = {**os.environ, "PYTHONPATH": str(learners_copy), "HP_MLM_PROFILE": "smoke"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *CHECKS, "-q", "-p", "no:cacheprovider"],
        cwd=learners_copy,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:]


def test_pytest_collects_no_checkpoint_copy_of_a_notebook(learners_copy):
    env = {**os.environ, "PYTHONPATH": str(learners_copy), "HP_MLM_PROFILE": "smoke"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval-lax", "--nbval-current-env", "notebooks"],
        cwd=learners_copy,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "03_training.ipynb::" in done.stdout and ".ipynb_checkpoints" not in done.stdout, done.stdout[-2000:]
