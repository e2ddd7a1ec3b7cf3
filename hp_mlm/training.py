"""Training: one readable loop that runs a :class:`~hp_mlm.plan.TrainingPlan`.

Taught in ``notebooks/03_training.ipynb`` (its second half). Everything is decided before the loop
by ``plan.plan_training`` (how batches are built, the optimiser, the schedule, where to resume); the
loop only steps, logs, checkpoints and asks its callbacks whether to stop. It runs through
``accelerate.Accelerator``, so the same code uses bf16/fp16 autocast and several GPUs under
``accelerate launch``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from .allocator import reuse_freed_memory
from .callbacks import Callback
from .common import out_of_memory_in, sum_across_processes
from .config import Settings
from .objective import masked_counts
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


def memory_advice(settings: Settings) -> str:
    """What to lower when a training step runs out of memory, with the values in use."""
    return (
        f"`batch_size` (now {settings.batch_size}; raise `gradient_accumulation_steps` to keep the effective "
        f"batch) or `max_length` (now {settings.max_length}). Nothing from this step was saved; "
        "`resume` continues from the last checkpoint"
    )


#: Where a step can run out of memory besides its forward and backward passes.
OPTIMISER_PHASE = "the optimiser step (AdamW allocates its state, twice the weights, at the first step)"


def training_step(plan: TrainingPlan, window: list[dict[str, torch.Tensor]], masked: int, epoch: int) -> float:
    """One optimiser step on an accumulation window (``gradient_accumulation_steps`` batches, fewer at
    an epoch's end): forward and backward on each batch, clip, optimiser and schedule step, zero_grad.
    Returns the window's loss in nats: its masked tokens' summed cross-entropy over ``masked``, the
    window's masked tokens over every process, so the step is the large batch's (Case C38).

    Raises:
        TrainingDiverged: the loss is NaN/inf. common.OutOfMemory: in the passes or the optimiser step
            (names the phase and :func:`memory_advice`).
    """
    accelerator, settings = plan.accelerator, plan.settings
    processes, total = accelerator.num_processes, 0.0
    for j, batch in enumerate(window):
        # only the window's last backward synchronises the processes' gradients
        sync = contextlib.nullcontext() if j == len(window) - 1 else accelerator.no_sync(plan.objective)
        with sync, out_of_memory_in("the training step (forward and backward)", memory_advice(settings)):
            loss = plan.objective(batch["input_ids"], batch["attention_mask"], batch["labels"], masked)
            check_finite(loss, plan.history["optimizer_steps"] + 1, epoch + 1, settings.learning_rate)
            accelerator.backward(loss * processes)  # DDP averages the processes' gradients: undo it
        total += loss.item()
    with out_of_memory_in(OPTIMISER_PHASE, memory_advice(settings) + ", or use a smaller `model`"):
        if settings.max_grad_norm > 0:
            accelerator.clip_grad_norm_(plan.objective.parameters(), settings.max_grad_norm)
        plan.optimizer.step()
    plan.scheduler.step()
    plan.optimizer.zero_grad()
    return sum_across_processes([total])[0]


def windows(batches, size: int, start: int):
    """``(batches done after it, [batch, ...])`` for each accumulation window of ``size`` batches; the
    last window of an epoch may be shorter, and still makes its step (Case C39)."""
    window, done = [], start
    for done, batch in enumerate(batches, start=start + 1):
        window.append(batch)
        if len(window) == size:
            yield done, window
            window = []
    if window:
        yield done, window


def train(plan: TrainingPlan, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Run ``plan`` (from ``plan.plan_training``): fine-tune ``plan.model`` in place; return the history.

    Args:
        callbacks: ``callbacks.Callback`` objects (validation, early stopping, time budgets); any
            may stop training by returning True.
    Returns:
        ``{"steps": [{"step", "epoch", "loss", "lr", "seconds"}], "epochs": [{"epoch", "train_loss",
        "seconds", ...}], "learning_rate", "optimizer_steps", "skipped_steps", "precision", "device",
        "processes", "batches_without_masks"}`` (losses in nats, a step's the token-weighted loss of
        its window; seconds of training clock, callbacks excluded; an epoch a callback cut short has
        ``batches_done``, and its checkpoint resumes there; ``train_loss`` None for an epoch
        without a masked token; ``skipped_steps``: windows whose update fp16 loss scaling skipped, not
        counted as optimiser steps). With N processes (``accelerate launch``), each takes every N-th
        batch: ``optimizer_steps`` per epoch is about batches / N / ``gradient_accumulation_steps``.
        On the CPU the epochs run inside ``allocator.reuse_freed_memory``: the memory a step frees is
        kept for the next (faster steps, the same numbers; meanwhile the process holds about its
        largest step's memory).
    Raises:
        TrainingDiverged: the loss became NaN/inf (names the step; the last checkpoint is kept).
        common.OutOfMemory: memory ran out in a step (names the phase, batch size, max_length and
            what to lower).
    """
    plan.start()
    stop = False
    # on the CPU, each step's freed tensors are kept for the next step instead of faulted in again
    with reuse_freed_memory(plan.accelerator.device.type == "cpu"):
        for epoch in range(plan.start_epoch, plan.settings.epochs):
            stop = train_epoch(plan, epoch, callbacks)
            if stop:
                break
    for c in callbacks:
        c.on_train_end(plan.model, plan.history)
    plan.model.eval()
    return plan.history


def train_epoch(plan: TrainingPlan, epoch: int, callbacks: Sequence[Callback]) -> bool:
    """One epoch of windows, its record and its checkpoint; True when a callback stops training."""
    settings, history, model = plan.settings, plan.history, plan.model
    loader, done = plan.epoch_batches(epoch)
    plan.objective.train()
    clock, losses, stop = time.perf_counter(), [], False
    trained = sum(e["seconds"] for e in history["epochs"])
    show = settings.progress and plan.accelerator.is_main_process
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{settings.epochs}", leave=False, disable=not show)
    done_after = done
    for done_after, window in windows(bar, settings.gradient_accumulation_steps, done):
        counts = masked_counts(window)
        history["batches_without_masks"] += counts.count(0)  # no forward, no loss of 0.0 in the log
        kept = [batch for batch, count in zip(window, counts) if count]
        if not kept:
            continue
        losses.append(training_step(plan, kept, sum(counts), epoch))
        if plan.optimizer.step_was_skipped:  # fp16 loss scaling found inf/NaN gradients: no update
            history["skipped_steps"] = history.get("skipped_steps", 0) + 1
            continue
        history["optimizer_steps"] += 1
        step, lr = history["optimizer_steps"], plan.scheduler.get_last_lr()[0]
        record = {
            "step": step,
            "epoch": epoch + 1,
            "loss": losses[-1],
            "lr": lr,
            "seconds": trained + time.perf_counter() - clock,
        }
        history["steps"].append(record)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if settings.checkpoint_every and step % settings.checkpoint_every == 0 and done_after < len(loader) + done:
            plan.save(epoch, done_after)
        paused = time.perf_counter()
        stop = any([c.on_step(model, record) for c in callbacks])
        clock += time.perf_counter() - paused  # callbacks are not training time
        if stop:
            break
    bar.close()
    mean = sum(losses) / len(losses) if losses else None
    record = {"epoch": epoch + 1, "train_loss": mean, "seconds": time.perf_counter() - clock}
    complete = done_after == len(loader) + done  # else a callback stopped it (a time budget): resume there
    if not complete:
        record["batches_done"] = done_after
    stop = any([c.on_epoch_end(model, record) for c in callbacks]) or stop
    history["epochs"].append(record)
    plan.save(epoch + 1, 0) if complete else plan.save(epoch, done_after)
    return stop
