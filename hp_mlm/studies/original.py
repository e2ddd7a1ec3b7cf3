"""The original tutorial's accuracy measurement, reproduced so that the course can show what it hides.

Taught in ``notebooks/04_evaluation.ipynb`` (the last section); the main job reports it beside
``evaluation.evaluate``. Not a sound metric: see :func:`original_tutorial_accuracy`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.common import autocast, inference_mode, mlm_logits, model_device, out_of_memory_in


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
