"""Shared fixtures: the project's own tiny tokenizer/model and small corpora written by the tests."""

from __future__ import annotations

import pytest
import torch
from transformers import BertTokenizerFast

from hp_mlm.models import build_smoke_model, build_smoke_tokenizer

#: A small corpus written for these tests (original sentences).
SENTENCES = [
    "Mira Ashdown crossed the Silver Lake at dawn.",
    "Professor Quillon taught potions below the Great Hall.",
    "The Lantern Tower glowed above the misty island.",
    "Oren Blackthistle lost his silverleaf quill again.",
    "Nell Cobbing found a mistfox in the Glass Greenhouse.",
    "Hob Tanner rowed the ferry across the Silver Lake.",
    "Jasper Hollin read about thornbacks in the Hollow Library.",
    "Headmistress Winterbourne rang the Mist Bell at midnight.",
]


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


def tokenised(tokenizer, texts, max_length=64):
    """Tokenised rows as plain dicts (input_ids, attention_mask, special_tokens_mask)."""
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, return_special_tokens_mask=True,
                    return_token_type_ids=False)
    return [{k: enc[k][i] for k in ("input_ids", "attention_mask", "special_tokens_mask")} for i in range(len(texts))]


@pytest.fixture()
def generator():
    return torch.Generator().manual_seed(0)
