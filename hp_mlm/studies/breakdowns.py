"""Breakdowns of the held-out accuracy: by kind of token, and by whole word.

Taught in ``notebooks/04_evaluation.ipynb`` after the plain top-1. ``evaluation.evaluate`` adds up hits
over masked tokens; pass it ``breakdowns=(BY_KIND,)`` or ``(BY_WORD,)`` and each breakdown adds its own
counts in the same pass, summed over processes in the same all-reduce. Each evaluation asks for the one
that fits its masks (the command line's run: by kind on the held-out masks, by word on the words hidden
whole):

- :data:`BY_KIND`: top-1 per kind of masked token: a word that is one piece, a piece of a longer word,
  and, where rows carry ``entity_mask``, named entities and other words;
- :data:`BY_WORD`: whole-word top-1, a word right only when every hidden piece of it is, for one-piece
  and multi-piece words apart; meant for masks frozen whole (:func:`freeze_whole_words`).

A breakdown has ``key`` (its entry in the result), ``names`` (its counts), ``sums(batch, tokenizer,
target, right)`` (one batch's counts) and ``result(sums)`` (its entry from the totals).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX, freeze_masks
from hp_mlm.tokens import continuation_table, word_start_index

#: Kinds of scored token (see :meth:`ByKind.kinds`).
KINDS = ("entity", "other_word", "whole_word", "word_piece")
#: Kinds of scored word (see :class:`ByWord`): one piece, or several.
WORD_KINDS = ("one_piece", "multi_piece")


def in_multi_piece_word(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """BoolTensor[batch, seq_len]: True for positions inside a word of two or more pieces."""
    cont = continuation_table(tokenizer)[input_ids.clamp(0, len(tokenizer) - 1)]
    next_cont = torch.cat([cont[:, 1:], torch.zeros_like(cont[:, :1])], dim=1)  # is the next piece a ``##``?
    return cont | next_cont


def _original(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """LongTensor[batch, seq_len]: the ids before masking (the labels where a token was hidden)."""
    return torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])


class ByKind:
    """Top-1 per kind of masked token: ``{kind: {"top1", "n_positions"}}`` under ``"kinds"`` (kinds with
    nothing masked left out, except ``whole_word`` and ``word_piece``; ``{}`` when nothing was scored)."""

    key = "kinds"
    names = tuple(f"{kind}_{what}" for kind in KINDS for what in ("top1", "masked"))

    @staticmethod
    def kinds(batch: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase) -> dict[str, torch.Tensor]:
        """BoolTensors[batch, seq_len]: ``whole_word`` (a word that is one piece) and ``word_piece`` (a
        piece of a longer word), and, when the batch carries ``entity_mask``, ``entity`` and ``other_word``."""
        pieces = in_multi_piece_word(_original(batch), tokenizer)
        kinds = {"whole_word": ~pieces, "word_piece": pieces}
        if "entity_mask" in batch:
            kinds["entity"] = batch["entity_mask"].bool()
            kinds["other_word"] = ~batch["entity_mask"].bool()
        return kinds

    def sums(self, batch, tokenizer, target: torch.Tensor, right: torch.Tensor) -> dict[str, int]:
        """Per kind, the top-1 hits and the masked tokens (``target``: BoolTensor[batch, seq_len] of the
        scored positions; ``right``: BoolTensor[n_masked], top-1 right at each, row-major)."""
        sums = {}
        for kind, where in self.kinds(batch, tokenizer).items():
            selected = where[target]
            sums[f"{kind}_top1"], sums[f"{kind}_masked"] = int(right[selected].sum()), int(selected.sum())
        return sums

    def result(self, sums: dict[str, float]) -> dict[str, Any]:
        if not sums["masked"]:
            return {}
        return {
            kind: {"top1": sums[f"{kind}_top1"] / count if count else None, "n_positions": int(count)}
            for kind in sorted(KINDS)
            if (count := sums[f"{kind}_masked"]) or kind in ("whole_word", "word_piece")
        }


class ByWord:
    """Whole-word top-1 under ``"words"``: ``{"top1", "n_words", "one_piece": {"top1", "n_words"},
    "multi_piece": {...}}`` (``top1`` None where no word was scored)."""

    key = "words"
    names = tuple(f"{kind}_{what}" for kind in WORD_KINDS for what in ("right", "words"))

    def sums(self, batch, tokenizer, target: torch.Tensor, right: torch.Tensor) -> dict[str, int]:
        """Words right and words scored, of one piece and of several. Pieces are grouped into words by
        WordPiece's ``##`` marks on the original ids; a word is right when every one of its masked pieces
        is the top-1 prediction. With token masks a word counts the pieces that happen to be hidden."""
        original = _original(batch)
        rows, cols = target.nonzero(as_tuple=True)
        word = rows * target.shape[1] + word_start_index(original, tokenizer)[rows, cols]
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

    def result(self, sums: dict[str, float]) -> dict[str, Any]:
        right, n = (sum(sums[f"{kind}_{what}"] for kind in WORD_KINDS) for what in ("right", "words"))
        result: dict[str, Any] = {"top1": right / n if n else None, "n_words": int(n)}
        for kind in WORD_KINDS:
            r, c = sums[f"{kind}_right"], sums[f"{kind}_words"]
            result[kind] = {"top1": r / c if c else None, "n_words": int(c)}
        return result


BY_KIND, BY_WORD = ByKind(), ByWord()
#: Both breakdowns.
BREAKDOWNS = (BY_KIND, BY_WORD)


def freeze_whole_words(
    rows: Sequence[dict[str, Any]], tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15, seed: int = 0
) -> list[dict[str, list[int]]] | None:
    """The tokenised held-out ``rows`` with words hidden whole (``freeze_masks(..., strategy="whole_word")``,
    seeded), so that before and after score the same words; None for a vocabulary without WordPiece
    ``##`` pieces (no word boundaries to mask by). A run freezes them once and scores them with
    ``evaluate(..., breakdowns=(BY_WORD,))`` (its ``words`` entry)."""
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
    """``evaluation.evaluate`` with :data:`BY_WORD` on :func:`freeze_whole_words` of ``rows`` (frozen on
    every call: a run that scores more than once freezes them once itself); None without ``##`` pieces."""
    frozen = freeze_whole_words(rows, tokenizer, mlm_probability, seed)
    if frozen is None:
        return None
    return evaluate(model, frozen, tokenizer, batch_size, precision=precision, breakdowns=(BY_WORD,))
