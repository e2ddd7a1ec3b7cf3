"""The course as episodes: minutes per notebook, the workshop schedule, and knowledge-check quizzes.

Each notebook keeps its estimated teaching and exercise minutes in its metadata
(``metadata["hp_mlm"]["episode"]``, with what a 3-hour room does and leaves for home);
:func:`room_schedule` turns them, with the machine times measured by ``benchmarks/notebook_times.py``,
into docs/teaching.md's 3-hour schedule, and :func:`frame_table` into each notebook's frame (tests check
that they agree and that the room fits 180 minutes). Quizzes are data (``data/quizzes/NN.json``):
every question has one right choice and a reason for every choice. :func:`show_quiz` shows them
as ipywidgets where a widget front end runs (Colab, a Jupyter server), else as plain text with
:func:`answer_quiz` to check an answer. Reads only the package's own files; imports no model.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import resources
from typing import Any

LETTERS = "abcdefgh"
#: What the frame's machine-time columns show, in this order.
MACHINE_PROFILES = ("smoke", "offline")
#: Notebook 03's machine time per profile (seconds, kernel start included) on :data:`MEASURED_ON`, by
#: ``benchmarks/notebook_times.py``; a test keeps them equal to benchmarks/results/notebook_times.json.
TRAINING_SECONDS = {"smoke": 23.0, "offline": 167.1}
MEASURED_ON = "2 CPU cores"


def load_quiz(notebook: str) -> list[dict[str, Any]]:
    """The questions of notebook ``notebook`` (``"00"`` to ``"06"``), each
    ``{"question", "choices": [{"text", "correct", "why"}], "computed"?}``.

    Raises:
        FileNotFoundError: no quiz for that notebook (names the ones there are).
    """
    folder = resources.files("hp_mlm") / "quizzes"
    path = folder / f"{notebook}.json"
    if not path.is_file():
        there = sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))
        raise FileNotFoundError(f"no quiz for notebook {notebook!r}; there are quizzes for {there}")
    return json.loads(path.read_text(encoding="utf-8"))["questions"]


def widgets_front_end() -> bool:
    """True in Colab or under a Jupyter server (JupyterLab, Notebook 7), where widgets are drawn;
    False in a terminal, under nbconvert/nbval and in CI, where they would show as a placeholder."""
    if "google.colab" not in sys.modules and "JPY_SESSION_NAME" not in os.environ:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def quiz_text(notebook: str) -> str:
    """The quiz as plain text: numbered questions, lettered choices, how to check an answer."""
    lines = []
    for number, q in enumerate(load_quiz(notebook), start=1):
        lines.append(f"{number}. {q['question']}")
        lines += [f"   ({LETTERS[i]}) {c['text']}" for i, c in enumerate(q["choices"])]
    lines.append(
        f'Check an answer with answer_quiz("{notebook}", question, "letter"), e.g. answer_quiz("{notebook}", 1, "a").'
    )
    return "\n".join(lines)


def answer_quiz(notebook: str, question: int, letter: str) -> bool:
    """Print whether choice ``letter`` of question ``question`` (from 1) is right, and why.

    Raises:
        ValueError: no such question or choice (names the ones there are).
    """
    questions = load_quiz(notebook)
    if not 1 <= question <= len(questions):
        raise ValueError(f"notebook {notebook}'s quiz has questions 1 to {len(questions)}, not {question}")
    choices = questions[question - 1]["choices"]
    index = LETTERS.find(str(letter).strip().lower()[:1])
    if not 0 <= index < len(choices):
        raise ValueError(f"question {question} has choices {', '.join(LETTERS[: len(choices)])}; got {letter!r}")
    choice = choices[index]
    print(f"({LETTERS[index]}) {'right' if choice['correct'] else 'not right'}: {choice['why']}")
    return bool(choice["correct"])


def show_quiz(notebook: str, widgets: bool | None = None) -> None:
    """Show notebook ``notebook``'s quiz: one radio-button group per question, each choice's
    reason shown when it is picked (``widgets=True``), or plain text (``False``); ``None`` decides
    by :func:`widgets_front_end`."""
    if not (widgets_front_end() if widgets is None else widgets):
        print(quiz_text(notebook))
        return
    import ipywidgets as w
    from IPython.display import display

    boxes = []
    for number, q in enumerate(load_quiz(notebook), start=1):
        options = [(f"({LETTERS[i]}) {c['text']}", i) for i, c in enumerate(q["choices"])]
        picker = w.RadioButtons(options=options, value=None, layout=w.Layout(width="auto"))
        reason = w.HTML()

        def explain(change, q=q, reason=reason):
            choice = q["choices"][change["new"]]
            reason.value = f"<b>{'Right' if choice['correct'] else 'Not right'}:</b> {choice['why']}"

        picker.observe(explain, names="value")
        boxes.append(w.VBox([w.HTML(f"<b>{number}. {q['question']}</b>"), picker, reason]))
    display(w.VBox(boxes))


def episode_minutes(notebook_json: dict[str, Any]) -> dict[str, Any]:
    """A notebook's minutes from its metadata (estimates): ``{"teaching", "exercises"}`` for the whole
    episode, and for a 3-hour room ``"room"`` (minutes in the room), ``"in_room"`` (what is done there) and
    ``"home"`` (what is left for home).

    Raises:
        KeyError: the notebook has no ``metadata["hp_mlm"]["episode"]`` or no ``room`` in it.
    """
    episode = notebook_json["metadata"]["hp_mlm"]["episode"]
    room = episode["room"]
    return {
        "teaching": int(episode["teaching_minutes"]),
        "exercises": int(episode["exercise_minutes"]),
        "room": int(room["minutes"]),
        "in_room": room["does"],
        "home": room["home"],
    }


def machine_time(seconds: float | None) -> str:
    """A measured notebook time for a table: ``"9 s"``, ``"2 min"``, or ``"not measured"``."""
    if seconds is None:
        return "not measured"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def room_cell(minutes: dict[str, Any]) -> str:
    """What a 3-hour room does with a notebook: ``"35 min: the lesson, exercise 2.1"``, or ``"at home"``."""
    return f"{minutes['room']} min: {minutes['in_room']}" if minutes["room"] else "at home"


def frame_table(minutes: dict[str, Any], times: dict[str, float | None]) -> str:
    """A notebook's time table: teaching and exercise minutes, what a 3-hour room does and leaves for home,
    then the machine time per profile."""
    header = (
        "| teaching | exercises | in a 3-hour room | left for home | "
        + " | ".join(f"machine time, `{p}`" for p in MACHINE_PROFILES)
        + " |"
    )
    row = (
        f"| {minutes['teaching']} min | {minutes['exercises']} min | {room_cell(minutes)} | {minutes['home']} | "
        + " | ".join(machine_time(times.get(p)) for p in MACHINE_PROFILES)
        + " |"
    )
    return "\n".join([header, "|" + " --- |" * (4 + len(MACHINE_PROFILES)), row])


#: The 3-hour room's fixed slots (minutes): the machine check first, a break after notebook 02.
ROOM_CHECK, ROOM_BREAK, ROOM_BREAK_AFTER, ROOM_PROFILE = 10, 15, "02", "offline"


def clock(seconds: float) -> str:
    """``seconds`` from the start as ``h:mm``, to the nearest minute."""
    minutes = round(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def room_schedule(episodes: list[tuple[str, dict[str, Any], dict[str, float | None]]]) -> tuple[str, float]:
    """The 3-hour room's schedule (docs/teaching.md) from ``episodes`` as ``(notebook name, minutes, machine
    times per profile)``: the machine check, each notebook's minutes in the room plus its machine time in
    :data:`ROOM_PROFILE`, the break after :data:`ROOM_BREAK_AFTER`. Returns the table and its length in minutes
    (the sum of those parts), so a test can hold it to 180."""
    lines = ["| clock | what | minutes | left for home |", "| --- | --- | --- | --- |"]
    lines.append(f"| 0:00 | the machine check (below) | {ROOM_CHECK} | |")
    seconds = ROOM_CHECK * 60.0
    for name, minutes, times in episodes:
        if not minutes["room"]:
            continue
        run = times.get(ROOM_PROFILE)
        lines.append(
            f"| {clock(seconds)} | {name.replace('_', ' ')}: {minutes['in_room']} | {minutes['room']} "
            f"+ {machine_time(run)} running | {minutes['home']} |"
        )
        seconds += minutes["room"] * 60 + (run or 0.0)
        if name.startswith(ROOM_BREAK_AFTER):
            lines.append(f"| {clock(seconds)} | break | {ROOM_BREAK} | |")
            seconds += ROOM_BREAK * 60
    home = ", ".join(name[:2] for name, minutes, _ in episodes if not minutes["room"])
    lines.append(f"| {clock(seconds)} | end | | notebooks {home} |" if home else f"| {clock(seconds)} | end | | |")
    return "\n".join(lines), seconds / 60


def training_notice(settings, steps_left: int, device: str, measured: dict[str, float] = TRAINING_SECONDS) -> str:
    """What notebook 04 says before it trains the model that notebook 03 has not saved: what it trains,
    how long that took where it was measured, and the smaller ways (a time budget, the offline profile).

    Args:
        settings: the run's resolved ``config.Settings`` (``profile``, ``model``, ``epochs``,
            ``batch_size``, ``max_length``, ``time_budget_minutes``, ``output_dir``).
        steps_left: optimiser steps still to run (a resumed checkpoint's steps left out).
        device: where it trains: ``"cuda"``, ``"mps"`` or ``"cpu"``.
        measured: notebook 03's seconds per profile on :data:`MEASURED_ON` (CPU cores, no GPU).
    Returns:
        A few lines of text, to print.
    """
    profile = settings.profile
    seconds = measured.get(profile)
    lines = [
        f"No fine-tuned model in {settings.output_dir}/model yet, so this cell trains one as notebook 03 does: "
        f"profile `{profile}`, {settings.model}, {steps_left} optimiser steps ({settings.epochs} epoch(s) of batches "
        f"of {settings.batch_size} rows, max_length {settings.max_length}) on {device}."
    ]
    if seconds is None:
        t4 = "; the original tutorial reports 15-17 min of training on a Colab T4" if profile == "full" else ""
        lines.append(f"How long: not measured for the `{profile}` profile (measured: {', '.join(measured)}){t4}.")
    elif device == "cpu":
        lines.append(f"How long: notebook 03 took {machine_time(seconds)} in this profile on {MEASURED_ON}.")
    else:
        lines.append(f"How long: not measured on a GPU; notebook 03 took {machine_time(seconds)} on {MEASURED_ON}.")
    if settings.time_budget_minutes:
        lines.append(
            f"The time budget stops training after {settings.time_budget_minutes:g} min; the model so far is used."
        )
    else:
        lines.append(
            "Shorter: interrupt this cell, set a time budget in minutes (`%env HP_MLM_TIME_BUDGET=5`) and run the "
            "notebook from the top; the model trained so far is then saved and evaluated."
        )
    if profile in ("full", "quick"):
        offline = (
            f" (notebook 03: {machine_time(measured['offline'])} on {MEASURED_ON})" if "offline" in measured else ""
        )
        lines.append(
            f"Smaller: `OFFLINE = True` in the first code cell runs the offline profile, a small BERT{offline}."
        )
    lines.append("Or run notebook 03 first: this notebook evaluates the model it saves.")
    return "\n".join(lines)
