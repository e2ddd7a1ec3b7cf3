"""Shared fixtures: the project's own tiny tokenizer and model, and a tiny BERT vocabulary."""

from __future__ import annotations

import pytest
from transformers import BertTokenizerFast

from hp_mlm.models import build_smoke_model, build_smoke_tokenizer


@pytest.fixture(scope="session")
def smoke_tokenizer():
    return build_smoke_tokenizer()


@pytest.fixture()
def smoke_model(smoke_tokenizer):
    return build_smoke_model(smoke_tokenizer)


@pytest.fixture(scope="session")
def tiny_vocab_tokenizer():
    """A 12-token BERT vocabulary where [MASK] is 4, [CLS] 2, [SEP] 3, [PAD] 0 (not 103/101/102/0)."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "harry", "potter", "looked", "at", "the", "owl", "."]
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)
