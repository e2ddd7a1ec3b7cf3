"""Shared fixtures: the project's own tiny tokenizer and model, and a tiny BERT vocabulary."""

from __future__ import annotations

import os

# Under pytest-xdist (`-n auto`, the README's test command) each worker gets its share of the cores, set
# before torch is imported so that the kernels and subprocesses the tests start inherit it: two workers
# with two threads each on 2 cores run slower than one.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault(
        "OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    )

import pytest  # noqa: E402
from transformers import BertTokenizerFast  # noqa: E402

from hp_mlm.models import build_smoke_model, build_smoke_tokenizer  # noqa: E402


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
