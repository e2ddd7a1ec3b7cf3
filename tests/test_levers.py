"""The speed levers the course keeps: attention dropout off while training (``attention_dropout``), hidden-state
dropout off (``hidden_dropout``), and the attention kernel chosen for the machine (``attention``: eager on a CPU in
bf16 at short rows).

Each dropout setting must change only its own dropout: the same weights, the same evaluation; the original recipe
keeps the model's dropout; the log, the command line and the card say which was used.
"""

from __future__ import annotations

import pytest
import torch

from hp_mlm.config import get_settings, resolve_attention
from hp_mlm.models import build_smoke_tokenizer, load_model
from hp_mlm.profiles import SMOKE_MODEL


def train_mode_outputs(model, input_ids, hidden_dropout: bool) -> list[torch.Tensor]:
    """Two forward passes in train mode, hidden-state dropout on or off (attention dropout as the model has it)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and ".attention.self" not in name and not hidden_dropout:
            module.p = 0.0
    model.train()
    torch.manual_seed(0)
    return [model(input_ids=input_ids).logits for _ in range(2)]


@pytest.mark.parametrize("dropout", ["attention_dropout", "hidden_dropout"])
def test_the_course_trains_without_dropout_and_the_original_recipe_with_it(dropout):
    assert getattr(get_settings("smoke"), dropout) is False
    assert getattr(get_settings("offline"), dropout) is False
    assert getattr(get_settings("smoke", recipe="original"), dropout) is True
    assert getattr(get_settings("smoke", recipe="original", **{dropout: False}), dropout) is False
    env = {f"HP_MLM_{dropout.upper()}": "yes"}
    assert getattr(get_settings("smoke", environ=env), dropout) is True


def test_off_turns_off_only_the_dropout_on_attention_weights():
    tok = build_smoke_tokenizer()
    on = load_model(SMOKE_MODEL, tok, attention_dropout=True).model
    off = load_model(SMOKE_MODEL, tok, attention_dropout=False).model
    assert on.config.attention_probs_dropout_prob > 0 and off.config.attention_probs_dropout_prob == 0.0
    assert off.config.hidden_dropout_prob == on.config.hidden_dropout_prob > 0
    for (name, a), (_, b) in zip(on.state_dict().items(), off.state_dict().items(), strict=True):
        assert torch.equal(a, b), name  # the same weights
    ids = tok(["the ferry crossed the silver lake in the fog at dawn"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(on.eval()(input_ids=ids).logits, off.eval()(input_ids=ids).logits)  # evaluation alike
        first, second = train_mode_outputs(off, ids, hidden_dropout=False)
        assert torch.equal(first, second)  # nothing random is left once hidden dropout is off too
        first, second = train_mode_outputs(on, ids, hidden_dropout=False)
        assert not torch.equal(first, second)  # the model's own attention dropout draws masks
    off_again = load_model(SMOKE_MODEL, tok, attention_dropout=False).model
    with torch.no_grad():
        first, second = train_mode_outputs(off_again, ids, hidden_dropout=True)
    assert not torch.equal(first, second)  # hidden-state dropout stays on


def test_off_reaches_a_pretrained_checkpoint_from_its_folder(tmp_path):
    """A saved folder (``from_pretrained``, as a Hub model loads) gets the config override before it is built."""
    tok = build_smoke_tokenizer()
    saved = load_model(SMOKE_MODEL, tok).model
    saved.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    on = load_model(str(tmp_path), attention_dropout=True).model
    off = load_model(str(tmp_path), attention_dropout=False).model
    assert on.config.attention_probs_dropout_prob == saved.config.attention_probs_dropout_prob > 0
    assert off.config.attention_probs_dropout_prob == 0.0
    assert all(torch.equal(a, b) for a, b in zip(on.state_dict().values(), off.state_dict().values(), strict=True))
    ids = tok(["hob tanner rowed the ferry"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        first, second = train_mode_outputs(off, ids, hidden_dropout=False)
    assert torch.equal(first, second)


def test_eager_and_sdpa_attention_train_the_same_function():
    """``benchmarks/attention_kernel.py`` compares the two kernels on speed alone: without attention dropout
    they give the same logits and the same gradients (a padded batch, so the attention mask counts)."""
    tok = build_smoke_tokenizer()
    batch = tok(["the ferry crossed the silver lake", "at dawn"], padding=True, return_tensors="pt")
    assert batch["attention_mask"].min() == 0  # the second row is padded
    results = {}
    for kernel in ("sdpa", "eager"):  # chosen as the model is built, as prepare does (settings.attention)
        model = load_model(SMOKE_MODEL, tok, attention_dropout=False, attention=kernel).model.eval()  # eval: no dropout
        assert model.config._attn_implementation == kernel
        logits = model(**batch).logits
        logits[batch["attention_mask"].bool()].square().mean().backward()
        results[kernel] = logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]
    (sdpa_logits, sdpa_grads), (eager_logits, eager_grads) = results["sdpa"], results["eager"]
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(eager_logits[real], sdpa_logits[real], atol=1e-4, rtol=1e-4)
    assert len(eager_grads) == len(sdpa_grads) > 0
    for a, b in zip(eager_grads, sdpa_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    ("changes", "device", "expected"),
    [
        ({"precision": "bf16", "max_length": 128}, "cpu", "eager"),  # measured faster (attention_kernel*.md)
        ({"precision": "bf16", "max_length": 512}, "cpu", None),  # eager slower at 16 x 512: transformers' choice
        ({"precision": "fp32", "max_length": 128}, "cpu", None),  # eager not faster in fp32
        ({"precision": "auto", "max_length": 128}, "cuda", None),  # a GPU's fused kernels
        ({"precision": "bf16", "max_length": 64, "attention": "sdpa"}, "cpu", "sdpa"),  # an explicit choice is kept
        ({"precision": "fp32", "max_length": 512, "attention": "eager"}, "cuda", "eager"),
    ],
)
def test_attention_auto_is_eager_only_on_a_cpu_in_bf16_at_short_rows(changes, device, expected, monkeypatch):
    monkeypatch.setattr("hp_mlm.common.cpu_has_native_bf16", lambda: True)  # bf16 asked for must not warn here
    assert get_settings("smoke").attention == "auto"
    assert resolve_attention(get_settings("smoke", **changes), device) == expected


def test_auto_follows_the_machines_precision_and_a_bad_kernel_is_refused(monkeypatch):
    settings = get_settings("smoke", max_length=128)
    monkeypatch.setattr("hp_mlm.common.cpu_has_native_bf16", lambda: False)  # auto precision is fp32 here
    assert resolve_attention(settings, "cpu") is None
    monkeypatch.setattr("hp_mlm.common.cpu_has_native_bf16", lambda: True)
    assert resolve_attention(settings, "cpu") == "eager"
    with pytest.raises(ValueError, match=r"`attention` \(HP_MLM_ATTENTION\) must be one of"):
        get_settings("smoke", attention="flash")


def test_prepare_builds_the_model_with_the_kernel_it_reports(monkeypatch):
    from hp_mlm.prepare import prepare

    monkeypatch.setattr("hp_mlm.config.device_kind", lambda: "cpu")
    monkeypatch.setattr("hp_mlm.common.cpu_has_native_bf16", lambda: True)
    for precision, kernel in (("bf16", "eager"), ("fp32", "sdpa")):  # fp32: transformers' choice for BERT
        prep = prepare(get_settings("smoke", precision=precision, progress=False, max_validation_rows=8))
        assert prep.settings.attention == kernel
        assert prep.loaded.model.config._attn_implementation == kernel


def test_a_model_without_sdpa_still_loads_where_auto_leaves_the_choice_to_transformers(tmp_path):
    """MPNet has no SDPA kernel in transformers: ``auto`` off a bf16 CPU (None) must not ask for one."""
    from transformers import MPNetConfig, MPNetForMaskedLM

    tok = build_smoke_tokenizer()
    config = MPNetConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, pad_token_id=tok.pad_token_id)  # fmt: skip
    MPNetForMaskedLM(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    kernel = resolve_attention(get_settings("smoke", precision="fp32"), "cpu")
    assert kernel is None
    assert load_model(str(tmp_path), attention=kernel).model.config._attn_implementation == "eager"
    with pytest.raises(ValueError, match=r"^`attention` 'sdpa': .* has no such kernel; use eager or auto$"):
        load_model(str(tmp_path), attention="sdpa")  # asked for by name: one line in the course's words


def test_hidden_dropout_off_turns_off_only_the_dropout_on_hidden_states():
    """``hidden_dropout=False``: BERT's ``hidden_dropout_prob`` 0 (after the embeddings, each attention output and
    each feed-forward block); the attention weights' dropout and the weights themselves as they were."""
    tok = build_smoke_tokenizer()
    on = load_model(SMOKE_MODEL, tok, attention_dropout=False).model
    off = load_model(SMOKE_MODEL, tok, attention_dropout=False, hidden_dropout=False).model
    assert on.config.hidden_dropout_prob > 0 and off.config.hidden_dropout_prob == 0.0
    assert off.config.attention_probs_dropout_prob == on.config.attention_probs_dropout_prob == 0.0
    assert all(torch.equal(a, b) for a, b in zip(on.state_dict().values(), off.state_dict().values(), strict=True))
    ids = tok(["the ferry crossed the silver lake in the fog at dawn"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        first, second = train_mode_outputs(off, ids, hidden_dropout=True)  # the model's own modules, untouched
        assert torch.equal(first, second)  # nothing random is left
        first, second = train_mode_outputs(on, ids, hidden_dropout=True)
        assert not torch.equal(first, second)
        both_on = load_model(SMOKE_MODEL, tok, attention_dropout=True, hidden_dropout=False).model
        first, second = train_mode_outputs(both_on, ids, hidden_dropout=True)
    assert both_on.config.attention_probs_dropout_prob > 0 and not torch.equal(first, second)


def test_hidden_dropout_off_reaches_a_checkpoint_folder_and_distilberts_own_field(tmp_path):
    """A saved folder gets the override before the model is built; DistilBERT calls the field ``dropout``."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    tok = build_smoke_tokenizer()
    bert = load_model(SMOKE_MODEL, tok).model
    bert.save_pretrained(tmp_path / "bert")
    config = DistilBertConfig(vocab_size=len(tok), dim=32, hidden_dim=64, n_layers=1, n_heads=2)
    DistilBertForMaskedLM(config).save_pretrained(tmp_path / "distilbert")
    for folder in ("bert", "distilbert"):
        tok.save_pretrained(tmp_path / folder)
    loaded = load_model(str(tmp_path / "bert"), hidden_dropout=False).model.config
    assert loaded.hidden_dropout_prob == 0.0 and bert.config.hidden_dropout_prob > 0
    assert load_model(str(tmp_path / "distilbert")).model.config.dropout == config.dropout > 0
    distil = load_model(str(tmp_path / "distilbert"), hidden_dropout=False, attention_dropout=False).model
    assert distil.config.dropout == 0.0 and distil.config.attention_dropout == 0.0
    assert all(m.p == 0.0 for m in distil.modules() if isinstance(m, torch.nn.Dropout))


def test_model_options_give_load_model_the_dropout_and_the_kernel_prepare_builds_with(monkeypatch):
    from hp_mlm.config import model_options
    from hp_mlm.prepare import prepare

    monkeypatch.setattr("hp_mlm.common.cpu_has_native_bf16", lambda: True)
    settings = get_settings("smoke", precision="bf16", hidden_dropout=False, progress=False, max_validation_rows=8)
    assert model_options(settings) == dict(
        attention_dropout=settings.attention_dropout, hidden_dropout=False, attention=resolve_attention(settings)
    )
    prep = prepare(settings)
    assert prep.loaded.model.config.hidden_dropout_prob == 0.0 and prep.settings.hidden_dropout is False
    assert get_settings("smoke", environ={"HP_MLM_HIDDEN_DROPOUT": "no"}).hidden_dropout is False
