"""Masking: choose ``mlm_probability`` of the real tokens, hide them, and label only those.

Taught in ``notebooks/02_masking.ipynb``. Every id comes from the tokenizer (no literal 101/102/103/0).
The course's scheme replaces every chosen token with the mask token; ``strategy="bert"`` is the
80/10/10 variant of Devlin et al. 2019, section 3.1 (as ``DataCollatorForLanguageModeling``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .tokens import pad_batch

IGNORE_INDEX = -100  # cross-entropy skips these labels (torch's default ignore_index)


def selectable_positions(
    input_ids: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    special_tokens_mask: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Positions that may be masked: real tokens, never special tokens or padding.

    Args:
        input_ids: LongTensor[batch, seq_len].
        special_tokens_mask: optional 0/1 LongTensor[batch, seq_len] from the tokenizer;
            when missing, special ids are asked from ``tokenizer.all_special_ids``.
        attention_mask: optional 0/1 LongTensor[batch, seq_len]; 0 marks padding.
    Returns:
        BoolTensor[batch, seq_len], True where a token may be chosen.
    """
    special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=input_ids.dtype)
    ok = ~torch.isin(input_ids, special_ids)
    if special_tokens_mask is not None:
        ok &= special_tokens_mask == 0
    if attention_mask is not None:
        ok &= attention_mask != 0
    if tokenizer.pad_token_id is not None:
        ok &= input_ids != tokenizer.pad_token_id
    return ok


def mask_tokens(
    input_ids: torch.Tensor,
    selectable: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
    strategy: str = "mask",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose positions with probability ``mlm_probability`` each, hide them, and build MLM labels.

    Each selectable position is chosen independently (a Bernoulli draw), as in
    ``DataCollatorForLanguageModeling``. ``strategy="mask"`` (the course's scheme) puts the
    tokenizer's mask token at every chosen position; ``strategy="bert"`` does so for 80% of them,
    puts a random vocabulary token at 10% and leaves 10% unchanged (Devlin et al. 2019, 3.1).

    Args:
        input_ids: LongTensor[batch, seq_len]; not modified.
        selectable: BoolTensor[batch, seq_len] from :func:`selectable_positions`.
        mlm_probability: fraction in (0, 1] of selectable positions to choose, on average.
        generator: the source of randomness (same state, same masks).
        strategy: ``"mask"`` or ``"bert"``.
    Returns:
        ``(masked_input_ids, labels)``, both LongTensor[batch, seq_len]: ``labels`` holds the
        original id at chosen positions and -100 everywhere else.
    Raises:
        ValueError: ``mlm_probability`` outside (0, 1], an unknown strategy, or a tokenizer with
            no mask token.
    """
    if not 0.0 < mlm_probability <= 1.0:
        raise ValueError(f"mlm_probability must be in (0, 1], got {mlm_probability}")
    if strategy not in ("mask", "bert"):
        raise ValueError(f"strategy must be 'mask' or 'bert', got {strategy!r}")
    if tokenizer.mask_token_id is None:
        raise ValueError("this tokenizer has no mask token; MLM needs a tokenizer with one (e.g. BERT's)")
    probability = torch.full(input_ids.shape, mlm_probability)
    chosen = torch.bernoulli(probability, generator=generator).bool() & selectable
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    masked = input_ids.clone()
    if strategy == "mask":
        masked[chosen] = tokenizer.mask_token_id
        return masked, labels
    to_mask = chosen & torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool()
    masked[to_mask] = tokenizer.mask_token_id
    # Half of the remaining 20%: a random token; the other half keeps the original token.
    to_random = chosen & ~to_mask & torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool()
    random_ids = torch.randint(len(tokenizer), input_ids.shape, generator=generator, dtype=input_ids.dtype)
    masked[to_random] = random_ids[to_random]
    return masked, labels


class MaskingCollator:
    """Pads a list of tokenised rows per batch and draws fresh masks for every batch.

    Use as a ``DataLoader`` ``collate_fn``. Batch ``b`` of epoch ``e`` draws its masks from a
    generator seeded with ``(seed, e, b)``: every batch gets different masks, and a run resumed
    from a checkpoint redraws exactly the masks it would have drawn (call :meth:`start_epoch`
    with the epoch and the number of batches already done). ``label_all_tokens=True`` labels
    every real token (an ablation: the original tutorial's labels).

    Returns (per call) a dict of LongTensor[batch, seq_len]: ``input_ids`` (masked),
    ``attention_mask``, ``labels`` (-100 off the chosen positions).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        mlm_probability: float = 0.15,
        seed: int = 0,
        strategy: str = "mask",
        pad_to_multiple_of: int | None = None,
        label_all_tokens: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.mlm_probability = mlm_probability
        self.seed = seed
        self.strategy = strategy
        self.pad_to_multiple_of = pad_to_multiple_of
        self.label_all_tokens = label_all_tokens
        self.epoch, self.batch_index = 0, 0

    def start_epoch(self, epoch: int, batches_done: int = 0) -> None:
        """Set where the next batch falls: epoch ``epoch``, after ``batches_done`` batches."""
        self.epoch, self.batch_index = epoch, batches_done

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch_seed = ((self.seed * 1_000_003 + self.epoch) * 1_000_003 + self.batch_index) % 2**63
        generator = torch.Generator().manual_seed(batch_seed)
        self.batch_index += 1
        batch = pad_batch(features, self.tokenizer, pad_to_multiple_of=self.pad_to_multiple_of)
        selectable = selectable_positions(
            batch["input_ids"], self.tokenizer, batch.get("special_tokens_mask"), batch["attention_mask"]
        )
        input_ids, labels = mask_tokens(
            batch["input_ids"], selectable, self.tokenizer, self.mlm_probability, generator, self.strategy
        )
        if self.label_all_tokens:
            labels = label_everything(batch["input_ids"], batch["attention_mask"])
        return {"input_ids": input_ids, "attention_mask": batch["attention_mask"], "labels": labels}


def label_everything(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Labels at every non-padding position (special tokens included), -100 on padding.

    The original tutorial's labels (without its padding positions): an ablation, not the MLM objective.
    """
    return torch.where(attention_mask.bool(), input_ids, torch.full_like(input_ids, IGNORE_INDEX))


def freeze_masks(
    rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    seed: int = 0,
    label_all_tokens: bool = False,
) -> list[dict[str, list[int]]]:
    """Draw evaluation masks once, row by row, so that every evaluation scores the same positions.

    Row ``i``'s masks come from a generator seeded with ``(seed, i)``, so they do not depend on
    batching or on which other rows are present (the Hugging Face course, chapter 7, freezes
    evaluation masks the same way).

    Args:
        rows: tokenised rows (``input_ids`` and ``special_tokens_mask`` lists).
        label_all_tokens: label every token instead of only the masked ones (training ablation).
    Returns:
        One dict per row: ``input_ids`` (masked), ``attention_mask`` and ``labels`` (lists of int).
    """
    frozen = []
    for i, row in enumerate(rows):
        ids = torch.tensor([row["input_ids"]], dtype=torch.long)
        special = torch.tensor([row["special_tokens_mask"]]) if "special_tokens_mask" in row else None
        selectable = selectable_positions(ids, tokenizer, special)
        generator = torch.Generator().manual_seed(seed * 1_000_003 + i)
        masked, labels = mask_tokens(ids, selectable, tokenizer, mlm_probability, generator)
        if label_all_tokens:
            labels = label_everything(ids, torch.ones_like(ids))
        frozen.append(
            {
                "input_ids": masked[0].tolist(),
                "attention_mask": [1] * ids.shape[1],
                "labels": labels[0].tolist(),
            }
        )
    return frozen


def seed_recipe_batches(
    rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """The original tutorial's data, reproduced: for comparison only, not for training a good model.

    Every row is padded to the longest row of the whole dataset; masks are drawn *once*, before
    training (``rand < mlm_probability``, skipping the tokenizer's ``[CLS]``/``[SEP]``/``[PAD]``
    ids), so every epoch sees the same masks; and ``labels`` are a copy of the unmasked
    ``input_ids`` at *every* position, padding included, so most of the loss is about copying
    visible tokens.

    Returns:
        ``input_ids`` (masked), ``attention_mask``, ``labels``: LongTensor[n_rows, longest_row].
    """
    batch = pad_batch(list(rows), tokenizer, pad_to_length=max(len(r["input_ids"]) for r in rows))
    ids = batch["input_ids"]
    labels = ids.clone()
    skip = torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id])
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_probability) & ~torch.isin(ids, skip)
    masked = ids.clone()
    masked[chosen] = tokenizer.mask_token_id
    return {"input_ids": masked, "attention_mask": batch["attention_mask"], "labels": labels}
