"""The course as a course: episode frames, exercises with solutions, quizzes whose computed keys the
package computes, figure descriptions, and the README's schedule generated from the notebooks."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from helpers import committed_notebook

from hp_mlm.config import get_settings
from hp_mlm.course.episodes import (
    MEASURED_ON,
    ROOM_BREAK,
    ROOM_CHECK,
    TRAINING_SECONDS,
    answer_quiz,
    episode_minutes,
    frame_table,
    load_quiz,
    quiz_text,
    room_schedule,
    show_quiz,
    training_notice,
    widgets_front_end,
)
from hp_mlm.masking import mask_tokens
from hp_mlm.tokens import padding_share, plan_batches

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
STEMS = [
    "00_setup",
    "01_tokenising",
    "02_masking",
    "03_training",
    "04_evaluation",
    "05_going_further",
    "06_the_library_way",
]
VERBS = {
    "Explain",
    "Use",
    "Choose",
    "Compute",
    "Count",
    "Write",
    "Compare",
    "Interpret",
    "Evaluate",
    "Design",
    "Measure",
}

sys.path.insert(0, str(NOTEBOOKS))
from tidy import FRAME_TABLE, episodes, machine_times  # noqa: E402


def load(path: Path) -> dict:
    """A notebook as the repository holds it, not as a run in place left it (``helpers.committed_notebook``)."""
    return committed_notebook(path)


def text(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def bullets(markdown: str, heading: str) -> list[str]:
    """The bullet lines under ``**heading**`` (or ``## heading``), up to the next heading."""
    match = re.search(rf"(?:\*\*{heading}\*\*|## {heading})[^\n]*\n\n((?:- .*\n?)+)", markdown)
    return [line[2:] for line in match.group(1).strip().splitlines()] if match else []


def frame_cell(nb: dict) -> str:
    return next(text(c) for c in nb["cells"] if c["cell_type"] == "markdown" and "**Objectives**" in text(c))


# --- episode frames ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stem", STEMS)
def test_every_notebook_is_an_episode_with_questions_objectives_minutes_and_key_points(stem):
    nb = load(NOTEBOOKS / f"{stem}.ipynb")
    assert nb["cells"][1]["cell_type"] == "markdown" and "**Objectives**" in text(nb["cells"][1]), (
        "the frame follows the badge and the outputs note"
    )
    frame = frame_cell(nb)
    assert 1 <= len(bullets(frame, "Questions")) <= 3
    objectives = bullets(frame, "Objectives")
    assert 2 <= len(objectives) <= 4
    assert all(o.split()[0] in VERBS for o in objectives), objectives
    assert "estimates" in frame
    minutes = episode_minutes(nb)
    assert minutes["teaching"] > 0 and minutes["exercises"] > 0
    points = [b for c in nb["cells"] if c["cell_type"] == "markdown" for b in bullets(text(c), "Key points")]
    assert 3 <= len(points) <= 5


@pytest.mark.parametrize("stem", STEMS)
def test_the_frames_time_table_is_the_one_made_from_the_metadata_and_the_measured_times(stem):
    nb = load(NOTEBOOKS / f"{stem}.ipynb")
    shown = FRAME_TABLE.search(frame_cell(nb)).group(2)
    assert shown == frame_table(episode_minutes(nb), machine_times(stem)), "run python notebooks/tidy.py on it"


def test_the_three_hour_schedule_is_generated_from_the_notebooks():
    teaching = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- room schedule: start -->\n(.*?)\n<!-- room schedule: end -->", teaching, re.S)
    assert block, "teaching.md's 3-hour schedule sits between <!-- room schedule: start/end --> markers"
    assert block.group(1).strip() == room_schedule(episodes())[0], "run python notebooks/tidy.py"


ROOM_CELL = re.compile(r"^\| \d+ min \| \d+ min \| (?:(\d+) min: [^|]+|at home) \| [^|]+ \|.* \| ([^|]+) \|$", re.M)


def test_the_three_hour_room_fits_180_minutes_by_the_notebooks_own_tables():
    """The sum of what each notebook's frame table gives the room, its offline machine time, the check and
    the break: the 3-hour schedule adds up to at most 180 minutes, and ends where teaching.md says."""
    total = ROOM_CHECK + ROOM_BREAK
    for stem in STEMS:
        room, offline = ROOM_CELL.search(frame_cell(load(NOTEBOOKS / f"{stem}.ipynb"))).groups()
        if room:
            number, unit = offline.split()
            total += int(room) + float(number) / (60 if unit == "s" else 1)
    assert total <= 180, f"the 3-hour room takes {total:.0f} minutes"
    assert abs(room_schedule(episodes())[1] - total) < 1
    end = re.search(r"^\| (\d):(\d\d) \| end \|", (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8"), re.M)
    assert int(end[1]) * 60 + int(end[2]) <= 180


def test_the_room_schedule_runs_a_clock_adds_the_machine_time_and_leaves_home_notebooks_out():
    lesson = {"teaching": 20, "exercises": 20, "room": 30, "in_room": "the lesson", "home": "exercise 9.2"}
    home = {**lesson, "room": 0}
    table, minutes = room_schedule(
        [("00_a", lesson, {"offline": 120.0}), ("02_b", lesson, {}), ("05_c", home, {"offline": 600.0})]
    )
    assert minutes == ROOM_CHECK + 30 + 2 + 30 + ROOM_BREAK
    assert "| 0:42 | 02 b: the lesson | 30 + not measured running | exercise 9.2 |" in table
    assert "| 1:12 | break |" in table and "notebooks 05" in table and "05 c" not in table


# --- notebook 04 without notebook 03's model --------------------------------------------------------
def test_the_training_notice_says_what_trains_how_long_and_the_smaller_ways():
    notice = training_notice(get_settings("offline", environ={}), 168, "cpu")
    assert "outputs/offline/model" in notice and "profile `offline`" in notice and "168 optimiser steps" in notice
    measured = f"{TRAINING_SECONDS['offline'] / 60:.0f} min"  # notebook 03's measured time (278.2 s: 5 min)
    assert f"notebook 03 took {measured} in this profile on 2 CPU cores" in notice
    assert "`%env HP_MLM_TIME_BUDGET=5`" in notice and "OFFLINE = True" not in notice  # offline already


def test_the_training_notice_on_a_gpu_in_the_full_profile_offers_the_offline_profile():
    notice = training_notice(get_settings("full", environ={}), 252, "cuda")
    assert "on cuda" in notice and "not measured for the `full` profile" in notice and "Colab T4" in notice
    measured = f"{TRAINING_SECONDS['offline'] / 60:.0f} min"
    assert "`OFFLINE = True` in the first code cell" in notice and f"(notebook 03: {measured} on 2 CPU cores)" in notice
    budgeted = training_notice(get_settings("full", environ={}, time_budget_minutes=7.5), 252, "cuda")
    assert "stops training after 7.5 min" in budgeted and "HP_MLM_TIME_BUDGET=5" not in budgeted
    assert "not measured on a GPU; notebook 03 took 23 s" in training_notice(
        get_settings("smoke", environ={}), 9, "cuda"
    )


def test_the_notices_measured_times_are_notebook_03s_in_the_benchmark_results():
    measured = {profile: s for profile, s in machine_times("03_training").items() if s is not None}
    assert TRAINING_SECONDS == measured, "copy benchmarks/results/notebook_times.json's 03_training times"
    machines = json.loads((ROOT / "benchmarks" / "results" / "notebook_times.json").read_text(encoding="utf-8"))
    assert {f"{m['cores']} CPU cores" for m in machines["machines"].values()} == {MEASURED_ON}


def test_notebook_04_says_what_it_trains_and_validates_before_it_checkpoints_as_03_does():
    """Its checkpoints are 03's to resume: every epoch record holds its validation (03's table reads it).
    Notebook 04 trains through ``course.catch_up.fine_tuned_model``, which keeps the plumbing out of the lesson."""
    import inspect

    from hp_mlm.course import catch_up

    notebook_03 = [text(c) for c in load(NOTEBOOKS / "03_training.ipynb")["cells"] if c["cell_type"] == "code"]
    (cell,) = [s for s in notebook_03 if "SaveCheckpoints(plan)" in s]
    trains = inspect.getsource(catch_up.fine_tuned_model)
    for source in (cell, trains):
        order = re.search(r"callbacks\s*=\s*\[(.*?)\]", source, re.S).group(1)
        # the watch may come first (its last frame shows the weights trained, before early stopping's best)
        assert re.match(
            r"\s*(watch, |WatchLearning\(plan, tokenizer\), )?(Validate\(|validate\b)", order
        ) and order.rstrip(", \n").endswith("SaveCheckpoints(plan)"), source[:80]
    assert trains.index("log(training_notice(") < trains.index("train(plan")
    notebook_04 = "\n".join(
        text(c) for c in load(NOTEBOOKS / "04_evaluation.ipynb")["cells"] if c["cell_type"] == "code"
    )
    assert "fine_tuned_model(prep)" in notebook_04 and "plan_training" not in notebook_04


# --- exercises and their solutions ------------------------------------------------------------------
def exercises(nb: dict) -> list[str]:
    return [m for c in nb["cells"] for m in re.findall(r"^### Exercise (\d\.\d)$", text(c), re.M)]


@pytest.mark.parametrize("stem", STEMS)
def test_every_exercise_has_a_collapsed_solution_and_one_in_the_solutions_notebook(stem):
    nb = load(NOTEBOOKS / f"{stem}.ipynb")
    numbers = exercises(nb)
    assert len(numbers) >= (1 if stem.startswith("00") else 3)
    assert numbers == [f"{stem[1]}.{i}" for i in range(1, len(numbers) + 1)], "numbered N.M in order"
    markdown = "\n".join(text(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    for number in numbers:
        assert f"<details>\n<summary>Solution {number}</summary>" in markdown
    solutions = load(NOTEBOOKS / "solutions" / f"{stem}_solutions.ipynb")
    found = [m for c in solutions["cells"] for m in re.findall(r"^## Solution (\d\.\d)$", text(c), re.M)]
    assert found == numbers


def called_names(code: str) -> set[str]:
    """The names a piece of code calls (``f(...)``, ``x.f(...)``: ``f``), what a solution needs."""
    import ast

    calls = [n.func for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)]
    return {c.attr if isinstance(c, ast.Attribute) else c.id for c in calls if isinstance(c, (ast.Attribute, ast.Name))}


@pytest.mark.parametrize("stem", STEMS)
def test_no_coded_exercise_can_be_answered_by_copying_a_cell_above_it(stem):
    """A coded exercise's solution needs something no single code cell above the exercise shows: some
    function it calls is called in none of them (a worked version of the same lines, shown above,
    calls them all; notebook 02's hand-written masking and notebook 03's hand loop once did)."""
    cells = load(NOTEBOOKS / f"{stem}.ipynb")["cells"]
    for i, cell in enumerate(cells):
        found = re.search(r"<summary>Solution (\d\.\d)</summary>\s*```python\n(.*?)```", text(cell), re.S)
        if not found or not re.search(r"^def my_\w+\(", found.group(2), re.M):
            continue
        number, solution = found.groups()
        start = next(j for j in range(i, -1, -1) if text(cells[j]).startswith(f"### Exercise {number}"))
        code = solution.split("\n\ncheck_")[0]
        parameters = set(re.findall(r"^def my_\w+\((.*?)\)", code, re.M)[0].replace(" ", "").split(","))
        needed = called_names(code) - parameters
        if needed <= {"len", "range", "zip", "print", "max", "min", "abs", "round", "sum", "int", "float"}:
            continue  # arithmetic on what the exercise gives: no cell to copy it from
        for above in cells[:start]:
            if above["cell_type"] == "code" and not text(above).lstrip().startswith(("%", "!")):
                shown = called_names(text(above))
                assert needed - shown, (
                    f"exercise {number}: cell {cells.index(above)} above it calls all of {sorted(needed)}"
                )


@pytest.mark.parametrize("stem", STEMS)
def test_each_coded_exercise_starts_as_a_stub_and_its_solution_asserts_the_check(stem):
    nb = load(NOTEBOOKS / f"{stem}.ipynb")
    code = [text(c) for c in nb["cells"] if c["cell_type"] == "code"]
    checks = sorted({m for c in code for m in re.findall(r"^(check_\w+)\(", c, re.M)})
    for name in checks:
        cell = next(c for c in code if re.search(rf"^{name}\(", c, re.M))
        assert "...  # your code here" in cell or re.search(r"= \.\.\.", cell), f"{name}: the learner's cell is a stub"
    solutions = "\n".join(
        text(c) for c in load(NOTEBOOKS / "solutions" / f"{stem}_solutions.ipynb")["cells"] if c["cell_type"] == "code"
    )
    for name in checks:
        assert re.search(rf"^assert {name}\(", solutions, re.M), f"the solutions notebook asserts {name}"


@pytest.mark.parametrize("stem", STEMS)
def test_solutions_notebooks_were_executed_offline_without_errors(stem):
    nb = load(NOTEBOOKS / "solutions" / f"{stem}_solutions.ipynb")
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in cells), "execute and commit the solutions notebook"
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("profile: offline" in "".join(o.get("text", "")) for o in outputs)
    assert not any("not done yet" in "".join(o.get("text", "")) for o in outputs)


@pytest.mark.parametrize("stem", STEMS)
def test_solutions_outputs_are_clean(stem):
    from test_notebooks import MACHINE_PATH, MEMORY_ADDRESS, WIDGET_VIEW

    nb = load(NOTEBOOKS / "solutions" / f"{stem}_solutions.ipynb")
    assert "widgets" not in nb["metadata"]
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            assert WIDGET_VIEW not in out.get("data", {})
            body = "".join(out.get("text", "")) + json.dumps(out.get("data", {}))
            assert not MACHINE_PATH.search(body) and not MEMORY_ADDRESS.search(body)
            assert not re.search(r"\b(Dorothy|Scarecrow|oz_mlm)\b", body)


# --- figures --------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [NOTEBOOKS / f"{s}.ipynb" for s in STEMS], ids=STEMS)
def test_every_figure_is_followed_by_a_sentence_that_says_what_it_shows(path):
    cells = load(path)["cells"]
    plots = [
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "code" and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))
    ]
    assert plots or path.name.startswith("00"), "the committed notebook shows its plots"
    for i in plots:
        after = cells[i + 1]
        assert after["cell_type"] == "markdown" and text(after).startswith("*Figure:* "), f"cell {i} has no description"
        assert len(text(after)) > 60 and "Look" in text(after), "say what it shows and what to look at"


# --- quizzes --------------------------------------------------------------------------------------
def computed(key: str) -> float:
    """The package computes every answer key a quiz states as a number."""
    if key == "uniform_loss":
        return torch.nn.functional.cross_entropy(torch.zeros(1, 30522), torch.tensor([0])).item()
    if key == "padding_share_10_20_30_40":
        return padding_share([[0, 1, 2, 3]], [10, 20, 30, 40])
    if key == "optimizer_steps_637_16_4":
        return 4 * len(plan_batches([50] * 637, 16, torch.Generator().manual_seed(0)))
    if key == "perplexity_of_2_nats":
        logits = torch.log(torch.tensor([[math.exp(-2.0), 1 - math.exp(-2.0)]]))
        return math.exp(torch.nn.functional.cross_entropy(logits, torch.tensor([0])).item())
    ids = torch.full((40000, 4), 7)
    selectable = torch.ones_like(ids, dtype=torch.bool)
    draws = [mask_tokens(ids, selectable, _tok(), 0.15, torch.Generator().manual_seed(s))[1] != -100 for s in range(3)]
    if key == "all_pieces_hidden_token_masking":
        measured = draws[0][:, :3].all(dim=1).float().mean().item()
        assert abs(measured - 0.15**3) < 0.0015
        return 0.15**3
    if key == "coverage_after_3_epochs":
        measured = (draws[0] | draws[1] | draws[2]).float().mean().item()
        assert abs(measured - (1 - 0.85**3)) < 0.005
        return 1 - 0.85**3
    raise KeyError(key)


def _tok():
    from hp_mlm.models import build_smoke_tokenizer

    return build_smoke_tokenizer()


@pytest.mark.parametrize("notebook", ["00", "01", "02", "03", "04", "05", "06"])
def test_every_question_has_one_right_choice_and_a_reason_for_every_choice(notebook):
    questions = load_quiz(notebook)
    assert 3 <= len(questions) <= 5
    for q in questions:
        assert sum(c["correct"] for c in q["choices"]) == 1, q["question"]
        assert len(q["choices"]) >= 3 and all(len(c["why"]) > 20 for c in q["choices"]), q["question"]
    assert len({next(i for i, c in enumerate(q["choices"]) if c["correct"]) for q in questions}) > 1, (
        "the right answer is not always in the same place"
    )


@pytest.mark.parametrize("notebook", ["00", "01", "02", "03", "04", "05", "06"])
def test_computed_answer_keys_equal_the_packages_values(notebook):
    for q in load_quiz(notebook):
        if "computed" not in q:
            continue
        value = q["computed"]["format"].format(computed(q["computed"]["key"]))
        right = next(c for c in q["choices"] if c["correct"])
        assert right["text"].startswith(value), (q["question"], value, right["text"])
        assert not any(c["text"].startswith(value) for c in q["choices"] if not c["correct"])


def test_every_notebook_shows_its_own_quiz_and_computed_keys_exist():
    assert sum("computed" in q for n in ("00", "01", "02", "03", "04") for q in load_quiz(n)) >= 5
    for stem in STEMS:
        code = "\n".join(text(c) for c in load(NOTEBOOKS / f"{stem}.ipynb")["cells"] if c["cell_type"] == "code")
        assert f'show_quiz("{stem[:2]}")' in code


def test_a_quiz_is_plain_text_without_a_widget_front_end_and_answers_say_why(capsys, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert not widgets_front_end()
    show_quiz("02")
    out = capsys.readouterr().out
    assert out.strip() == quiz_text("02") and "(a)" in out and 'answer_quiz("02"' in out
    q = load_quiz("02")[0]
    right = "abcd"[next(i for i, c in enumerate(q["choices"]) if c["correct"])]
    assert answer_quiz("02", 1, right) is True and "right:" in capsys.readouterr().out
    wrong = next(letter for letter in "abc" if letter != right)
    assert answer_quiz("02", 1, wrong) is False and "not right:" in capsys.readouterr().out
    with pytest.raises(ValueError, match="questions 1 to"):
        answer_quiz("02", 9, "a")
    with pytest.raises(ValueError, match="has choices a, b"):
        answer_quiz("02", 1, "z")
    with pytest.raises(FileNotFoundError, match="there are quizzes for"):
        load_quiz("09")


def test_under_a_jupyter_server_the_quiz_is_radio_buttons_that_explain(monkeypatch):
    pytest.importorskip("ipywidgets")
    import ipywidgets

    monkeypatch.setenv("JPY_SESSION_NAME", "x.ipynb")
    assert widgets_front_end()
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda box: shown.append(box))
    show_quiz("01")
    questions = shown[0].children
    assert len(questions) == len(load_quiz("01"))
    picker, reason = questions[0].children[1], questions[0].children[2]
    assert isinstance(picker, ipywidgets.RadioButtons) and picker.value is None
    picker.value = 0
    assert load_quiz("01")[0]["choices"][0]["why"] in reason.value


def test_the_teaching_guides_minutes_are_the_notebooks():
    """docs/teaching.md's table of notebooks repeats each episode's minutes: they must not drift."""
    guide = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
    for stem in STEMS:
        minutes = episode_minutes(load(NOTEBOOKS / f"{stem}.ipynb"))
        number, name = stem.split("_", 1)
        row = f"| {number} {name.replace('_', ' ')} | {minutes['teaching']} min | {minutes['exercises']} min |"
        assert row in guide, row
