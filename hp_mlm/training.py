"""Training: one readable loop over per-batch masks, with AdamW, warmup/decay, clipping and checkpoints.

Taught in ``notebooks/03_training.ipynb``. The loop runs through ``accelerate.Accelerator``, so the
same code uses bf16/fp16 on a GPU and runs on several GPUs under ``accelerate launch``. Its feature
set follows ``transformers``' ``run_mlm_no_trainer.py`` example; the loop itself fits one screen.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from .config import Settings
from .masking import IGNORE_INDEX, MaskingCollator, freeze_masks, seed_recipe_batches
from .models import quiet_transformers
from .tokens import pad_batch, plan_batches

CHECKPOINTS = "checkpoints"
LATEST = "latest.json"
#: Settings that fix the batches and the schedule: a run resumes only if they are unchanged.
RESUME_MUST_MATCH = ("seed", "batch_size", "gradient_accumulation_steps", "epochs", "max_length", "recipe",
                     "group_by_length", "mlm_probability", "masking", "mask_once", "label_all_tokens", "schedule")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; training stopped before saving anything from that step."""


# ---------------------------------------------------------------------------------------------
# The objective: cross-entropy at the masked positions only.
# ---------------------------------------------------------------------------------------------


def _encoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The encoder and MLM head of a BERT-like (``cls``) or RoBERTa-like (``lm_head``) model."""
    head = getattr(model, "cls", None) or getattr(model, "lm_head", None)
    encoder = getattr(model, getattr(model, "base_model_prefix", ""), None)
    return (encoder, head) if head is not None and encoder is not None else None


def mlm_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Vocabulary logits, either at every position or only at ``positions``.

    Projecting the hidden states onto the vocabulary (30,522 tokens for BERT) is a large share
    of the compute of a small model; the loss only needs it where a token was masked.

    Args:
        input_ids, attention_mask: LongTensor[batch, seq_len].
        positions: optional BoolTensor[batch, seq_len]; when given, only those positions are scored.
    Returns:
        FloatTensor[batch, seq_len, vocab] without ``positions``, else FloatTensor[n_selected, vocab]
        in row-major order of the selected positions.
    """
    parts = _encoder_and_head(model) if positions is not None else None
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits if positions is None else logits[positions]
    encoder, head = parts
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
    return head(hidden[positions])


def masked_lm_loss(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    masked_positions_only: bool = True,
) -> torch.Tensor:
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
        self.model = model
        self.masked_positions_only = masked_positions_only

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return masked_lm_loss(self.model, input_ids, attention_mask, labels, self.masked_positions_only)


# ---------------------------------------------------------------------------------------------
# Optimiser and schedule.
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
    """Linear warmup over ``warmup_fraction`` of ``total_steps``, then linear decay to 0
    (``transformers.get_scheduler``); ``kind="constant"`` keeps the rate flat."""
    from transformers import get_scheduler

    warmup = int(round(warmup_fraction * total_steps)) if kind == "linear" else 0
    return get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)


# ---------------------------------------------------------------------------------------------
# Checkpoints: written to a temporary folder, then renamed, then pointed at.
# ---------------------------------------------------------------------------------------------


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace`` (never half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save_checkpoint(directory: Path, model: nn.Module, optimizer, scheduler, state: dict[str, Any]) -> Path:
    """Save everything needed to resume at ``state["global_step"]``; returns the checkpoint folder.

    Layout: ``checkpoints/step-NNNNNNN/`` with ``model.safetensors``, ``optimizer.pt``,
    ``scheduler.pt``, ``rng.pt`` and ``state.json``, written under a temporary name and renamed
    when complete; ``checkpoints/latest.json`` then points at it. Older checkpoints are removed.
    """
    from safetensors.torch import save_model

    root = Path(directory) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state['global_step']:07d}"
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    rng = {"torch": torch.get_rng_state()}  # dropout; the masks are seeded per batch
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / LATEST, json.dumps({"checkpoint": final.name, "global_step": state["global_step"]}))
    for old in root.glob("step-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(directory: Path) -> Path | None:
    """The last complete checkpoint under ``directory``, or None."""
    pointer = Path(directory) / CHECKPOINTS / LATEST
    if not pointer.exists():
        return None
    path = pointer.parent / json.loads(pointer.read_text(encoding="utf-8"))["checkpoint"]
    return path if (path / "state.json").exists() else None


def load_checkpoint(path: Path, model: nn.Module, optimizer, scheduler) -> dict[str, Any]:
    """Restore a checkpoint written by :func:`save_checkpoint` (``torch.load(weights_only=True)``)."""
    from safetensors.torch import load_model

    load_model(model, str(Path(path) / "model.safetensors"))
    optimizer.load_state_dict(torch.load(Path(path) / "optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(Path(path) / "scheduler.pt", weights_only=True))
    rng = torch.load(Path(path) / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return json.loads((Path(path) / "state.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The loop.
# ---------------------------------------------------------------------------------------------


def _mixed_precision() -> str:
    if not torch.cuda.is_available():
        return "no"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def train(
    model: nn.Module,
    tokenizer,
    train_rows: Sequence[dict[str, Any]],
    settings: Settings,
    learning_rate: float,
    *,
    evaluate_fn: Callable[[nn.Module], dict[str, Any]] | None = None,
    output_dir: str | Path | None = None,
    resume: bool = False,
    stop_after_steps: int | None = None,
    step_callback: Callable[[nn.Module, int, float], bool | None] | None = None,
    schedule_steps: int | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` in place on ``train_rows`` and return the training history.

    The course's recipe: every batch padded to its own longest row (rows of similar length
    batched together), masks drawn afresh for every batch, loss only at masked positions,
    AdamW with linear warmup and decay, gradient clipping. ``settings.recipe == "seed"`` runs the
    original tutorial's procedure instead (see :func:`~hp_mlm.masking.seed_recipe_batches`;
    constant learning rate, no clipping).

    Args:
        train_rows: tokenised rows (``input_ids``, ``attention_mask``, ``special_tokens_mask``).
        learning_rate: peak learning rate (see ``config.resolve_learning_rate``).
        evaluate_fn: called with the model after each epoch; its dict goes into the history.
        output_dir: where checkpoints go (every ``settings.checkpoint_every`` optimiser steps and
            at each epoch end); None keeps nothing on disk.
        resume: continue from the last complete checkpoint in ``output_dir``.
        stop_after_steps: stop after this many optimiser steps in total (for tests and budgets).
        step_callback: called as ``step_callback(model, global_step, loss)`` after every optimiser
            step; returning True stops training (e.g. a wall-clock budget, periodic evaluation).
            Time spent in it is not counted in an epoch's ``seconds``.
        schedule_steps: length of the warmup/decay schedule in optimiser steps (default: all
            epochs' steps); set it when a budget will stop training early.
    Returns:
        ``{"steps": [{"step", "epoch", "loss", "lr"}], "epochs": [{"epoch", "train_loss",
        "seconds", "validation": {...}}], "learning_rate", "optimizer_steps"}``, plus
        ``"early_stopping": {"best_epoch", "best_cross_entropy", "stopped_after_epoch"}`` when
        ``settings.early_stopping_patience`` is set (the model then holds the best epoch's weights).
    Raises:
        TrainingDiverged: the loss became NaN/inf (names the step; the last checkpoint is kept).
        RuntimeError: CUDA ran out of memory (names batch size, max_length and the flags to lower).
        ValueError: no training rows.
    """
    from accelerate import Accelerator

    if len(train_rows) == 0:
        raise ValueError("no training rows: use a larger split or a smaller validation_fraction")
    accelerator = Accelerator(
        mixed_precision=_mixed_precision(), gradient_accumulation_steps=settings.gradient_accumulation_steps
    )
    seed_recipe = settings.recipe == "seed"
    torch.manual_seed(settings.seed)  # dropout
    lengths = [len(r["input_ids"]) for r in train_rows]
    collator: MaskingCollator | None = None
    if seed_recipe:
        static = seed_recipe_batches(
            train_rows, tokenizer, settings.mlm_probability, torch.Generator().manual_seed(settings.seed)
        )
        data: list[dict[str, Any]] = [{k: v[i] for k, v in static.items()} for i in range(len(lengths))]
        collate_fn = None
    elif settings.mask_once:
        data = freeze_masks(
            train_rows, tokenizer, settings.mlm_probability, settings.seed + 1, settings.label_all_tokens, settings.masking
        )
        collate_fn = partial(pad_batch, tokenizer=tokenizer)
    else:
        data = list(train_rows)
        collator = collate_fn = MaskingCollator(
            tokenizer,
            settings.mlm_probability,
            seed=settings.seed + accelerator.process_index,
            strategy=settings.masking,
            pad_to_multiple_of=8 if accelerator.device.type == "cuda" else None,
            label_all_tokens=settings.label_all_tokens,
        )
    batches_per_epoch = math.ceil(len(train_rows) / settings.batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / settings.gradient_accumulation_steps)
    total_steps = schedule_steps or steps_per_epoch * settings.epochs
    optimizer = build_optimizer(model, learning_rate, settings.weight_decay)
    schedule = "constant" if seed_recipe else settings.schedule
    scheduler = build_scheduler(optimizer, total_steps, settings.warmup_fraction, schedule)
    objective = MaskedLMObjective(model, settings.masked_positions_only and not seed_recipe)
    # prepare() wraps the objective (DDP, autocast) but moves `model` in place: `model` stays the
    # object to save, evaluate and checkpoint.
    objective, optimizer, scheduler = accelerator.prepare(objective, optimizer, scheduler)

    history: dict[str, Any] = {"steps": [], "epochs": [], "learning_rate": learning_rate, "optimizer_steps": 0}
    start_epoch, skip_batches, global_step = 0, 0, 0
    best: dict[str, Any] | None = None  # early stopping: the best epoch so far and its weights
    out = Path(output_dir) if output_dir is not None else None
    run_shape = {k: getattr(settings, k) for k in RESUME_MUST_MATCH}
    if resume and out is not None and (ckpt := latest_checkpoint(out)) is not None:
        saved_shape = json.loads((ckpt / "state.json").read_text(encoding="utf-8")).get("run", run_shape)
        differ = {k: (saved_shape[k], run_shape[k]) for k in run_shape if saved_shape.get(k) != run_shape[k]}
        if differ:
            raise ValueError(
                "cannot resume: these settings differ from the interrupted run (was, now): "
                + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in differ.items())
                + "; rerun with the same settings, or use --overwrite to start again"
            )
        state = load_checkpoint(ckpt, model, optimizer, scheduler)
        start_epoch, skip_batches, global_step = state["epoch"], state["batches_done"], state["global_step"]
        history = state["history"]

    def checkpoint(epoch: int, batches_done: int) -> None:
        if out is None or not accelerator.is_main_process:
            return
        state = {"epoch": epoch, "batches_done": batches_done, "global_step": global_step, "history": history,
                 "run": run_shape}
        save_checkpoint(out, model, optimizer, scheduler, state)

    for epoch in range(start_epoch, settings.epochs):
        started = time.perf_counter()
        shuffle = torch.Generator().manual_seed(settings.seed * 1000 + epoch)
        plan = plan_batches(lengths, settings.batch_size, shuffle, settings.group_by_length and not seed_recipe)
        if collator is not None:
            collator.start_epoch(epoch, skip_batches)
        # Its own generator, so that creating the loader draws nothing from the global RNG (dropout).
        loader = DataLoader(data, batch_sampler=plan[skip_batches:], collate_fn=collate_fn, generator=torch.Generator())
        loader = accelerator.prepare(loader)
        objective.train()
        losses: list[float] = []
        callback_seconds = 0.0
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{settings.epochs}", disable=not settings.progress or not accelerator.is_main_process, leave=False)
        for i, batch in enumerate(bar, start=skip_batches):
            with accelerator.accumulate(objective):
                try:
                    loss = objective(batch["input_ids"], batch["attention_mask"], batch["labels"])
                    accelerator.backward(loss)
                except torch.OutOfMemoryError as error:
                    raise RuntimeError(
                        f"Out of GPU memory with batch_size={settings.batch_size} and max_length={settings.max_length}. "
                        "Lower --batch-size (and raise --gradient-accumulation-steps to keep the effective batch) "
                        "or lower --max-length."
                    ) from error
                if not torch.isfinite(loss.detach()):
                    raise TrainingDiverged(
                        f"loss became {loss.item()} at optimiser step {global_step + 1} (epoch {epoch + 1}); "
                        f"nothing from this step was saved{' and the last checkpoint is intact' if out else ''}. "
                        f"Try a lower learning rate, e.g. --lr {learning_rate / 10:g}."
                    )
                if accelerator.sync_gradients and settings.max_grad_norm > 0 and not seed_recipe:
                    accelerator.clip_grad_norm_(objective.parameters(), settings.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
            if accelerator.sync_gradients:
                global_step += 1
                history["steps"].append(
                    {"step": global_step, "epoch": epoch + 1, "loss": losses[-1], "lr": scheduler.get_last_lr()[0]}
                )
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
                if settings.checkpoint_every and global_step % settings.checkpoint_every == 0 and i + 1 < len(plan):
                    checkpoint(epoch, i + 1)
                if stop_after_steps is not None and global_step >= stop_after_steps:
                    break
                if step_callback is not None:
                    called = time.perf_counter()
                    stop = step_callback(model, global_step, losses[-1])
                    callback_seconds += time.perf_counter() - called
                    if stop:
                        stop_after_steps = global_step
                        break
        bar.close()
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "train_loss": sum(losses) / max(len(losses), 1),
            "seconds": time.perf_counter() - started - callback_seconds,
        }
        if evaluate_fn is not None:
            record["validation"] = evaluate_fn(model)
        history["epochs"].append(record)
        history["optimizer_steps"] = global_step
        skip_batches = 0
        checkpoint(epoch + 1, 0)
        if stop_after_steps is not None and global_step >= stop_after_steps:
            break
        if settings.early_stopping_patience and "validation" in record:
            loss = record["validation"]["cross_entropy"]
            if best is None or loss < best["cross_entropy"]:
                state = model.state_dict()
                best = {"epoch": epoch + 1, "cross_entropy": loss, "state": {k: v.detach().clone() for k, v in state.items()}}
            elif epoch + 1 - best["epoch"] >= settings.early_stopping_patience:
                break
    if best is not None:
        if best["epoch"] != history["epochs"][-1]["epoch"]:
            model.load_state_dict(best["state"])
        history["early_stopping"] = {
            "best_epoch": best["epoch"],
            "best_cross_entropy": best["cross_entropy"],
            "stopped_after_epoch": history["epochs"][-1]["epoch"],
        }
    model.eval()
    return history


def save_model(model: nn.Module, tokenizer, directory: str | Path) -> Path:
    """Save model and tokenizer with ``save_pretrained`` (safetensors), atomically.

    Written to a temporary folder beside ``directory`` and renamed into place, so a crash never
    leaves half a model. ``transformers.pipeline("fill-mask", model=directory)`` loads the result.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_transformers():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    old = directory.with_name(f".{directory.name}.old")
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)
    return directory
