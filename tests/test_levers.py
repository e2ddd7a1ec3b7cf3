"""The speed lever the course keeps: attention dropout off while training (``attention_dropout``).

It must change only the dropout on attention weights: the same weights, the same evaluation, dropout
on the hidden states still on; the original recipe keeps the model's attention dropout; the log, the
command line and the card say which was used.
"""

from __future__ import annotations

import torch

from hp_mlm.config import get_settings
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


def test_the_course_trains_without_attention_dropout_and_the_original_recipe_with_it():
    assert get_settings("smoke").attention_dropout is False
    assert get_settings("offline").attention_dropout is False
    assert get_settings("smoke", recipe="original").attention_dropout is True
    assert get_settings("smoke", recipe="original", attention_dropout=False).attention_dropout is False
    env = {"HP_MLM_ATTENTION_DROPOUT": "yes"}
    assert get_settings("smoke", environ=env).attention_dropout is True


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
    model = load_model(SMOKE_MODEL, tok, attention_dropout=False).model.eval()  # eval: hidden dropout off too
    batch = tok(["the ferry crossed the silver lake", "at dawn"], padding=True, return_tensors="pt")
    assert batch["attention_mask"].min() == 0  # the second row is padded
    results = {}
    for kernel in ("sdpa", "eager"):
        model.config._attn_implementation = kernel
        model.zero_grad()
        logits = model(**batch).logits
        logits[batch["attention_mask"].bool()].square().mean().backward()
        results[kernel] = logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]
    (sdpa_logits, sdpa_grads), (eager_logits, eager_grads) = results["sdpa"], results["eager"]
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(eager_logits[real], sdpa_logits[real], atol=1e-4, rtol=1e-4)
    assert len(eager_grads) == len(sdpa_grads) > 0
    for a, b in zip(eager_grads, sdpa_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
