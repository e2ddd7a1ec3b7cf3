"""Helpers shared by the tests (a small corpus written for them, tokenising to plain rows, the command line)."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

#: The repository these tests belong to.
ROOT = Path(__file__).resolve().parents[1]
#: Folders a learner's tools make beside the course's files (JupyterLab's autosaved copies of notebooks).
LEARNERS_FOLDERS = (".ipynb_checkpoints",)

#: A small corpus written for these tests (original sentences).
SENTENCES = [
    "Mira Ashdown crossed the Silver Lake at dawn.",
    "Professor Quillon taught potions below the Great Hall.",
    "The Lantern Tower glowed above the misty island.",
    "Oren Blackthistle lost his silverleaf quill again.",
    "Nell Cobbing found a mistfox in the Glass Greenhouse.",
    "Hob Tanner rowed the ferry across the Silver Lake.",
    "Jasper Hollin read about thornbacks in the Hollow Library.",
    "Headmistress Winterbourne rang the Mist Bell at midnight.",
]


def tokenised(tokenizer, texts, max_length=64):
    """Tokenised rows as plain dicts (input_ids, attention_mask, special_tokens_mask)."""
    enc = tokenizer(
        list(texts),
        truncation=True,
        max_length=max_length,
        return_special_tokens_mask=True,
        return_token_type_ids=False,
    )
    return [{k: enc[k][i] for k in ("input_ids", "attention_mask", "special_tokens_mask")} for i in range(len(texts))]


def run_cli(*args, env=None, timeout=300):
    """``python -m hp_mlm ARGS`` in a subprocess, progress bars off; returns the CompletedProcess."""
    full_env = {**os.environ, "HP_MLM_PROGRESS": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hp_mlm", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def fit(model, tokenizer, rows, settings, callbacks=(), **plan):
    """Notebook 03's two halves: ``plan_training`` (with ``settings``' ``auto`` values settled for a
    new head, as ``prepare`` would for the smoke BERT), then ``train`` as the main job runs it
    (``job.run_training``, checkpoints last). Returns the history."""
    from hp_mlm.callbacks import SaveCheckpoints
    from hp_mlm.config import resolve_auto
    from hp_mlm.ops.job import run_training
    from hp_mlm.training import plan_training

    resolved = resolve_auto(settings, new_head=True)
    planned = plan_training(model, tokenizer, rows, resolved, **plan)
    return run_training(planned, [*callbacks, SaveCheckpoints(planned)])


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation other than ``-`` and ``_``
    dropped, each space a ``-`` (``## `max_length` above the model's limit`` -> ``max_length-above-the-models-limit``)."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def markdown_anchors(text: str) -> set[str]:
    """The anchors of every heading (``#`` to ``######``) in a Markdown text, outside code blocks."""
    import re

    anchors, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            anchors.add(github_anchor(match.group(1)))
    return anchors


@functools.cache
def _tracked(root: Path) -> frozenset[str] | None:
    """The paths git tracks under ``root`` (its index), relative and POSIX; None outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return frozenset(listed.stdout.decode("utf-8").split("\0")) - {""}


def committed(pattern: str, root: Path = ROOT) -> list[Path]:
    """The repository's files that ``root.glob(pattern)`` finds (``"notebooks/*.ipynb"``, ``"docs/*.md"``,
    ``"notebooks/**/*.ipynb"``), sorted, less what a learner made beside them: nothing inside a
    ``.ipynb_checkpoints/`` folder (JupyterLab's autosaved copies), and no notebook git does not track
    (an ``Untitled.ipynb``; outside a git checkout, a downloaded archive, every notebook on disk counts).

    Tests about what the repository holds read these (notebooks with :func:`committed_notebook`), so that
    the notebooks a learner opened, ran and autosaved in JupyterLab never fail them."""
    tracked = _tracked(root)
    found = [
        p for p in root.glob(pattern) if p.is_file() and not set(p.relative_to(root).parts) & set(LEARNERS_FOLDERS)
    ]
    if tracked is None:
        return sorted(found)
    return sorted(p for p in found if p.suffix != ".ipynb" or p.relative_to(root).as_posix() in tracked)


@functools.cache
def committed_text(path: Path, root: Path = ROOT) -> str:
    """A file's text as the repository holds it. A tracked notebook is read from git's index (``git show
    :path``: what was committed, or staged with ``git add``), never as a run in place left it (outputs,
    widget state, a changed kernel): stage a notebook you re-executed before its tests read it. Any other
    file, or any file outside a git checkout, is read from disk."""
    path = Path(path)
    relative = path.resolve().relative_to(root).as_posix()
    if path.suffix == ".ipynb" and relative in (_tracked(root) or ()):
        shown = subprocess.run(["git", "-C", str(root), "show", f":{relative}"], capture_output=True)
        if shown.returncode == 0:
            return shown.stdout.decode("utf-8")
    return path.read_text(encoding="utf-8")


def committed_notebook(path: Path, root: Path = ROOT) -> dict:
    """A notebook as the repository holds it (:func:`committed_text`), parsed: a fresh dict each call."""
    return json.loads(committed_text(Path(path), root))
