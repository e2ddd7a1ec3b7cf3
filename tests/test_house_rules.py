"""House rules a grep can check: no literal BERT token ids, no transformers.AdamW, no remote code,
weights loaded safely. These guard the package against the original tutorial's faults."""

import json
import re
from pathlib import Path

import pytest
import torch
from helpers import committed, committed_text

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "hp_mlm").rglob("*.py"))


def code_lines(path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.split("#", 1)[0]
        yield number, stripped


def test_no_literal_bert_special_token_ids():
    import io
    import tokenize

    found = []
    for path in SOURCES:
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if tok.type == tokenize.NUMBER and tok.string in ("101", "102", "103"):
                found.append(f"{path.name}:{tok.start[0]}")
    assert not found, f"ask the tokenizer for ids instead: {found}"


def test_no_transformers_adamw_and_no_remote_code():
    files = SOURCES + committed("notebooks/*.ipynb")
    for path in files:
        text = committed_text(path)
        assert not re.search(r"from transformers import[^\n]*\bAdamW\b", text), path
        assert not re.search(r"trust_remote_code\s*=\s*True", text), path


def test_every_torch_load_is_weights_only():
    for path in SOURCES:
        for number, line in code_lines(path):
            if "torch.load(" in line:
                assert "weights_only=True" in line, f"{path.name}:{number}"


def test_cuda_out_of_memory_is_reported_with_the_settings_to_lower(monkeypatch, smoke_tokenizer, smoke_model):
    from helpers import SENTENCES, fit, tokenised

    from hp_mlm import training
    from hp_mlm.common import OutOfMemory
    from hp_mlm.config import get_settings

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(training, "masked_lm_loss", out_of_memory)
    settings = get_settings("smoke", environ={}, batch_size=4, progress=False, epochs=1, schedule="linear")
    with pytest.raises(
        OutOfMemory,
        match=r"in the training step \(forward and backward\) \(OutOfMemoryError: CUDA out of memory\. Tried.*"
        r"Lower `batch_size` \(now 4; raise `gradient_accumulation_steps`.*`max_length` \(now 64\)",
    ):
        fit(smoke_model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), settings.replace(learning_rate=1e-3))


def test_importing_the_package_is_light_and_touches_no_network():
    import subprocess
    import sys

    code = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise AssertionError('network touched at import')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse\n"
        "import hp_mlm; light = 'torch' not in sys.modules\n"
        "import hp_mlm.ops.cli, hp_mlm.ops.job, hp_mlm.course.plots\n"
        "print(light)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_no_fault_number_from_outside_the_repository():
    """Faults are said in words: a number from a list the repository does not hold (a "case" number)
    tells a reader nothing they can look up."""
    pattern = re.compile(r"\b(?:[Cc]ases? )?C\d{2}[a-d]?\b")
    texts = [*committed("*.md"), *committed("docs/*.md"), *committed("benchmarks/**/*.py")]
    texts += [*committed("hp_mlm/**/*.py"), *committed("tests/*.py"), *committed("notebooks/**/*.ipynb")]
    found = []
    for path in texts:
        text = committed_text(path)
        if path.suffix == ".ipynb":  # the cells' sources, not the outputs (images are base64)
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in pattern.finditer(text)]
    assert found == []
    number = "C" + "38"  # written apart, so that this file passes its own scan
    assert pattern.search(f"as Case {number} says") and pattern.search(f"({number}b)") and not pattern.search("PC300")
