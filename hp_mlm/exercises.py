"""Exercises that check themselves: your function against the package (and the library) on small inputs.

Each ``check_<name>(your_function)`` runs the comparisons the test suite makes for that step, on
seeded inputs built from the smoke vocabulary (no network, a second or less), and prints one line:
``correct`` with what was checked, ``not done yet`` for an untouched stub (a body of ``...`` or
``raise NotImplementedError``), or the first thing that is wrong with a hint. The hints name the
mistakes the original tutorial made. Returns True (correct), False (wrong) or None (not done).

The checks' tokenizer has unusual special ids (``[PAD]`` is not 0), so written ids are caught.
Taught in notebooks 01-04 (the exercises at their ends); solutions in ``notebooks/solutions/``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from transformers import DataCollatorForLanguageModeling

from . import checking as kit
from .checking import call, check_answer, close, require, verdict
from .masking import IGNORE_INDEX, mask_tokens, selectable_positions
from .tokens import padding_share
from .training import build_scheduler

NAMES = ("Thornwick", "Ashdown", "Mira", "wand", "Hogwarts", "Dumbledore")  # exercise 1.1: the course's and the books' names


# --- notebook 01 -------------------------------------------------------------------------------
def check_word_pieces(count_pieces: Callable) -> bool | None:
    """Exercise 1.1: ``count_pieces(words, tokenizer) -> {word: number of word pieces}``."""

    def run() -> str:
        tok = kit.check_tokenizer()
        answer = call(count_pieces, list(NAMES), tok)
        require(isinstance(answer, dict) and set(answer) == set(NAMES),
                 "return a dict with one entry per word you were given, e.g. {'Hogwarts': 3}")
        for word in NAMES:
            pieces = tok.tokenize(word)
            got = answer[word]
            require(got != len(pieces) + 2, "tokenizer(word) adds [CLS] and [SEP]: count tokenizer.tokenize(word), "
                     "or pass add_special_tokens=False")
            require(got != sum(p.startswith("##") for p in pieces) or got == len(pieces),
                     "the first piece of a word has no '##': count every piece")
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
        require(not close(got, pad / real), "divide the padding by all positions (real tokens + padding), "
                 "not by the real tokens")
        require(not close(got, sum(per_batch) / len(batches)), "add up the padding of all batches before you divide: "
                 "a mean of per-batch shares weighs a batch of 1 row like a batch of 5")
        require(not close(got, padding_share(batches, lengths, max(lengths))),
                 "pad each batch to its own longest row, not to the longest row of the dataset")
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
        require(ids.shape[1] != 512 and ids.shape[1] <= right["input_ids"].shape[1],
                 "pad to the longest row of this batch, not to a fixed width")
        require(ids.shape == right["input_ids"].shape, f"the batch should be {tuple(right['input_ids'].shape)} "
                 f"(rows, longest row); yours is {tuple(ids.shape)}")
        filler = right["attention_mask"] == 0
        require(not (ids[filler] == 0).all() or tok.pad_token_id == 0,
                 f"ask tokenizer.pad_token_id for the pad id: with this tokenizer it is {tok.pad_token_id}, not 0")
        width = ids.shape[1]
        left = all(ids[i, width - len(r):].tolist() == r for i, r in enumerate(rows))
        require(not left or torch.equal(ids, right["input_ids"]), "BERT pads on the right: put the pad ids after the row's tokens")
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
        require(isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(a, torch.Tensor) for a in answer),
                "return two tensors: (masked_input_ids, labels)")
        masked, labels = answer
        require(torch.equal(ids, original), "you changed input_ids in place: work on a copy (input_ids.clone())")
        require(masked.shape == labels.shape == ids.shape, "masked input and labels have the shape of input_ids")
        require(labels.dtype == torch.long, "labels hold token ids: a LongTensor, as input_ids (cross_entropy needs it)")
        require(not (masked == IGNORE_INDEX).any(), "return (masked_input_ids, labels) in this order")
        require(not (labels[selectable] == ids[selectable]).all(), "labels are a copy of input_ids (the original tutorial's mistake): "
                "keep the original id only at the chosen positions and -100 everywhere else")
        hidden = masked != ids
        require(bool((labels[~hidden & selectable] == IGNORE_INDEX).float().mean() > 0.5),
                "every position that was not chosen gets the label -100 (cross_entropy's ignore_index); "
                f"yours has {labels[~hidden & selectable].mode().values.item()} there")
        chosen = labels != IGNORE_INDEX
        require(not (chosen & ~selectable).any(), "you chose [CLS], [SEP] or padding: choose only where selectable is True")
        written = masked[chosen].unique()
        require(not (len(written) == 1 and written.item() != tok.mask_token_id), "do not write the mask id "
                f"(bert-base-uncased's is 103): ask tokenizer.mask_token_id (here it is {tok.mask_token_id})")
        require(bool((masked[chosen] == tok.mask_token_id).all()), "put tokenizer.mask_token_id at every chosen position")
        require(torch.equal(masked[~chosen], ids[~chosen]), "leave every position that was not chosen as it was")
        require(torch.equal(labels[chosen], ids[chosen]), "a chosen position's label is its original id")
        rate = (chosen.sum() / selectable.sum()).item()
        require(abs(rate - 0.15) < 0.015, f"about mlm_probability (15%) of the selectable tokens should be chosen; "
                 f"you chose {rate:.1%}")
        higher = (call(mask, ids, selectable, tok, 0.3, torch.Generator().manual_seed(0))[1] != IGNORE_INDEX).sum()
        require(abs((higher / selectable.sum()).item() - 0.3) < 0.02, "use the mlm_probability you are given, not 0.15")
        again = call(mask, ids, selectable, tok, 0.15, torch.Generator().manual_seed(0))[1]
        other = call(mask, ids, selectable, tok, 0.15, torch.Generator().manual_seed(1))[1]
        require(torch.equal(again, labels) and not torch.equal(other, labels),
                 "draw from the generator you are given (torch.bernoulli(..., generator=generator)): "
                 "the same seed must give the same masks, another seed other masks")
        package = mask_tokens(ids, selectable, tok, 0.15, torch.Generator().manual_seed(0))[1] != IGNORE_INDEX
        library = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, mask_replace_prob=1.0, random_replace_prob=0.0,
                                                  seed=0)([{"input_ids": r} for r in kit.token_rows(200, seed=1)])["labels"]
        library_rate = ((library != IGNORE_INDEX).sum() / selectable.sum()).item()
        return (f"labels, special tokens, the mask id and seeding over {int(selectable.sum())} tokens; you chose {rate:.1%}, "
                f"mask_tokens {package.float().sum().item() / selectable.sum().item():.1%}, "
                f"DataCollatorForLanguageModeling {library_rate:.1%}")

    return verdict("2.1", run)


# --- notebook 03 -------------------------------------------------------------------------------
def check_train_step(step: Callable) -> bool | None:
    """Exercise 3.1: ``step(model, batch, optimizer, scheduler, max_grad_norm) -> loss (float)``.

    Three steps of your function on a tiny BERT (no dropout, SGD, a decaying rate, clipping at 0.1)
    against the reference loop forward, backward, clip, step, schedule, zero_grad.
    """

    def run() -> str:
        base, batches = kit.tiny_model(kit.check_tokenizer()), kit.masked_batches()
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = build_scheduler(optimizer, 4, 0.0, "linear")
        losses = [call(step, model, batch, optimizer, scheduler, 0.1) for batch in batches]
        require(all(isinstance(loss, float) for loss in losses), "return loss.item(), a float: the tensor would keep "
                "the batch's whole graph alive")
        right_losses, right_lr, right = kit.reference_steps(copy.deepcopy(base), batches, 0.1)

        def same(other) -> bool:
            return all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), other.parameters()))

        require(not same(base), kit.TRAIN_STEP_MISTAKES["zero_grad_before_step"])  # nothing learnt at all
        if not same(right) or not close(scheduler.get_last_lr()[0], right_lr):
            for mistake, hint in kit.TRAIN_STEP_MISTAKES.items():
                _, lr, wrong = kit.reference_steps(copy.deepcopy(base), batches, 0.1, skip=mistake)
                require(not (same(wrong) and close(scheduler.get_last_lr()[0], lr)), hint)
            require(same(right), "after 3 steps your weights differ from the reference loop's: "
                     "forward (model(**batch).loss), backward, clip, optimizer.step(), scheduler.step(), zero_grad")
            require(False, kit.TRAIN_STEP_MISTAKES["schedule"])
        require(all(close(a, b) for a, b in zip(losses, right_losses)),
                 "return loss.item(), the loss of this batch's forward pass")
        return "3 steps on a tiny BERT: weights, learning rate and losses equal the reference loop's"

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
        require(isinstance(answer, torch.Tensor) and answer.dim() == 0, "return a scalar tensor (so that .backward() works)")
        got = answer.item()
        for value, hint in kit.loss_mistakes(logits, labels):
            require(not close(got, value), hint)
        require(close(got, right), f"the model's own loss on this batch is {right:.4f}; yours is {got:.4f}")
        return f"a batch of 8 rows, {int((labels != IGNORE_INDEX).sum())} hidden tokens, against the model's own loss ({right:.4f})"

    return verdict("3.2", run)


def check_learning_rate(rate: Callable) -> bool | None:
    """Exercise 3.3: ``rate(step, total_steps, peak, warmup_steps) -> learning rate`` at optimiser step
    ``step`` (0 = the first): linear warmup from 0, then linear decay to 0, as ``build_scheduler``."""

    def run() -> str:
        for total, peak, warmup in ((20, 1e-3, 4), (10, 2e-3, 0)):
            right = kit.scheduled_rates(total, peak, warmup)
            got = [float(call(rate, s, total, peak, warmup)) for s in range(total)]
            require(not close(got[0], peak) or warmup == 0, "the rate should rise from 0 over the warmup steps, not start at the peak")
            require(not all(close(g, r) for g, r in zip(got, right[1:] + [0.0])),
                    "step 0 is the first step, where the rate is 0: you are one step ahead")
            wrong = next((s for s, (g, r) in enumerate(zip(got, right)) if not close(g, r)), None)
            at = 0 if wrong is None else wrong
            require(wrong is None or wrong >= warmup, "during the warmup the rate at step s is peak * s / warmup_steps "
                    f"(step {at}: {right[at]:g}); yours: {got[at]:g}")
            require(wrong is None, f"after the warmup, decay linearly from the peak to 0 at total_steps: at step {at} "
                    f"of {total} (warmup {warmup}) the rate is {right[at]:g}; yours: {got[at]:g}")
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
        ce = [torch.nn.functional.cross_entropy(lo[la != IGNORE_INDEX], la[la != IGNORE_INDEX]).item() for lo, la in batches]
        require(not close(got, math.log(right)), "that is the cross-entropy: perplexity is exp(cross-entropy)")
        require(not close(got, sum(math.exp(c) for c in ce) / len(ce)),
                 "exp of the mean over all hidden tokens, not a mean of per-batch perplexities")
        require(not close(got, math.exp(sum(ce) / len(ce))),
                 "weigh each batch by its number of hidden tokens: a batch of 1 token counts as much as one of 40 here")
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
        require(not close(got[5], sum(per_batch) / 3), "count hits over all hidden tokens, then divide: a mean of "
                 "per-batch accuracies weighs a batch of 1 token like a batch of 40")
        require(not close(got[5], everywhere), "score only the hidden tokens (labels != -100)")
        require(not close(got[5], right[1]) or close(right[1], right[5]),
                 "a hidden token counts when it is among the k best guesses (logits.topk(k)), not only the best")
        require(all(close(got[k], right[k]) for k in (1, 5)),
                 f"top-1 and top-5 here are {right[1]:.4f} and {right[5]:.4f}; yours {got[1]:.4f} and {got[5]:.4f}")
        return f"top-1 and top-5 over 48 hidden tokens in 3 batches ({right[1]:.3f}, {right[5]:.3f}), per token as evaluate"

    return verdict("4.2", run)


#: The checks a notebook imports (``check_answer``, for computed answers, comes from ``checking``).
__all__ = ["check_answer", "check_learning_rate", "check_mask_tokens", "check_masked_lm_loss", "check_pad_batch",
           "check_padding_share", "check_perplexity", "check_top_k_accuracy", "check_train_step", "check_word_pieces"]
