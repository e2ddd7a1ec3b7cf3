"""Training: one readable loop over per-batch masks, with AdamW, warmup, clipping and checkpoints.

Taught in ``notebooks/03_training.ipynb``. Everything is decided before the loop (how batches are
built, the optimiser, the schedule, where to resume); the loop only steps. It runs through
``accelerate.Accelerator``, so the same code uses bf16/fp16 autocast and several GPUs under
``accelerate launch``. Its feature set follows ``transformers``' ``run_mlm_no_trainer.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from .callbacks import Callback
from .checkpoints import resume_state, run_shape, save_checkpoint
from .common import (
    MIXED_PRECISION,
    cpu_process_group,
    derive_seed,
    generator,
    mlm_logits,
    resolve_precision,
    sum_across_processes,
)
from .config import Settings
from .masking import IGNORE_INDEX, MaskingCollator, freeze_masks, original_batches
from .tokens import pad_batch, plan_batches


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; training stopped before saving anything from that step."""


# ---------------------------------------------------------------------------------------------
# The objective: cross-entropy at the masked positions only.
# ---------------------------------------------------------------------------------------------


def masked_lm_loss(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                   masked_positions_only: bool = True) -> torch.Tensor:
    """Mean cross-entropy over the positions whose label is not -100 (a scalar FloatTensor).

    With ``masked_positions_only`` the MLM head runs only at those positions; the loss is the same
    as ``model(..., labels=labels).loss`` (a test checks it to 1e-5). A batch with no labelled
    position gives a zero loss that still has a gradient graph, never NaN.
    """
    target = labels != IGNORE_INDEX
    if not bool(target.any()):
        return model(input_ids=input_ids, attention_mask=attention_mask).logits.sum() * 0.0
    logits = mlm_logits(model, input_ids, attention_mask, target if masked_positions_only else None)
    if not masked_positions_only:
        logits = logits[target]
    return nn.functional.cross_entropy(logits.float(), labels[target])


class MaskedLMObjective(nn.Module):
    """Wraps a masked-LM so that ``forward`` returns the loss (so DDP and autocast see one module)."""

    def __init__(self, model: nn.Module, masked_positions_only: bool = True) -> None:
        super().__init__()
        self.model, self.masked_positions_only = model, masked_positions_only

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return masked_lm_loss(self.model, input_ids, attention_mask, labels, self.masked_positions_only)


# ---------------------------------------------------------------------------------------------
# Everything the loop needs, decided before it.
# ---------------------------------------------------------------------------------------------


def build_optimizer(model: nn.Module, learning_rate: float, weight_decay: float = 0.01) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` with no weight decay on biases and LayerNorm weights (as ``run_mlm``).

    (``transformers.AdamW`` was removed from transformers; PyTorch's is the one to use.)
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float, kind: str = "linear"):
    """Linear warmup over ``warmup_fraction`` of ``total_steps`` optimiser steps, then linear decay
    to 0 (``kind="linear"``) or a flat rate (``kind="constant"``), via ``transformers.get_scheduler``."""
    from transformers import get_scheduler

    names = {"linear": "linear", "constant": "constant_with_warmup"}
    if kind not in names:
        raise ValueError(f"schedule must be 'linear' or 'constant' here, got {kind!r} (resolve 'auto' with config.resolve_auto)")
    warmup = int(round(warmup_fraction * total_steps))
    return get_scheduler(names[kind], optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)


def training_data(rows: Sequence[dict[str, Any]], tokenizer, settings: Settings, process_index: int = 0):
    """How the training batches are built: ``(rows_for_the_loader, collate_fn)``.

    - the course (``padding="batch"``): each batch padded to its own longest row, masks drawn
      afresh for every batch by :class:`~hp_mlm.masking.MaskingCollator` (seeded per epoch and batch);
    - ``mask_once``: masks drawn once before training (:func:`~hp_mlm.masking.freeze_masks`);
    - ``padding="dataset"``: the original tutorial's data, built once
      (:func:`~hp_mlm.masking.original_batches`: longest-row padding, static masks, labels everywhere).
    """
    if settings.padding == "dataset":
        static = original_batches(rows, tokenizer, settings.mlm_probability, generator(settings.seed, "original-masks"))
        return [{k: v[i] for k, v in static.items()} for i in range(len(rows))], None
    if settings.mask_once:
        frozen = freeze_masks(rows, tokenizer, settings.mlm_probability, derive_seed(settings.seed, "static-masks"),
                              settings.label_all_tokens, settings.masking)
        return frozen, partial(pad_batch, tokenizer=tokenizer)
    collator = MaskingCollator(tokenizer, settings.mlm_probability, seed=settings.seed, process_index=process_index,
                               strategy=settings.masking, label_all_tokens=settings.label_all_tokens,
                               pad_to_multiple_of=8 if torch.cuda.is_available() else None)
    return list(rows), collator


def epoch_loader(data, collate_fn, lengths: Sequence[int], settings: Settings, epoch: int, skip: int = 0) -> DataLoader:
    """The DataLoader of one epoch, every batch of the plan; ``accelerator.prepare`` gives each of N
    processes every N-th one (accelerate's ``BatchSamplerShard``). ``skip``: batches this process
    already did (resuming), so that its masks go on from there; ``accelerator.skip_first_batches`` skips them.
    """
    group = settings.group_by_length and settings.padding == "batch"
    plan = plan_batches(lengths, settings.batch_size, generator(settings.seed, "shuffle", epoch), group)
    if isinstance(collate_fn, MaskingCollator):
        collate_fn.start_epoch(epoch, skip)
    # Its own generator, so that creating the loader draws nothing from the global RNG (dropout).
    return DataLoader(data, batch_sampler=plan, collate_fn=collate_fn, generator=torch.Generator())


def has_masked_position(labels: torch.Tensor) -> bool:
    """Whether any process's batch has a label other than -100. A batch with nothing masked (a short
    row, a low ``mlm_probability``) is skipped: no optimiser step, no loss of 0.0 in the log. All
    processes skip together (one sum over processes), or their steps would go out of step."""
    return sum_across_processes([float((labels != IGNORE_INDEX).sum())])[0] > 0


def check_finite(loss: torch.Tensor, step: int, epoch: int, learning_rate: float) -> None:
    """Raise :class:`TrainingDiverged` (naming the step and a 10x lower rate) if ``loss`` is NaN/inf."""
    if not torch.isfinite(loss.detach()):
        raise TrainingDiverged(
            f"loss became {loss.item()} at optimiser step {step} (epoch {epoch}); nothing from this step was "
            f"saved and the last checkpoint is intact. Try a lower learning rate, e.g. --lr {learning_rate / 10:g}."
        )


def out_of_memory(settings: Settings, error: Exception) -> RuntimeError:
    """The out-of-memory error, with the flags that lower memory."""
    return RuntimeError(
        f"Out of GPU memory with batch_size={settings.batch_size} and max_length={settings.max_length}. "
        "Lower --batch-size (and raise --gradient-accumulation-steps to keep the effective batch) or lower --max-length."
    )


# ---------------------------------------------------------------------------------------------
# The loop.
# ---------------------------------------------------------------------------------------------


def train(
    model: nn.Module,
    tokenizer,
    train_rows: Sequence[dict[str, Any]],
    settings: Settings,
    learning_rate: float | None = None,
    *,
    callbacks: Sequence[Callback] = (),
    make_scheduler: Callable[[torch.optim.Optimizer, int], Any] | None = None,
    output_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``model`` in place on ``train_rows`` and return the training history.

    Args:
        train_rows: tokenised rows (``input_ids``, ``attention_mask``, ``special_tokens_mask``).
        learning_rate: peak learning rate (default ``settings.learning_rate``; see ``config.resolve_auto``).
        callbacks: ``callbacks.Callback`` objects (validation, early stopping, time budgets).
        make_scheduler: ``(optimizer, total_steps) -> scheduler``; default :func:`build_scheduler`
            with ``settings.schedule`` and ``settings.warmup_fraction`` over all epochs' steps.
        output_dir: where checkpoints go (every ``settings.checkpoint_every`` optimiser steps and at
            each epoch end); None keeps nothing on disk.
        resume: continue from the last complete checkpoint in ``output_dir``.
    Returns:
        ``{"steps": [{"step", "epoch", "loss", "lr", "seconds"}], "epochs": [{"epoch", "train_loss",
        "seconds", ...}], "learning_rate", "optimizer_steps", "precision", "device", "processes",
        "batches_without_masks"}`` (losses in nats, seconds of training clock, callbacks excluded;
        ``train_loss`` None for an epoch without a masked token). With N processes (``accelerate
        launch``), each takes every N-th batch: ``optimizer_steps`` per epoch is about batches / N.
    Raises:
        TrainingDiverged: the loss became NaN/inf (names the step; the last checkpoint is kept).
        RuntimeError: CUDA ran out of memory (names batch size, max_length and the flags to lower).
        ValueError: no training rows, no learning rate, or an unresolved ``"auto"`` schedule.
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    learning_rate = settings.learning_rate if learning_rate is None else learning_rate
    if len(train_rows) == 0 or learning_rate is None:
        raise ValueError("need training rows and a learning rate (use a larger split, or resolve 'auto' with config.resolve_auto)")
    precision = resolve_precision(settings.precision)
    # accelerate keeps one precision per process; each run sets its own (the process group stays).
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    accelerator = Accelerator(mixed_precision=MIXED_PRECISION[precision], cpu=cpu_process_group(),
                              gradient_accumulation_steps=settings.gradient_accumulation_steps)
    torch.manual_seed(settings.seed)  # dropout
    data, collate_fn = training_data(train_rows, tokenizer, settings, accelerator.process_index)
    lengths = [len(r["input_ids"]) for r in train_rows]
    optimizer = build_optimizer(model, learning_rate, settings.weight_decay)
    # The schedule counts the steps of one process on all batches: with N processes, accelerate
    # advances it N times per optimiser step, so it ends on time.
    total_steps = math.ceil(math.ceil(len(lengths) / settings.batch_size) / settings.gradient_accumulation_steps)
    total_steps *= settings.epochs
    scheduler = (make_scheduler or partial(_default_scheduler, settings=settings))(optimizer, total_steps)
    objective = MaskedLMObjective(model, settings.masked_positions_only)
    # prepare() wraps the objective (DDP, autocast) but moves `model` in place: `model` stays the
    # object to save, evaluate and checkpoint.
    objective, optimizer, scheduler = accelerator.prepare(objective, optimizer, scheduler)
    history: dict[str, Any] = {"steps": [], "epochs": [], "learning_rate": learning_rate, "optimizer_steps": 0,
                               "precision": precision, "device": str(accelerator.device),
                               "processes": accelerator.num_processes, "batches_without_masks": 0}
    shape = run_shape(settings, learning_rate, accelerator.num_processes)
    state = resume_state(accelerator, output_dir, shape) if resume and output_dir is not None else None
    start_epoch, skip = (state["epoch"], state["batches_done"]) if state else (0, 0)
    history = state["history"] if state else history

    def checkpoint(epoch: int, batches_done: int) -> None:
        if output_dir is not None:
            save_checkpoint(accelerator, output_dir, {"epoch": epoch, "batches_done": batches_done, "run": shape,
                                                      "global_step": history["optimizer_steps"], "history": history})

    stop = False
    for epoch in range(start_epoch, settings.epochs):
        loader = accelerator.prepare(epoch_loader(data, collate_fn, lengths, settings, epoch, skip))
        loader = accelerator.skip_first_batches(loader, skip) if skip else loader
        objective.train()
        clock, losses = time.perf_counter(), []
        trained = sum(e["seconds"] for e in history["epochs"])
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{settings.epochs}", leave=False,
                   disable=not settings.progress or not accelerator.is_main_process)
        for i, batch in enumerate(bar, start=skip):
            if not has_masked_position(batch["labels"]):
                history["batches_without_masks"] += 1  # no step, no loss of 0.0 in the log
                continue
            with accelerator.accumulate(objective):
                try:
                    loss = objective(batch["input_ids"], batch["attention_mask"], batch["labels"])
                    check_finite(loss, history["optimizer_steps"] + 1, epoch + 1, learning_rate)
                    accelerator.backward(loss)
                except torch.OutOfMemoryError as error:
                    raise out_of_memory(settings, error) from error
                if accelerator.sync_gradients and settings.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(objective.parameters(), settings.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
            if not accelerator.sync_gradients:
                continue
            history["optimizer_steps"] += 1
            elapsed = time.perf_counter() - clock
            record = {"step": history["optimizer_steps"], "epoch": epoch + 1, "loss": losses[-1],
                      "lr": scheduler.get_last_lr()[0], "seconds": trained + elapsed}
            history["steps"].append(record)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if settings.checkpoint_every and record["step"] % settings.checkpoint_every == 0 and i + 1 < len(loader) + skip:
                checkpoint(epoch, i + 1)
            paused = time.perf_counter()
            stop = any([c.on_step(model, record) for c in callbacks])
            clock += time.perf_counter() - paused  # callbacks are not training time
            if stop:
                break
        bar.close()
        epoch_record = {"epoch": epoch + 1, "train_loss": sum(losses) / len(losses) if losses else None,
                        "seconds": time.perf_counter() - clock}
        stop = any([c.on_epoch_end(model, epoch_record) for c in callbacks]) or stop
        history["epochs"].append(epoch_record)
        skip = 0
        checkpoint(epoch + 1, 0)
        if stop:
            break
    for c in callbacks:
        c.on_train_end(model, history)
    model.eval()
    return history


def _default_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, settings: Settings):
    return build_scheduler(optimizer, total_steps, settings.warmup_fraction, settings.schedule)
