"""Training: one readable loop that runs a :class:`~hp_mlm.plan.TrainingPlan`.

Taught in ``notebooks/03_training.ipynb`` (its second half). Everything is decided before the loop
by ``plan.plan_training`` (how batches are built, the optimiser, the schedule, where to resume); the
loop only steps, logs, checkpoints and asks its callbacks whether to stop. It runs through
``accelerate.Accelerator``, so the same code uses bf16/fp16 autocast and several GPUs under
``accelerate launch``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from .callbacks import Callback
from .common import error_summary
from .config import Settings
from .objective import has_masked_position
from .plan import TrainingPlan


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; training stopped before saving anything from that step."""


def check_finite(loss: torch.Tensor, step: int, epoch: int, learning_rate: float) -> None:
    """Raise :class:`TrainingDiverged` (naming the step and a 10x lower rate) if ``loss`` is NaN/inf."""
    if not torch.isfinite(loss.detach()):
        raise TrainingDiverged(
            f"loss became {loss.item()} at optimiser step {step} (epoch {epoch}); nothing from this step was "
            f"saved and the last checkpoint is intact. Try a lower learning_rate, e.g. {learning_rate / 10:g}."
        )


def memory_error(settings: Settings, error: torch.OutOfMemoryError) -> RuntimeError:
    """The out-of-memory error, with the settings that lower memory and the library's own message."""
    return RuntimeError(
        f"Out of GPU memory with batch_size={settings.batch_size} and max_length={settings.max_length} "
        f"({error_summary(error)}). Lower batch_size (and raise "
        "gradient_accumulation_steps to keep the effective batch) or lower max_length."
    )


def training_step(plan: TrainingPlan, batch: dict[str, torch.Tensor], epoch: int) -> float:
    """Forward, backward, clip, optimiser and schedule step, zero_grad on one batch; returns its loss
    (nats). Under gradient accumulation accelerate steps the optimiser only every
    ``gradient_accumulation_steps`` batches (``accelerator.sync_gradients``).

    Raises:
        TrainingDiverged: the loss is NaN/inf. RuntimeError: out of GPU memory (:func:`memory_error`).
    """
    accelerator, settings = plan.accelerator, plan.settings
    with accelerator.accumulate(plan.objective):
        try:
            loss = plan.objective(batch["input_ids"], batch["attention_mask"], batch["labels"])
            check_finite(loss, plan.history["optimizer_steps"] + 1, epoch + 1, settings.learning_rate)
            accelerator.backward(loss)
        except torch.OutOfMemoryError as error:
            raise memory_error(settings, error) from error
        if accelerator.sync_gradients and settings.max_grad_norm > 0:
            accelerator.clip_grad_norm_(plan.objective.parameters(), settings.max_grad_norm)
        plan.optimizer.step()
        plan.scheduler.step()
        plan.optimizer.zero_grad()
    return loss.item()


def train(plan: TrainingPlan, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Run ``plan`` (from ``plan.plan_training``): fine-tune ``plan.model`` in place; return the history.

    Args:
        callbacks: ``callbacks.Callback`` objects (validation, early stopping, time budgets); any
            may stop training by returning True.
    Returns:
        ``{"steps": [{"step", "epoch", "loss", "lr", "seconds"}], "epochs": [{"epoch", "train_loss",
        "seconds", ...}], "learning_rate", "optimizer_steps", "precision", "device", "processes",
        "batches_without_masks"}`` (losses in nats, seconds of training clock, callbacks excluded;
        ``train_loss`` None for an epoch without a masked token). With N processes (``accelerate
        launch``), each takes every N-th batch: ``optimizer_steps`` per epoch is about batches / N.
    Raises:
        TrainingDiverged: the loss became NaN/inf (names the step; the last checkpoint is kept).
        RuntimeError: CUDA ran out of memory (names batch size, max_length and what to lower).
    """
    settings, history, model = plan.settings, plan.history, plan.model
    show = settings.progress and plan.accelerator.is_main_process
    stop = False
    for epoch in range(plan.start_epoch, settings.epochs):
        loader, done = plan.epoch_batches(epoch)
        plan.objective.train()
        clock, losses = time.perf_counter(), []
        trained = sum(e["seconds"] for e in history["epochs"])
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{settings.epochs}", leave=False, disable=not show)
        for i, batch in enumerate(bar, start=done):
            if not has_masked_position(batch["labels"]):
                history["batches_without_masks"] += 1  # no step, no loss of 0.0 in the log
                continue
            losses.append(training_step(plan, batch, epoch))
            if not plan.accelerator.sync_gradients:
                continue
            history["optimizer_steps"] += 1
            step = history["optimizer_steps"]
            lr = plan.scheduler.get_last_lr()[0]
            record = {
                "step": step,
                "epoch": epoch + 1,
                "loss": losses[-1],
                "lr": lr,
                "seconds": trained + time.perf_counter() - clock,
            }
            history["steps"].append(record)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if settings.checkpoint_every and step % settings.checkpoint_every == 0 and i + 1 < len(loader) + done:
                plan.save(epoch, i + 1)
            paused = time.perf_counter()
            stop = any([c.on_step(model, record) for c in callbacks])
            clock += time.perf_counter() - paused  # callbacks are not training time
            if stop:
                break
        bar.close()
        mean = sum(losses) / len(losses) if losses else None
        epoch_record = {"epoch": epoch + 1, "train_loss": mean, "seconds": time.perf_counter() - clock}
        stop = any([c.on_epoch_end(model, epoch_record) for c in callbacks]) or stop
        history["epochs"].append(epoch_record)
        plan.save(epoch + 1, 0)
        if stop:
            break
    for c in callbacks:
        c.on_train_end(model, history)
    model.eval()
    return history
