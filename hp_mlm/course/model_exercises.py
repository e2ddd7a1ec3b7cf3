"""Exercises that check themselves, on the model's side: the training step, the MLM loss, the
learning-rate schedule (notebook 03), perplexity and top-k accuracy (notebook 04).

As ``exercises`` (notebooks 01-02): each ``check_<name>(your_function)`` compares your function
with the package and the library on small seeded inputs and prints ``correct``, ``not done yet`` or
the first thing that is wrong with a hint. Returns True, False or None. Solutions in
``notebooks/solutions/``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from hp_mlm.course import checking as kit
from hp_mlm.course.checking import call, check_answer, close, require, verdict
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.training import build_scheduler


# --- notebook 03 -------------------------------------------------------------------------------
def check_accumulation_step(step: Callable) -> bool | None:
    """Exercise 3.1: ``step(model, batches, optimizer, scheduler, max_grad_norm) -> loss (float)``: one
    optimiser step over an accumulation window of batches, the loss per hidden token of the window.

    Two windows of two batches with different numbers of hidden tokens, on a tiny BERT (no dropout,
    SGD, a decaying rate, clipping at 0.1), against the reference: each batch's loss times its share of
    the window's hidden tokens, backward on each, then clip, step, schedule, zero_grad once (the step
    that one batch of all the window's rows would make: ``training.training_step``).
    """

    def run() -> str:
        base, windows = kit.tiny_model(kit.check_tokenizer()), kit.masked_windows()
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = build_scheduler(optimizer, 4, 0.0, "linear")
        losses = [call(step, model, window, optimizer, scheduler, 0.1) for window in windows]
        require(
            all(isinstance(loss, float) for loss in losses),
            "return a float (loss.item() of each batch, added up): a tensor would keep the batches' graphs alive",
        )
        right_losses, right_lr, right = kit.reference_steps(copy.deepcopy(base), windows, 0.1)

        def same(other) -> bool:
            return all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), other.parameters()))

        require(not same(base), kit.TRAIN_STEP_MISTAKES["zero_grad_before_step"])  # nothing learnt at all
        if not same(right) or not close(scheduler.get_last_lr()[0], right_lr):
            for mistake, hint in kit.TRAIN_STEP_MISTAKES.items():
                _, lr, wrong = kit.reference_steps(copy.deepcopy(base), windows, 0.1, skip=mistake)
                require(not (same(wrong) and close(scheduler.get_last_lr()[0], lr)), hint)
            require(
                same(right),
                "after 2 windows your weights differ from the reference's: for each batch, model(**batch).loss "
                "times its share of the window's hidden tokens, backward(); then clip, step, schedule, zero_grad",
            )
            require(False, kit.TRAIN_STEP_MISTAKES["schedule"])
        require(
            all(close(a, b) for a, b in zip(losses, right_losses)),
            f"return the window's loss per hidden token (the reference's first is {right_losses[0]:.4f}, "
            f"yours {losses[0]:.4f}): each batch's loss times its share of the window's hidden tokens, added up "
            "(with clipping, a step from unscaled losses can still look right: the loss shows it)",
        )
        hidden = [[int((b["labels"] != IGNORE_INDEX).sum()) for b in w] for w in windows]
        return (
            f"2 windows of batches with {hidden} hidden tokens: weights, learning rate and losses equal the reference's"
        )

    return verdict("3.1", run)


def check_masked_lm_loss(loss_fn: Callable) -> bool | None:
    """Exercise 3.2: ``loss_fn(logits, labels) -> scalar``: mean cross-entropy over the labelled positions.

    ``logits``: FloatTensor[batch, seq_len, vocab]; ``labels``: LongTensor[batch, seq_len], -100 off
    the hidden tokens. Compared with the model's own loss (``BertForMaskedLM(..., labels=...).loss``).
    """

    def run() -> str:
        model, batch = kit.tiny_model(kit.check_tokenizer()).eval(), kit.masked_batches(1)[0]
        labels = batch["labels"]
        labels[0, :] = IGNORE_INDEX
        labels[0, 1] = batch["input_ids"][0, 1]  # row 0: one hidden token, so a mean of row means differs
        with torch.no_grad():
            output = model(**batch)
        logits, right = output.logits, output.loss.item()
        answer = call(loss_fn, logits, labels)
        require(
            isinstance(answer, torch.Tensor) and answer.dim() == 0, "return a scalar tensor (so that .backward() works)"
        )
        got = answer.item()
        for value, hint in kit.loss_mistakes(logits, labels):
            require(not close(got, value), hint)
        require(close(got, right), f"the model's own loss on this batch is {right:.4f}; yours is {got:.4f}")
        return f"a batch of 8 rows, {int((labels != IGNORE_INDEX).sum())} hidden tokens, against the model's own loss ({right:.4f})"

    return verdict("3.2", run)


def check_learning_rate(rate: Callable) -> bool | None:
    """Exercise 3.3: ``rate(step, total_steps, peak, warmup_steps) -> learning rate`` at optimiser step
    ``step`` (1 = the first): linear warmup reaching the peak at step ``warmup_steps``, then linear decay
    reaching 0 at step ``total_steps + 1``, one after the last, as ``build_scheduler`` (no step at rate 0)."""

    def run() -> str:
        for total, peak, warmup in ((20, 1e-3, 4), (10, 2e-3, 0)):
            right = kit.scheduled_rates(total, peak, warmup)
            got = [float(call(rate, s, total, peak, warmup)) for s in range(1, total + 1)]
            require(
                not close(got[0], 0.0),
                "step 1 is the first step and should move the weights: counted from 1, the warmup gives it "
                "peak / warmup_steps, not 0 (step 0 would be a step before the run)",
            )
            require(
                not warmup or got[0] <= 2 * right[0] * (1 + 1e-6),
                "the rate should rise from near 0 over the warmup steps (step 1: peak / warmup_steps), not start "
                "near the peak",
            )
            require(
                not all(close(g, r) for g, r in zip(got, right[1:])),
                "you are one step ahead: step 1 is the first step, at peak / warmup_steps",
            )
            require(
                not close(got[-1], 0.0),
                f"the last step (step {total}) should not run at rate 0 either: the decay reaches 0 at step "
                "total_steps + 1, one after the last",
            )
            wrong = next((s for s, (g, r) in enumerate(zip(got, right)) if not close(g, r)), None)
            at = 0 if wrong is None else wrong
            require(
                wrong is None or wrong + 1 >= warmup,
                "during the warmup the rate at step s is peak * s / warmup_steps "
                f"(step {at + 1}: {right[at]:g}); yours: {got[at]:g}",
            )
            require(
                wrong is None,
                f"after the warmup, decay linearly from the peak at step warmup_steps to 0 at step total_steps + 1: "
                f"at step {at + 1} of {total} (warmup {warmup}) the rate is {right[at]:g}; yours: {got[at]:g}",
            )
        return "20 steps (warmup 4) and 10 steps (no warmup) against build_scheduler (transformers' linear schedule)"

    return verdict("3.3", run)


# --- notebook 04 -------------------------------------------------------------------------------
def check_perplexity(perplexity: Callable) -> bool | None:
    """Exercise 4.1: ``perplexity(batches) -> exp(mean cross-entropy over every hidden token)``;
    ``batches``: a list of ``(logits FloatTensor[b, s, V], labels LongTensor[b, s])``, as ``evaluate``."""

    def run() -> str:
        batches = kit.scored_batches()
        logits, gold = kit.per_token(batches)
        right = math.exp(torch.nn.functional.cross_entropy(logits, gold).item())
        got = float(call(perplexity, batches))
        ce = [
            torch.nn.functional.cross_entropy(lo[la != IGNORE_INDEX], la[la != IGNORE_INDEX]).item()
            for lo, la in batches
        ]
        require(not close(got, math.log(right)), "that is the cross-entropy: perplexity is exp(cross-entropy)")
        require(
            not close(got, sum(math.exp(c) for c in ce) / len(ce)),
            "exp of the mean over all hidden tokens, not a mean of per-batch perplexities",
        )
        require(
            not close(got, math.exp(sum(ce) / len(ce))),
            "weigh each batch by its number of hidden tokens: a batch of 1 token counts as much as one of 40 here",
        )
        require(not close(got, 2 ** math.log(right)), "cross-entropy is in nats: use exp, not 2 **")
        require(close(got, right), f"the perplexity of these batches is {right:.3f}; yours is {got:.3f}")
        return f"3 batches of 1, 7 and 40 hidden tokens (perplexity {right:.3f}), as evaluation.evaluate computes it"

    return verdict("4.1", run)


def check_top_k_accuracy(accuracy: Callable) -> bool | None:
    """Exercise 4.2: ``accuracy(batches, k) -> fraction in [0, 1]`` of hidden tokens among the ``k`` best guesses."""

    def run() -> str:
        batches = kit.scored_batches()
        logits, gold = kit.per_token(batches)
        right = {k: (logits.topk(k, -1).indices == gold[:, None]).any(-1).float().mean().item() for k in (1, 5)}
        got = {k: float(call(accuracy, batches, k)) for k in (1, 5)}
        per_batch = []
        for lo, la in batches:
            t = la != IGNORE_INDEX
            per_batch.append((lo[t].topk(5, -1).indices == la[t][:, None]).any(-1).float().mean().item())
        everywhere = sum((lo.topk(5, -1).indices == la[..., None]).any(-1).sum().item() for lo, la in batches) / 240
        require(not close(got[5], 100 * right[5]), "give a fraction in [0, 1], not a percentage")
        require(
            not close(got[5], sum(per_batch) / 3),
            "count hits over all hidden tokens, then divide: a mean of "
            "per-batch accuracies weighs a batch of 1 token like a batch of 40",
        )
        require(not close(got[5], everywhere), "score only the hidden tokens (labels != -100)")
        require(
            not close(got[5], right[1]) or close(right[1], right[5]),
            "a hidden token counts when it is among the k best guesses (logits.topk(k)), not only the best",
        )
        require(
            all(close(got[k], right[k]) for k in (1, 5)),
            f"top-1 and top-5 here are {right[1]:.4f} and {right[5]:.4f}; yours {got[1]:.4f} and {got[5]:.4f}",
        )
        return f"top-1 and top-5 over 48 hidden tokens in 3 batches ({right[1]:.3f}, {right[5]:.3f}), per token as evaluate"

    return verdict("4.2", run)


#: The checks notebooks 03-04 import (``check_answer`` comes from ``checking``).
__all__ = [
    "check_answer",
    "check_learning_rate",
    "check_masked_lm_loss",
    "check_perplexity",
    "check_top_k_accuracy",
    "check_accumulation_step",
]
