"""A book's words, scored at every held-out occurrence: its names followed while it trains, and what it taught.

Taught in ``notebooks/03_training.ipynb`` (the watch follows the names) and ``notebooks/04_evaluation.ipynb``
(what the book taught). A picked example sentence fixes one name in one context; most books teach their names in
many (*said Colin*, *Colin's room*), so the course also scores a name wherever it occurs in the held-out rows, the
way knowledge probes report a word over all its cloze items (Petroni et al. 2019, LAMA): each occurrence is hidden
whole (all its word pieces, nothing else), and it counts as right when the model's first guess at every piece is
the name's (a name of several pieces is scored whole). The share of occurrences right rises as the book is learned,
even where no single sentence decides the name.

- :func:`follow_names` picks the book's most frequent names (``data.find_entities``, titles left out) and freezes
  one item per held-out occurrence, with ``context`` tokens on each side; :func:`score_names` scores them with
  ``evaluation.evaluate`` and the :class:`PerWord` breakdown, so the watch, the report and notebook 04 count alike.
- :func:`taught` lists the words a run now gets right at held-out gaps (the whole words the main job hides,
  ``studies.breakdowns.freeze_whole_words``) that it did not before.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.tokens import continuation_table, word_start_index

#: Names followed at most (the most frequent first).
FOLLOWED = 8
#: A name is followed only where the held-out rows hold it at least this often (fewer says little).
MIN_OCCURRENCES = 3
#: Tokens of context kept on each side of an occurrence (a sentence or two): what decides a name is near it, and
#: a short item keeps the watch's cost small: a frame's names took 0.93 s at 32 against 1.97 s for whole rows of
#: 128 tokens (The Secret Garden, 191 occurrences, MiniLM on 2 cores in bf16; benchmarks/results/book_names.md).
CONTEXT = 32
#: Capitalised words that are titles (``Mrs Medlock``, ``Aunt Em``) or a book's headings (``Chapter 1``), not
#: names: never followed.
TITLES = frozenset(
    "mr mrs ms miss dr sir madam lady lord master mistress aunt uncle king queen prince princess captain "
    "professor saint st god chapter book part volume contents".split()
)
#: A name is *learned* once it is the first guess at this share of its held-out occurrences.
LEARNED = 1 / 3
#: Words every English text has, which :func:`taught` leaves out: what a model learns of them is English, not
#: the book (punctuation is left out too: a taught word holds a letter).
COMMON = frozenset(
    """a about after again all also am an and any are as at be been before but by can could did do does down each
    even ever for from had has have he her here him his how i if in into is it its just like made make may me more
    most much must my never no not now of off on once one only or other our out over said say see she should so
    some such than that the their them then there these they this those through to too up upon us very was we
    were what when where which while who will with would yes you your don didn doesn couldn wouldn shouldn wasn
    weren isn aren hadn hasn haven won ll ve re""".split()
)


def _original(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """LongTensor[batch, seq_len]: the ids before masking (the labels where a token was hidden)."""
    return torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])


class PerWord:
    """A breakdown for ``evaluation.evaluate``: per word of ``words``, ``{"seen", "right"}`` under ``"per_word"``:
    the hidden occurrences scored, and those whose every hidden piece was the first guess. Pieces are grouped into
    words by WordPiece's ``##`` marks (``tokens.word_start_index``); a word counts where the pieces hidden are the
    word's own (hidden whole, as :func:`follow_names` and ``freeze_whole_words`` hide them)."""

    key = "per_word"

    def __init__(self, words: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> None:
        self.words = list(dict.fromkeys(words))
        self.names = tuple(f"{word}\t{what}" for word in self.words for what in ("right", "seen"))
        self.ids = {tuple(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(w))): w for w in self.words}

    def sums(self, batch, tokenizer, target: torch.Tensor, right: torch.Tensor) -> dict[str, int]:
        original = _original(batch)
        rows, cols = target.nonzero(as_tuple=True)
        starts = word_start_index(original, tokenizer)[rows, cols]
        pieces: dict[tuple[int, int], list[tuple[int, bool]]] = {}
        for row, col, start, ok in zip(rows.tolist(), cols.tolist(), starts.tolist(), right.tolist()):
            pieces.setdefault((row, start), []).append((int(original[row, col]), ok))
        sums = dict.fromkeys(self.names, 0)
        for hidden in pieces.values():
            if (word := self.ids.get(tuple(i for i, _ in hidden))) is not None:
                sums[f"{word}\tseen"] += 1
                sums[f"{word}\tright"] += all(ok for _, ok in hidden)
        return sums

    def result(self, sums: dict[str, float]) -> dict[str, dict[str, int]]:
        return {w: {"seen": int(sums[f"{w}\tseen"]), "right": int(sums[f"{w}\tright"])} for w in self.words}


@dataclass
class Followed:
    """The names a run follows: ``names`` (most frequent first), ``occurrences`` (``{name: held-out
    occurrences}``), ``items`` (frozen rows, one occurrence hidden whole in each: ``input_ids``,
    ``attention_mask``, ``labels``) and their ``breakdown`` (:class:`PerWord`)."""

    names: list[str]
    occurrences: dict[str, int]
    items: list[dict[str, list[int]]] = field(repr=False)
    breakdown: PerWord = field(repr=False)


def follow_names(
    rows: Sequence[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    entities: Sequence[str],
    limit: int = FOLLOWED,
    context: int = CONTEXT,
) -> Followed:
    """The book's most frequent names (``entities``, most frequent first: ``Prepared.entities``), at most ``limit``,
    each with at least :data:`MIN_OCCURRENCES` occurrences in the tokenised held-out ``rows`` (``input_ids``), and
    one item per occurrence: that occurrence's pieces hidden (the mask token), labelled with the name's pieces
    (-100 elsewhere), ``context`` tokens kept on each side between ``[CLS]`` and ``[SEP]``. A name is found where
    its pieces stand as a whole word (not followed by a ``##`` piece); a name with an unknown piece is left out."""
    cont = continuation_table(tokenizer).tolist()
    pieces = {e: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(e)) for e in entities if e not in TITLES}
    pieces = {e: p for e, p in pieces.items() if p and tokenizer.unk_token_id not in p}
    found: dict[str, list[tuple[list[int], int]]] = {e: [] for e in pieces}
    for ids in (list(row["input_ids"]) for row in rows):
        at: dict[int, list[int]] = {}  # where each token stands, [CLS] and [SEP] aside
        for i, token in enumerate(ids[1:-1], 1):
            at.setdefault(token, []).append(i)
        for name, p in pieces.items():
            end = len(p)
            found[name] += [(ids, i) for i in at.get(p[0], ()) if ids[i : i + end] == p and not cont[ids[i + end]]]
    names = [e for e in pieces if len(found[e]) >= MIN_OCCURRENCES][:limit]
    items = [_item(ids, i, pieces[name], tokenizer, context) for name in names for ids, i in found[name]]
    return Followed(names, {n: len(found[n]) for n in names}, items, PerWord(names, tokenizer))


def _item(ids: list[int], i: int, pieces: list[int], tokenizer, context: int) -> dict[str, list[int]]:
    """One occurrence at ``i`` of ``ids`` hidden whole, with ``context`` tokens each side (specials re-added)."""
    k, start, stop = len(pieces), max(1, i - context), min(len(ids) - 1, i + len(pieces) + context)
    body = ids[start:i] + [tokenizer.mask_token_id] * k + ids[i + k : stop]
    labels = [IGNORE_INDEX] * (i - start + 1) + pieces + [IGNORE_INDEX] * (stop - i - k + 1)
    input_ids = [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]
    return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids), "labels": labels}


def score_names(
    model: nn.Module, followed: Followed, tokenizer: PreTrainedTokenizerBase, batch_size: int = 32, precision="fp32"
) -> dict[str, int]:
    """``{name: occurrences right}``: where the model's first guess at every piece of a hidden occurrence is the
    name's (``evaluation.evaluate`` with :class:`PerWord`, in ``precision``); ``{}`` when nothing is followed."""
    if not followed.items:
        return {}
    scored = evaluate(
        model, followed.items, tokenizer, batch_size, precision=precision, breakdowns=(followed.breakdown,)
    )
    return {name: counts["right"] for name, counts in scored["per_word"].items()}


def first_learned(frames: Sequence[dict[str, Any]], occurrences: dict[str, int]) -> list[dict[str, Any]]:
    """Per followed name, the first frame (``{"step", "seconds"}``, None: not yet) at which it was right at
    :data:`LEARNED` of its held-out occurrences or more; frames carry ``"names"`` (``{name: right}``)."""
    firsts = []
    for name, seen in occurrences.items():
        hit = next((f for f in frames if f.get("names", {}).get(name, 0) >= LEARNED * seen), {})
        firsts.append({"name": name, "seen": seen, "step": hit.get("step"), "seconds": hit.get("seconds")})
    return firsts


def hidden_words(frozen: Sequence[dict[str, list[int]]], tokenizer: PreTrainedTokenizerBase) -> Counter:
    """The whole words hidden in ``frozen`` rows (masks frozen whole), counted: what :func:`taught` scores."""
    words: Counter = Counter()
    for row in frozen:
        labels = row["labels"]
        hidden = [label if label != IGNORE_INDEX else None for label in labels]
        word: list[int] = []
        for label in [*hidden, None]:
            if label is not None and (not word or tokenizer.convert_ids_to_tokens(label).startswith("##")):
                word.append(label)
                continue
            if word:
                words[tokenizer.decode(word).replace(" ", "")] += 1
            word = [label] if label is not None else []
    return words


def taught(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], limit: int = 12) -> list[dict]:
    """The book's words a run gets right at held-out gaps and did not before (``PerWord`` results before and
    after): ``[{"word", "seen", "before", "after"}]``, words of two letters or more that every English text has not
    (:data:`COMMON`; nor the pieces of *don't*) right more often after, the largest gain first (then the most
    seen), at most ``limit``."""
    gained = [
        {"word": w, "seen": a["seen"], "before": before.get(w, {}).get("right", 0), "after": a["right"]}
        for w, a in after.items()
        if a["right"] > before.get(w, {}).get("right", 0) and w not in COMMON and sum(c.isalpha() for c in w) > 1
    ]
    return sorted(gained, key=lambda g: (g["before"] - g["after"], -g["seen"], g["word"]))[:limit]


def name_gaps(texts: Sequence[str], names: Sequence[str], limit: int = 4) -> list[tuple[str, tuple[str]]]:
    """Example sentences from a book's own ``texts`` (its held-out rows) for ``names``: for each name, its first
    sentence (split after ``.``, ``!`` or ``?``) of at most 40 words that holds it once as a whole word, with that word
    hidden (``[MASK]``), as ``(sentence, (name,))``; at most ``limit``. What notebook 04 asks about where the run
    picked no example sentence (``course.examples``) and the book has names (:func:`follow_names`)."""
    sentences = [s for text in texts for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) <= 40]
    gaps = []
    for name in names:
        word = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
        found = next((s for s in sentences if len(word.findall(s)) == 1), None)
        if found:
            gaps.append((word.sub("[MASK]", found), (name,)))
    return gaps[:limit]
