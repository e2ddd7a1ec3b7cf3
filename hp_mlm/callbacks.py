"""Callbacks: what the training loop does besides stepping (validation, early stopping, time budgets).

``training.train`` calls every callback after each optimiser step and at the end of each epoch;
any of them may stop training by returning True. Time spent inside callbacks is not counted in
an epoch's ``seconds``. Taught in ``notebooks/03_training.ipynb`` (``Validate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn


class Callback:
    """Base class: every hook does nothing and never stops training."""

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> bool:  # noqa: ARG002 - a hook's signature
        """After an optimiser step; ``step`` is its history record: ``{"step"`` (1-based), ``"epoch"``,
        ``"loss"`` (nats), ``"lr"``, ``"seconds"`` (training clock so far, callbacks excluded)``}``.
        True stops training."""
        return False

    def on_epoch_end(self, model: nn.Module, record: dict[str, Any]) -> bool:  # noqa: ARG002 - a hook's signature
        """After an epoch; may add keys to its history ``record``; True stops training."""
        return False

    def on_train_end(self, model: nn.Module, history: dict[str, Any]) -> None:
        """Once, after the last step (also after a stop)."""


class Validate(Callback):
    """Score the model after every epoch (``record["validation"]``), optionally with early stopping.

    Args:
        evaluate_fn: model -> metrics dict with ``cross_entropy`` (e.g. ``evaluation.evaluate`` on
            frozen held-out masks). The last epoch's result is the run's "after".
        patience: stop when the validation cross-entropy has not improved for this many epochs,
            and give the model back the best epoch's weights (``0``: off).
    """

    def __init__(self, evaluate_fn: Callable[[nn.Module], dict[str, Any]], patience: int = 0) -> None:
        self.evaluate_fn, self.patience = evaluate_fn, patience
        self.best: dict[str, Any] | None = None

    def on_epoch_end(self, model: nn.Module, record: dict[str, Any]) -> bool:
        record["validation"] = result = self.evaluate_fn(model)
        if not self.patience:
            return False
        if self.best is None or result["cross_entropy"] < self.best["cross_entropy"]:
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.best = {
                "epoch": record["epoch"],
                "cross_entropy": result["cross_entropy"],
                "validation": result,
                "state": state,
            }
            return False
        return record["epoch"] - self.best["epoch"] >= self.patience

    def on_train_end(self, model: nn.Module, history: dict[str, Any]) -> None:
        if self.best is None:
            return
        last = history["epochs"][-1]
        if self.best["epoch"] != last["epoch"]:
            model.load_state_dict(self.best["state"])
        history["early_stopping"] = {
            "best_epoch": self.best["epoch"],
            "best_cross_entropy": self.best["cross_entropy"],
            "stopped_after_epoch": last["epoch"],
        }
        history["final_validation"] = self.best["validation"]


class TimeBudget(Callback):
    """Stop at the first optimiser step whose training clock (callbacks excluded) reaches ``seconds``;
    ``stopped_at`` is then that step's record (``{"step", "epoch", "seconds", ...}``), else None."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.stopped_at = seconds, None

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> bool:  # noqa: ARG002 - a hook's signature
        if step["seconds"] >= self.seconds:
            self.stopped_at = step
        return self.stopped_at is not None
