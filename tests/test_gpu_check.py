"""benchmarks/gpu_check.sh starts, and refuses clearly without CUDA; its code path runs on a CPU, tiny."""

import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_without_cuda_the_gpu_check_stops_at_once_and_says_why():
    # PYTHON: this interpreter, not `python` from PATH (a venv's python run directly leaves PATH without it)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_check.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: no CUDA GPU is visible") and "--cpu-smoke" in done.stderr


def test_the_gpu_checks_path_runs_on_a_cpu_with_a_tiny_bert():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--cpu-smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith(("HP_MLM_", "HF_"))},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["label"] for r in runs] == ["auto", "fp16"]
    assert all(r["optimizer_steps"] > 0 and not r["scheduler_warning"] and r["real_tokens_per_s"] > 0 for r in runs)
