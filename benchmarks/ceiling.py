"""How close a training step comes to what this machine can do: achieved FLOP/s against the ceiling.

For MiniLM-L6 (the offline stand-in, 22M parameters) and bert-base size (``BertConfig()`` with random
weights: exactly ``bert-base-uncased``'s shapes, 110M parameters), at the quick profile's shape
(16 rows x 128 tokens) and the full profile's (16 x 512), in fp32 and, where the CPU has bf16
instructions, bf16 autocast:

1. the ceiling: a matrix multiply of the step's largest shape (the feed-forward up-projection,
   ``[batch x length, hidden] @ [hidden, 4 x hidden]``), best of several;
2. the arithmetic of one step: 6 x (linear weights) x tokens for the encoder's linear layers
   (forward 2, backward 4), 12 x batch x length^2 x hidden per layer for attention, and 6 x (the
   head's weights) x the masked tokens for the MLM head, which runs only there (as the course's
   ``objective.masked_lm_loss``); embeddings and element-wise work are left out, so the share is
   if anything a little low;
3. real steps: forward, loss at the 15% masked positions, backward, clip, AdamW (PyTorch's default
   step; the course's ``build_optimizer`` now uses the fused one, 3-7% faster a step:
   ``fused_adamw.py``), as the course's loop does, timed after a warm-up; the peak memory of the process (each configuration runs in a
   fresh process, so its peak is its own).

    python benchmarks/ceiling.py                  # everything (about 15 minutes on 2 cores)
    python benchmarks/ceiling.py --shapes quick   # the 16 x 128 steps only

Writes benchmarks/results/ceiling.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = {"quick": (16, 128), "full": (16, 512)}
MODELS = ("minilm-l6", "bert-base")


def build(model_name: str):
    """The model, on the CPU, in train mode: MiniLM-L6's real config, or ``BertConfig()`` (random)."""
    from transformers import BertConfig, BertForMaskedLM

    if model_name == "bert-base":
        config = BertConfig()
    else:
        from hp_mlm.models import offline_model_path

        config = BertConfig.from_pretrained(offline_model_path())
    return BertForMaskedLM(config).train()


def step_flops(config, batch: int, length: int, masked: int) -> float:
    """FLOP of one training step (forward + backward), as in the module docstring."""
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    linear = layers * (4 * hidden * hidden + 2 * hidden * config.intermediate_size)
    attention = layers * 12 * batch * length * length * hidden
    head = 6 * (hidden * hidden + hidden * vocab) * masked
    return 6 * linear * batch * length + attention + head


def matmul_ceiling(rows: int, hidden: int, precision: str, repeats: int = 5) -> float:
    """Best FLOP/s of ``[rows, hidden] @ [hidden, 4 hidden]`` in ``precision`` over ``repeats`` runs."""
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = torch.randn(rows, hidden, dtype=dtype), torch.randn(hidden, 4 * hidden, dtype=dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * rows * hidden * 4 * hidden / best


def time_steps(model, batch: int, length: int, precision: str, steps: int) -> tuple[list[float], int]:
    """Seconds of each of ``steps`` training steps after one warm-up, and the masked tokens per step."""
    import torch

    from hp_mlm.common import autocast, mlm_logits

    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, length), generator=draw)
    mask, chosen = torch.ones_like(ids), torch.rand(ids.shape, generator=draw) < 0.15
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    seconds = []
    for i in range(steps + 1):
        started = time.perf_counter()
        with autocast(precision, "cpu"):
            logits = mlm_logits(model, ids, mask, chosen)
        loss = torch.nn.functional.cross_entropy(logits.float(), ids[chosen])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if i:  # the first step is the warm-up (allocations, AdamW's state)
            seconds.append(time.perf_counter() - started)
    return seconds, int(chosen.sum())


def measure_one(model_name: str, shape: str, precision: str, steps: int) -> dict:
    """One configuration, in this process: the ceiling, the step's FLOP, its times and peak memory."""
    import torch

    batch, length = SHAPES[shape]
    model = build(model_name)
    ceiling = matmul_ceiling(batch * length, model.config.hidden_size, precision)
    seconds, masked = time_steps(model, batch, length, precision, steps)
    flops = step_flops(model.config, batch, length, masked)
    median = statistics.median(seconds)
    return {
        "model": model_name,
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "shape": f"{batch} x {length}",
        "precision": precision,
        "step_seconds": [round(s, 3) for s in seconds],
        "step_median_s": round(median, 3),
        "gflop_per_step": round(flops / 1e9, 1),
        "achieved_gflops": round(flops / median / 1e9, 1),
        "ceiling_gflops": round(ceiling / 1e9, 1),
        "share_of_ceiling": round(flops / median / ceiling, 3),
        "peak_memory_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        "threads": torch.get_num_threads(),
    }


def run_all(shapes: list[str], steps: int) -> list[dict]:
    """Every configuration, each in a fresh process (its own peak memory); fp32 then bf16 in turn."""
    from hp_mlm.common import cpu_has_native_bf16

    precisions = ["fp32", "bf16"] if cpu_has_native_bf16() else ["fp32"]
    rows = []
    for shape in shapes:
        for model_name in MODELS:
            for precision in precisions:
                argv = [sys.executable, __file__, "--one", model_name, shape, precision, "--steps", str(steps)]
                done = subprocess.run(argv, capture_output=True, text=True, check=True)
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(format_row(rows[-1]), flush=True)
    return rows


def format_row(r: dict) -> str:
    return (
        f"| {r['model']} ({r['parameters_m']}M) | {r['shape']} | {r['precision']} | {r['step_median_s']} | "
        f"{r['gflop_per_step']} | {r['achieved_gflops']} | {r['ceiling_gflops']} | {r['share_of_ceiling']:.0%} | "
        f"{r['peak_memory_gb']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration (after a warm-up)")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "SHAPE", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(*args.one, args.steps)))
        return
    from hp_mlm.common import cpu_has_native_bf16

    started = time.perf_counter()
    header = (
        "| model | batch x tokens | precision | step (s, median) | GFLOP / step | achieved GFLOP/s | "
        "ceiling GFLOP/s | share | peak memory (GB) |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    print(header)
    rows = run_all(args.shapes, args.steps)
    machine = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "native_bf16": cpu_has_native_bf16(),
        "loadavg_end": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ceiling.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    text = "\n".join([f"`python benchmarks/ceiling.py` on {machine}:", "", header, *map(format_row, rows)])
    (RESULTS / "ceiling.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
