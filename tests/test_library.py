"""The library's way (``Trainer`` + ``DataCollatorForLanguageModeling``) set up to match the course."""

from __future__ import annotations

import pytest
import torch
from helpers import SENTENCES, tokenised
from transformers import Trainer, get_scheduler

from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.prepare import prepare
from hp_mlm.studies.library import (
    WAYS,
    library_collator,
    scored_positions,
    side_by_side,
    trainer_arguments,
)
from hp_mlm.training import build_optimizer, build_scheduler, optimizer_steps


def settings(**changes):
    base = {"progress": False, "epochs": 2, "batch_size": 4, **changes}
    return resolve_auto(get_settings("smoke", environ={}, **base), new_head=True)


@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_the_trainer_gets_the_courses_schedule_and_weight_decay_groups(smoke_model, tmp_path, schedule):
    s = settings(schedule=schedule, warmup_fraction=0.2, epochs=3)
    n_rows = 37
    args = trainer_arguments(s, str(tmp_path), n_rows)
    trainer = Trainer(model=smoke_model, args=args)
    steps = optimizer_steps(n_rows, s)
    trainer.create_optimizer_and_scheduler(num_training_steps=steps)
    ours = build_optimizer(smoke_model, s.learning_rate, s.weight_decay)
    ours_schedule = build_scheduler(ours, steps, s.warmup_fraction, s.schedule)
    theirs, theirs_schedule = trainer.optimizer, trainer.lr_scheduler
    names = {id(p): n for n, p in smoke_model.named_parameters()}

    def groups(opt):
        return sorted((g["weight_decay"], sorted(names[id(p)] for p in g["params"])) for g in opt.param_groups)

    assert groups(theirs) == groups(ours)
    rates = []
    for _ in range(steps):  # the rate each step runs at, read from the optimiser before it
        rates.append((theirs.param_groups[0]["lr"], ours.param_groups[0]["lr"]))
        theirs.step(), ours.step(), theirs_schedule.step(), ours_schedule.step()
    # the same shape and warmup (0.2 * 30 is 6 steps, not 7), counted from 0 by the library, from 1 here
    warmup = args.warmup_steps
    shape = get_scheduler(
        args.lr_scheduler_type, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]), warmup, steps + 1
    )
    assert steps == 30 and warmup == 6 and rates[0][0] == 0.0 and min(b for _, b in rates) > 0
    assert [b for _, b in rates] == pytest.approx(
        [s.learning_rate * shape.lr_lambdas[0](k) for k in range(1, steps + 1)]
    )
    library = get_scheduler(
        args.lr_scheduler_type, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]), warmup, steps
    )
    assert [a for a, _ in rates] == pytest.approx([s.learning_rate * library.lr_lambdas[0](k) for k in range(steps)])
    assert args.per_device_train_batch_size == s.batch_size and args.max_grad_norm == s.max_grad_norm
    with pytest.raises(ValueError, match="still 'auto'"):
        trainer_arguments(get_settings("smoke", environ={}), str(tmp_path), n_rows)


def test_the_library_collator_masks_like_the_course(smoke_tokenizer):
    tok = smoke_tokenizer
    rows = tokenised(tok, SENTENCES * 40)
    batch = library_collator(tok, settings(mlm_probability=0.3))(rows)
    original = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(r["input_ids"]) for r in rows], batch_first=True, padding_value=tok.pad_token_id
    )
    chosen = batch["labels"] != IGNORE_INDEX
    assert torch.equal(batch["labels"][chosen], original[chosen])  # labels only where masked
    assert bool((batch["input_ids"][chosen] == tok.mask_token_id).all())  # masking="mask": every one masked
    specials = torch.isin(original, torch.tensor([tok.cls_token_id, tok.sep_token_id, tok.pad_token_id]))
    assert not bool((chosen & specials).any())
    assert 0.25 < chosen.sum() / (~specials).sum() < 0.35
    with pytest.raises(ValueError, match="cannot prefer entities"):
        library_collator(tok, settings(masking="entity"))


def test_every_way_is_scored_on_the_same_frozen_positions(monkeypatch):
    from hp_mlm.ops import allocator
    from hp_mlm.studies import library

    switched = []  # both loops keep freed memory, as the main job does (a fair race)
    monkeypatch.setattr(
        library, "reuse_freed_memory", lambda on: switched.append(on) or allocator.reuse_freed_memory(on)
    )
    s = settings(epochs=2)
    rows = side_by_side(s, seeds=1, log=lambda _: None)
    assert [r["way"] for r in rows] == list(WAYS)
    assert switched == [True] * len(WAYS)  # this machine trains on the CPU
    prep = prepare(s)
    count, digest = scored_positions(prep.frozen_validation)
    assert {(r["n_positions"], r["positions"]) for r in rows} == {(count, digest)} and count > 0
    by = {r["way"]: r for r in rows}
    steps = optimizer_steps(len(prep.train_tokens), prep.settings)
    assert by["course"]["optimizer_steps"] == by["trainer"]["optimizer_steps"] == steps
    assert by["pack"]["optimizer_steps"] < steps  # blocks hold several rows: fewer batches per epoch
    assert by["pack"]["padding_share"] < 0.02 < by["course"]["padding_share"]
    for r in rows:
        assert 0 <= r["top1"] <= r["top5"] <= 1 and r["real_tokens_per_second"] > 0


def test_scored_positions_tell_different_masks_apart():
    rows = [{"labels": [IGNORE_INDEX, 5, IGNORE_INDEX]}, {"labels": [7, IGNORE_INDEX]}]
    moved = [{"labels": [5, IGNORE_INDEX, IGNORE_INDEX]}, {"labels": [7, IGNORE_INDEX]}]
    assert scored_positions(rows)[0] == scored_positions(moved)[0] == 2
    assert scored_positions(rows)[1] != scored_positions(moved)[1]
    with pytest.raises(ValueError, match="ways"):
        side_by_side(settings(), ways=["keras"])
