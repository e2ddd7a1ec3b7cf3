"""Tokens: text rows to ``input_ids``, word pieces, batches padded per batch, and rows packed into blocks.

Taught in ``notebooks/01_tokenising.ipynb``, in the order of this file:

- rows to ``input_ids`` (:func:`tokenize_rows`), each batch padded to its own longest row
  (:func:`pad_batch`), and the batches of an epoch with rows of similar length together
  (:func:`plan_batches`);
- word pieces: which ids continue a word (WordPiece ``##`` pieces), where each word starts and which
  ids are ordinary tokens, in tables built once per tokenizer from its own vocabulary (no token id is
  written here); whole-word masking (``masking``) and the per-kind scores of ``evaluation`` use them;
- packing (``padding="pack"``, notebook 06): the training rows joined end to end and cut into blocks
  of ``max_length``. The Hugging Face course and ``run_mlm`` chunk the joined rows into blocks of 128
  (their ``group_texts``) and drop the last partial block. Here every cut moves back to the start of a
  word, so no block begins with a ``##`` piece; each block gets its own ``[CLS]``/``[SEP]``; and the
  last, shorter block is kept, so no token is dropped. Held-out rows are never packed.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from datasets import Dataset
from transformers import BatchEncoding, PreTrainedTokenizerBase
from transformers.trainer_pt_utils import get_length_grouped_indices

from .common import generator

# ---------------------------------------------------------------------------------------------
# Rows to input_ids, padding per batch, the batches of an epoch (notebook 01)
# ---------------------------------------------------------------------------------------------


#: Columns a tokenised row keeps (``token_type_ids`` is all zeros for one-segment rows, so dropped).
MODEL_COLUMNS = ("input_ids", "attention_mask", "special_tokens_mask")
#: Per-token columns that ``tokenizer.pad`` does not know, and the value each is padded with.
EXTRA_PADDING = {"labels": -100, "entity_mask": 0}


def token_list(value: Any, key: str = "input_ids") -> list[int]:
    """One row's ``key`` column as a list of ints: a list as it is, a 1-D tensor or array, or a (1, n)
    tensor as ``tokenizer(text, return_tensors="pt")`` gives for one sentence.

    Raises:
        ValueError: any other shape (e.g. a whole batch of shape (8, n) as one row), naming the shape
            expected.
    """
    shape = tuple(getattr(value, "shape", ()))
    if not shape and value and isinstance(value[0], (list, tuple)):
        shape = (len(value), len(value[0]))
        value = value[0] if len(value) == 1 else value
    elif len(shape) == 1 or (len(shape) == 2 and shape[0] == 1):
        return [int(v) for v in value.reshape(-1).tolist()]
    if len(shape) > 1 and shape[0] != 1:
        raise ValueError(
            f"a row's `{key}` has shape {shape}; each row holds one sequence, shape (n,) or (1, n): "
            "give one dict per sentence (e.g. `tokenizer(texts)` without return_tensors, then one row per text)"
        )
    return value


def as_rows(rows: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
    """``rows`` with every per-token column (:data:`MODEL_COLUMNS`, labels, entity_mask) as a list of
    ints (see :func:`token_list`); rows already holding lists (a ``datasets.Dataset`` always does)
    come back as they are."""
    columns = (*MODEL_COLUMNS, *EXTRA_PADDING)
    if isinstance(rows, Dataset) or all(
        not hasattr(r["input_ids"], "shape") and not isinstance(next(iter(r["input_ids"]), 0), list) for r in rows
    ):
        return rows
    return [{k: token_list(v, k) if k in columns else v for k, v in r.items()} for r in rows]


def check_max_length(max_length: int, model_limit: int | None) -> None:
    """Refuse a ``max_length`` the model cannot embed.

    Raises:
        ValueError: if ``max_length`` exceeds ``model_limit`` (the model's position-embedding count).
    """
    if model_limit is not None and max_length > model_limit:
        raise ValueError(
            f"`max_length` {max_length} is above the model's limit of {model_limit} positions; "
            f"set max_length to {model_limit} or less"
        )


def tokenize_rows(
    rows: Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    text_column: str = "text",
    split_long_rows: bool = False,
    entities: Collection[str] | None = None,
) -> Dataset:
    """Tokenise every row with ``datasets.map(batched=True)`` (cached by ``datasets`` when file-backed).

    Rows are truncated at ``max_length`` tokens, ``[CLS]``/``[SEP]`` included (:func:`truncation`
    counts what that drops); with ``split_long_rows`` a long row becomes several rows instead, each
    cut at a word start, so no text is lost and no row starts inside a word. No padding
    here: batches are padded later, each to its own longest row.

    With ``entities`` (lower-cased words, e.g. from ``data.find_entities``) each row also gets
    ``entity_mask``: 1 on every piece of a word in ``entities``, else 0 (needs a fast tokenizer).

    Returns:
        A ``Dataset`` with columns ``input_ids``, ``attention_mask``, ``special_tokens_mask``
        (lists of int, one entry per token), ``length`` (tokens in the row) and, with
        ``entities``, ``entity_mask``.
    """
    # a set, not a frozenset: datasets hashes a set's items sorted, so this map's fingerprint (its cache
    # files' name) is the same in every process; a frozenset's order changes with each process's string hashing
    wanted = set(entities) if entities is not None else None

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        if split_long_rows:
            return _split_at_words(batch[text_column], tokenizer, max_length, wanted)
        enc = tokenizer(
            batch[text_column],
            truncation=True,
            max_length=max_length,
            return_special_tokens_mask=True,
            return_token_type_ids=False,
        )
        out = {k: enc[k] for k in MODEL_COLUMNS}
        out["length"] = [len(ids) for ids in enc["input_ids"]]
        if wanted is not None:
            out["entity_mask"] = [entity_piece_mask(text, enc, i, wanted) for i, text in enumerate(batch[text_column])]
        return out

    return rows.map(encode, batched=True, remove_columns=rows.column_names, desc="Tokenising")


def _split_at_words(texts: list[str], tokenizer, max_length: int, wanted: set | None) -> dict[str, list]:
    """Each text as rows of at most ``max_length`` tokens (special tokens included), every cut at
    the start of a word (as the fast tokenizer's ``word_ids`` say); a single word longer than a row
    is cut where it must be."""
    # verbose=False: no "longer than the maximum sequence length" warning for rows this function cuts itself
    enc = tokenizer(texts, add_special_tokens=False, verbose=False)
    room = max_length - 2  # [CLS] and [SEP], as the tokenizer names them
    out: dict[str, list] = {k: [] for k in (*MODEL_COLUMNS, "length", *(("entity_mask",) if wanted else ()))}
    for i, text in enumerate(texts):
        ids, words = enc["input_ids"][i], enc.word_ids(i)
        entity = entity_piece_mask(text, enc, i, wanted) if wanted else None
        append_cut_rows(out, tokenizer, ids, words, room, entity)
    return out


def append_cut_rows(
    out: dict[str, list], tokenizer, ids: list[int], words: list[int | None], room: int, entity: list[int] | None
) -> None:
    """Cut ``ids`` (pieces without special tokens, word indices ``words``) at word starts into rows of
    at most ``room`` pieces (:func:`word_cuts`), each between ``[CLS]`` and ``[SEP]``, and append each
    row's columns to ``out`` (``entity`` marks, when given, follow their pieces)."""
    for start, end in word_cuts(words, room):
        row = [tokenizer.cls_token_id, *ids[start:end], tokenizer.sep_token_id]
        out["input_ids"].append(row)
        out["attention_mask"].append([1] * len(row))
        out["special_tokens_mask"].append([1] + [0] * (end - start) + [1])
        out["length"].append(len(row))
        if entity is not None:
            out["entity_mask"].append([0, *entity[start:end], 0])


def word_cuts(words: list[int | None], room: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each row of at most ``room`` tokens, for pieces whose word indices are
    ``words`` (a fast tokenizer's ``word_ids``): a cut that would split a word backs off to that
    word's start, unless the word alone fills the row. An empty text is one empty row."""

    def inside_word(j: int) -> bool:
        return words[j] is not None and words[j] == words[j - 1]

    cuts, start = [], 0
    while True:
        end = min(start + room, len(words))
        cut = end
        while cut < len(words) and cut - 1 > start and inside_word(cut):
            cut -= 1
        end = end if cut < len(words) and inside_word(cut) else cut  # a word longer than a row is cut inside
        cuts.append((start, end))
        if end >= len(words):
            return cuts
        start = end


def truncation(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase, max_length: int) -> dict[str, int]:
    """What truncating ``texts`` at ``max_length`` tokens drops: ``{"rows_cut", "tokens_dropped"}``."""
    if not texts:  # the tokenizer refuses an empty batch
        return {"rows_cut": 0, "tokens_dropped": 0}
    lengths = [len(ids) for ids in tokenizer(list(texts), return_token_type_ids=False, verbose=False)["input_ids"]]
    over = [n - max_length for n in lengths if n > max_length]
    return {"rows_cut": len(over), "tokens_dropped": sum(over)}


def words_cut(rows: Dataset, tokenizer: PreTrainedTokenizerBase) -> int:
    """Rows that open inside a word: a ``##`` piece right after ``[CLS]``, where a word with more pieces than
    fit in a row was cut (:func:`word_cuts`, with ``split_long_rows`` or packing). Whole-word masking reads
    such a row's leading pieces as a word of their own (:func:`word_start_index`)."""
    table = continuation_table(tokenizer)
    return sum(len(ids) > 2 and bool(table[ids[1]]) for ids in rows["input_ids"])


def entity_piece_mask(text: str, encoding: BatchEncoding, row: int, entities: Collection[str]) -> list[int]:
    """1 for each token of row ``row`` of ``encoding`` (a fast tokenizer's, of ``text``) whose whole word (as
    the tokenizer split it; its characters in ``text``: ``encoding.word_to_chars``) is in ``entities``, else 0:
    one int per token."""
    words = encoding.word_ids(row)
    spans = {w: encoding.word_to_chars(row, w) for w in set(words) - {None}}
    hits = {w for w, (start, end) in spans.items() if text[start:end].lower() in entities}
    return [int(w in hits) for w in words]


def pad_batch(
    features: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    pad_to_multiple_of: int | None = None,
    pad_to_length: int | None = None,
) -> dict[str, torch.Tensor]:
    """Pad a list of tokenised rows to the longest row of *this batch* (dynamic padding).

    Uses ``tokenizer.pad``. ``pad_to_length`` pads to a fixed length instead (the original
    tutorial's "pad every row to the longest row of the dataset").

    Returns:
        ``input_ids``, ``attention_mask``, ``special_tokens_mask`` (padding counts as special):
        LongTensor[batch, seq_len]; plus ``labels`` (padded with -100) and ``entity_mask``
        (padded with 0) when the rows carry them.
    """
    features = as_rows(features)
    plain = [{k: f[k] for k in MODEL_COLUMNS if k in f} for f in features]
    if pad_to_length is not None:
        batch = tokenizer.pad(plain, padding="max_length", max_length=pad_to_length, return_tensors="pt")
    else:
        batch = tokenizer.pad(plain, padding="longest", pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")
    batch = dict(batch)
    width = batch["input_ids"].shape[1]
    for key, fill in EXTRA_PADDING.items():
        if key in features[0]:
            batch[key] = torch.tensor([[*f[key], *[fill] * (width - len(f[key]))] for f in features], dtype=torch.long)
    return batch


def plan_batches(
    lengths: Sequence[int],
    batch_size: int,
    generator: torch.Generator,
    group_by_length: bool = True,
    processes: int = 1,
) -> list[list[int]]:
    """The batches of one epoch, as lists of row indices; every row appears exactly once.

    With ``group_by_length``, rows of similar length share a batch (so little padding is needed):
    ``transformers``' ``get_length_grouped_indices`` shuffles the rows, sorts them by length
    within mega-batches of ``50 * batch_size`` rows, and the batches are then shuffled so that
    long and short batches alternate at random. Without it, a plain random shuffle.

    Args:
        lengths: tokens per row.
        generator: seeds the shuffle (same state, same batches).
        processes: N processes each take every N-th batch (``accelerate``), and each must get as many
            as the others, or ``accelerate`` fills the last round with copies of the first batches, so
            that those rows train twice. So the rows of the last round and of the full round before it
            are dealt into 2N batches (N when there is no full round): the same optimiser steps, every
            row once (with fewer rows than that, as with ``batch_size`` 1, a process may get one copy).
    """
    n = len(lengths)
    if group_by_length:
        order = get_length_grouped_indices(list(lengths), batch_size, generator=generator)
    else:
        order = torch.randperm(n, generator=generator).tolist()
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if group_by_length:
        shuffled = torch.randperm(len(batches), generator=generator).tolist()
        batches = [batches[i] for i in shuffled]
    if uneven := len(batches) % processes:  # re-cut the last round, with the full one before it, for every process
        tail = [row for batch in batches[-uneven - processes :] for row in batch]
        parts = processes * (2 if len(batches) > processes else 1)
        batches = batches[: max(0, len(batches) - uneven - processes)] + [tail[j::parts] for j in range(parts)]
    return [batch for batch in batches if batch]


def padding_share(batches: Sequence[Sequence[int]], lengths: Sequence[int], pad_to_length: int | None = None) -> float:
    """Fraction in [0, 1] of batch positions that are padding, for a batch plan over rows of ``lengths``."""
    real = sum(lengths[i] for batch in batches for i in batch)
    padded = sum((pad_to_length or max(lengths[i] for i in batch)) * len(batch) for batch in batches)
    return 0.0 if padded == 0 else 1.0 - real / padded


# ---------------------------------------------------------------------------------------------
# Word pieces: where words start and continue, from the tokenizer's vocabulary (notebook 01)
# ---------------------------------------------------------------------------------------------


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
    Google's ``create_pretraining_data.py`` draw from the whole vocabulary instead. ``inference.fill_mask``
    lists only these. Computed once per tokenizer; empty when no token is ordinary.
    """
    special = set(tokenizer.all_special_ids)
    return _per_tokenizer(
        tokenizer,
        "replacements",
        lambda tokens: torch.tensor(
            [i for i, t in enumerate(tokens) if i not in special and not RESERVED.fullmatch(t)], dtype=torch.long
        ),
    )


def word_start_index(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """For every position, the position where its word starts (itself, unless it is a ``##`` piece).

    A ``##`` piece right after a special token starts a word of its own: a row that opens inside a word
    (a word with more pieces than fit in a row, cut where it must be: :func:`word_cuts`) has its
    leading pieces read as one word, never as part of ``[CLS]``.

    Args:
        input_ids: LongTensor[batch, seq_len] of original (unmasked) ids.
    Returns:
        LongTensor[batch, seq_len].
    """
    ids = input_ids.clamp(0, len(tokenizer) - 1)
    cont = continuation_table(tokenizer)[ids] & ~torch.isin(ids.roll(1, 1), torch.tensor(tokenizer.all_special_ids))
    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    return torch.cummax(torch.where(cont, torch.zeros_like(positions), positions), dim=1).values


def require_word_pieces(tokenizer: PreTrainedTokenizerBase, strategy: str) -> None:
    """Raise ValueError when ``strategy`` masks whole words and the vocabulary marks no word pieces
    (no ``##`` entries: not a WordPiece vocabulary such as BERT's), where it would silently become
    token masking."""
    if not bool(continuation_table(tokenizer).any()):
        raise ValueError(
            f"`masking` {strategy!r} finds words by WordPiece's '##' pieces, and this tokenizer "
            f"({type(tokenizer).__name__}, {len(tokenizer):,} tokens) has none: use `masking` 'mask' or 'bert'"
        )


# ---------------------------------------------------------------------------------------------
# Packing: rows joined and cut into blocks at word starts (padding="pack", notebook 06)
# ---------------------------------------------------------------------------------------------


def pack_rows(
    rows: Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    text_column: str = "text",
    entities: Collection[str] | None = None,
) -> Dataset:
    """The rows' tokens, in row order, as blocks of at most ``max_length`` tokens (``[CLS]``/``[SEP]`` included).

    Each row is tokenised without special tokens, the rows are joined end to end (a row's end is
    always a word's end), and the stream is cut every ``max_length - 2`` tokens, each cut moved back
    to the start of a word (a word longer than a block is cut where it must be). Every token of every
    row is in exactly one block. Needs a fast tokenizer (``word_ids``).

    Args:
        entities: lower-cased words whose pieces are marked in ``entity_mask`` (as ``tokens.tokenize_rows``).
    Returns:
        A ``Dataset`` with the columns of ``tokens.tokenize_rows``: ``input_ids``, ``attention_mask``,
        ``special_tokens_mask``, ``length`` (and ``entity_mask``), one block per row, no padding.
    Raises:
        ValueError: ``max_length`` below 3 (no room for a token between ``[CLS]`` and ``[SEP]``), or the
            rows hold no token at all.
    """
    if max_length < 3:
        raise ValueError(f"packing needs max_length of at least 3 ([CLS], a token, [SEP]), got {max_length}")
    wanted = frozenset(entities) if entities is not None else None
    texts = list(rows[text_column])
    # texts or [""]: the tokenizer refuses an empty batch (no rows: no ids, refused below); verbose=False: no
    # "longer than the maximum sequence length" warning for rows cut below, never sent whole to the model
    enc = tokenizer(texts or [""], add_special_tokens=False, verbose=False)
    ids: list[int] = []
    words: list[int | None] = []
    marks: list[int] = []
    first = 0  # word indices run on across rows, so a row's first token always starts a word
    for i, text in enumerate(texts):
        row_words = enc.word_ids(i)
        ids.extend(enc["input_ids"][i])
        words.extend(None if w is None else first + w for w in row_words)
        first += 1 + max((w for w in row_words if w is not None), default=-1)
        if wanted is not None:
            marks.extend(entity_piece_mask(text, enc, i, wanted))
    if not ids:
        raise ValueError(f"the {len(texts)} training rows hold no token to pack; check the text column")
    out: dict[str, list] = {k: [] for k in (*MODEL_COLUMNS, "length", *(("entity_mask",) if wanted else ()))}
    append_cut_rows(out, tokenizer, ids, words, max_length - 2, marks if wanted is not None else None)
    return Dataset.from_dict(out)


def grouped(padding: str, group_by_length: bool) -> bool:
    """Whether the batch plan groups rows by length: only for rows padded per batch (``"batch"``,
    ``"pack"``); the original's ``"dataset"`` padding makes every row as long as the longest."""
    return group_by_length and padding != "dataset"


def epoch_padding_share(
    lengths: Sequence[int], batch_size: int, seed: int, group_by_length: bool, pad_to_length: int | None = None
) -> float:
    """Fraction in [0, 1] of the first epoch's batch positions that are padding, for the batches the
    training plan builds (``tokens.plan_batches`` with ``training.epoch_loader``'s generator)."""
    batches = plan_batches(lengths, batch_size, generator(seed, "shuffle", 0), group_by_length)
    return padding_share(batches, lengths, pad_to_length)
