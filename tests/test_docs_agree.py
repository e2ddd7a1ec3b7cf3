"""The pages agree with the course and with each other: how many notebooks there are, each notebook's
time and memory (one source: benchmarks/results/notebook_times.json), every schedule covering every
notebook, and the loss of a uniform guess called what it is."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from helpers import committed  # noqa: E402
from test_links import markdown_of  # noqa: E402
from tidy import SCHEDULE, TEACHING_ROW, refresh_teaching  # noqa: E402

NOTEBOOKS = committed("notebooks/0*.ipynb")  # markdown_of reads them as the repository holds them
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEACHING = ROOT / "docs" / "teaching.md"


def said_counts(text: str) -> list[int]:
    """Every "N notebooks" / "all N notebooks" a text says (``N`` a digit or a word), as numbers."""
    words = "|".join(NUMBERS)
    found = re.findall(rf"\b({words}|\d+) (?:course )?notebooks\b", text, re.I)
    return [int(n) if n.isdigit() else NUMBERS.index(n.lower()) for n in found]


@pytest.mark.parametrize("path", PAGES + NOTEBOOKS, ids=lambda p: p.name)
def test_every_page_counts_the_notebooks_there_are(path):
    counts = said_counts(markdown_of(path))
    assert all(n == len(NOTEBOOKS) for n in counts), f"{path.name} says {counts}; there are {len(NOTEBOOKS)}"


def test_the_count_check_catches_another_count():
    assert said_counts("Six notebooks, each an episode; all seven notebooks") == [6, 7]


def test_teachings_table_is_the_notebooks_minutes_and_the_measured_times_and_memory():
    text = TEACHING.read_text(encoding="utf-8")
    rows = TEACHING_ROW.findall(text)
    assert [number for number, _, _ in rows] == [p.name[:2] for p in NOTEBOOKS], "one row per notebook, in order"
    assert refresh_teaching(text) == text, "run python notebooks/tidy.py: the table differs from what was measured"
    measured = json.loads((ROOT / "benchmarks" / "results" / "notebook_times.json").read_text(encoding="utf-8"))
    changed = measured["profiles"]["offline"]["03_training"]["seconds"] + 6000  # 100 min more: no time of the table
    measured["profiles"]["offline"]["03_training"]["seconds"] = changed  # the check sees a changed time
    assert f"| {changed / 60:.0f} min |" not in text


DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:min|minutes|s|seconds)\b")


#: The evidence page quotes runs with their times, dates and commands: it is where measured times belong.
GUIDES = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "results.md"]


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_no_guide_writes_a_notebooks_time_by_hand(path):
    """A notebook's time is said once, in the measured table; elsewhere the guides point at it."""
    text = path.read_text(encoding="utf-8")
    generated = {m.group(0) for m in TEACHING_ROW.finditer(text)}
    for block in SCHEDULE.finditer(text):  # the 3-hour schedule, written by tidy.py from the measured times
        generated |= set(block.group(2).splitlines())
    for line in path.read_text(encoding="utf-8").splitlines():
        if line in generated or not re.search(r"(?<![-\d])\b0[0-6]\b(?!-)", line):  # a notebook, not a date
            continue
        if "break" in line or "time_budget" in line.lower().replace(" ", "_") or "tutorial reports" in line:
            continue  # the room's minutes, a setting's, a citation's
        assert not DURATION.search(line), f"{path.name}: {line.strip()!r} states a notebook's time by hand"


def schedules() -> dict[str, str]:
    text = TEACHING.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    return {p.partition("\n")[0]: p for p in parts if p.startswith("Schedule")}


def test_teaching_has_three_schedules():
    assert len(schedules()) == 3, sorted(schedules())


@pytest.mark.parametrize("schedule", sorted(schedules()))
def test_every_schedule_places_every_notebook(schedule):
    """A schedule says where each notebook goes: in the room, after it, or left out."""
    text = schedules()[schedule]
    placed = set(re.findall(r"\b0\d\b", text))
    for first, last in re.findall(r"\b(0\d) ?(?:to|-) ?(0\d)\b", text):  # "00 to 06", "00-06"
        placed |= {f"{n:02d}" for n in range(int(first), int(last) + 1)}
    missing = [p.name[:2] for p in NOTEBOOKS if p.name[:2] not in placed]
    assert not missing, f"{schedule!r} does not place notebooks {missing}"


@pytest.mark.parametrize("path", PAGES + NOTEBOOKS, ids=lambda p: p.name)
def test_the_loss_of_a_uniform_guess_is_a_ceiling_not_a_floor(path):
    """ln(vocabulary size) is the loss of guessing uniformly: a trained model's loss must get under it."""
    for sentence in re.split(r"(?<=[.:;])\s", markdown_of(path)):
        if re.search(r"uniform guess|ln\(", sentence):
            assert not re.search(r"\bfloor\b", sentence), f"{path.name}: {sentence.strip()!r}"


#: Phrasings that read a committed run's values into the prose, which a learner's own run may not show.
PINNED = re.compile(r"\bhere about \d|\bin the committed \(?\w*\)? ?outputs?,|\banswers \"[^\"]+\" with `##", re.I)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_prose_reads_a_committed_runs_values(path):
    """What depends on the run is printed by a cell; the prose says what to look for."""
    assert not PINNED.findall(markdown_of(path)), path.name


def test_the_pinned_prose_check_catches_the_old_sentences():
    old = 'In the committed (offline) outputs, the fine-tuned model answers "Harry [MASK]" with `##wright`'
    assert PINNED.search(old) and PINNED.search("it is a few points (here about 6)")
