"""The library's way beside the course's: ``transformers.Trainer`` with ``DataCollatorForLanguageModeling``.

Taught in ``notebooks/06_the_library_way.ipynb``. The Hugging Face course and the ``transformers``
task guide fine-tune an MLM with ``Trainer``, its collator and concatenate-and-chunk. Here the
``Trainer`` gets the arguments that match the course's settings (rate, schedule, warmup, batch,
epochs, precision, weight decay, clipping), and :func:`side_by_side` trains the course's loop, the
``Trainer`` and the course's loop on packed rows from the same start, with the same seeds, and scores
each on the same frozen held-out masks.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from hp_mlm.common import device_kind, model_device
from hp_mlm.config import Settings, model_options
from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.models import load_model
from hp_mlm.ops.allocator import reuse_freed_memory
from hp_mlm.prepare import prepare
from hp_mlm.studies.options import training_tokens
from hp_mlm.tokens import grouped
from hp_mlm.training import optimizer_steps, plan_training, train

#: The ways :func:`side_by_side` trains: the course's loop, the library's ``Trainer``, the course's loop on packed rows.
WAYS = ("course", "trainer", "pack")


def library_collator(tokenizer, settings: Settings):
    """``DataCollatorForLanguageModeling`` set to the course's masking: ``mlm_probability`` of the
    tokens chosen, every chosen one replaced by the mask token (``masking="mask"``) or 80/10/10
    (``"bert"``, the collator's default), whole words with ``"whole_word"`` (the collator then needs
    ``offset_mapping`` in each row). Seeded by ``settings.seed``.

    Raises:
        ValueError: ``masking="entity"``, which the library's collator has no way to do.
    """
    from transformers import DataCollatorForLanguageModeling

    if settings.masking == "entity":
        raise ValueError("the library's collator cannot prefer entities; use masking 'mask', 'bert' or 'whole_word'")
    replace = (1.0, 0.0) if settings.masking == "mask" else (0.8, 0.1)
    return DataCollatorForLanguageModeling(
        tokenizer,
        mlm_probability=settings.mlm_probability,
        mask_replace_prob=replace[0],
        random_replace_prob=replace[1],
        whole_word_mask=settings.masking == "whole_word",
        seed=settings.seed,
    )


def trainer_arguments(settings: Settings, output_dir: str, n_rows: int):
    """``TrainingArguments`` that match the course's settings for a run over ``n_rows`` training rows.

    The warmup is given in steps, counted as ``training.build_scheduler`` counts them (a part of a step is
    a step), and the schedule has the same shape; the course's ``"constant"`` schedule is the library's
    ``"constant_with_warmup"``. One difference stays: the library's first step runs at the schedule's rate
    for step 0 (0 with a warmup: it moves no weight), the course's counts its steps from 1 (its linear
    decay ends one step after the run). Both leave biases and LayerNorm weights out of weight decay and use
    fused AdamW. Evaluation and checkpoints are off: the runs are scored on the frozen held-out masks.

    Raises:
        ValueError: the learning rate or schedule is still ``auto`` (take ``prepare(settings).settings``).
    """
    import inspect

    from transformers import TrainingArguments

    if settings.learning_rate is None or settings.schedule not in ("linear", "constant"):
        raise ValueError("learning_rate or schedule still 'auto': take the settings from prepare(settings).settings")
    steps = optimizer_steps(n_rows, settings)
    group = grouped(settings.padding, settings.group_by_length)
    # later 5.x releases replaced group_by_length by train_sampling_strategy
    if "train_sampling_strategy" in inspect.signature(TrainingArguments).parameters:
        sampling = {"train_sampling_strategy": "group_by_length" if group else "random"}
    else:
        sampling = {"group_by_length": group}
    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        lr_scheduler_type={"linear": "linear", "constant": "constant_with_warmup"}[settings.schedule],
        warmup_steps=math.ceil(round(settings.warmup_fraction * steps, 6)),  # as training.build_scheduler
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        bf16=settings.precision == "bf16",
        fp16=settings.precision == "fp16",
        use_cpu=device_kind() == "cpu",
        seed=settings.seed,
        **sampling,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",  # no loss line per step in the notebook; the run's mean loss is still kept
        report_to="none",
        disable_tqdm=not settings.progress,
    )


class CountingCollator:
    """Wraps a collator and counts what its batches hold: ``real`` tokens (attention 1) and ``padded``
    positions (the batch's width times its rows), so both ways report tokens per second alike."""

    def __init__(self, collate: Callable) -> None:
        self.collate, self.real, self.padded = collate, 0, 0

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collate(features)
        self.real += int(batch["attention_mask"].sum())
        self.padded += batch["input_ids"].numel()
        return batch


def train_with_trainer(model, tokenizer, train_tokens, settings: Settings) -> dict[str, Any]:
    """Fine-tune ``model`` in place with ``transformers.Trainer`` (:func:`trainer_arguments`,
    :func:`library_collator`) on the tokenised rows ``train_tokens`` (``tokens.tokenize_rows``).

    Returns:
        ``{"optimizer_steps", "train_loss"`` (nats, the run's mean), ``"seconds"`` (the ``Trainer``'s
        train runtime), ``"real_tokens", "padded_tokens"}`` (summed over the run).
    """
    from transformers import PrinterCallback, Trainer

    rows = train_tokens.select_columns(["input_ids", "attention_mask", "special_tokens_mask", "length"])
    collator = CountingCollator(library_collator(tokenizer, settings))
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(
            model=model,
            args=trainer_arguments(settings, out, len(rows)),
            train_dataset=rows,
            data_collator=collator,
            processing_class=tokenizer,
        )
        if not settings.progress:  # no dict of run metrics printed at the end either
            trainer.remove_callback(PrinterCallback)
        result = trainer.train()
    model.eval()
    return {
        "optimizer_steps": result.global_step,
        "train_loss": result.training_loss,
        "seconds": result.metrics["train_runtime"],
        "real_tokens": collator.real,
        "padded_tokens": collator.padded,
    }


def train_course(model, tokenizer, train_tokens, settings: Settings) -> dict[str, Any]:
    """Fine-tune ``model`` in place with the course's plan and loop; returns what
    :func:`train_with_trainer` returns (``seconds``: the loop's training clock)."""
    plan = plan_training(model, tokenizer, train_tokens, settings)
    plan.collate_fn = collator = CountingCollator(plan.collate_fn)
    history = train(plan)
    losses = [s["loss"] for s in history["steps"]]
    return {
        "optimizer_steps": history["optimizer_steps"],
        "train_loss": sum(losses) / len(losses),
        "seconds": sum(e["seconds"] for e in history["epochs"]),
        "real_tokens": collator.real,
        "padded_tokens": collator.padded,
    }


def scored_positions(frozen_rows: Sequence[dict[str, Any]]) -> tuple[int, str]:
    """``(count, digest)`` of the frozen held-out positions: every ``(row, position, label id)``
    with a label, hashed, so two runs can show they were scored on the same tokens."""
    triples = [(r, p, y) for r, row in enumerate(frozen_rows) for p, y in enumerate(row["labels"]) if y != IGNORE_INDEX]
    return len(triples), hashlib.sha1(repr(triples).encode()).hexdigest()[:12]


def side_by_side(
    settings: Settings,
    seeds: int = 3,
    ways: Sequence[str] = WAYS,
    log: Callable[[str], None] = print,
    epochs: Mapping[str, int] | None = None,
    on_model: Callable[[str, int, Any], None] | None = None,
) -> list[dict[str, Any]]:
    """Train each way once per seed from the same start and score every run on the same frozen masks.

    Seeds ``settings.seed``, ``+1``, ... change the shuffling, the masks and dropout (and a new
    head's start); the split and the held-out masks stay those of ``settings.seed``. ``"pack"`` trains
    on the training rows packed by ``tokens.pack_rows``.

    Args:
        epochs: way -> epochs for that way (e.g. more for ``"pack"``, to match the others' training
            clock); the others train ``settings.epochs``.
        on_model: called with ``(way, seed, model)`` after each run is scored (to keep or probe it).

    Returns:
        One dict per run: ``way``, ``seed``, ``top1``, ``top5`` (fractions), ``perplexity``,
        ``n_positions`` and ``positions`` (:func:`scored_positions`), ``optimizer_steps``, ``train_loss``,
        ``epochs``, ``seconds`` (training clock), ``wall_seconds`` (the whole run: start, training, scoring),
        ``real_tokens_per_second``, ``padded_tokens_per_second``, ``padding_share``.
    Raises:
        ValueError: ``seeds`` < 1, or a way not in :data:`WAYS`.
    """
    if seeds < 1 or set(ways) - set(WAYS):
        raise ValueError(f"`seeds` must be >= 1 and `ways` among {WAYS}, got {seeds} and {list(ways)}")
    prep = prepare(settings.replace(padding="batch"))
    tok, base = prep.loaded.tokenizer, prep.settings
    data = {"course": prep.train_tokens, "trainer": prep.train_tokens}
    if "pack" in ways:
        data["pack"] = training_tokens(prep, base.replace(padding="pack"))
    rows = []
    for k in range(seeds):
        for way in ways:
            run = base.replace(seed=base.seed + k, padding="pack" if way == "pack" else "batch")
            run = run.replace(epochs=(epochs or {}).get(way, run.epochs))
            started = time.perf_counter()
            loaded = load_model(base.model, tok, seed=run.seed, **model_options(run))
            model = loaded.model.to(prep.loaded.model.device)
            fit = train_with_trainer if way == "trainer" else train_course
            # both loops keep freed CPU memory for the next step, as the main job does (allocator.py),
            # so that the race measures the loops, not the allocator
            with reuse_freed_memory(model_device(model).type == "cpu"):
                result = fit(model, tok, data[way], run)
            scores = evaluate(model, prep.frozen_validation, tok, base.eval_batch_size, precision=base.precision)
            rows.append(_row(way, run.seed, scores, result, prep.frozen_validation, time.perf_counter() - started))
            rows[-1]["epochs"] = run.epochs
            if on_model is not None:
                on_model(way, run.seed, model)
            log(f"{way}, seed {run.seed}: top-1 {scores['top1']:.1%}, {result['optimizer_steps']} steps")
    return rows


def _row(way, seed, scores, result, frozen, wall) -> dict[str, Any]:
    n_positions, digest = scored_positions(frozen)
    return {
        "way": way,
        "seed": seed,
        **{k: scores[k] for k in ("top1", "top5", "perplexity", "n_positions")},
        "positions": digest if n_positions == scores["n_positions"] else None,
        "optimizer_steps": result["optimizer_steps"],
        "train_loss": result["train_loss"],
        "seconds": result["seconds"],
        "wall_seconds": wall,
        "real_tokens_per_second": result["real_tokens"] / result["seconds"],
        "padded_tokens_per_second": result["padded_tokens"] / result["seconds"],
        "padding_share": 1 - result["real_tokens"] / result["padded_tokens"],
    }
