"""The plan: everything the training loop needs, decided before it starts.

Taught in ``notebooks/03_training.ipynb`` (its first half; ``training.train`` is the second).
:func:`plan_training` builds the optimiser (AdamW with weight-decay groups), the schedule (linear
warmup, then decay or a held rate), how batches are built (fresh masks per batch, or the original
tutorial's static data), the ``accelerate`` wrapper (precision, several processes) and the point
to resume from, and returns them as one :class:`TrainingPlan`. Its feature set follows
``transformers``' ``run_mlm_no_trainer.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .callbacks import TimeBudget
from .checkpoints import resume_key, resume_state, save_checkpoint
from .common import MIXED_PRECISION, cpu_process_group, derive_seed, generator
from .config import Settings
from .masking import MaskingCollator, freeze_masks, original_batches
from .objective import MaskedLMObjective
from .packing import grouped
from .tokens import as_rows, pad_batch, plan_batches


def build_optimizer(model: nn.Module, learning_rate: float, weight_decay: float = 0.01) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` with no weight decay on biases and LayerNorm weights (as ``run_mlm``).

    PyTorch's (``transformers.AdamW`` is gone), ``fused=True`` where torch has the kernel: the same
    update in one pass, 4 times faster than the default on a CPU (benchmarks/results/fused_adamw.md).
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            exempt = name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name
            (no_decay if exempt else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=learning_rate, fused=True)
    except (RuntimeError, ValueError):  # an older torch, or a device without the fused kernel
        return torch.optim.AdamW(groups, lr=learning_rate)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float, kind: str = "linear"):
    """Linear warmup over ``warmup_fraction`` of ``total_steps`` optimiser steps, then linear decay
    to 0 (``kind="linear"``) or a flat rate (``kind="constant"``), via ``transformers.get_scheduler``.

    Raises:
        ValueError: ``kind`` is neither (``"auto"`` is resolved by ``config.resolve_auto``).
    """
    from transformers import get_scheduler

    names = {"linear": "linear", "constant": "constant_with_warmup"}
    if kind not in names:
        raise ValueError(f"schedule must be 'linear' or 'constant' here, got {kind!r} (resolve 'auto' first)")
    warmup = int(round(warmup_fraction * total_steps))
    return get_scheduler(names[kind], optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)


def optimizer_steps(n_rows: int, settings: Settings) -> int:
    """Optimiser steps of the whole run on ``n_rows`` rows: batches per epoch, divided by the
    accumulation steps (rounded up), times the epochs. With N processes accelerate advances the
    schedule N times per optimiser step, so a schedule of this length ends on time."""
    batches = math.ceil(n_rows / settings.batch_size)
    return math.ceil(batches / settings.gradient_accumulation_steps) * settings.epochs


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
    if settings.mask_once:  # static masks, drawn once: a plain 15% draw (no row given one)
        options = dict(label_all_tokens=settings.label_all_tokens, strategy=settings.masking, at_least_one=False)
        seed = derive_seed(settings.seed, "static-masks")
        frozen = freeze_masks(rows, tokenizer, settings.mlm_probability, seed, **options)
        return frozen, partial(pad_batch, tokenizer=tokenizer)
    collator = MaskingCollator(
        tokenizer,
        settings.mlm_probability,
        seed=settings.seed,
        process_index=process_index,
        strategy=settings.masking,
        label_all_tokens=settings.label_all_tokens,
        pad_to_multiple_of=8 if torch.cuda.is_available() else None,
    )
    return list(rows), collator


class PositionedRows(Dataset):
    """The training rows, read by ``(epoch, batch index, row index)``: each row comes back with its
    batch's position (``masking.BATCH_POSITION``), so the masks do not depend on how often, or in
    which worker process, the collator was called."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: tuple[int, int, int]) -> dict[str, Any]:
        epoch, batch_index, row = index
        return {**self.rows[row], "epoch": epoch, "batch_index": batch_index}


def epoch_loader(data, collate_fn, lengths: Sequence[int], settings: Settings, epoch: int) -> DataLoader:
    """The DataLoader of one epoch, every batch of the plan (``tokens.plan_batches``, shuffled by
    ``settings.seed`` and ``epoch``); ``accelerator.prepare`` gives each of N processes every N-th
    one (accelerate's ``BatchSamplerShard``). ``lengths``: tokens per row."""
    group = grouped(settings.padding, settings.group_by_length)
    plan = plan_batches(lengths, settings.batch_size, generator(settings.seed, "shuffle", epoch), group)
    return batch_loader(data, plan, collate_fn, epoch)


def batch_loader(data, batches: Sequence[Sequence[int]], collate_fn, epoch: int) -> DataLoader:
    """A DataLoader over ``batches`` (lists of row indices) whose rows know their place: row ``j`` of
    batch ``b`` comes back with ``epoch`` and ``b`` (:class:`PositionedRows`)."""
    positioned = [[(epoch, b, row) for row in batch] for b, batch in enumerate(batches)]
    rows = PositionedRows(data)  # the loader gets its own generator: it draws nothing from the global RNG (dropout)
    return DataLoader(rows, batch_sampler=positioned, collate_fn=collate_fn, generator=torch.Generator())


@dataclass
class TrainingPlan:
    """What :func:`plan_training` decided; ``training.train`` runs it.

    Attributes:
        model: the model trained in place (moved to the device; save and evaluate this one).
        settings: the run's resolved settings (``learning_rate``, ``schedule``, ``precision`` concrete).
        accelerator: the ``accelerate.Accelerator`` (precision, processes).
        objective, optimizer, scheduler: prepared by the accelerator (the objective wraps ``model``).
        data, collate_fn, lengths: the rows for the loader, how a batch is built, tokens per row.
        total_steps: optimiser steps of the whole run (:func:`optimizer_steps`).
        start_epoch, batches_done: where the loop starts (0, 0 unless resuming a checkpoint).
        history: the run's history so far (empty, or the checkpoint's).
        output_dir: where checkpoints go (None: nowhere).
        ran: whether ``training.train`` has run this plan (a plan runs once).
    """

    model: nn.Module
    settings: Settings
    accelerator: Any
    objective: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    data: Any
    collate_fn: Callable | None
    lengths: list[int]
    total_steps: int
    start_epoch: int
    batches_done: int
    history: dict[str, Any]
    output_dir: Path | None
    ran: bool = False

    def start(self) -> None:
        """Mark the plan as run; raise ValueError if it has run before (its optimiser and schedule
        are spent: a second run would go on at the schedule's end, at rate 0 for a decayed one)."""
        if self.ran:
            raise ValueError("this plan has been trained already; make a new one with plan_training to train again")
        self.ran = True

    def epoch_batches(self, epoch: int) -> tuple[Any, int]:
        """``(loader, batches already done)`` for ``epoch``: a resumed epoch skips what it did."""
        skip = self.batches_done if epoch == self.start_epoch else 0
        loader = self.accelerator.prepare(epoch_loader(self.data, self.collate_fn, self.lengths, self.settings, epoch))
        return (self.accelerator.skip_first_batches(loader, skip) if skip else loader), skip

    def time_budget(self) -> TimeBudget:
        """The run's ``TimeBudget``: ``settings.time_budget_minutes`` of this run's training clock (the
        minutes of a run it resumes come on top); one that never stops when the setting is 0."""
        minutes, trained = self.settings.time_budget_minutes, sum(e["seconds"] for e in self.history["epochs"])
        return TimeBudget(60 * minutes + trained if minutes else math.inf)

    def save(self, epoch: int, batches_done: int) -> None:
        """Checkpoint the run (every process calls it) when it has an output folder."""
        if self.output_dir is None:
            return
        state = {"epoch": epoch, "batches_done": batches_done, "global_step": self.history["optimizer_steps"]}
        key = resume_key(self.settings, self.accelerator.num_processes)
        save_checkpoint(self.accelerator, self.output_dir, {**state, "run": key, "history": self.history})


def check_resolved(settings: Settings) -> None:
    """Raise ValueError when a setting left on ``auto`` reaches training (``config.resolve_auto``
    settles it for a model; ``prepare.prepare`` calls it)."""
    values = {"learning_rate": settings.learning_rate, "schedule": settings.schedule, "epochs": settings.epochs}
    unresolved = [
        name for name, value in {**values, "precision": settings.precision}.items() if value in (None, "auto")
    ]
    if unresolved:
        raise ValueError(
            f"{', '.join(unresolved)} still 'auto': use prepare(settings).settings, or settle them for the model "
            "with config.resolve_auto(settings, head_newly_initialised), or set them"
        )


def new_accelerator(settings: Settings):
    """A fresh ``accelerate.Accelerator`` for this run's precision. Gradient accumulation is the
    loop's own (``training.training_step`` weighs a window by its masked tokens), not accelerate's."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    # accelerate keeps one precision per process; each run sets its own (the process group stays).
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    return Accelerator(mixed_precision=MIXED_PRECISION[settings.precision], cpu=cpu_process_group())


def plan_training(
    model: nn.Module,
    tokenizer,
    train_rows: Sequence[dict[str, Any]],
    settings: Settings,
    *,
    make_scheduler: Callable[[torch.optim.Optimizer, int], Any] | None = None,
    output_dir: str | Path | None = None,
    resume: bool = False,
) -> TrainingPlan:
    """Decide everything the loop needs, in the order the loop needs it.

    Args:
        train_rows: tokenised rows (``input_ids``, ``attention_mask``, ``special_tokens_mask``).
        settings: resolved settings (:func:`check_resolved`).
        make_scheduler: ``(optimizer, total_steps) -> scheduler``; default :func:`build_scheduler`
            with ``settings.schedule`` and ``settings.warmup_fraction`` over all epochs' steps.
        output_dir: where checkpoints go (every ``settings.checkpoint_every`` optimiser steps and at
            each epoch end); None keeps nothing on disk.
        resume: continue from the last complete checkpoint in ``output_dir`` (its weights,
            optimiser, schedule, random states and history are loaded now).
    Raises:
        ValueError: no training rows, a setting still ``auto``, or a checkpoint written with other
            settings (``checkpoints.resume_state``).
    """
    check_resolved(settings)
    if len(train_rows) == 0:
        raise ValueError("no training rows: use a larger split or a smaller validation_fraction")
    accelerator = new_accelerator(settings)
    torch.manual_seed(settings.seed)  # dropout
    train_rows = as_rows(train_rows)  # (1, n) tensors too, read once as lists
    data, collate_fn = training_data(train_rows, tokenizer, settings, accelerator.process_index)
    optimizer = build_optimizer(model, settings.learning_rate, settings.weight_decay)
    total_steps = optimizer_steps(len(train_rows), settings)
    default = partial(build_scheduler, warmup_fraction=settings.warmup_fraction, kind=settings.schedule)
    scheduler = (make_scheduler or default)(optimizer, total_steps)
    # prepare() wraps the objective (DDP, autocast) but moves `model` in place: `model` stays the
    # object to save, evaluate and checkpoint.
    objective = MaskedLMObjective(model, settings.masked_positions_only)
    objective, optimizer, scheduler = accelerator.prepare(objective, optimizer, scheduler)
    key = resume_key(settings, accelerator.num_processes)
    state = resume_state(accelerator, output_dir, key) if resume and output_dir is not None else None
    history = state["history"] if state else new_history(settings, accelerator)
    start = (state["epoch"], state["batches_done"]) if state else (0, 0)
    lengths = [len(r["input_ids"]) for r in train_rows]
    folder = None if output_dir is None else Path(output_dir)
    return TrainingPlan(
        model,
        settings,
        accelerator,
        objective,
        optimizer,
        scheduler,
        data,
        collate_fn,
        lengths,
        total_steps,
        *start,
        history,
        folder,
    )


def new_history(settings: Settings, accelerator) -> dict[str, Any]:
    """The history of a run that has not taken a step yet (see ``training.train`` for its keys)."""
    return {
        "steps": [],
        "epochs": [],
        "learning_rate": settings.learning_rate,
        "optimizer_steps": 0,
        "skipped_steps": 0,
        "precision": settings.precision,
        "device": str(accelerator.device),
        "processes": accelerator.num_processes,
        "batches_without_masks": 0,
    }
