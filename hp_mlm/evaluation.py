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
from .masking import IGNORE_INDEX
from .tokens import pad_batch

#: What :func:`evaluate` adds up, batch by batch and then over processes (one all-reduce, in this
#: order, then each breakdown's counts): rows with a real token, masked tokens scored, top-1 and top-k
#: hits, and the summed cross-entropy (nats).
SUMS = ("rows", "masked", "top1", "topk", "nll")


def evaluate(
    model: nn.Module,
    frozen_rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    batch_size: int = 32,
    top_k: int = 5,
    precision: str = "fp32",
    breakdowns: Sequence[Any] = (),
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
        breakdowns: optional ways to split the hits, each adding its entry to the result in the same
            pass, each counted once (``studies.breakdowns``: ``BY_KIND`` adds ``kinds``, top-1 per kind of
            token; ``BY_WORD`` adds ``words``, whole-word top-1, for masks frozen whole).
    Returns:
        ``{"top1", "top5", "cross_entropy", "perplexity", "n_positions", "n_rows", "seconds"}``
        (``n_rows``: the rows scored; a row with no real token, its ``attention_mask`` all 0, has
        nothing the model reads, so its labels are not scored and it is not counted there):
        top-1 and top-``top_k`` accuracy as fractions in [0, 1] (the key stays ``top5``), mean
        cross-entropy in nats, perplexity = exp(mean cross-entropy), and wall time in seconds; plus
        one entry per breakdown (``kinds``, ``words``), before ``seconds``.
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
    breakdowns = tuple({breakdown.key: breakdown for breakdown in breakdowns}.values())  # each counted once
    names = [*SUMS, *(name for breakdown in breakdowns for name in breakdown.names)]
    sums = dict.fromkeys(names, 0.0)
    lower = f"`eval_batch_size` (now {batch_size}); rerun with `resume` to continue from the last checkpoint"
    with inference_mode(model), out_of_memory_in("the held-out evaluation", lower):
        for rows in batches[state.process_index :: state.num_processes]:
            batch = pad_batch([frozen_rows[i] for i in rows], tokenizer)
            sums["rows"] += int(batch["attention_mask"].any(dim=1).sum())  # a row of padding alone is no row
            labels = batch["labels"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX).to(device)  # real tokens
            target = labels != IGNORE_INDEX  # the masked positions: only these are scored
            with autocast(precision, device):
                logits = mlm_logits(model, batch["input_ids"].to(device), batch["attention_mask"].to(device), target)
            logits, gold = logits.float(), labels[target]
            topk = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
            right = (topk[:, 0] == gold).cpu()
            sums["masked"] += int(target.sum())
            sums["top1"] += int(right.sum())
            sums["topk"] += int((topk == gold[:, None]).any(dim=-1).sum())
            sums["nll"] += nn.functional.cross_entropy(logits, gold, reduction="sum").item()
            for breakdown in breakdowns:  # each adds its own counts for this batch
                for name, value in breakdown.sums(batch, tokenizer, target.cpu(), right).items():
                    sums[name] += value
    sums = dict(zip(names, sum_across_processes([sums[name] for name in names])))  # one all-reduce
    result = scores(sums) | {breakdown.key: breakdown.result(sums) for breakdown in breakdowns}
    return result | {"seconds": time.perf_counter() - started}


def perplexity(cross_entropy: float) -> float:
    """``exp(cross_entropy)`` (nats in, a ratio out); ``inf``, with a warning, where it overflows a float
    (a cross-entropy above about 709 nats: a broken model, not a number to print)."""
    if cross_entropy > math.log(sys.float_info.max):
        warnings.warn(f"cross-entropy {cross_entropy:.1f} nats: perplexity overflows, reported as inf", stacklevel=2)
        return math.inf
    return math.exp(cross_entropy)


def scores(sums: dict[str, float]) -> dict[str, Any]:
    """:func:`evaluate`'s result from its :data:`SUMS` (see :func:`evaluate` for the keys); with nothing
    masked at all, None for the accuracies, cross-entropy and perplexity, not an accuracy of 0.0."""
    n = int(sums["masked"])
    cross_entropy = sums["nll"] / n if n else None
    return {
        "top1": sums["top1"] / n if n else None,
        "top5": sums["topk"] / n if n else None,
        "cross_entropy": cross_entropy,
        "perplexity": perplexity(cross_entropy) if n else None,
        "n_positions": n,
        "n_rows": int(sums["rows"]),
    }
