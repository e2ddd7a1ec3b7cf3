"""The self-checking exercises: each check accepts the reference solution, says "not done yet" for an
untouched stub, and rejects a catalogue of known-wrong answers, each with its own hint."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hp_mlm.course import exercises as ex
from hp_mlm.course import model_exercises as mx
from hp_mlm.course.checking import check_tokenizer
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.tokens import padding_share


def stub_ellipsis(*args): ...


def stub_raises(*args):
    raise NotImplementedError


# --- reference solutions (what the solutions notebooks run) --------------------------------------
def pieces_right(words, tok):
    return {w: len(tok.tokenize(w)) for w in words}


def share_right(batches, lengths):
    real = padded = 0
    for batch in batches:
        real += sum(lengths[i] for i in batch)
        padded += max(lengths[i] for i in batch) * len(batch)
    return 1 - real / padded


def pad_with(fill, mask_fill=0, left=False, width=None):
    def pad(rows, tok):
        w = width or max(map(len, rows))
        value = tok.pad_token_id if fill == "ask" else fill
        ids = [([value] * (w - len(r)) + r) if left else (r + [value] * (w - len(r))) for r in rows]
        mask = [[1] * len(r) + [mask_fill] * (w - len(r)) for r in rows]
        return torch.tensor(ids), torch.tensor(mask)

    return pad


def masking(
    labels="chosen",
    mask_id="ask",
    use_generator=True,
    respect_selectable=True,
    p_scale=1.0,
    fixed_p=None,
    filler=IGNORE_INDEX,
    swap=False,
):
    def mask(ids, selectable, tok, p, generator):
        g = generator if use_generator else None
        chosen = torch.bernoulli(torch.full(ids.shape, (fixed_p or p) * p_scale), generator=g).bool()
        if respect_selectable:
            chosen &= selectable
        out = ids.clone()
        out[chosen] = tok.mask_token_id if mask_id == "ask" else mask_id
        target = torch.where(chosen, ids, filler) if labels == "chosen" else ids.clone()
        return (target, out) if swap else (out, target)

    return mask


def accumulate_with(zero_grad=True, clip=True, schedule=True, share="tokens", step_each=False):
    """An accumulation step as a learner may write it; the defaults are right."""

    def step(model, batches, optimizer, scheduler, max_grad_norm):
        hidden = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)
        total = 0.0
        for batch in batches:
            n = int((batch["labels"] != IGNORE_INDEX).sum())
            loss = model(**batch).loss * {"tokens": n / hidden, "batches": 1 / len(batches), "none": 1.0}[share]
            loss.backward()
            total += loss.item()
            if step_each:
                optimizer.step()
                optimizer.zero_grad()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        if schedule:
            scheduler.step()
        if zero_grad:
            optimizer.zero_grad()
        return total

    return step


def loss_right(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def loss_row_means(logits, labels):
    rows = [
        F.cross_entropy(lo[la != IGNORE_INDEX], la[la != IGNORE_INDEX])
        for lo, la in zip(logits, labels)
        if (la != IGNORE_INDEX).any()
    ]
    return torch.stack(rows).mean()


def rate_right(step, total, peak, warmup):
    return peak * step / warmup if step < warmup else peak * (total + 1 - step) / (total + 1 - warmup)


def ppl_right(batches):
    total = count = 0
    for lo, la in batches:
        t = la != IGNORE_INDEX
        total += F.cross_entropy(lo[t], la[t], reduction="sum").item()
        count += int(t.sum())
    return math.exp(total / count)


def ce_per_batch(batches):
    return [F.cross_entropy(lo[la != IGNORE_INDEX], la[la != IGNORE_INDEX]).item() for lo, la in batches]


def acc_right(batches, k):
    hits = count = 0
    for lo, la in batches:
        t = la != IGNORE_INDEX
        hits += (lo[t].topk(k, -1).indices == la[t][:, None]).any(-1).sum().item()
        count += int(t.sum())
    return hits / count


def acc_per_batch(batches, k):
    means = [
        (lo[la != -100].topk(k, -1).indices == la[la != -100][:, None]).any(-1).float().mean().item()
        for lo, la in batches
    ]
    return sum(means) / len(means)


def acc_everywhere(batches, k):
    hits = sum((lo.topk(k, -1).indices == la[..., None]).any(-1).sum().item() for lo, la in batches)
    return hits / sum(la.numel() for _, la in batches)


CHECKS = {
    "check_word_pieces": (
        pieces_right,
        [
            (lambda w, t: {x: len(t(x)["input_ids"]) for x in w}, "adds [CLS] and [SEP]"),
            (
                lambda w, t: {x: sum(p.startswith("##") for p in t.tokenize(x)) for x in w},
                "first piece of a word has no '##'",
            ),
            (lambda w, t: {x: len(x) for x in w}, "not the letters"),
            (lambda w, t: [len(t.tokenize(x)) for x in w], "return a dict"),
        ],
    ),
    "check_padding_share": (
        share_right,
        [
            (lambda b, lengths: share_right(b, lengths) / (1 - share_right(b, lengths)), "not by the real tokens"),
            (lambda b, lengths: sum(padding_share([x], lengths) for x in b) / len(b), "a mean of per-batch shares"),
            (lambda b, lengths: padding_share(b, lengths, max(lengths)), "not to the longest row of the dataset"),
            (lambda b, lengths: 100 * share_right(b, lengths), "not a percentage"),
            (lambda b, lengths: 1 - share_right(b, lengths), "share of real tokens"),
        ],
    ),
    "check_pad_batch": (
        pad_with("ask"),
        [
            (pad_with(0), "ask tokenizer.pad_token_id"),
            (pad_with("ask", mask_fill=1), "attention_mask must be 0 at the padding"),
            (pad_with("ask", width=512), "not to a fixed width"),
            (pad_with("ask", left=True), "pads on the right"),
        ],
    ),
    "check_mask_tokens": (
        masking(),
        [
            (masking(labels="all"), "labels are a copy of input_ids"),
            (masking(respect_selectable=False), "choose only where selectable is True"),
            (masking(mask_id=103), "do not write the mask id"),
            (masking(use_generator=False), "draw from the generator you are given"),
            (masking(p_scale=2.0), "about mlm_probability"),
            (masking(fixed_p=0.15), "use the mlm_probability you are given"),
            (masking(filler=-1), "gets the label -100"),
            (masking(swap=True), "in this order"),
        ],
    ),
    "check_accumulation_step": (
        accumulate_with(),
        [
            (accumulate_with(zero_grad=False), "call optimizer.zero_grad()"),
            (accumulate_with(clip=False), "clip the gradient norm"),
            (accumulate_with(schedule=False), "scheduler.step()"),
            (accumulate_with(share="batches"), "weigh each batch by its share"),
            (accumulate_with(step_each=True), "one optimiser step per window"),
            (lambda m, bs, o, s, g: sum(m(**b).loss.item() for b in bs), "your weights did not change"),
            (
                lambda m, bs, o, s, g: accumulate_with()(m, bs, o, s, g) and m(**bs[0]).loss,
                "return a float",
            ),
            (lambda m, bs, o, s, g: accumulate_with()(m, bs, o, s, g) * 2, "the window's loss per hidden token"),
        ],
    ),
    "check_masked_lm_loss": (
        loss_right,
        [
            (
                lambda lo, la: F.cross_entropy(lo.reshape(-1, lo.shape[-1]), la.reshape(-1), reduction="sum"),
                "not the sum",
            ),
            (
                lambda lo, la: F.cross_entropy(lo.transpose(1, 2), la, reduction="none").sum() / la.numel(),
                "not by every position",
            ),
            (loss_row_means, "a mean of per-row means"),
            (lambda lo, la: F.nll_loss(lo.transpose(1, 2), la), "nll_loss on logits"),
            (lambda lo, la: F.cross_entropy(lo.softmax(-1)[la != -100], la[la != -100]), "a softmax before it"),
            (lambda lo, la: loss_right(lo, la) / math.log(2), "do not convert it to bits"),
            (lambda lo, la: F.cross_entropy(lo.transpose(1, 2), la.clamp(min=0)), "do not turn them into a token"),
            (lambda lo, la: loss_right(lo, la).item(), "return a scalar tensor"),
        ],
    ),
    "check_learning_rate": (
        rate_right,
        [
            (lambda s, t, p, w: p * (t - s) / t, "rise from near 0 over the warmup"),
            (lambda s, t, p, w: rate_right(s - 1, t, p, w), "step 1 is the first step and should move the weights"),
            (lambda s, t, p, w: rate_right(s + 1, t, p, w), "one step ahead"),
            (lambda s, t, p, w: p * s / w if s < w else p * (t - s) / (t - w), "should not run at rate 0 either"),
            (lambda s, t, p, w: p * s / w if s < w else p, "decay linearly from the peak at step warmup_steps"),
            (lambda s, t, p, w: p * s / (2 * w) if s < w else rate_right(s, t, p, w), "during the warmup"),
            (
                lambda s, t, p, w: rate_right(s, t, p, w) if s < w else p * (t + 1 - s) / (t + 1),
                "at step 4 of 20 (warmup 4)",
            ),
            (lambda s, t, p, w: p * min(s / w, (t + 1 - s) / (t + 1 - w)), "your function raised ZeroDivisionError"),
        ],
    ),
    "check_perplexity": (
        ppl_right,
        [
            (lambda b: math.log(ppl_right(b)), "perplexity is exp(cross-entropy)"),
            (lambda b: sum(math.exp(c) for c in ce_per_batch(b)) / 3, "a mean of per-batch perplexities"),
            (lambda b: math.exp(sum(ce_per_batch(b)) / 3), "weigh each batch by its number of hidden tokens"),
            (lambda b: 2 ** math.log(ppl_right(b)), "not 2 **"),
        ],
    ),
    "check_top_k_accuracy": (
        acc_right,
        [
            (acc_per_batch, "a mean of per-batch accuracies"),
            (acc_everywhere, "score only the hidden tokens"),
            (lambda b, k: acc_right(b, 1), "among the k best guesses"),
            (lambda b, k: 100 * acc_right(b, k), "not a percentage"),
        ],
    ),
}


def check(name):
    """The check called ``name``, from whichever of the two exercise modules holds it."""
    return getattr(ex if name in ex.__all__ else mx, name)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_accepts_the_reference_solution(name, capsys):
    right, _ = CHECKS[name]
    assert check(name)(right) is True
    assert "correct. Checked:" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CHECKS))
@pytest.mark.parametrize("stub", [stub_ellipsis, stub_raises])
def test_an_untouched_stub_is_not_done_yet_and_does_not_raise(name, stub, capsys):
    assert check(name)(stub) is None
    assert "not done yet" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_known_mistake_gets_its_own_hint(name, capsys):
    _, wrongs = CHECKS[name]
    assert len(wrongs) >= 3
    hints = []
    for wrong, expected in wrongs:
        assert check(name)(wrong) is False, expected
        out = capsys.readouterr().out
        assert "not yet right" in out and expected in out, (expected, out)
        hints.append(out)
    assert len(set(hints)) == len(hints), "each mistake gets a hint of its own"


def test_every_check_of_the_package_is_in_the_catalogue():
    assert (set(ex.__all__) | set(mx.__all__)) - {"check_answer"} == set(CHECKS)
    assert not (set(ex.__all__) & set(mx.__all__)) - {"check_answer"}


def test_a_learners_bug_is_reported_not_raised(capsys):
    assert ex.check_mask_tokens(lambda *a: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_the_checks_tokenizer_has_no_bert_base_special_ids():
    tok = check_tokenizer()
    ids = {tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.pad_token_id, tok.unk_token_id}
    assert len(ids) == 5 and not ids & {0, 100, 101, 102, 103}


def test_check_value_accepts_the_right_number_rejects_others_and_waits_for_an_answer(capsys):
    from hp_mlm.course.checking import check_value

    assert check_value("2.2", 0.15**3, 0.003375, "multiply") is True
    assert check_value("2.2", 0.15, 0.003375, "multiply") is False
    assert "multiply (your answer: 0.15)" in capsys.readouterr().out
    assert check_value("2.2", ..., 0.003375, "multiply") is None
    assert check_value("2.2", "a lot", 0.003375, "multiply") is False


@pytest.mark.parametrize(
    "exercise, given, right, wrong",
    [
        ("0.2", {"vocab_size": 30522}, math.log(30522), 1 / 30522),
        ("2.2", {"mlm_probability": 0.15}, (0.0034, 0.15), (0.15, 0.15)),
        ("2.3", {"mlm_probability": 0.15}, 19, 18),
    ],
)
def test_computed_answers_are_computed_from_what_the_notebook_gives(exercise, given, right, wrong, capsys):
    assert ex.check_answer(exercise, right, **given) is True
    assert ex.check_answer(exercise, wrong, **given) is False
    assert ex.check_answer(exercise, ..., **given) is None
    assert "not done yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        ((0.3375, 0.15), "token masking: that is a percentage"),
        ((0.45, 0.15), "token masking: adding the three chances"),
        ((0.15, 0.15), "token masking: that is one piece's chance"),
        ((0.0225, 0.15), "token masking: three pieces, three draws"),
        ((0.002, 0.15), "token masking: each of the three pieces is drawn on its own"),
        ((0.003375, 15), "whole-word masking: that is a percentage"),
        ((0.003375, 0.003375), "whole-word masking: that is token masking's chance"),
        ((0.003375, 0.45), "whole-word masking: whole-word masking draws once per word, not once per piece: nothing"),
        ((0.003375, 0.5), "whole-word masking: whole-word masking draws once per word, and"),
        (0.003375, "give 2 numbers: (token masking, whole-word masking)"),
    ],
)
def test_exercise_2_2_checks_both_parts_with_a_hint_per_wrong_answer(answer, hint, capsys):
    assert ex.check_answer("2.2", answer, mlm_probability=0.15) is False
    out = capsys.readouterr().out
    assert hint in out, out


def test_exercise_2_2_waits_for_each_part_and_accepts_the_exact_chances(capsys):
    assert ex.check_answer("2.2", (..., 0.15), mlm_probability=0.15) is None
    assert ex.check_answer("2.2", (0.15**3, ...), mlm_probability=0.15) is None
    assert ex.check_answer("2.2", (0.3**3, 0.3), mlm_probability=0.3) is True
    assert "correct" in capsys.readouterr().out
