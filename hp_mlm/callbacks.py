"""Callbacks: what a run does besides stepping, passed to ``training.train`` by the caller.

Taught in ``notebooks/03_training.ipynb``. The loop calls every callback's hooks (``on_step``,
``on_epoch_end``, ``on_train_end``, see ``training.Callback``) and stops when one returns True; the
time spent in them is not training time. Here: :class:`Validate` (held-out scores after every epoch,
with early stopping), :class:`TimeBudget` (a time box) and :class:`SaveCheckpoints` (save the run so
that ``training.plan_training(..., resume=True)`` continues it). The loop itself knows nothing of
them: a notebook or the command line chooses them, in one visible line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from torch import nn

from .checkpoints import release_output_dir, save_checkpoint
from .training import Callback, TrainingPlan

#: The reasons these callbacks give when they stop a run (``history["stopped_by"]``, see ``training.Callback``).
TIME_BUDGET, EARLY_STOPPING = "time budget", "early stopping"


class Validate(Callback):
    """Score the model after every epoch (``record["validation"]``), optionally with early stopping.

    Stops with the reason :data:`EARLY_STOPPING`.

    Args:
        evaluate_fn: model -> metrics dict with ``cross_entropy`` (e.g. ``evaluation.evaluate`` on
            frozen held-out masks). The last epoch's result is the run's "after".
        patience: stop when the validation cross-entropy has not improved for this many epochs,
            and give the model back the best epoch's weights (``0``: off).
        plan: the run's ``training.TrainingPlan``: the best epoch's weights go into its checkpoints
            (``plan.kept["best"]``), and a resumed run starts from the best of the epochs it finished
            (its history) and their weights, so that it stops and ends as the uninterrupted run does.
    An epoch cut short (a time budget) is scored, but its weights are a best only for the run's end: the
    run that resumes it finishes that epoch.
    """

    def __init__(self, evaluate_fn: Callable[[nn.Module], dict[str, Any]], patience: int = 0, plan=None) -> None:
        self.evaluate_fn, self.patience, self.kept = evaluate_fn, patience, {} if plan is None else plan.kept
        done = [e for e in plan.history["epochs"] if "batches_done" not in e] if patience and self.kept else []
        self.best = min(done, key=lambda e: e["validation"]["cross_entropy"], default=None)

    def on_epoch_end(self, model: nn.Module, record: dict[str, Any]) -> str | None:
        record["validation"] = result = self.evaluate_fn(model)
        if not self.patience or "batches_done" in record:
            return None
        if self.best is None or result["cross_entropy"] < self.best["validation"]["cross_entropy"]:
            self.best = record
            self.kept["best"] = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            return None
        return EARLY_STOPPING if record["epoch"] - self.best["epoch"] >= self.patience else None

    def on_train_end(self, model: nn.Module, history: dict[str, Any]) -> None:
        if not self.patience:
            return
        last = history["epochs"][-1]  # cut short (a time budget), it may still be the best
        best = min(self.best or last, last, key=lambda e: e["validation"]["cross_entropy"])
        if best is not last:
            model.load_state_dict(self.kept["best"])
        history["early_stopping"] = {
            "best_epoch": best["epoch"],
            "best_cross_entropy": best["validation"]["cross_entropy"],
            "stopped_after_epoch": last["epoch"],
        }
        history["final_validation"] = best["validation"]


class TimeBudget(Callback):
    """Stop (reason :data:`TIME_BUDGET`) at the first optimiser step whose training clock (callbacks excluded)
    reaches ``seconds``; ``stopped_at`` is then that step's record (``{"step", "epoch", "seconds", ...}``),
    else None."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.stopped_at = seconds, None

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> str | None:  # noqa: ARG002 - a hook's signature
        if step["seconds"] >= self.seconds:
            self.stopped_at = step
        return TIME_BUDGET if self.stopped_at else None


def time_budget(plan: TrainingPlan) -> TimeBudget:
    """The run's :class:`TimeBudget`: ``settings.time_budget_minutes`` of this run's training clock, so a
    resumed run's budget starts again (the minutes of the run it resumes come on top: the job's log says
    so); one that never stops when the setting is 0."""
    minutes, trained = plan.settings.time_budget_minutes, sum(e["seconds"] for e in plan.history["epochs"])
    return TimeBudget(60 * minutes + trained if minutes else math.inf)


class SaveCheckpoints(Callback):
    """Checkpoint ``plan`` into ``plan.output_dir`` every ``checkpoint_every`` optimiser steps and at the
    end of each epoch (also an epoch a time budget cut short), so that ``plan_training(...,
    resume=True)`` continues the run from there (``checkpoints.save_checkpoint``: every process
    calls it). Pass it last: an epoch's record is saved with what the callbacks before it added
    (``Validate``'s scores). When the run ends, other runs may use the folder again
    (``checkpoints.release_output_dir``). Does nothing for a plan without an output folder."""

    def __init__(self, plan: TrainingPlan) -> None:
        self.plan = plan

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> None:  # noqa: ARG002 - a hook's signature
        every, where = self.plan.settings.checkpoint_every, self.plan.position
        if every and step["step"] % every == 0 and where["batches_done"] < where["batches"]:
            self.save(where["epoch"], where["batches_done"])  # the epoch's end saves its own

    def on_epoch_end(self, model: nn.Module, record: dict[str, Any]) -> None:  # noqa: ARG002 - a hook's signature
        if "batches_done" in record:  # cut short: resume inside the epoch
            self.save(record["epoch"] - 1, record["batches_done"])
        else:
            self.save(record["epoch"], 0)

    def on_train_end(self, model: nn.Module, history: dict[str, Any]) -> None:  # noqa: ARG002 - a hook's signature
        if self.plan.output_dir is not None:
            release_output_dir(self.plan.output_dir)

    def save(self, epoch: int, batches_done: int) -> None:
        """Save the run as at ``batches_done`` batches into ``epoch`` (0-based)."""
        plan = self.plan
        if plan.output_dir is None:
            return
        state = {"epoch": epoch, "batches_done": batches_done, "global_step": plan.history["optimizer_steps"]}
        run = plan.history["run"]  # the settings, model and rows it trains: the key a resume must match
        save_checkpoint(plan.accelerator, plan.output_dir, {**state, "run": run, "history": plan.history}, plan.kept)
