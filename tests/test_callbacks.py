"""Callbacks across a resume: a run interrupted mid-way and resumed from its checkpoint ends exactly where the
same run ends uninterrupted, for every callback the course ships: what it stops on, what it keeps, what it
reports (``callbacks.Validate``, ``TimeBudget``, ``SaveCheckpoints``, ``course.watch.WatchLearning``)."""

from __future__ import annotations

import json

import torch
from helpers import SENTENCES, tokenised

from hp_mlm.callbacks import SaveCheckpoints, TimeBudget, Validate
from hp_mlm.checkpoints import STATE, latest_checkpoint
from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.course.watch import WatchLearning
from hp_mlm.models import build_smoke_model
from hp_mlm.ops.job import run_training
from hp_mlm.training import Callback, plan_training

#: The held-out cross-entropy each epoch scores (scripted, so that early stopping's turns are known): the
#: best is epoch 2, and with a patience of 2 the run stops after epoch 4 with epoch 2's weights.
SCRIPTED = [3.0, 1.0, 2.0, 2.5, 2.6, 2.7]


class StopAt(Callback):
    """Stops training after optimiser step ``step``: the interruption (as a time budget or a kill would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step(self, model, step):  # noqa: ARG002 - a hook's signature
        return "interrupted" if step["step"] == self.step else None


def run(tokenizer, folder, make_callbacks, stop_at: int | None = None, resume: bool = False, **changes):
    """One run of 16 rows in batches of 4 (4 optimiser steps an epoch) into ``folder``, the callbacks from
    ``make_callbacks(plan)`` before the checkpoints (as the main job passes them); ``stop_at``: interrupted
    after that step. Returns the model, the history and the callbacks."""
    base = dict(epochs=len(SCRIPTED), batch_size=4, progress=False, checkpoint_every=0, learning_rate=1e-3)
    settings = resolve_auto(get_settings("smoke", environ={}, **{**base, **changes}), new_head=True)
    model = build_smoke_model(tokenizer)
    plan = plan_training(
        model, tokenizer, tokenised(tokenizer, SENTENCES * 2), settings, output_dir=folder, resume=resume
    )
    callbacks = make_callbacks(plan)
    history = run_training(plan, [*callbacks, *([StopAt(stop_at)] if stop_at else []), SaveCheckpoints(plan)])
    return model, history, callbacks


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def without_seconds(value):
    """``value`` with every ``seconds`` entry left out (wall time differs from run to run)."""
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_seconds(v) for v in value]
    return value


def test_early_stopping_resumed_keeps_its_best_epoch_and_patience_and_ends_with_the_same_weights(
    tmp_path, smoke_tokenizer
):
    """Validate with a patience of 2: uninterrupted, the run stops after epoch 4 and goes back to epoch 2's
    weights. Interrupted in epoch 3 and resumed, it used to forget its best epoch (and its weights) and
    counted patience from the resumed epoch: it trained on to epoch 5 and kept epoch 3's weights."""

    def validate(plan):
        scripted = lambda m: {"cross_entropy": SCRIPTED[len(plan.history["epochs"]) - 1]}  # noqa: E731
        return [Validate(scripted, patience=2, plan=plan)]

    whole, whole_history, _ = run(smoke_tokenizer, tmp_path / "whole", validate)
    assert whole_history["early_stopping"] == {"best_epoch": 2, "best_cross_entropy": 1.0, "stopped_after_epoch": 4}
    run(smoke_tokenizer, tmp_path / "cut", validate, stop_at=10)  # epoch 3, after 2 of its 4 batches
    resumed, history, _ = run(smoke_tokenizer, tmp_path / "cut", validate, resume=True)
    assert history["early_stopping"] == whole_history["early_stopping"]
    assert history["final_validation"] == whole_history["final_validation"]
    assert without_seconds(history["epochs"]) == without_seconds(whole_history["epochs"])
    assert same_weights(resumed, whole)


def test_a_run_stopped_by_its_time_budget_resumes_to_the_end_of_the_uninterrupted_run(tmp_path, smoke_tokenizer):
    """The budget stops the first run at its first step (the epoch cut short, checkpointed); the run resumed
    without a budget takes the same steps, with the same losses, to the same weights."""
    budget = TimeBudget(0.0)
    whole, whole_history, _ = run(smoke_tokenizer, tmp_path / "whole", lambda plan: [], epochs=2)
    run(smoke_tokenizer, tmp_path / "cut", lambda plan: [budget], epochs=2)
    assert budget.stopped_at["step"] == 1
    resumed, history, _ = run(smoke_tokenizer, tmp_path / "cut", lambda plan: [], epochs=2, resume=True)
    assert [s["loss"] for s in history["steps"]] == [s["loss"] for s in whole_history["steps"]]
    assert without_seconds(history["epochs"]) == without_seconds(whole_history["epochs"])
    assert same_weights(resumed, whole)


def test_the_checkpoints_of_a_resumed_run_are_those_of_the_uninterrupted_run(tmp_path, smoke_tokenizer):
    """SaveCheckpoints every 3 steps: the last checkpoint of a run interrupted at step 5 and resumed holds the
    same step, position and history (times aside) as the uninterrupted run's last one."""

    def last_state(folder):
        return json.loads((latest_checkpoint(folder) / STATE).read_text(encoding="utf-8"))

    run(smoke_tokenizer, tmp_path / "whole", lambda plan: [], epochs=2, checkpoint_every=3)
    run(smoke_tokenizer, tmp_path / "cut", lambda plan: [], stop_at=5, epochs=2, checkpoint_every=3)
    run(smoke_tokenizer, tmp_path / "cut", lambda plan: [], epochs=2, checkpoint_every=3, resume=True)
    whole, resumed = last_state(tmp_path / "whole"), last_state(tmp_path / "cut")
    assert resumed["global_step"] == whole["global_step"] == 8
    assert without_seconds(resumed) == without_seconds(whole)


def test_the_watch_resumed_shows_the_frames_and_first_steps_of_the_uninterrupted_run(tmp_path, smoke_tokenizer):
    """Frames every 3 steps and the step at which each example's word first came first: a run interrupted
    at step 7 and resumed keeps the frames it showed and adds the rest, as one run would."""
    probes = [{"text": "Hob Tanner rowed the ferry across the [MASK] Lake.", "answer": "silver"}]

    def watch(plan):
        return [WatchLearning(plan, smoke_tokenizer, probes, every=3, log=lambda _: None)]

    _, whole, _ = run(smoke_tokenizer, tmp_path / "whole", watch, epochs=3, learning_rate=3e-3)
    run(smoke_tokenizer, tmp_path / "cut", watch, stop_at=7, epochs=3, learning_rate=3e-3)
    _, resumed, _ = run(smoke_tokenizer, tmp_path / "cut", watch, epochs=3, learning_rate=3e-3, resume=True)
    frames = [f["step"] for f in resumed["watch"]["frames"]]
    assert frames == [f["step"] for f in whole["watch"]["frames"]] == [0, 3, 6, 9, 12]
    assert without_seconds(resumed["watch"]) == without_seconds(whole["watch"])


def test_each_way_a_run_stops_is_kept_as_the_reason_its_callback_returned(tmp_path, smoke_tokenizer):
    """The loop keeps the reason the stopping callback returned (``history["stopped_by"]``): early stopping,
    a time budget (also with early stopping's patience set), an interruption of one's own; None for a run that
    trained every epoch with patience set. The endings are read from it (``course.watch.stop_reason``)."""
    from hp_mlm.callbacks import EARLY_STOPPING, TIME_BUDGET
    from hp_mlm.course.watch import stop_reason

    def validate(patience, budget=None):
        def make(plan):
            scripted = lambda m: {"cross_entropy": SCRIPTED[len(plan.history["epochs"]) - 1]}  # noqa: E731
            return [Validate(scripted, patience=patience, plan=plan), *([budget] if budget else [])]

        return make

    _, early, _ = run(smoke_tokenizer, tmp_path / "early", validate(2))
    assert early["stopped_by"] == EARLY_STOPPING == stop_reason(early, len(SCRIPTED))
    _, boxed, _ = run(smoke_tokenizer, tmp_path / "boxed", validate(2, TimeBudget(0.0)))
    assert boxed["stopped_by"] == TIME_BUDGET == stop_reason(boxed, len(SCRIPTED)) and "early_stopping" in boxed
    _, full, _ = run(smoke_tokenizer, tmp_path / "full", validate(10), epochs=2)
    assert full["stopped_by"] is None and stop_reason(full, 2) is None and "early_stopping" in full
    _, cut, _ = run(smoke_tokenizer, tmp_path / "cut", lambda plan: [], stop_at=3, epochs=2)
    assert cut["stopped_by"] == "interrupted" and cut["optimizer_steps"] == 3
    _, resumed, _ = run(smoke_tokenizer, tmp_path / "cut", lambda plan: [], epochs=2, resume=True)
    assert resumed["stopped_by"] is None and resumed["optimizer_steps"] == 8  # the earlier stop is not kept
