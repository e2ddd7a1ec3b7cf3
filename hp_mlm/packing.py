"""Packing: the training rows joined end to end and cut into blocks of ``max_length`` (``padding="pack"``).

Taught in ``notebooks/06_the_library_way.ipynb``. The Hugging Face course and ``run_mlm`` concatenate
the tokenised rows and chunk them into blocks of 128 (their ``group_texts``), dropping the last
partial block. Here every cut moves back to the start of a word, so no block begins with a ``##``
piece (Case C44); each block gets its own ``[CLS]``/``[SEP]``; and the last, shorter block is kept,
so no token is dropped. Held-out rows are never packed: packed and unpacked runs are scored on the
same frozen rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from .common import generator
from .tokens import MODEL_COLUMNS, append_cut_rows, entity_piece_mask, padding_share, plan_batches


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
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=wanted is not None) if texts else None
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
            marks.extend(entity_piece_mask(text, row_words, enc["offset_mapping"][i], wanted))
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
    training plan builds (``tokens.plan_batches`` with ``plan.epoch_loader``'s generator)."""
    batches = plan_batches(lengths, batch_size, generator(seed, "shuffle", 0), group_by_length)
    return padding_share(batches, lengths, pad_to_length)
