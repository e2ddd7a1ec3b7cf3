"""Training: the loss, AdamW, the learning-rate schedule, the batches, the plan, and the loop.

Taught in ``notebooks/03_training.ipynb``, in the order of this file:

- the loss (:func:`masked_lm_loss`): cross-entropy at the masked positions only (Devlin et al. 2019,
  section 3.1), wrapped as a module (:class:`MaskedLMObjective`) so that ``accelerate`` (DDP,
  autocast) sees one model;
- AdamW with weight-decay groups (:func:`build_optimizer`), linear warmup then decay or a held rate
  (:func:`build_scheduler`), and the batches of an epoch (:func:`epoch_loader`);
- the plan (:func:`plan_training`): everything decided before the loop, returned as one
  :class:`TrainingPlan` (its features follow ``transformers``' ``run_mlm_no_trainer.py``);
- the loop (:func:`train`, :func:`train_epoch`, :func:`training_step`): notebook 03's hand loop with
  what a real run needs inside a step; everything else (validation, time budget, checkpoints) is a
  :class:`Callback` the caller passes (``hp_mlm.callbacks``).

It runs through ``accelerate.Accelerator``, so the same code uses bf16/fp16 autocast and several
GPUs under ``accelerate launch``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from .checkpoints import hold_output_dir, release_output_dir, resume_key, resume_state
from .common import (
    MIXED_PRECISION,
    cpu_process_group,
    derive_seed,
    generator,
    mlm_logits,
    out_of_memory_in,
)
from .config import AUTO_SETTINGS, Settings
from .masking import IGNORE_INDEX, MaskingCollator, freeze_masks, original_batches
from .tokens import as_rows, grouped, pad_batch, plan_batches

# ---------------------------------------------------------------------------------------------
# objective
# ---------------------------------------------------------------------------------------------


def masked_lm_loss(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    masked_positions_only: bool = True,
    num_items: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy (nats) over the positions whose label is not -100: a scalar FloatTensor.

    ``input_ids``, ``attention_mask``, ``labels``: LongTensor[batch, seq_len]. With
    ``masked_positions_only`` the MLM head runs only at the labelled positions; the loss is the
    same as ``model(..., labels=labels).loss`` (a test checks it to 1e-5). With ``num_items`` the
    sum of the cross-entropies is divided by it instead of by this batch's labelled positions: the
    training loop passes the masked tokens of a whole accumulation window (over every process), so
    that the window's gradient is the large batch's, each masked token weighing the same (as
    transformers' ``num_items_in_batch``). A batch with no labelled position gives a zero loss that
    still has a gradient graph, never NaN.
    """
    target = labels != IGNORE_INDEX
    if not bool(target.any()):
        return model(input_ids=input_ids, attention_mask=attention_mask).logits.sum() * 0.0
    logits = mlm_logits(model, input_ids, attention_mask, target if masked_positions_only else None)
    if not masked_positions_only:
        logits = logits[target]
    if num_items is None:
        return nn.functional.cross_entropy(logits.float(), labels[target])
    return nn.functional.cross_entropy(logits.float(), labels[target], reduction="sum") / num_items


class MaskedLMObjective(nn.Module):
    """Wraps a masked-LM so that ``forward(input_ids, attention_mask, labels, num_items)`` returns
    :func:`masked_lm_loss`. A model wrapped by ``torch.compile`` is held unwrapped, so that a checkpoint
    names its parameters as the model does (not ``_orig_mod.``...) and resumes with or without the
    compile (the loss at the masked positions called its encoder and head directly already)."""

    def __init__(self, model: nn.Module, masked_positions_only: bool = True) -> None:
        super().__init__()
        self.model, self.masked_positions_only = getattr(model, "_orig_mod", model), masked_positions_only

    def load_state_dict(self, state_dict: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """``nn.Module.load_state_dict``, reading ``model._orig_mod.``... as ``model.``...: a checkpoint written while
        the objective held a compiled model wrapped (before it held it unwrapped) resumes with its trained weights."""
        return super().load_state_dict({k.replace("_orig_mod.", ""): v for k, v in state_dict.items()}, *args, **kwargs)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, num_items: int | None = None
    ) -> torch.Tensor:
        return masked_lm_loss(self.model, input_ids, attention_mask, labels, self.masked_positions_only, num_items)


def masked_counts(batches: list[dict[str, torch.Tensor]], accelerator) -> list[int]:
    """Masked tokens (labels other than -100) of each batch of an accumulation window, summed over
    every process (one ``accelerator.reduce`` for the window).

    A batch whose count is 0 (a short row, a low ``mlm_probability``) is skipped by the loop on
    every process together (or their steps would go out of step); the sum is what
    :func:`masked_lm_loss` divides by (``num_items``), counted before the window starts.
    """
    counts = torch.tensor([int((b["labels"] != IGNORE_INDEX).sum()) for b in batches], device=accelerator.device)
    return accelerator.reduce(counts, reduction="sum").tolist()


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------


def build_optimizer(
    model: nn.Module, learning_rate: float, weight_decay: float = 0.01, fused: bool = True
) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` with no weight decay on biases and LayerNorm weights (as ``run_mlm``).

    PyTorch's (``transformers.AdamW`` is gone), ``fused=True`` where torch has the kernel: the same
    update in one pass, 4 times faster than the default on a CPU (benchmarks/results/fused_adamw.md).
    ``fused=False`` for fp16: a fused AdamW skips an inf/NaN step inside its kernel, where accelerate
    cannot see it (its ``step_was_skipped`` stays False, so the schedule and the step count would
    move for an update that did not happen); the unfused one is skipped in the open.
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            exempt = name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name
            (no_decay if exempt else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=learning_rate, fused=fused)
    except (RuntimeError, ValueError):  # an older torch, or a device without the fused kernel
        return torch.optim.AdamW(groups, lr=learning_rate)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float, kind: str = "linear"):
    """Linear warmup over ``warmup_fraction`` of ``total_steps`` optimiser steps, then linear decay
    (``kind="linear"``) or a flat rate (``kind="constant"``): ``transformers.get_scheduler``'s shape, with
    the steps counted from 1.

    ``transformers``' schedule (its ``get_linear_schedule_with_warmup``, ``get_constant_schedule_with_warmup``)
    gives the rate of step ``k`` counted from 0, so its first step runs at rate 0 and moves no weight. Here
    step ``k`` (1 = the first) runs at the rate that schedule over ``total_steps + 1`` steps gives at ``k``:
    the warmup reaches the peak at its last step, a linear decay reaches 0 one step after the run's last,
    and no step runs at rate 0. A warmup of a fraction of a step counts it whole (2.5 steps are 3), as
    ``TrainingArguments`` rounds a ``warmup_ratio`` up. Read the rate a step uses from the optimiser
    before it (``optimizer.param_groups[0]["lr"]``); ``get_last_lr()`` after it is the next step's.

    Raises:
        ValueError: ``kind`` is neither (``"auto"`` is resolved by ``config.resolve_auto``).
    """
    from transformers import get_scheduler

    names = {"linear": "linear", "constant": "constant_with_warmup"}
    if kind not in names:
        raise ValueError(f"schedule must be 'linear' or 'constant' here, got {kind!r} (resolve 'auto' first)")
    warmup = math.ceil(round(warmup_fraction * total_steps, 6))  # a part of a step is a step; 0.1 * 30 is 3, not 4
    shape = get_scheduler(names[kind], optimizer, num_warmup_steps=warmup, num_training_steps=total_steps + 1)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: shape.lr_lambdas[0](step + 1))


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


def epoch_loader(data, collate_fn, lengths: Sequence[int], settings: Settings, epoch: int, processes=1) -> DataLoader:
    """The DataLoader of one epoch: the batches of ``tokens.plan_batches`` (shuffled by
    ``settings.seed`` and ``epoch``; ``lengths``: tokens per row), each row told its place
    (:class:`PositionedRows`), so its masks depend on that place only. ``accelerator.prepare`` gives
    each of ``processes`` every N-th batch (accelerate's ``BatchSamplerShard``), as many to each."""
    group = grouped(settings.padding, settings.group_by_length)
    batches = plan_batches(lengths, settings.batch_size, generator(settings.seed, "shuffle", epoch), group, processes)
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
        ran: whether :func:`train` has run this plan (a plan runs once).
        position: where the loop is, for a checkpoint (``callbacks.SaveCheckpoints``): ``{"epoch"``
            (0-based), ``"batches_done"`` (of the epoch's batches), ``"batches"`` (in the epoch)``}``.
        memory_advice: what to lower when a step runs out of memory (:func:`memory_advice`, said once).
        kept: tensors callbacks keep across a resume, saved with each checkpoint (name -> tensors:
            ``callbacks.Validate``'s best epoch's weights); a resumed plan starts with its checkpoint's.
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
    position: dict[str, int] = field(default_factory=dict)
    memory_advice: str = ""
    kept: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    def start(self) -> None:
        """Mark the plan as run; raise ValueError if it has run before (its optimiser and schedule
        are spent: a second run would go on at the schedule's end, at rate 0 for a decayed one)."""
        if self.ran:
            raise ValueError("this plan has been trained already; make a new one with plan_training to train again")
        self.ran = True

    def epoch_batches(self, epoch: int) -> tuple[Any, int]:
        """``(loader, batches already done)`` for ``epoch``: a resumed epoch skips what it did."""
        skip = self.batches_done if epoch == self.start_epoch else 0
        loader = self.accelerator.prepare(  # each of N processes takes every N-th batch
            epoch_loader(self.data, self.collate_fn, self.lengths, self.settings, epoch, self.accelerator.num_processes)
        )
        return (self.accelerator.skip_first_batches(loader, skip) if skip else loader), skip


def check_resolved(settings: Settings) -> None:
    """Raise ValueError when a setting left on ``auto`` reaches training (``config.resolve_auto``
    settles it for a model; ``prepare.prepare`` calls it)."""
    unresolved = [name for name in (*AUTO_SETTINGS, "precision") if getattr(settings, name) in (None, "auto")]
    if unresolved:
        raise ValueError(
            f"{', '.join(unresolved)} still 'auto': use prepare(settings).settings, or settle them for the model "
            "with config.resolve_auto(settings, new_head), or set them"
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
            each epoch end); None keeps nothing on disk. This run holds it until it ends
            (``checkpoints.hold_output_dir``; ``callbacks.SaveCheckpoints`` lets it go); a plan refused
            here lets it go at once.
        resume: continue from the last complete checkpoint in ``output_dir`` (its weights,
            optimiser, schedule, random states and history are loaded now).
    Raises:
        ValueError: no training rows, a setting still ``auto``, or a checkpoint written with other
            settings (``checkpoints.resume_state``).
        RuntimeError: another live run is training into ``output_dir``.
    """
    check_resolved(settings)
    if len(train_rows) == 0:
        raise ValueError("no training rows: use a larger split or a smaller validation_fraction")
    accelerator = new_accelerator(settings)
    if output_dir is not None and accelerator.is_main_process:
        hold_output_dir(output_dir)  # before reading its checkpoint: one run per folder
    torch.manual_seed(settings.seed)  # dropout
    train_rows = as_rows(train_rows)  # (1, n) tensors too, read once as lists
    data, collate_fn = training_data(train_rows, tokenizer, settings, accelerator.process_index)
    optimizer = build_optimizer(model, settings.learning_rate, settings.weight_decay, settings.precision != "fp16")
    total_steps = optimizer_steps(len(train_rows), settings)
    default = partial(build_scheduler, warmup_fraction=settings.warmup_fraction, kind=settings.schedule)
    scheduler = (make_scheduler or default)(optimizer, total_steps)
    # prepare() wraps the objective (DDP, autocast) but moves `model` in place: `model` stays the
    # object to save, evaluate and checkpoint.
    objective = MaskedLMObjective(model, settings.masked_positions_only)
    objective, optimizer, scheduler = accelerator.prepare(objective, optimizer, scheduler)
    key = resume_key(settings, accelerator.num_processes, train_rows, model)  # what this run trains
    try:
        state = resume_state(accelerator, output_dir, key) if resume and output_dir is not None else None
    except BaseException:
        release_output_dir(output_dir)  # a refused run holds nothing: only a training holds its folder
        raise
    history = (state["history"] if state else new_history(settings, accelerator)) | {"run": key}  # checkpoints keep it
    start_epoch, batches_done = (state["epoch"], state["batches_done"]) if state else (0, 0)
    return TrainingPlan(
        model=model,
        settings=settings,
        accelerator=accelerator,
        objective=objective,
        optimizer=optimizer,
        scheduler=scheduler,
        data=data,
        collate_fn=collate_fn,
        lengths=[len(r["input_ids"]) for r in train_rows],
        total_steps=total_steps,
        start_epoch=start_epoch,
        batches_done=batches_done,
        history=history,
        output_dir=None if output_dir is None else Path(output_dir),
        memory_advice=memory_advice(settings),
        kept=state["kept"] if state else {},
    )


def new_history(settings: Settings, accelerator) -> dict[str, Any]:
    """The history of a run that has not taken a step yet; :func:`train` fills it in.

    Keys: ``steps`` (``[{"step", "epoch", "loss", "lr", "seconds"}]``; ``lr``: the rate the step used), ``epochs`` (``[{"epoch",
    "train_loss", "masked_tokens", "seconds", ...}]``, callbacks add e.g. ``validation``), ``learning_rate``,
    ``optimizer_steps``, ``stopped_by`` (set by :func:`train`: the reason a callback stopped the run, or None),
    ``skipped_steps`` (windows whose update fp16 loss scaling skipped, not counted
    as optimiser steps), ``precision``, ``device``, ``processes``, ``batches_without_masks``, and, once
    :func:`plan_training` has added it, ``run``: what the run trains (``checkpoints.resume_key``: the settings
    that fix the batches and the schedule, the model, the training rows' fingerprint). Losses
    are in nats per masked token: a step's over its window, an epoch's ``train_loss`` over all of its
    ``masked_tokens`` (the rule of the held-out loss, not a mean of step losses; None for an epoch
    without a masked token). Seconds are training clock, callbacks excluded. An epoch a callback cut
    short has ``batches_done``, where its checkpoint resumes. With N processes (``accelerate
    launch``) each takes every N-th batch: ``optimizer_steps`` per epoch is about batches / N /
    ``gradient_accumulation_steps``.
    """
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


# ---------------------------------------------------------------------------------------------
# The loop: notebook 03's hand loop, with what a real run needs around it
# ---------------------------------------------------------------------------------------------


def train(plan: TrainingPlan, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Run ``plan`` (from :func:`plan_training`): fine-tune ``plan.model`` in place; return its history
    (:func:`new_history` lists the keys). ``callbacks``: :class:`Callback` objects, any of which may
    stop training by returning its reason (kept as ``history["stopped_by"]``). The step notebook 03 writes by hand is :func:`training_step`,
    just below; :func:`train_epoch`, after it, runs one epoch of steps and keeps its record.

    Raises:
        TrainingDiverged: the loss became NaN/inf (names the step; the last checkpoint is kept).
        common.OutOfMemory: memory ran out in a step (names the phase and what to lower).
    """
    plan.start()  # a plan runs once: a second run would go on past the end of its schedule
    for epoch in range(plan.start_epoch, plan.settings.epochs):
        plan.history["stopped_by"] = train_epoch(plan, epoch, callbacks)  # a callback's reason, or None
        if plan.history["stopped_by"]:
            break
    for c in callbacks:
        c.on_train_end(plan.model, plan.history)
    plan.model.eval()
    return plan.history


def training_step(plan: TrainingPlan, window: list[dict[str, torch.Tensor]], epoch: int) -> tuple[float, int] | None:
    """One optimiser step on a window of ``gradient_accumulation_steps`` batches (fewer at an epoch's
    end): forward and backward on each batch, clip, optimiser and schedule step, zero_grad. A batch's
    loss is divided by the masked tokens of the whole window on every process, so the step is the one
    large batch would make; a batch with nothing masked is left out.

    Returns ``(loss in nats per masked token, masked tokens)``, or None when no update was made (nothing
    masked, or fp16 loss scaling skipped it: counted in ``skipped_steps``). Raises TrainingDiverged
    (NaN/inf loss) and common.OutOfMemory (naming the phase and :func:`memory_advice`).
    """
    accelerator, settings, history = plan.accelerator, plan.settings, plan.history
    counts = masked_counts(window, accelerator)  # masked tokens of each batch, over every process
    history["batches_without_masks"] += counts.count(0)  # no forward for them, no loss of 0.0 in the log
    window, masked, total = [b for b, n in zip(window, counts) if n], sum(counts), 0.0
    if not window:
        return None
    for j, batch in enumerate(window):
        # only the window's last backward synchronises the processes' gradients
        sync = contextlib.nullcontext() if j == len(window) - 1 else accelerator.no_sync(plan.objective)
        with sync, out_of_memory_in("the training step (forward and backward)", plan.memory_advice):
            loss = plan.objective(batch["input_ids"], batch["attention_mask"], batch["labels"], masked)
            check_finite(loss, history["optimizer_steps"] + 1, epoch + 1, settings.learning_rate)
            accelerator.backward(loss * accelerator.num_processes)  # DDP averages the processes' gradients: undo it
        total += loss.item()
    with out_of_memory_in(OPTIMISER_PHASE, plan.memory_advice + ", or use a smaller `model`"):
        if settings.max_grad_norm > 0:
            accelerator.clip_grad_norm_(plan.objective.parameters(), settings.max_grad_norm)
        plan.optimizer.step()
    plan.scheduler.step()  # accelerate's scheduler does not move when the optimiser skipped its step
    plan.optimizer.zero_grad()
    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()
    if plan.optimizer.step_was_skipped:
        history["skipped_steps"] = history.get("skipped_steps", 0) + 1  # a checkpoint of an older run lacks it
        return None
    return total, masked


def train_epoch(plan: TrainingPlan, epoch: int, callbacks: Sequence[Callback]) -> str | None:
    """One epoch of optimiser steps and its record; the reason a callback gave to stop training, or None."""
    settings, history = plan.settings, plan.history
    loader, skipped = plan.epoch_batches(epoch)  # a resumed epoch skips the batches it did before
    done, end, losses, stop = skipped, skipped + len(loader), [], None
    plan.objective.train()  # dropout on
    clock, trained = time.perf_counter(), sum(e["seconds"] for e in history["epochs"])
    show = settings.progress and plan.accelerator.is_main_process
    with tqdm(loader, desc=f"epoch {epoch + 1}/{settings.epochs}", leave=False, disable=not show) as bar:
        for done, window in windows(bar, settings.gradient_accumulation_steps, skipped):
            plan.position = {"epoch": epoch, "batches_done": done, "batches": end}  # for a checkpoint
            rate = plan.optimizer.param_groups[0]["lr"]  # the rate this step uses (the schedule moves after it)
            step = training_step(plan, window, epoch)  # (loss in nats, masked tokens), or None
            if step is None:  # nothing masked in the window, or fp16 loss scaling skipped the update
                continue
            loss, masked = step
            losses.append((loss, masked))
            history["optimizer_steps"] += 1
            record = {
                "step": history["optimizer_steps"],
                "epoch": epoch + 1,
                "loss": loss,
                "lr": rate,
                "seconds": trained + time.perf_counter() - clock,
            }
            history["steps"].append(record)
            bar.set_postfix(loss=f"{loss:.3f}")
            paused = time.perf_counter()
            stop = next(filter(None, [c.on_step(plan.model, record) for c in callbacks]), None)  # all are called
            clock += time.perf_counter() - paused  # callbacks are not training time
            if stop:
                break
    if history["epochs"] and history["epochs"][-1]["epoch"] == epoch + 1:  # its part before a stop, now resumed:
        part = history["epochs"].pop()  # one record for the whole epoch
        losses, clock = [(part["train_loss"] or 0.0, part["masked_tokens"]), *losses], clock - part["seconds"]
    masked = sum(n for _, n in losses)  # per masked token, as a window's loss and the held-out loss
    record = {"epoch": epoch + 1, "train_loss": sum(x * n for x, n in losses) / masked if masked else None}
    record.update(masked_tokens=masked, seconds=time.perf_counter() - clock)
    if done < end:  # a callback stopped it (a time budget): its checkpoint resumes after batch `done`
        record["batches_done"] = done
    history["epochs"].append(record)
    # every callback's on_epoch_end is called (a list); the step's reason, if any, comes first
    return next(filter(None, [stop] + [c.on_epoch_end(plan.model, record) for c in callbacks]), None)


def windows(batches, size: int, start: int):
    """``(batches done after it, [batch, ...])`` for each accumulation window of ``size`` batches; the
    last window of an epoch may be shorter, and still makes its step."""
    batches = iter(batches)
    while window := list(itertools.islice(batches, size)):
        start += len(window)
        yield start, window


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


# ---------------------------------------------------------------------------------------------
# callbacks
# ---------------------------------------------------------------------------------------------


class Callback:
    """Base class: every hook does nothing and never stops training. A hook stops training by returning
    its reason, a short str (``callbacks.TIME_BUDGET``, ``callbacks.EARLY_STOPPING``): the loop keeps the
    first one given as ``history["stopped_by"]`` (None: no callback stopped the run)."""

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> str | None:  # noqa: ARG002 - a hook's signature
        """After an optimiser step; ``step`` is its history record: ``{"step"`` (1-based), ``"epoch"``,
        ``"loss"`` (nats), ``"lr"`` (the rate the step used), ``"seconds"`` (training clock so far,
        callbacks excluded)``}``. A reason stops training."""
        return None

    def on_epoch_end(self, model: nn.Module, record: dict[str, Any]) -> str | None:  # noqa: ARG002 - a hook's signature
        """After an epoch; may add keys to its history ``record``; a reason stops training."""
        return None

    def on_train_end(self, model: nn.Module, history: dict[str, Any]) -> None:
        """Once, after the last step (also after a stop)."""
