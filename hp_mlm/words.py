"""Word pieces: which ids continue a word (WordPiece ``##`` pieces), where each word starts, and
which ids are ordinary tokens. Tables are built once per tokenizer from its vocabulary.

Taught in ``notebooks/01_tokenising.ipynb`` (a name of several pieces) and used by whole-word
masking (``masking``) and the per-kind scores of ``evaluation``. No token id is written here: the
tables come from the tokenizer's own vocabulary.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable

import torch
from transformers import PreTrainedTokenizerBase

_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {(name, vocab size): tensor}
_Build = Callable[[list[str]], torch.Tensor]  # tokens in id order -> a table
#: A vocabulary entry written as a bracketed name (``[unused12]``, ``[CLS]``): a reserved slot, not a word.
RESERVED = re.compile(r"\[[^\[\]\s]+\]")


def _per_tokenizer(tokenizer: PreTrainedTokenizerBase, name: str, build: _Build) -> torch.Tensor:
    """``build(tokens)`` over the tokenizer's tokens in id order, once per tokenizer and vocabulary size."""
    tables = _TABLES.setdefault(tokenizer, {})
    key = (name, len(tokenizer))  # a tokenizer that gained tokens gets a fresh table
    if key not in tables:
        tables[key] = build([t or "" for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))])
    return tables[key]


def continuation_table(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """BoolTensor[vocab]: True for ids that continue a word (WordPiece ``##`` pieces).

    For a vocabulary without ``##`` pieces (not WordPiece) every token counts as a word start:
    :func:`require_word_pieces` refuses whole-word masking there. Computed once per tokenizer.
    """
    return _per_tokenizer(tokenizer, "continuation", lambda tokens: torch.tensor([t.startswith("##") for t in tokens]))


def wordlike_table(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """BoolTensor[vocab]: True for ids whose text (``##`` mark aside) holds a letter or digit, i.e. can be
    part of a word; punctuation and symbols are False. Computed once per tokenizer."""
    return _per_tokenizer(
        tokenizer,
        "wordlike",
        lambda tokens: torch.tensor([any(c.isalnum() for c in t.removeprefix("##")) for t in tokens]),
    )


def replacement_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """LongTensor[n]: the ordinary token ids that ``strategy="bert"`` draws its random replacements from.

    Special tokens (``tokenizer.all_special_ids``) and reserved slots (entries written as a bracketed name,
    ``RESERVED``: bert-base-uncased's ``[unused0]``..``[unused993]`` are 3.3% of its vocabulary) are left
    out, so a replacement is a real word or piece. ``DataCollatorForLanguageModeling.torch_mask_tokens`` and
    Google's ``create_pretraining_data.py`` draw from the whole vocabulary instead. Computed once per
    tokenizer. Raises ValueError when no token is ordinary (then use ``strategy="mask"``).
    """
    special = set(tokenizer.all_special_ids)
    ids = _per_tokenizer(
        tokenizer,
        "replacements",
        lambda tokens: torch.tensor(
            [i for i, t in enumerate(tokens) if i not in special and not RESERVED.fullmatch(t)], dtype=torch.long
        ),
    )
    if len(ids) == 0:
        raise ValueError("this vocabulary has only special or reserved tokens to draw from; use strategy='mask'")
    return ids


def word_start_index(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """For every position, the position where its word starts (itself, unless it is a ``##`` piece).

    Args:
        input_ids: LongTensor[batch, seq_len] of original (unmasked) ids.
    Returns:
        LongTensor[batch, seq_len].
    """
    table = continuation_table(tokenizer)
    cont = table[input_ids.clamp(0, len(table) - 1)]
    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    return torch.cummax(torch.where(cont, torch.zeros_like(positions), positions), dim=1).values


def in_multi_piece_word(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """BoolTensor[batch, seq_len]: True for positions inside a word of two or more pieces."""
    cont = continuation_table(tokenizer)[input_ids.clamp(0, len(tokenizer) - 1)]
    next_cont = torch.cat([cont[:, 1:], torch.zeros_like(cont[:, :1])], dim=1)  # is the next piece a ``##``?
    return cont | next_cont


def require_word_pieces(tokenizer: PreTrainedTokenizerBase, strategy: str) -> None:
    """Raise ValueError when ``strategy`` masks whole words and the vocabulary marks no word pieces
    (no ``##`` entries: not a WordPiece vocabulary such as BERT's), where it would silently become
    token masking (Case C45)."""
    if not bool(continuation_table(tokenizer).any()):
        raise ValueError(
            f"`masking` {strategy!r} finds words by WordPiece's '##' pieces, and this tokenizer "
            f"({type(tokenizer).__name__}, {len(tokenizer):,} tokens) has none: use `masking` 'mask' or 'bert'"
        )
