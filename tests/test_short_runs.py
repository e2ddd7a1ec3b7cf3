"""A time budget, early stopping or a short run is a normal ending: notebooks 03 and 04 run every cell,
the model is saved, and the notebook and the main job say what the ending means and what to do next."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from hp_mlm.callbacks import EARLY_STOPPING, TIME_BUDGET
from hp_mlm.config import get_settings
from hp_mlm.course.watch import run_ending, stop_reason, stopped_early

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _history(first_steps, epochs=((1, {}),), planned=(40, 4), **extra):
    """A watched run's history: frames at steps 0 and 5, each mask's first step, the epochs as (number, extra)."""
    frames = [{"step": s, "seconds": float(s), "examples": [], "probes_right": 0, "probes": 0} for s in (0, 5)]
    first = [{"mask": "Hob [MASK]", "answer": "tanner", "step": s, "seconds": s} for s in first_steps]
    watch = {"every": 5, "frames": frames, "first_right": first, "planned": dict(zip(("steps", "epochs"), planned))}
    return {"optimizer_steps": 5, "epochs": [{"epoch": e, **x} for e, x in epochs], "watch": watch, **extra}


def test_a_run_whose_word_came_first_needs_no_note():
    assert run_ending(_history([5, None])) == ""
    assert run_ending({"optimizer_steps": 3, "epochs": []}) == ""  # no watch: nothing to say about its frames


def test_a_budget_that_stopped_before_any_word_came_first_says_it_is_normal_and_how_to_go_on():
    history = _history([None, 0], epochs=((1, {"batches_done": 5}),), stopped_by=TIME_BUDGET)  # step 0 is no turn
    assert stop_reason(history) == TIME_BUDGET
    assert stopped_early(history) == "the time budget stopped it at optimiser step 5 of 40"
    note = run_ending(history)
    assert "normal ending" in note and "the model is saved" in note
    assert "run the notebook again from the top: training continues from its checkpoint" in note
    assert "python -m hp_mlm handout" in note and "HP_MLM_TRAINED_MODEL" in note
    assert "rerun the same command with --resume" in run_ending(history, again="rerun the same command with --resume")


def test_early_stopping_and_a_finished_short_run_say_to_train_further_from_the_saved_model_not_to_resume():
    stopped = _history([None], epochs=((1, {}), (2, {})), stopped_by=EARLY_STOPPING, early_stopping={"best_epoch": 1})
    assert stopped_early(stopped) == "early stopping ended it after epoch 2 of 4"
    finished = _history([None], epochs=((1, {}), (2, {}), (3, {}), (4, {})), stopped_by=None)
    assert stopped_early(finished) == ""
    for history in (stopped, finished):
        note = run_ending(history)
        assert "train further from the saved model into a new folder" in note and "checkpoint" not in note
        assert "HP_MLM_TRAINED_MODEL" in note
    assert "trained all 5 steps it planned" in run_ending(finished)


def test_the_ending_follows_the_reason_a_callback_returned_not_the_words_of_a_message():
    """A time budget reached with early stopping set is a budget's ending (advising --resume); a run that
    trained all of its epochs with patience set was not ended by early stopping; neither was a run whose
    budget or patience came due at its very last step."""
    budget_with_patience = _history(
        [None], epochs=((1, {"batches_done": 2}),), stopped_by=TIME_BUDGET, early_stopping={"stopped_after_epoch": 1}
    )
    assert stop_reason(budget_with_patience) == TIME_BUDGET
    note = run_ending(budget_with_patience, again="rerun the same command with --resume")
    assert "the time budget stopped it" in note and "--resume" in note and "early stopping" not in note
    all_epochs = ((1, {}), (2, {}), (3, {}), (4, {}))
    patience_unused = _history([None], epochs=all_epochs, early_stopping={"best_epoch": 4, "stopped_after_epoch": 4})
    assert stop_reason(patience_unused) is None and stopped_early(patience_unused) == ""
    assert "early stopping" not in run_ending(patience_unused).split(":")[1]
    for reason in (TIME_BUDGET, EARLY_STOPPING):  # due at the last step of the last epoch: the run trained it all
        assert stop_reason(_history([None], epochs=all_epochs, stopped_by=reason)) is None
    assert stop_reason(_history([None], epochs=((1, {}),), stopped_by=TIME_BUDGET), epochs=1) is None
    assert stop_reason(_history([None], epochs=((1, {}),), stopped_by=TIME_BUDGET), epochs=3) == TIME_BUDGET


def test_the_main_job_stopped_by_a_budget_in_its_first_steps_logs_and_reports_what_next(tmp_path):
    from hp_mlm.ops.job import run_job
    from hp_mlm.ops.report import format_report

    out = tmp_path / "boxed"
    settings = get_settings(
        "smoke", environ={}, progress=False, checkpoint_every=0, output_dir=str(out), time_budget_minutes=0.0001
    )  # 6 ms of training clock: the first step is past it
    logged = []
    metrics = run_job(settings, log=logged.append)
    history = json.loads((out / "history.json").read_text())
    assert history["optimizer_steps"] < history["watch"]["planned"]["steps"]
    assert metrics["ending"] == history["ending"] == run_ending(history, again="rerun the same command with --resume")
    assert "the time budget stopped it" in metrics["ending"] and "--resume" in metrics["ending"]
    assert metrics["ending"] in logged and metrics["ending"] in format_report(metrics).splitlines()
    assert any("python -m hp_mlm handout" in line for line in logged if line.startswith("time budget reached"))
    assert (out / "model" / "model.safetensors").is_file()


def _run(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError at the first cell that fails
    return nb


def _printed(nb: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_notebooks_03_and_04_run_every_cell_when_a_time_budget_stops_training_in_its_first_steps(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    for name, value in {
        "HP_MLM_PROFILE": "smoke",
        "HP_MLM_OUTPUT_DIR": str(out),
        "HP_MLM_TIME_BUDGET": "0.0001",  # 6 ms of training clock: the first step is past it
        "HP_MLM_PROGRESS": "0",
        "TQDM_DISABLE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HP_MLM_TRAINED_MODEL", raising=False)  # the notebooks' own model, not a handout
    trained = _printed(_run("03_training.ipynb"))
    history = json.loads((out / "history.json").read_text())
    assert stopped_early(history).startswith("the time budget stopped it at optimiser step ")
    assert "time budget reached at step" in trained and (out / "model" / "model.safetensors").is_file()
    assert run_ending(history) in trained  # the note, when no word came first; "" (trivially in) when one did
    evaluated = _printed(_run("04_evaluation.ipynb"))
    assert f"this model trained less than planned ({stopped_early(history)})" in evaluated
