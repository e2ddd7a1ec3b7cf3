"""Exercises that check themselves: your function against the package (and the library) on small inputs.

Each ``check_<name>(your_function)`` runs the comparisons the test suite makes for that step, on
seeded inputs built from the smoke vocabulary (no network, a second or less), and prints one line:
``correct`` with what was checked, ``not done yet`` for an untouched stub (a body of ``...`` or
``raise NotImplementedError``), or the first thing that is wrong with a hint. The hints name the
mistakes the original tutorial made. Returns True (correct), False (wrong) or None (not done).

The checks' tokenizer has unusual special ids (``[PAD]`` is not 0), so written ids are caught.
Taught in notebooks 01-02 (the exercises at their ends; notebooks 03-04's are in
``model_exercises``); solutions in ``notebooks/solutions/``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DataCollatorForLanguageModeling

from hp_mlm.course import checking as kit
from hp_mlm.course.checking import call, check_answer, close, require, verdict
from hp_mlm.masking import IGNORE_INDEX, mask_tokens, selectable_positions
from hp_mlm.tokens import padding_share

NAMES = (
    "Thornwick",
    "Ashdown",
    "Mira",
    "wand",
    "Hogwarts",
    "Dumbledore",
)  # exercise 1.1: the course's and the books' names


# --- notebook 01 -------------------------------------------------------------------------------
def check_word_pieces(count_pieces: Callable) -> bool | None:
    """Exercise 1.1: ``count_pieces(words, tokenizer) -> {word: number of word pieces}``."""

    def run() -> str:
        tok = kit.check_tokenizer()
        answer = call(count_pieces, list(NAMES), tok)
        require(
            isinstance(answer, dict) and set(answer) == set(NAMES),
            "return a dict with one entry per word you were given, e.g. {'Hogwarts': 3}",
        )
        for word in NAMES:
            pieces = tok.tokenize(word)
            got = answer[word]
            require(
                got != len(pieces) + 2,
                "tokenizer(word) adds [CLS] and [SEP]: count tokenizer.tokenize(word), "
                "or pass add_special_tokens=False",
            )
            require(
                got != sum(p.startswith("##") for p in pieces) or got == len(pieces),
                "the first piece of a word has no '##': count every piece",
            )
            require(got != len(word) or got == len(pieces), "count the tokenizer's pieces, not the letters")
            require(got == len(pieces), f"{word!r} is {pieces} ({len(pieces)} pieces); your function says {got}")
        return f"the pieces of {len(NAMES)} words against tokenizer.tokenize"

    return verdict("1.1", run)


def check_padding_share(share: Callable) -> bool | None:
    """Exercise 1.2: ``share(batches, lengths) -> fraction in [0, 1] of positions that are padding``
    when each batch is padded to its own longest row (compared with ``tokens.padding_share``)."""

    def run() -> str:
        lengths = [3, 5, 5, 10, 2, 2, 2, 30, 4, 6]
        batches = [[0, 1], [2, 3], [4, 5, 6, 8, 9], [7]]
        got, right = float(call(share, batches, lengths)), padding_share(batches, lengths)
        real = sum(lengths)
        pad = real * right / (1 - right)
        per_batch = [padding_share([b], lengths) for b in batches]
        require(
            not close(got, pad / real),
            "divide the padding by all positions (real tokens + padding), not by the real tokens",
        )
        require(
            not close(got, sum(per_batch) / len(batches)),
            "add up the padding of all batches before you divide: "
            "a mean of per-batch shares weighs a batch of 1 row like a batch of 5",
        )
        require(
            not close(got, padding_share(batches, lengths, max(lengths))),
            "pad each batch to its own longest row, not to the longest row of the dataset",
        )
        require(not close(got, 100 * right), "give a fraction in [0, 1], not a percentage")
        require(not close(got, 1 - right), "that is the share of real tokens; the question is the share of padding")
        require(close(got, right), f"the padding share of this plan is {right:.4f}; yours says {got:.4f}")
        return "a plan of 4 batches of 1-5 rows against tokens.padding_share"

    return verdict("1.2", run)


def check_pad_batch(pad: Callable) -> bool | None:
    """Exercise 1.3: ``pad(rows_ids, tokenizer) -> (input_ids, attention_mask)``, LongTensor[rows, longest row]."""

    def run() -> str:
        tok, rows = kit.check_tokenizer(), kit.token_rows(6)
        right = kit.padded(rows)
        answer = call(pad, rows, tok)
        require(isinstance(answer, tuple) and len(answer) == 2, "return two tensors: (input_ids, attention_mask)")
        ids, mask = (torch.as_tensor(a) for a in answer)
        require(
            ids.shape[1] != 512 and ids.shape[1] <= right["input_ids"].shape[1],
            "pad to the longest row of this batch, not to a fixed width",
        )
        require(
            ids.shape == right["input_ids"].shape,
            f"the batch should be {tuple(right['input_ids'].shape)} (rows, longest row); yours is {tuple(ids.shape)}",
        )
        filler = right["attention_mask"] == 0
        require(
            not (ids[filler] == 0).all() or tok.pad_token_id == 0,
            f"ask tokenizer.pad_token_id for the pad id: with this tokenizer it is {tok.pad_token_id}, not 0",
        )
        width = ids.shape[1]
        left = all(ids[i, width - len(r) :].tolist() == r for i, r in enumerate(rows))
        require(
            not left or torch.equal(ids, right["input_ids"]),
            "BERT pads on the right: put the pad ids after the row's tokens",
        )
        require(torch.equal(ids, right["input_ids"]), "input_ids: each row's own ids, then the pad id up to the width")
        require(not bool(mask.all()), "attention_mask must be 0 at the padding, so that the model ignores it")
        require(torch.equal(mask, right["attention_mask"]), "attention_mask: 1 at each real token, 0 at the padding")
        return "6 rows of different lengths against tokens.pad_batch (tokenizer.pad)"

    return verdict("1.3", run)


# --- notebook 02 -------------------------------------------------------------------------------
def check_mask_tokens(mask: Callable) -> bool | None:
    """Exercise 2.1: ``mask(input_ids, selectable, tokenizer, mlm_probability, generator) -> (masked, labels)``.

    Compared with ``masking.mask_tokens`` and with the rate of ``DataCollatorForLanguageModeling``
    (all chosen tokens to the mask token) over 200 rows: labels -100 off the chosen positions, only
    selectable positions chosen, the tokenizer's mask id, about ``mlm_probability`` chosen, seeded.
    """

    def run() -> str:
        tok = kit.check_tokenizer()
        batch = kit.padded(kit.token_rows(200, seed=1))
        ids = batch["input_ids"]
        original = ids.clone()
        selectable = selectable_positions(ids, tok, batch["special_tokens_mask"], batch["attention_mask"])
        answer = call(mask, ids, selectable, tok, 0.15, torch.Generator().manual_seed(0))
        require(
            isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(a, torch.Tensor) for a in answer),
            "return two tensors: (masked_input_ids, labels)",
        )
        require(torch.equal(ids, original), "you changed input_ids in place: work on a copy (input_ids.clone())")
        masked, labels = answer
        _check_labels(masked, labels, ids, selectable, tok)
        rate = _check_draws(mask, labels, ids, selectable, tok)
        package = mask_tokens(ids, selectable, tok, 0.15, torch.Generator().manual_seed(0))[1] != IGNORE_INDEX
        library = DataCollatorForLanguageModeling(
            tok, mlm_probability=0.15, mask_replace_prob=1.0, random_replace_prob=0.0, seed=0
        )([{"input_ids": r} for r in kit.token_rows(200, seed=1)])["labels"]
        library_rate = ((library != IGNORE_INDEX).sum() / selectable.sum()).item()
        return (
            f"labels, special tokens, the mask id and seeding over {int(selectable.sum())} tokens; you chose {rate:.1%}, "
            f"mask_tokens {package.float().sum().item() / selectable.sum().item():.1%}, "
            f"DataCollatorForLanguageModeling {library_rate:.1%}"
        )

    return verdict("2.1", run)


def _check_labels(masked, labels, ids, selectable, tok) -> None:
    """Exercise 2.1's checks of one answer: shapes, dtype, -100 off the chosen positions, only
    selectable positions chosen, the tokenizer's mask id there and nothing else changed."""
    require(masked.shape == labels.shape == ids.shape, "masked input and labels have the shape of input_ids")
    require(labels.dtype == torch.long, "labels hold token ids: a LongTensor, as input_ids (cross_entropy needs it)")
    require(not (masked == IGNORE_INDEX).any(), "return (masked_input_ids, labels) in this order")
    require(
        not (labels[selectable] == ids[selectable]).all(),
        "labels are a copy of input_ids (the original tutorial's mistake): "
        "keep the original id only at the chosen positions and -100 everywhere else",
    )
    hidden = masked != ids
    require(
        bool((labels[~hidden & selectable] == IGNORE_INDEX).float().mean() > 0.5),
        "every position that was not chosen gets the label -100 (cross_entropy's ignore_index); "
        f"yours has {labels[~hidden & selectable].mode().values.item()} there",
    )
    chosen = labels != IGNORE_INDEX
    require(not (chosen & ~selectable).any(), "you chose [CLS], [SEP] or padding: choose only where selectable is True")
    written = masked[chosen].unique()
    require(
        not (len(written) == 1 and written.item() != tok.mask_token_id),
        "do not write the mask id "
        f"(bert-base-uncased's is 103): ask tokenizer.mask_token_id (here it is {tok.mask_token_id})",
    )
    require(bool((masked[chosen] == tok.mask_token_id).all()), "put tokenizer.mask_token_id at every chosen position")
    require(torch.equal(masked[~chosen], ids[~chosen]), "leave every position that was not chosen as it was")
    require(torch.equal(labels[chosen], ids[chosen]), "a chosen position's label is its original id")


def _check_draws(mask: Callable, labels, ids, selectable, tok) -> float:
    """Exercise 2.1's checks of the draw: about ``mlm_probability`` chosen, the probability given
    used, the generator given used. Returns the share chosen at 0.15."""
    rate = ((labels != IGNORE_INDEX).sum() / selectable.sum()).item()
    require(
        abs(rate - 0.15) < 0.015,
        f"about mlm_probability (15%) of the selectable tokens should be chosen; you chose {rate:.1%}",
    )
    higher = (call(mask, ids, selectable, tok, 0.3, torch.Generator().manual_seed(0))[1] != IGNORE_INDEX).sum()
    require(abs((higher / selectable.sum()).item() - 0.3) < 0.02, "use the mlm_probability you are given, not 0.15")
    again = call(mask, ids, selectable, tok, 0.15, torch.Generator().manual_seed(0))[1]
    other = call(mask, ids, selectable, tok, 0.15, torch.Generator().manual_seed(1))[1]
    require(
        torch.equal(again, labels) and not torch.equal(other, labels),
        "draw from the generator you are given (torch.bernoulli(..., generator=generator)): "
        "the same seed must give the same masks, another seed other masks",
    )
    return rate


#: The checks notebooks 01-02 import (``check_answer``, for computed answers, comes from ``checking``;
#: notebooks 03-04 import theirs from ``model_exercises``).
__all__ = ["check_answer", "check_mask_tokens", "check_pad_batch", "check_padding_share", "check_word_pieces"]
