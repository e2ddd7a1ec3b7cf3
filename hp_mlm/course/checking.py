"""What the self-checking exercises stand on: running a learner's function, verdicts, small seeded inputs.

``hp_mlm.course.exercises`` holds the checks; this module runs a learner's function (an untouched stub is
"not done yet", an exception is reported, not raised), prints the verdict, and builds the inputs:
a tokenizer whose special tokens have unusual ids, rows of token ids, a tiny BERT without dropout.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from transformers import BertForMaskedLM, BertTokenizerFast

from hp_mlm.masking import IGNORE_INDEX, mask_tokens, selectable_positions
from hp_mlm.models import build_smoke_model, smoke_vocab_path
from hp_mlm.tokens import pad_batch
from hp_mlm.training import build_scheduler


class NotDone(Exception):
    """The learner's function is still the stub."""


class Wrong(Exception):
    """The first thing that is wrong, with its hint."""


def call(function: Callable, *args: Any) -> Any:
    """``function(*args)``; an untouched stub (NotImplementedError, or nothing returned) is "not done"."""
    try:
        result = function(*args)
    except NotImplementedError:
        raise NotDone from None
    except Exception as error:  # noqa: BLE001 - a learner's bug is reported, not raised
        raise Wrong(f"your function raised {type(error).__name__}: {error}") from None
    if result is None or result is Ellipsis:
        raise NotDone
    return result


def verdict(exercise: str, run: Callable[[], str]) -> bool | None:
    """Run one exercise's comparisons and print the verdict (see the module docstring)."""
    try:
        checked = run()
    except NotDone:
        print(f"Exercise {exercise}: not done yet (write your code in place of the `...`, then run the check again)")
        return None
    except Wrong as wrong:
        print(f"Exercise {exercise}: not yet right. {wrong}")
        return False
    print(f"Exercise {exercise}: correct. Checked: {checked}.")
    return True


def require(condition: bool, hint: str) -> None:
    if not condition:
        raise Wrong(hint)


@functools.lru_cache(maxsize=1)
def check_tokenizer() -> BertTokenizerFast:
    """The smoke vocabulary with its five special tokens moved to the end (ids 1195-1199, none 0 or 103)."""
    tokens = [t for t in smoke_vocab_path().read_text(encoding="utf-8").split("\n") if t]
    specials = [t for t in tokens if t.startswith("[") and t.endswith("]")]
    order = [t for t in tokens if t not in specials] + specials
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(order)}, do_lower_case=True)


def token_rows(n: int = 40, seed: int = 0) -> list[list[int]]:
    """``n`` rows of 3-30 ordinary token ids framed by ``[CLS]``/``[SEP]``, seeded."""
    tok, g = check_tokenizer(), torch.Generator().manual_seed(seed)
    ordinary = len(tok) - 5
    lengths = torch.randint(3, 31, (n,), generator=g).tolist()
    return [[tok.cls_token_id, *torch.randint(ordinary, (k,), generator=g).tolist(), tok.sep_token_id] for k in lengths]


def padded(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    rows = [
        {"input_ids": r, "attention_mask": [1] * len(r), "special_tokens_mask": [1] + [0] * (len(r) - 2) + [1]}
        for r in rows
    ]
    return pad_batch(rows, check_tokenizer())


def close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-5, abs_tol=1e-7)


def tiny_model(tok: BertTokenizerFast) -> BertForMaskedLM:
    """The smoke BERT without dropout (so two runs of a step give the same weights), seeded, in train mode."""
    return build_smoke_model(tok, seed=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train()


def masked_batches(n: int = 3) -> list[dict[str, torch.Tensor]]:
    tok, out = check_tokenizer(), []
    for b in range(n):
        batch = padded(token_rows(8, seed=10 + b))
        selectable = selectable_positions(
            batch["input_ids"], tok, batch["special_tokens_mask"], batch["attention_mask"]
        )
        masked, labels = mask_tokens(batch["input_ids"], selectable, tok, 0.3, torch.Generator().manual_seed(b))
        out.append({"input_ids": masked, "attention_mask": batch["attention_mask"], "labels": labels})
    return out


def scored_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three (logits, labels) batches with 1, 7 and 40 hidden tokens: per-batch averages differ from per-token ones."""
    g, out = torch.Generator().manual_seed(4), []
    for hidden in (1, 7, 40):
        labels = torch.full((4, 20), IGNORE_INDEX)
        labels.view(-1)[torch.randperm(80, generator=g)[:hidden]] = torch.randint(50, (hidden,), generator=g)
        logits = torch.randn(4, 20, 50, generator=g) * 3
        flat, gold = logits.view(-1, 50), labels.view(-1)
        hidden_at = (gold != IGNORE_INDEX).nonzero().view(-1)
        helped = hidden_at[torch.rand(len(hidden_at), generator=g) < 0.5]
        flat[helped, gold[helped]] += 6.0  # the right token is often among the best guesses
        out.append((logits, labels))
    return out


def per_token(batches) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.cat([lo[la != IGNORE_INDEX] for lo, la in batches])
    return logits, torch.cat([la[la != IGNORE_INDEX] for _, la in batches])


def masked_windows() -> list[list[dict[str, torch.Tensor]]]:
    """Two accumulation windows of two masked batches each (batches with different numbers of hidden tokens)."""
    batches = masked_batches(4)
    return [batches[:2], batches[2:]]


def reference_steps(model, windows, max_grad_norm: float, skip: str = "") -> tuple[list[float], float, Any]:
    """Run the reference inner loop with gradient accumulation on ``model``: one optimiser step per window
    of batches, each batch's loss weighted by its share of the window's hidden tokens. ``skip`` leaves one
    part out or gets it wrong (a key of ``TRAIN_STEP_MISTAKES``). Returns (each window's loss per hidden
    token, the last learning rate, the model)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = build_scheduler(optimizer, 4, 0.0, "linear")
    losses = []
    for window in windows:
        hidden = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in window)
        total = 0.0
        for batch in window:
            n = int((batch["labels"] != IGNORE_INDEX).sum())
            share = 1 / len(window) if skip == "mean_of_means" else n / hidden
            loss = model(**batch).loss * share  # the batch's mean over its hidden tokens, times its share
            loss.backward()
            total += loss.item()
            if skip == "step_per_batch":
                optimizer.step()
                optimizer.zero_grad()
        if skip == "zero_grad_before_step":
            optimizer.zero_grad()
        if skip != "clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        if skip != "schedule":
            scheduler.step()
        if skip != "zero_grad":
            optimizer.zero_grad()
        losses.append(total)
    return losses, scheduler.get_last_lr()[0], model


TRAIN_STEP_MISTAKES = {
    "zero_grad": "the gradients add up from step to step: call optimizer.zero_grad() after each step "
    "(forgetting it is a classic loop bug)",
    "zero_grad_before_step": "your weights did not change: each step needs loss.backward(), then optimizer.step(), "
    "and zero_grad() only after the step (or before backward)",
    "clip": "clip the gradient norm (torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)) "
    "after backward() and before optimizer.step()",
    "schedule": "advance the learning rate with scheduler.step() after every optimizer.step()",
    "mean_of_means": "weigh each batch by its share of the window's hidden tokens: multiply its loss by (its hidden "
    "tokens) / (the window's); equal weights (the losses added up, or each divided by the number of batches) let a "
    "batch with few hidden tokens count as much as a full one",
    "step_per_batch": "one optimiser step per window: backward() on every batch, then clip, optimizer.step(), "
    "scheduler.step() and zero_grad() once, after the window's last batch",
}


def check_value(exercise: str, value: Any, right: float, hint: str, rel_tol: float = 1e-3) -> bool | None:
    """A computed answer: ``value`` against ``right`` (computed by the package or the notebook) within
    ``rel_tol``; ``...`` or None is "not done yet". Prints the verdict; returns True, False or None."""

    def run() -> str:
        if value is None or value is Ellipsis:
            raise NotDone
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise Wrong(f"give a number, not {type(value).__name__}") from None
        require(math.isclose(number, right, rel_tol=rel_tol, abs_tol=1e-9), f"{hint} (your answer: {number:g})")
        return f"{number:g} equals {right:g}"

    return verdict(exercise, run)


#: Computed answers: exercise -> (the right value from what the notebook gives, the hint for a wrong one).
ANSWERS: dict[str, Callable[..., tuple[float, str]]] = {
    "0.2": lambda vocab_size: (
        math.log(vocab_size),
        "a uniform guess gives each token 1 / vocabulary size; the loss is -ln(the right token's probability), in nats",
    ),
    "2.3": lambda mlm_probability: (
        math.ceil(math.log(0.05) / math.log(1 - mlm_probability)),
        "a token escapes n epochs with probability (1 - p)^n: find the first whole n with 1 - (1 - p)^n >= 0.95",
    ),
}


def two_pieces_answers(p: float) -> list[tuple[str, float, str, list[tuple[float, str]]]]:
    """Exercise 2.2's two parts, at ``mlm_probability`` ``p``: (part, right value, hint, known wrong values
    each with its own hint)."""
    percent = "that is a percentage: give a fraction in [0, 1]"
    return [
        (
            "token masking",
            p**3,
            "each of the three pieces is drawn on its own with probability mlm_probability: the exact chance "
            "that all three are drawn (a measurement over draws is only near it)",
            [
                (100 * p**3, percent),
                (
                    3 * p,
                    "adding the three chances gives the chance of at least one (roughly), not of all three: "
                    "independent draws that must all happen multiply",
                ),
                (p, "that is one piece's chance: with token masking each piece is drawn on its own"),
                (p**2, "three pieces, three draws: the power is 3"),
            ],
        ),
        (
            "whole-word masking",
            p,
            "whole-word masking draws once per word, and a drawn word has every piece hidden",
            [
                (100 * p, percent),
                (p**3, "that is token masking's chance: whole-word masking draws once per word, not once per piece"),
                (3 * p, "whole-word masking draws once per word, not once per piece: nothing to add up"),
            ],
        ),
    ]


def check_parts(exercise: str, value: Any, parts: list[tuple[str, float, str, list[tuple[float, str]]]]) -> bool | None:
    """An answer of several numbers (a tuple, one per part): each part against its right value, a known wrong
    value getting its own hint. ``...`` (the whole answer or a part) is "not done yet"."""

    def run() -> str:
        if value is None or value is Ellipsis:
            raise NotDone
        names = ", ".join(name for name, *_ in parts)
        require(isinstance(value, (tuple, list)) and len(value) == len(parts), f"give {len(parts)} numbers: ({names})")
        if any(v is None or v is Ellipsis for v in value):
            raise NotDone
        for given, (name, right, hint, wrongs) in zip(value, parts):
            try:
                number = float(given)
            except (TypeError, ValueError):
                raise Wrong(f"{name}: give a number, not {type(given).__name__}") from None
            if math.isclose(number, right, rel_tol=0.02, abs_tol=1e-9):
                continue
            for wrong, why in wrongs:
                require(
                    not math.isclose(number, wrong, rel_tol=0.02, abs_tol=1e-9),
                    f"{name}: {why} (your answer: {number:g})",
                )
            require(False, f"{name}: {hint} (your answer: {number:g})")
        return "; ".join(f"{name}: {float(v):g}" for v, (name, *_) in zip(value, parts))

    return verdict(exercise, run)


#: Answers of several parts: exercise -> the parts from what the notebook gives.
PARTS: dict[str, Callable[..., list]] = {"2.2": lambda mlm_probability: two_pieces_answers(mlm_probability)}


def check_answer(exercise: str, value: Any, **given: Any) -> bool | None:
    """A computed answer of ``exercise`` (see ``ANSWERS`` and ``PARTS``), from the values the notebook
    ``given``s (e.g. ``vocab_size=len(tokenizer)``), so that the notebook's cell does not show the answer."""
    if exercise in PARTS:
        return check_parts(exercise, value, PARTS[exercise](**given))
    right, hint = ANSWERS[exercise](**given)
    return check_value(exercise, value, right, hint)


def scheduled_rates(total: int, peak: float, warmup: int) -> list[float]:
    """The rate each of ``total`` optimiser steps of ``build_scheduler``'s linear schedule runs at (steps 1 to
    ``total``), read from the optimiser before each step."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    scheduler = build_scheduler(optimizer, total, warmup / total, "linear")
    rates = []
    for _ in range(total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def loss_mistakes(logits: torch.Tensor, labels: torch.Tensor) -> list[tuple[float, str]]:
    """What known-wrong MLM losses give on ``logits`` [batch, seq_len, vocab] and ``labels``, each with its hint."""
    ce = torch.nn.functional.cross_entropy
    each = ce(logits.transpose(1, 2), labels, reduction="none")
    target = labels != IGNORE_INDEX
    right = ce(logits[target], labels[target]).item()
    row_means = torch.stack([each[i][target[i]].mean() for i in range(len(labels)) if target[i].any()]).mean().item()
    return [
        (each.sum().item(), "average over the hidden tokens, not the sum"),
        (
            (each.sum() / labels.numel()).item(),
            "divide by the number of hidden tokens (labels != -100), not by every position",
        ),
        (
            row_means,
            "average over all hidden tokens together: a mean of per-row means weighs a row with 1 hidden "
            "token like a row with 20",
        ),
        (
            torch.nn.functional.nll_loss(logits.transpose(1, 2), labels).item(),
            "cross_entropy takes raw logits (it applies log-softmax itself); nll_loss on logits is not a cross-entropy",
        ),
        (
            ce(logits.softmax(-1)[target], labels[target]).item(),
            "pass the raw logits: cross_entropy applies log-softmax itself, so a softmax before it squashes the loss",
        ),
        (right / math.log(2), "the loss is in nats (natural log), as the model's own; do not convert it to bits"),
        (
            ce(logits.transpose(1, 2), labels.clamp(min=0)).item(),
            "skip the positions labelled -100 (cross_entropy's ignore_index), do not turn them into a token",
        ),
    ]
