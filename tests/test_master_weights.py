"""bf16 weights with fp32 master weights while training in bf16 on a CPU (``studies.master_weights``)."""

import torch

from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.models import build_smoke_model
from hp_mlm.studies import master_weights
from hp_mlm.training import Callback, plan_training, train


def smoke_plan(tokenizer, precision="bf16", **changes):
    from helpers import SENTENCES, tokenised

    settings = get_settings("smoke", environ={}, epochs=1, batch_size=4, progress=False, precision=precision)
    settings = resolve_auto(settings, new_head=True).replace(**changes)
    return plan_training(build_smoke_model(tokenizer), tokenizer, tokenised(tokenizer, SENTENCES * 2), settings)


def tied(model) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_inside_the_model_is_bf16_and_tied_after_it_holds_the_optimisers_fp32_weights(smoke_tokenizer):
    plan = smoke_plan(smoke_tokenizer)
    before = {n: p for n, p in plan.model.named_parameters()}
    with master_weights.bf16_weights(plan) as switched:
        assert switched is True
        assert {p.dtype for p in plan.model.parameters()} == {torch.bfloat16}
        assert tied(plan.model)
        history = train(plan)
    after = dict(plan.model.named_parameters())
    assert all(after[n] is before[n] for n in before), "the optimiser's fp32 parameters are the model's again"
    assert {p.dtype for p in after.values()} == {torch.float32} and tied(plan.model)
    assert history["optimizer_steps"] >= 4 and all(torch.isfinite(torch.tensor(s["loss"])) for s in history["steps"])


def test_updates_smaller_than_a_bf16_step_are_kept_in_the_master_weights(smoke_tokenizer):
    plan = smoke_plan(smoke_tokenizer, learning_rate=1e-6, warmup_fraction=0.0, schedule="constant")
    start = {n: p.detach().clone() for n, p in plan.model.named_parameters()}
    with master_weights.bf16_weights(plan):
        train(plan)
    name = "bert.encoder.layer.0.intermediate.dense.weight"
    weight = dict(plan.model.named_parameters())[name].detach()
    moved = weight != start[name]
    assert moved.float().mean() > 0.5, "AdamW moves nearly every weight by about the rate each step"
    # far below bf16's rounding step for most of these weights: a bf16 weight alone would not have moved
    assert (weight - start[name]).abs().max() < 1e-4
    same_in_bf16 = weight[moved].bfloat16() == start[name][moved].bfloat16()
    assert same_in_bf16.float().mean() > 0.5


def test_weights_a_callback_loads_meanwhile_are_the_ones_kept(smoke_tokenizer):
    class LoadZeros(Callback):
        def on_train_end(self, model, history):
            model.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})

    plan = smoke_plan(smoke_tokenizer)
    with master_weights.bf16_weights(plan):
        train(plan, [LoadZeros()])
    assert all(float(p.detach().abs().sum()) == 0.0 for p in plan.model.parameters())


def test_nothing_changes_in_fp32_or_when_turned_off(smoke_tokenizer):
    plan = smoke_plan(smoke_tokenizer, precision="fp32")
    with master_weights.bf16_weights(plan) as switched:
        assert switched is False and {p.dtype for p in plan.model.parameters()} == {torch.float32}
    plan = smoke_plan(smoke_tokenizer)
    with master_weights.bf16_weights(plan, enabled=False) as switched:
        assert switched is False and {p.dtype for p in plan.model.parameters()} == {torch.float32}


def test_a_study_trains_an_option_with_it_and_the_others_without(monkeypatch, tmp_path):
    from hp_mlm.studies import options

    seen = []

    def record(plan, enabled=True):
        seen.append(enabled)
        return master_weights.bf16_weights(plan, False)

    monkeypatch.setattr(options, "bf16_weights", record)
    settings = get_settings("smoke", environ={}, epochs=1, progress=False, output_dir=str(tmp_path))
    rows = options.compare_options(
        settings, {"with": {"master_weights": True}, "without": {}}, seeds=2, log=lambda _: None
    )
    assert seen == [True, False, True, False], "seed by seed, each option in turn"
    assert [(r["option"], r["seed"]) for r in rows[1:]] == [
        ("with", 42),
        ("with", 43),
        ("without", 42),
        ("without", 43),
    ]
