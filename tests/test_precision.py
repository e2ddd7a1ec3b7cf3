"""Precision: what `auto` picks on each kind of machine, refusals, and bf16 training close to fp32."""

import math

import pytest
import torch
from helpers import SENTENCES, fit, tokenised

from hp_mlm.common import autocast, cpu_has_native_bf16, resolve_precision
from hp_mlm.config import get_settings
from hp_mlm.models import build_smoke_model, build_smoke_tokenizer

ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
OLDER = "processor\t: 0\nflags\t\t: fpu sse4_2 avx2 fma\n"


def test_cpu_bf16_is_detected_from_the_cpu_flags():
    assert cpu_has_native_bf16(ZEN4) is True
    assert cpu_has_native_bf16(OLDER) is False
    assert cpu_has_native_bf16("flags : amx_bf16 amx_tile\n") is True
    assert cpu_has_native_bf16("") is False


@pytest.mark.parametrize(
    "requested, device, cuda_bf16, cpu_bf16, expected",
    [
        ("auto", "cuda", True, None, "bf16"),  # Ampere and newer
        ("auto", "cuda", False, None, "fp16"),  # a Colab T4: fp16 with loss scaling
        ("auto", "cpu", None, True, "bf16"),  # a CPU with bf16 instructions
        ("auto", "cpu", None, False, "fp32"),  # any other CPU
        ("fp32", "cuda", True, None, "fp32"),
        ("bf16", "cpu", None, False, "bf16"),  # asked for explicitly: allowed (emulated, slower)
        ("fp16", "cuda", False, None, "fp16"),
    ],
)
def test_auto_precision_follows_the_hardware(requested, device, cuda_bf16, cpu_bf16, expected):
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # a simulated CPU without bf16: its warning is expected
        warnings.simplefilter("always")
        assert resolve_precision(requested, device, cuda_bf16=cuda_bf16, cpu_bf16=cpu_bf16) == expected
    emulated = [w for w in caught if "no native bf16" in str(w.message)]
    assert len(emulated) == (requested == "bf16" and device == "cpu" and cpu_bf16 is False)


def test_fp16_on_a_cpu_and_bf16_on_an_old_gpu_are_refused_naming_the_way_out():
    with pytest.raises(ValueError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", "cpu", cpu_bf16=True)
    with pytest.raises(ValueError, match="Ampere"):
        resolve_precision("bf16", "cuda", cuda_bf16=False)
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("int8", "cpu")


def test_fp16_on_a_cpu_is_refused_before_any_model_is_loaded(tmp_path, monkeypatch):
    from hp_mlm import prepare
    from hp_mlm.ops.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the precision was checked")

    monkeypatch.setattr(prepare, "load_model", no_loading)
    code = main(["train", "--profile", "smoke", "--precision", "fp16", "--output-dir", str(tmp_path), "--no-progress"])
    assert code == 2


def test_autocast_is_a_no_op_in_fp32_and_bf16_otherwise():
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with autocast("fp32", "cpu"):
        assert layer(x).dtype == torch.float32
    with autocast("bf16", "cpu"):
        assert layer(x).dtype == torch.bfloat16


def test_bf16_and_fp32_training_give_close_losses_and_the_history_names_the_precision():
    tokenizer = build_smoke_tokenizer()
    rows = tokenised(tokenizer, SENTENCES * 4)
    losses = {}
    for precision in ("fp32", "bf16"):
        model = build_smoke_model(tokenizer)
        settings = get_settings(
            "smoke", environ={}, epochs=2, batch_size=8, progress=False, schedule="linear", precision=precision
        )
        history = fit(model, tokenizer, rows, settings)
        assert history["precision"] == precision and history["device"] == "cpu" and history["processes"] == 1
        losses[precision] = [s["loss"] for s in history["steps"]]
    assert len(losses["fp32"]) == len(losses["bf16"])
    assert all(math.isfinite(x) for x in losses["bf16"])
    # bf16 keeps 8 bits of mantissa: per-step losses agree to a few per cent, not bit for bit
    assert max(abs(a - b) / a for a, b in zip(losses["fp32"], losses["bf16"])) < 0.05
    assert losses["fp32"] != losses["bf16"]  # bf16 really ran


def test_bf16_forced_on_a_cpu_without_it_runs_with_one_warning_line(tmp_path):
    """bf16 forced on a CPU without it: never silence; at the command line one line, naming the flag."""
    import subprocess
    import sys

    from hp_mlm.common import EMULATED_BF16

    with pytest.warns(UserWarning, match="no native bf16"):
        assert resolve_precision("bf16", "cpu", cpu_bf16=False) == "bf16"
    code = (
        "import sys, hp_mlm.common as c\n"
        "c.cpu_has_native_bf16 = lambda cpuinfo=None: False\n"
        "from hp_mlm.ops.cli import main\n"
        f"sys.exit(main(['train', '--profile', 'smoke', '--precision', 'bf16', '--epochs', '1', '--no-progress',"
        f" '--output-dir', {str(tmp_path / 'out')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "no native bf16" in line]
    assert lines == ["warning: " + EMULATED_BF16.replace("`precision`", "--precision")]
