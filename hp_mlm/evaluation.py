"""Evaluation: masked-token accuracy and perplexity on held-out rows with frozen masks.

Taught in ``notebooks/04_evaluation.ipynb``. ``evaluate`` scores exactly the positions that
``masking.freeze_masks`` chose, so "before" and "after" fine-tuning are compared on the same
tokens (``studies.original`` reproduces the original tutorial's measurement, for comparison).
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
from .tokens import continuation_table, in_multi_piece_word, pad_batch, word_start_index

#: Kinds of scored token (see :func:`position_kinds`).
KINDS = ("entity", "other_word", "whole_word", "word_piece")
#: Kinds of scored word (see :func:`word_sums`): one piece, or several.
WORD_KINDS = ("one_piece", "multi_piece")
#: What :func:`evaluate` adds up, batch by batch and then over processes (one all-reduce, in this
#: order): masked tokens scored, top-1 and top-k hits, summed cross-entropy (nats); per kind of
#: token its hits and masked tokens; per kind of word the words right and the words scored.
SUMS = (
    "masked",
    "top1",
    "topk",
    "nll",
    *(f"{kind}_{what}" for kind in KINDS for what in ("top1", "masked")),
    *(f"{kind}_{what}" for kind in WORD_KINDS for what in ("right", "words")),
)


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
    sums = dict.fromkeys(SUMS, 0.0)
    lower = f"`eval_batch_size` (now {batch_size}); rerun with `resume` to continue from the last checkpoint"
    with inference_mode(model), out_of_memory_in("the held-out evaluation", lower):
        for rows in batches[state.process_index :: state.num_processes]:
            batch = pad_batch([frozen_rows[i] for i in rows], tokenizer)
            for name, value in batch_sums(model, batch, tokenizer, top_k, precision, device).items():
                sums[name] += value
    sums = dict(zip(SUMS, sum_across_processes([sums[name] for name in SUMS])))  # one all-reduce
    return scores(sums, len(frozen_rows), time.perf_counter() - started)


def freeze_whole_words(
    rows: Sequence[dict[str, Any]], tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15, seed: int = 0
) -> list[dict[str, list[int]]] | None:
    """The tokenised held-out ``rows`` with words hidden whole (``freeze_masks(..., strategy="whole_word")``,
    seeded), so that before and after score the same words; None for a vocabulary without WordPiece
    ``##`` pieces (no word boundaries to mask by). A run freezes them once and scores them with
    :func:`evaluate` (its ``words`` block: whole-word top-1, one-piece and multi-piece words apart)."""
    if not bool(continuation_table(tokenizer).any()):
        return None
    return freeze_masks(rows, tokenizer, mlm_probability, seed, strategy="whole_word")


def evaluate_whole_words(
    model: nn.Module,
    rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    seed: int = 0,
    batch_size: int = 32,
    precision: str = "fp32",
) -> dict[str, Any] | None:
    """:func:`evaluate` on :func:`freeze_whole_words` of ``rows`` (frozen on every call: a run that
    scores more than once freezes them once itself); None without ``##`` pieces."""
    frozen = freeze_whole_words(rows, tokenizer, mlm_probability, seed)
    return None if frozen is None else evaluate(model, frozen, tokenizer, batch_size, precision=precision)


def batch_sums(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    top_k: int,
    precision: str,
    device: torch.device,
) -> dict[str, float]:
    """What one padded batch adds to :func:`evaluate`'s sums, by name (:data:`SUMS`; a batch with
    nothing masked adds nothing)."""
    labels = batch["labels"].to(device)
    target = labels != IGNORE_INDEX
    if not bool(target.any()):
        return {}
    with autocast(precision, device):
        logits = mlm_logits(model, batch["input_ids"].to(device), batch["attention_mask"].to(device), target)
    logits, gold = logits.float(), labels[target]
    topk = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
    right = (topk[:, 0] == gold).cpu()
    sums = {
        "masked": int(target.sum()),
        "top1": int(right.sum()),
        "topk": int((topk == gold[:, None]).any(dim=-1).sum()),
        "nll": nn.functional.cross_entropy(logits, gold, reduction="sum").item(),
    }
    for kind, where in position_kinds(batch, tokenizer).items():
        selected = where[target.cpu()]
        sums[f"{kind}_top1"], sums[f"{kind}_masked"] = int(right[selected].sum()), int(selected.sum())
    return sums | word_sums(batch, tokenizer, right)


def word_sums(
    batch: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase, right: torch.Tensor
) -> dict[str, int]:
    """Scored words: a word is right when every one of its masked pieces is the top-1 prediction.

    Pieces are grouped into words by WordPiece's ``##`` marks on the original (unmasked) ids. Meant for
    masks frozen whole (``freeze_masks(..., strategy="whole_word")``), where a word's pieces are all
    hidden together; with token masks a word counts the pieces that happen to be hidden.

    Args:
        batch: ``input_ids`` and ``labels`` LongTensors[batch, seq_len].
        right: BoolTensor[n_masked]: top-1 right at each masked position, row-major order.
    Returns:
        ``{"one_piece_right", "one_piece_words", "multi_piece_right", "multi_piece_words"}``: words right
        and words scored, of one piece and of several.
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
    return {
        "one_piece_right": int(won[~multi].sum()),
        "one_piece_words": int((~multi).sum()),
        "multi_piece_right": int(won[multi].sum()),
        "multi_piece_words": int(multi.sum()),
    }


def perplexity(cross_entropy: float) -> float:
    """``exp(cross_entropy)`` (nats in, a ratio out); ``inf``, with a warning, where it overflows a float
    (a cross-entropy above about 709 nats: a broken model, not a number to print)."""
    if cross_entropy > math.log(sys.float_info.max):
        warnings.warn(f"cross-entropy {cross_entropy:.1f} nats: perplexity overflows, reported as inf", stacklevel=2)
        return math.inf
    return math.exp(cross_entropy)


def scores(sums: dict[str, float], n_rows: int, seconds: float) -> dict[str, Any]:
    """:func:`evaluate`'s result from its :data:`SUMS` (see :func:`evaluate` for the keys)."""
    n = int(sums["masked"])
    words = {kind: (sums[f"{kind}_right"], sums[f"{kind}_words"]) for kind in WORD_KINDS}
    result = {
        "top1": None,
        "top5": None,
        "cross_entropy": None,
        "perplexity": None,
        "n_positions": n,
        "n_rows": n_rows,
        "kinds": {},
        "words": _words(words),
        "seconds": seconds,
    }
    if n == 0:  # nothing scored: no accuracy at all, not an accuracy of 0.0
        return result
    cross_entropy = sums["nll"] / n
    kinds = {
        kind: {"top1": sums[f"{kind}_top1"] / count if count else None, "n_positions": int(count)}
        for kind in sorted(KINDS)
        if (count := sums[f"{kind}_masked"]) or kind in ("whole_word", "word_piece")
    }
    top = {"top1": sums["top1"] / n, "top5": sums["topk"] / n, "cross_entropy": cross_entropy}
    return result | top | {"perplexity": perplexity(cross_entropy), "kinds": kinds}


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
