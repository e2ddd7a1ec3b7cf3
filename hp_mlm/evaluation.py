"""Evaluation: masked-token accuracy and perplexity on held-out rows with frozen masks.

Taught in ``notebooks/04_evaluation.ipynb``. ``evaluate`` scores exactly the positions that
``masking.freeze_masks`` chose, so "before" and "after" fine-tuning are compared on the same
tokens; ``original_tutorial_accuracy`` reproduces the original tutorial's measurement for comparison.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .common import (
    autocast,
    inference_mode,
    mlm_logits,
    model_device,
    out_of_memory_in,
    process_state,
    sum_across_processes,
)
from .masking import IGNORE_INDEX, freeze_masks
from .tokens import pad_batch
from .words import continuation_table, in_multi_piece_word, word_start_index

#: Kinds of scored token (see :func:`position_kinds`).
KINDS = ("entity", "other_word", "whole_word", "word_piece")
#: Kinds of scored word (see :func:`word_sums`): one piece, or several.
WORD_KINDS = ("one_piece", "multi_piece")
N_SUMS = 4 + 2 * len(KINDS) + 2 * len(WORD_KINDS)


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
        (see :func:`position_kinds`; ``{kind: {"top1", "n_positions"}}``), whole-word top-1 (``words``:
        ``{"top1", "n_words", "one_piece": {"top1", "n_words"}, "multi_piece": {...}}``, a word right only
        when all its hidden pieces are; see :func:`word_sums`), and wall time in seconds.
        With no masked position at all ("nothing scored"), the accuracies, cross-entropy and
        perplexity are None and ``n_positions`` is 0, never an accuracy of 0.0.

    Under ``accelerate launch`` every process calls this with the same rows: each scores every
    N-th batch and the sums are added over processes, so the result equals one process's.

    Raises:
        common.OutOfMemory: the device ran out of memory (names ``eval_batch_size`` to lower).
    """
    started = time.perf_counter()
    device = model_device(model)
    order = sorted(range(len(frozen_rows)), key=lambda i: len(frozen_rows[i]["input_ids"]))
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    state = process_state()  # several processes: each scores every N-th batch, then the sums are added
    totals = [0.0] * N_SUMS
    lower = f"`eval_batch_size` (now {batch_size}); rerun with `resume` to continue from the last checkpoint"
    with inference_mode(model), out_of_memory_in("the held-out evaluation", lower):
        for rows in batches[state.process_index :: state.num_processes]:
            batch = pad_batch([frozen_rows[i] for i in rows], tokenizer)
            sums = batch_sums(model, batch, tokenizer, top_k, precision, device)
            totals = [a + b for a, b in zip(totals, sums)]
    return scores(sum_across_processes(totals), len(frozen_rows), time.perf_counter() - started)


def evaluate_whole_words(
    model: nn.Module,
    rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    seed: int = 0,
    batch_size: int = 32,
    precision: str = "fp32",
) -> dict[str, Any] | None:
    """:func:`evaluate` on held-out words hidden whole: masks frozen by ``freeze_masks(...,
    strategy="whole_word")`` on the tokenised ``rows`` (seeded, so before and after score the same words);
    read its ``words`` block for whole-word top-1, one-piece and multi-piece words apart. None for a
    vocabulary without WordPiece ``##`` pieces (no word boundaries to mask by)."""
    if not bool(continuation_table(tokenizer).any()):
        return None
    frozen = freeze_masks(rows, tokenizer, mlm_probability, seed, strategy="whole_word")
    return evaluate(model, frozen, tokenizer, batch_size, precision=precision)


def batch_sums(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    top_k: int,
    precision: str,
    device: torch.device,
) -> list[float]:
    """What one padded batch adds to :func:`evaluate`'s sums: ``[positions scored, top-1 hits, top-k
    hits, summed cross-entropy (nats)]``, then ``top-1 hits, positions`` for each of ``KINDS``, then
    ``words right, words`` for each of ``WORD_KINDS`` (:func:`word_sums`)."""
    labels = batch["labels"].to(device)
    target = labels != IGNORE_INDEX
    if not bool(target.any()):
        return [0.0] * N_SUMS
    with autocast(precision, device):
        logits = mlm_logits(model, batch["input_ids"].to(device), batch["attention_mask"].to(device), target)
    logits, gold = logits.float(), labels[target]
    loss = nn.functional.cross_entropy(logits, gold, reduction="sum").item()
    topk = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
    right = topk[:, 0] == gold
    sums = [int(target.sum()), right.sum().item(), (topk == gold[:, None]).any(dim=-1).sum().item(), loss]
    found = position_kinds(batch, tokenizer)
    for kind in KINDS:
        selected = found[kind][target.cpu()] if kind in found else torch.zeros(len(gold), dtype=torch.bool)
        sums += [int(right.cpu()[selected].sum()), int(selected.sum())]
    return sums + word_sums(batch, tokenizer, right.cpu())


def word_sums(batch: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase, right: torch.Tensor) -> list[int]:
    """Scored words: a word is right when every one of its masked pieces is the top-1 prediction.

    Pieces are grouped into words by WordPiece's ``##`` marks on the original (unmasked) ids. Meant for
    masks frozen whole (``freeze_masks(..., strategy="whole_word")``), where a word's pieces are all
    hidden together; with token masks a word counts the pieces that happen to be hidden.

    Args:
        batch: ``input_ids`` and ``labels`` LongTensors[batch, seq_len].
        right: BoolTensor[n_masked]: top-1 right at each masked position, row-major order.
    Returns:
        ``[one-piece words right, one-piece words, multi-piece words right, multi-piece words]``.
    """
    labels = batch["labels"]
    original = torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"])
    rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
    word = rows * labels.shape[1] + word_start_index(original, tokenizer)[rows, cols]
    words, which = word.unique(return_inverse=True)
    wrong = torch.zeros(len(words)).scatter_add_(0, which, (~right).float())
    multi = torch.zeros(len(words), dtype=torch.bool)
    multi[which] = in_multi_piece_word(original, tokenizer)[rows, cols]
    won = wrong == 0
    return [int(won[~multi].sum()), int((~multi).sum()), int(won[multi].sum()), int(multi.sum())]


def perplexity(cross_entropy: float) -> float:
    """``exp(cross_entropy)`` (nats in, a ratio out); ``inf``, with a warning, where it overflows a float
    (a cross-entropy above about 709 nats: a broken model, not a number to print; Case C27c)."""
    if cross_entropy > math.log(sys.float_info.max):
        warnings.warn(f"cross-entropy {cross_entropy:.1f} nats: perplexity overflows, reported as inf", stacklevel=2)
        return math.inf
    return math.exp(cross_entropy)


def scores(totals: Sequence[float], n_rows: int, seconds: float) -> dict[str, Any]:
    """:func:`evaluate`'s result from its summed ``totals`` (see :func:`batch_sums`)."""
    n, hits1, hitsk, loss_sum = int(totals[0]), int(totals[1]), int(totals[2]), totals[3]
    per_kind = totals[4 : 4 + 2 * len(KINDS)]
    counts = dict(zip(KINDS, zip(per_kind[0::2], per_kind[1::2])))
    word_totals = totals[4 + 2 * len(KINDS) :]
    word_counts = dict(zip(WORD_KINDS, zip(word_totals[0::2], word_totals[1::2])))
    if n == 0:  # nothing scored: no accuracy at all, not an accuracy of 0.0
        return {
            "top1": None,
            "top5": None,
            "cross_entropy": None,
            "perplexity": None,
            "n_positions": 0,
            "n_rows": n_rows,
            "kinds": {},
            "words": _words(word_counts),
            "seconds": seconds,
        }
    cross_entropy = loss_sum / n
    kinds = {
        k: {"top1": h / c if c else None, "n_positions": int(c)}
        for k, (h, c) in sorted(counts.items())
        if c or k in ("whole_word", "word_piece")
    }
    return {
        "top1": hits1 / n,
        "top5": hitsk / n,
        "cross_entropy": cross_entropy,
        "perplexity": perplexity(cross_entropy),
        "n_positions": n,
        "n_rows": n_rows,
        "kinds": kinds,
        "words": _words(word_counts),
        "seconds": seconds,
    }


def _words(counts: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Whole-word top-1 (every piece right), over all scored words and per ``WORD_KINDS``."""
    right, n = sum(r for r, _ in counts.values()), sum(c for _, c in counts.values())
    result: dict[str, Any] = {"top1": right / n if n else None, "n_words": int(n)}
    for kind, (r, c) in counts.items():
        result[kind] = {"top1": r / c if c else None, "n_words": int(c)}
    return result


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
    Raises:
        common.OutOfMemory: the device ran out of memory (names ``eval_batch_size``, ``max_length``).
    """
    started = time.perf_counter()
    device = model_device(model)
    correct = 0
    lower = f"`eval_batch_size` (now {batch_size}) or `max_length` (now {max_length})"
    with inference_mode(model), out_of_memory_in("the original tutorial's accuracy", lower):
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(
                list(texts[start : start + batch_size]),
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            )
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
