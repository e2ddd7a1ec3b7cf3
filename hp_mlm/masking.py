"""Masking: choose ``mlm_probability`` of the real tokens, hide them, and label only those.

Taught in ``notebooks/02_masking.ipynb`` (strategies compared in ``05_going_further``). Every id
comes from the tokenizer. Strategies:

- ``"mask"`` (the course's scheme): each token chosen independently, each becomes the mask token.
- ``"bert"``: the same choice; 80% of chosen tokens become the mask token, 10% a random ordinary
  token (never special, never ``[unusedN]``: see ``replacement_ids``), 10% stay (Devlin et al. 2019, 3.1).
- ``"whole_word"``: whole words are chosen, so all pieces of a word are masked together and a
  ``##`` piece is never a target alone (Google's whole-word-masking BERT release, 2019).
- ``"entity"``: whole words, with names from the corpus (see ``data.find_entities``) chosen
  ``ENTITY_BOOST`` times as often as other words, at the same overall rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .common import generator as seeded_generator
from .profiles import MASKING_STRATEGIES as STRATEGIES
from .tokens import as_rows, pad_batch, replacement_ids, require_word_pieces, word_start_index

IGNORE_INDEX = -100  # cross-entropy skips these labels (torch's default ignore_index)
#: How much more often an entity word is chosen than another word under ``strategy="entity"``.
ENTITY_BOOST = 4.0


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
    return ok


def mask_tokens(
    input_ids: torch.Tensor,
    selectable: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
    strategy: str = "mask",
    entity_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose positions with probability ``mlm_probability`` each, hide them, and build MLM labels.

    Each selectable position is chosen independently (a Bernoulli draw), as in
    ``DataCollatorForLanguageModeling``. ``strategy="mask"`` (the course's scheme) puts the
    tokenizer's mask token at every chosen position; ``strategy="bert"`` does so for 80% of them,
    puts a random ordinary token (:func:`replacement_ids`) at 10% and leaves 10% unchanged (Devlin et al. 2019, 3.1).
    ``"whole_word"`` draws once per word and masks all of its pieces; ``"entity"`` does the same
    with entity words (``entity_mask``) ``ENTITY_BOOST`` times as likely as other words.

    Args:
        input_ids: LongTensor[batch, seq_len]; not modified.
        selectable: BoolTensor[batch, seq_len] from :func:`selectable_positions`.
        mlm_probability: fraction in (0, 1] of selectable positions to choose, on average.
        generator: the source of randomness (same state, same masks).
        strategy: one of ``STRATEGIES``.
        entity_mask: optional 0/1 LongTensor[batch, seq_len] marking the pieces of entity words
            (for ``strategy="entity"``; without it, entity masking is whole-word masking).
    Returns:
        ``(masked_input_ids, labels)``, both LongTensor[batch, seq_len]: ``labels`` holds the
        original id at chosen positions and -100 everywhere else.
    Raises:
        ValueError: ``mlm_probability`` outside (0, 1], an unknown strategy, a tokenizer with
            no mask token, (``"bert"``) no ordinary token to draw replacements from, or (whole
            words) a vocabulary without word pieces.
    """
    if not 0.0 < mlm_probability <= 1.0:
        raise ValueError(f"mlm_probability must be in (0, 1], got {mlm_probability}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if tokenizer.mask_token_id is None:
        raise ValueError("this tokenizer has no mask token; MLM needs a tokenizer with one (e.g. BERT's)")
    probability = torch.full(input_ids.shape, mlm_probability)
    if strategy == "entity" and entity_mask is not None:
        probability = entity_probabilities(entity_mask.bool() & selectable, selectable, mlm_probability)
    draw = torch.bernoulli(probability, generator=generator).bool()
    if strategy in ("whole_word", "entity"):
        require_word_pieces(tokenizer, strategy)
        # One draw per word, read at the word's first piece, so all its pieces go together.
        draw = draw.gather(1, word_start_index(input_ids, tokenizer))
    chosen = draw & selectable
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    masked = input_ids.clone()
    if strategy != "bert":
        masked[chosen] = tokenizer.mask_token_id
        return masked, labels
    to_mask = chosen & torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool()
    masked[to_mask] = tokenizer.mask_token_id
    # Half of the remaining 20%: a random token; the other half keeps the original token.
    to_random = chosen & ~to_mask & torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool()
    ordinary = replacement_ids(tokenizer).to(input_ids.dtype)  # never special tokens or [unusedN] slots
    if len(ordinary) == 0:
        raise ValueError("this vocabulary has only special or reserved tokens to draw from; use strategy='mask'")
    masked[to_random] = ordinary[torch.randint(len(ordinary), input_ids.shape, generator=generator)][to_random]
    return masked, labels


def entity_probabilities(entity: torch.Tensor, selectable: torch.Tensor, mlm_probability: float) -> torch.Tensor:
    """FloatTensor[batch, seq_len] of choice probabilities in [0, 1] that favour entity words at an
    unchanged overall rate: with a fraction ``f`` of the selectable tokens inside entities, other tokens
    get ``p_o = p / (f * ENTITY_BOOST + 1 - f)`` and entity tokens ``min(1, ENTITY_BOOST * p_o)``, so the
    expected share of chosen tokens stays ``p`` (unless the cap at 1 binds).
    """
    f = (entity & selectable).sum() / selectable.sum().clamp(min=1)
    other = mlm_probability / (f * ENTITY_BOOST + 1 - f)
    return torch.where(entity, (ENTITY_BOOST * other).clamp(max=1.0), other).float()


#: The keys that tell :class:`MaskingCollator` where a row's batch falls: ``(epoch, batch index)``.
BATCH_POSITION = ("epoch", "batch_index")


def with_position(rows: Sequence[dict[str, Any]], epoch: int, batch_index: int) -> list[dict[str, Any]]:
    """The rows of batch ``batch_index`` of epoch ``epoch``, each told where it falls (the
    :data:`BATCH_POSITION` keys), so that :class:`MaskingCollator` draws that batch's masks."""
    return [{**row, "epoch": epoch, "batch_index": batch_index} for row in rows]


@dataclass
class MaskingCollator:
    """Pads a list of tokenised rows per batch and draws fresh masks for every batch.

    Use as a ``DataLoader`` ``collate_fn`` (``training.epoch_loader`` builds one). A batch's masks are
    a pure function of where it falls: batch ``b`` of epoch ``e`` (the :data:`BATCH_POSITION` keys its
    rows carry, see :func:`with_position`; rows without them are batch 0 of epoch 0) draws from a
    generator seeded with ``common.derive_seed(seed, "masks", e, b)`` (plus ``"process", p`` for a
    process ``p`` > 0 under ``accelerate launch``). So every batch gets different masks, DataLoader
    workers draw what one process would, and a run resumed from a checkpoint redraws exactly the
    masks it would have drawn. ``label_all_tokens=True`` labels every real token (an ablation: the
    original tutorial's labels).

    Returns (per call) a dict of LongTensor[batch, seq_len]: ``input_ids`` (masked),
    ``attention_mask``, ``labels`` (-100 off the chosen positions).
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    seed: int = 0
    strategy: str = "mask"
    pad_to_multiple_of: int | None = None
    label_all_tokens: bool = False
    process_index: int = 0

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        position = [int(features[0].get(key, 0)) for key in BATCH_POSITION]
        rank = ("process", self.process_index) if self.process_index else ()  # process 0 draws as a single one
        generator = seeded_generator(self.seed, "masks", *position, *rank)
        batch = pad_batch(features, self.tokenizer, pad_to_multiple_of=self.pad_to_multiple_of)
        ids, attention = batch["input_ids"], batch["attention_mask"]
        selectable = selectable_positions(ids, self.tokenizer, batch.get("special_tokens_mask"), attention)
        masked, labels = mask_tokens(
            ids, selectable, self.tokenizer, self.mlm_probability, generator, self.strategy, batch.get("entity_mask")
        )
        if self.label_all_tokens:
            labels = label_everything(ids, attention)
        return {"input_ids": masked, "attention_mask": attention, "labels": labels}


def label_everything(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Labels at every non-padding position (special tokens included), -100 on padding: the original
    tutorial's labels (without its padding positions), an ablation, not the MLM objective."""
    return torch.where(attention_mask.bool(), input_ids, torch.full_like(input_ids, IGNORE_INDEX))


def freeze_masks(
    rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    seed: int = 0,
    label_all_tokens: bool = False,
    strategy: str = "mask",
    at_least_one: bool = True,
) -> list[dict[str, list[int]]]:
    """Draw evaluation masks once, row by row, so that every evaluation scores the same positions.

    Row ``i``'s masks come from a generator seeded with ``derive_seed(seed, "frozen", i)``, so they do not depend on
    batching or on which other rows are present (the Hugging Face course, chapter 7, freezes
    evaluation masks the same way).

    Args:
        rows: tokenised rows (``input_ids`` and ``special_tokens_mask`` lists).
        label_all_tokens: label every token instead of only the masked ones (training ablation).
        strategy: how positions are chosen (see :func:`mask_tokens`); evaluation uses ``"mask"``.
        at_least_one: a row the draw left without a masked token gets one (:func:`mask_one`), so
            every held-out row is scored; False keeps the plain draw (static training masks).
    Returns:
        One dict per row: ``input_ids`` (masked), ``attention_mask`` and ``labels`` (lists of
        int), and ``entity_mask`` when the rows carry it.
    """
    frozen = []
    for i, row in enumerate(as_rows(rows)):
        ids = torch.tensor([row["input_ids"]], dtype=torch.long)
        special = torch.tensor([row["special_tokens_mask"]]) if "special_tokens_mask" in row else None
        entity = torch.tensor([row["entity_mask"]]) if "entity_mask" in row else None
        selectable = selectable_positions(ids, tokenizer, special)
        generator = seeded_generator(seed, "frozen", i)
        masked, labels = mask_tokens(ids, selectable, tokenizer, mlm_probability, generator, strategy, entity)
        if at_least_one and bool(selectable.any()) and not bool((labels != IGNORE_INDEX).any()):
            masked, labels = mask_one(ids, selectable, tokenizer, generator)
        if label_all_tokens:
            labels = label_everything(ids, torch.ones_like(ids))
        item = {"input_ids": masked[0].tolist(), "attention_mask": [1] * ids.shape[1], "labels": labels[0].tolist()}
        if entity is not None:
            item["entity_mask"] = list(row["entity_mask"])
        frozen.append(item)
    return frozen


def mask_one(
    input_ids: torch.Tensor, selectable: torch.Tensor, tokenizer: PreTrainedTokenizerBase, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hide one position of a one-row batch, drawn uniformly among its ``selectable`` ones, with the
    tokenizer's mask token: ``(masked_input_ids, labels)``, LongTensor[1, seq_len] each (labels -100
    except there). For a short row the 15% draw left without a mask (0.85^n of the rows with n
    selectable tokens: 27% at 8, 20% at 10)."""
    places = selectable[0].nonzero().flatten()
    position = int(places[torch.randint(len(places), (1,), generator=generator)])
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[0, position] = input_ids[0, position]
    masked = input_ids.clone()
    masked[0, position] = tokenizer.mask_token_id
    return masked, labels


def original_batches(
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
    rows = as_rows(rows)
    batch = pad_batch(list(rows), tokenizer, pad_to_length=max(len(r["input_ids"]) for r in rows))
    ids = batch["input_ids"]
    skip = torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id])
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_probability) & ~torch.isin(ids, skip)
    masked = ids.clone()
    masked[chosen] = tokenizer.mask_token_id
    return {"input_ids": masked, "attention_mask": batch["attention_mask"], "labels": ids.clone()}
