"""Evaluation: masked-token accuracy and perplexity on held-out rows with frozen masks.

Taught in ``notebooks/04_evaluation.ipynb``. ``evaluate`` scores exactly the positions that
``masking.freeze_masks`` chose, so "before" and "after" fine-tuning are compared on the same
tokens; ``original_tutorial_accuracy`` reproduces the original tutorial's measurement for comparison.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .common import autocast, inference_mode, mlm_logits, model_device, process_state, sum_across_processes
from .masking import IGNORE_INDEX, in_multi_piece_word
from .tokens import pad_batch

#: Kinds of scored token (see :func:`position_kinds`).
KINDS = ("entity", "other_word", "whole_word", "word_piece")


def evaluate(
    model: nn.Module,
    frozen_rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    batch_size: int = 32,
    top_k: int = 5,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Masked-token accuracy on rows whose masks were frozen by ``masking.freeze_masks``.

    Batched (each batch padded to its own longest row), under ``no_grad`` in eval mode; only
    positions with a label (the masked ones, never special tokens or padding) are scored. The
    model's train/eval mode is restored afterwards. Sums are accumulated per position, so the
    result does not depend on ``batch_size`` (up to float rounding).

    Args:
        frozen_rows: dicts with ``input_ids`` (masked), ``attention_mask``, ``labels`` (lists of int).
        precision: ``fp32``, ``bf16`` or ``fp16``: the autocast the forward pass runs under (use
            the training run's, ``common.resolve_precision``); the loss is computed in fp32.
    Returns:
        ``{"top1", "top5", "cross_entropy", "perplexity", "n_positions", "n_rows", "kinds", "seconds"}``:
        top-1 and top-``top_k`` accuracy as fractions in [0, 1] (the key stays ``top5``), mean
        cross-entropy in nats, perplexity = exp(mean cross-entropy), top-1 per kind of token
        (see :func:`position_kinds`; ``{kind: {"top1", "n_positions"}}``), and wall time in seconds.
        With no masked position at all ("nothing scored"), the accuracies, cross-entropy and
        perplexity are None and ``n_positions`` is 0, never an accuracy of 0.0.

    Under ``accelerate launch`` every process calls this with the same rows: each scores every
    N-th batch and the sums are added over processes, so the result equals one process's.
    """
    started = time.perf_counter()
    device = model_device(model)
    n = hits1 = hitsk = 0
    loss_sum = 0.0
    kinds = {kind: [0, 0] for kind in KINDS}  # kind -> [top-1 hits, positions]
    order = sorted(range(len(frozen_rows)), key=lambda i: len(frozen_rows[i]["input_ids"]))
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    state = process_state()  # several processes: each scores every N-th batch, then the sums are added
    with inference_mode(model):
        for rows in batches[state.process_index :: state.num_processes]:
            batch = pad_batch([frozen_rows[i] for i in rows], tokenizer)
            labels = batch["labels"].to(device)
            target = labels != IGNORE_INDEX
            if not bool(target.any()):
                continue
            with autocast(precision, device):
                logits = mlm_logits(model, batch["input_ids"].to(device), batch["attention_mask"].to(device), target)
            logits = logits.float()
            gold = labels[target]
            loss_sum += nn.functional.cross_entropy(logits, gold, reduction="sum").item()
            topk = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
            hits1 += (topk[:, 0] == gold).sum().item()
            hitsk += (topk == gold[:, None]).any(dim=-1).sum().item()
            n += int(target.sum())
            right = (topk[:, 0] == gold).cpu()
            for kind, where in position_kinds(batch, tokenizer).items():
                selected = where[target.cpu()]
                kinds[kind][0] += int(right[selected].sum())
                kinds[kind][1] += int(selected.sum())
    totals = sum_across_processes([n, hits1, hitsk, loss_sum, *(x for tally in kinds.values() for x in tally)])
    n, hits1, hitsk, loss_sum = int(totals[0]), int(totals[1]), int(totals[2]), totals[3]
    counts = dict(zip(KINDS, zip(totals[4::2], totals[5::2])))
    if n == 0:  # nothing scored: no accuracy at all, not an accuracy of 0.0
        return {"top1": None, "top5": None, "cross_entropy": None, "perplexity": None, "n_positions": 0,
                "n_rows": len(frozen_rows), "kinds": {}, "seconds": time.perf_counter() - started}
    cross_entropy = loss_sum / n
    return {
        "top1": hits1 / n,
        "top5": hitsk / n,
        "cross_entropy": cross_entropy,
        "perplexity": math.exp(min(cross_entropy, 700.0)),
        "n_positions": n,
        "n_rows": len(frozen_rows),
        "kinds": {k: {"top1": h / c if c else None, "n_positions": int(c)} for k, (h, c) in sorted(counts.items())
                  if c or k in ("whole_word", "word_piece")},
        "seconds": time.perf_counter() - started,
    }


def position_kinds(batch: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase) -> dict[str, torch.Tensor]:
    """Which kind of token each position holds, for per-kind accuracy.

    Returns BoolTensors[batch, seq_len]: ``whole_word`` (a word that is one piece) and
    ``word_piece`` (a piece of a longer word), and, when the batch carries ``entity_mask``,
    ``entity`` and ``other_word``.
    """
    original = torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])
    pieces = in_multi_piece_word(original, tokenizer)
    kinds = {"whole_word": ~pieces, "word_piece": pieces}
    if "entity_mask" in batch:
        kinds["entity"] = batch["entity_mask"].bool()
        kinds["other_word"] = ~batch["entity_mask"].bool()
    return kinds


def original_tutorial_accuracy(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    generator: torch.Generator | None = None,
    max_length: int = 512,
    batch_size: int = 32,
    precision: str = "fp32",
) -> dict[str, Any]:
    """The original tutorial's accuracy measurement, reproduced for comparison (not a sound metric).

    What it keeps of the original: in each text, *one* position drawn at random from all of its
    positions, so ``[CLS]`` or ``[SEP]`` may be the one masked and scored (easy guesses once a
    model is trained with labels everywhere); a fresh draw on every call, so a "before" and an
    "after" call score different positions; typically run on the training rows. What it changes,
    none of which changes a prediction: texts are scored in padded batches (the original ran one
    text at a time; with the attention mask, padding does not change the logits beyond float
    rounding, which a test checks), the vocabulary projection runs only at the scored position,
    eval mode and ``no_grad``, the mask id asked from the tokenizer, and truncation at
    ``max_length`` (the original crashed on longer rows).

    Args:
        generator: draws the positions (pass a seeded one to repeat a call exactly).
        batch_size: texts per forward pass.
    Returns:
        ``{"accuracy", "n_positions", "n_rows", "seconds"}``; accuracy is a fraction in [0, 1],
        or None when ``texts`` is empty (nothing scored); ``n_positions`` equals ``n_rows``.
    """
    started = time.perf_counter()
    device = model_device(model)
    correct = 0
    with inference_mode(model):
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[start : start + batch_size]), truncation=True, max_length=max_length,
                            padding=True, return_tensors="pt")
            lengths = enc["attention_mask"].sum(dim=1)
            # One position per text, uniform over its real tokens ([CLS] and [SEP] included), drawn in order.
            chosen = torch.cat([torch.randint(int(n), (1,), generator=generator) for n in lengths])
            rows = torch.arange(len(lengths))
            truth = enc["input_ids"][rows, chosen]
            masked = enc["input_ids"].clone()
            masked[rows, chosen] = tokenizer.mask_token_id
            where = torch.zeros_like(masked, dtype=torch.bool)
            where[rows, chosen] = True
            with autocast(precision, device):
                logits = mlm_logits(model, masked.to(device), enc["attention_mask"].to(device), where.to(device))
            correct += int((logits.argmax(dim=-1).cpu() == truth).sum())
    return {
        "accuracy": correct / len(texts) if len(texts) else None,
        "n_positions": len(texts),
        "n_rows": len(texts),
        "seconds": time.perf_counter() - started,
    }
