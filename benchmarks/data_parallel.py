"""The smoke profile's epoch with 1 and with 2 CPU processes (issue 11).

Runs ``python -m hp_mlm train --profile smoke`` alone and under
``accelerate launch --multi_gpu --num_processes 2`` (which works on CPUs, over gloo), alternating,
``--rounds`` times, and prints per run: optimiser steps per epoch, the median epoch's training clock
(seconds, from history.json) and the whole command's wall time. Writes
``benchmarks/results/data_parallel.json``.

    python benchmarks/data_parallel.py --rounds 3 --epochs 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "data_parallel.json"


def run(processes: int, epochs: int, out: Path) -> dict:
    job = [
        "-m",
        "hp_mlm",
        "train",
        "--profile",
        "smoke",
        "--epochs",
        str(epochs),
        "--no-progress",
        "--output-dir",
        str(out),
    ]
    if processes == 1:
        cmd = [sys.executable, *job]
    else:
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            *job,
        ]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    wall = time.perf_counter() - started
    history = json.loads((out / "history.json").read_text())
    epochs_s = [e["seconds"] for e in history["epochs"]]
    return {
        "processes": history["processes"],
        "steps_per_epoch": history["optimizer_steps"] / len(epochs_s),
        "epoch_seconds_median": statistics.median(epochs_s),
        "command_seconds": wall,
        "after_top1": json.loads((out / "metrics.json").read_text())["after"]["top1"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for processes in (1, 2):
                row = run(processes, args.epochs, Path(tmp) / f"{r}-{processes}") | {"round": r}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {}
    for processes in (1, 2):
        mine = [r for r in rows if r["processes"] == processes]
        summary[processes] = {
            k: (statistics.mean(r[k] for r in mine), min(r[k] for r in mine), max(r[k] for r in mine))
            for k in ("steps_per_epoch", "epoch_seconds_median", "command_seconds")
        }
        print(
            f"{processes} process(es): "
            + ", ".join(f"{k} {m:.2f} [{lo:.2f}, {hi:.2f}]" for k, (m, lo, hi) in summary[processes].items())
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "epochs": args.epochs,
                "rounds": args.rounds,
                "cpu_count": os.cpu_count(),
                "rows": rows,
                "summary": summary,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
