"""Notebooks 00-04 walked on a learner's book as learners have one: a plain .txt with chapter headings, chapter
numbers alone on a line and paragraphs between blank lines (``MY_TEXT`` sets ``HP_MLM_DATASET``), in the smoke
profile. Each runs to its end; 03 follows the book's names and 04 shows them and what the book taught."""

from __future__ import annotations

import json
from importlib import resources

import nbformat
from helpers import ROOT
from nbclient import NotebookClient

NOTEBOOKS = ROOT / "notebooks"


def book(path) -> str:
    """A book-shaped text written from the course's own smoke corpus: 12 chapters, each a heading line, its
    number alone on a line, and paragraphs of three of the corpus's lines, blank lines between."""
    lines = (resources.files("hp_mlm") / "corpora" / "smoke_corpus.txt").read_text(encoding="utf-8").splitlines()
    paragraphs = [" ".join(lines[i : i + 3]) for i in range(0, len(lines), 3)]
    chapters = []
    for n in range(12):
        chapters += [f"CHAPTER {n + 1}", str(n + 1), *paragraphs[n::12]]
    path.write_text("\n\n".join(chapters) + "\n", encoding="utf-8")
    return str(path)


def run(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError at the first cell that fails
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_notebooks_00_to_04_run_to_their_end_on_a_book_and_speak_of_its_names(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    settings = {"HP_MLM_PROFILE": "smoke", "HP_MLM_DATASET": book(tmp_path / "my_book.txt"), "HP_MLM_EPOCHS": "6"}
    for name, value in {**settings, "HP_MLM_OUTPUT_DIR": str(out), "HP_MLM_PROGRESS": "0", "TQDM_DISABLE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HP_MLM_TRAINED_MODEL", raising=False)
    printed = {stem: run(f"{stem}.ipynb") for stem in ("00_setup", "01_tokenising", "02_masking", "03_training")}
    assert "my_book.txt [train]" in printed["01_tokenising"]  # the whole book, never a profile's slice
    assert "this run: " in printed["03_training"] and "passes over the text" in printed["03_training"]
    history = json.loads((out / "history.json").read_text())
    followed = history["watch"]["names"]
    assert len(followed) >= 5 and all(name.isalpha() for name in followed)
    assert all(set(frame["names"]) == set(followed) for frame in history["watch"]["frames"])
    assert history["watch"]["examples"] == [[t, a] for t, a in map(tuple, history["watch"]["examples"])]
    evaluated = run("04_evaluation.ipynb")
    assert f"{len(followed)} names followed" in evaluated
    demo = "Mira [MASK] crossed"  # the course's own demo is never passed off as the learner's book
    assert demo not in evaluated or f"the course's own example: {demo}" in evaluated
