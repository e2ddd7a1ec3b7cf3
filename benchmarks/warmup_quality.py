"""The warmup schedule counted from step 1 against the one it replaced (transformers' schedule read from
step 0, whose first step runs at rate 0), on the same rows and frozen held-out masks, 3 seeds each, in one run.

    python benchmarks/warmup_quality.py                 # offline profile, 3 seeds

Writes ``benchmarks/results/warmup_quality.{json,md}``: held-out top-1 and perplexity, mean [min, max].
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from transformers import get_scheduler

import hp_mlm.training as training
from hp_mlm.common import atomic_write_text
from hp_mlm.config import get_settings
from hp_mlm.studies.options import compare_options, summarise

RESULTS = Path(__file__).resolve().parent / "results"
COUNTED_FROM_1 = training.build_scheduler


def counted_from_0(optimizer, total_steps: int, warmup_fraction: float, kind: str = "linear"):
    """The schedule before the change: ``get_scheduler`` read from step 0 (its first step at rate 0)."""
    names = {"linear": "linear", "constant": "constant_with_warmup"}
    warmup = int(round(warmup_fraction * total_steps))
    return get_scheduler(names[kind], optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)


def main() -> None:
    profile = sys.argv[1] if len(sys.argv) > 1 else "offline"
    settings = get_settings(profile, environ={}, progress=False)
    started, rows = time.perf_counter(), []
    for name, schedule in (
        ("counted from step 1 (now)", COUNTED_FROM_1),
        ("counted from step 0 (before)", counted_from_0),
    ):
        training.build_scheduler = schedule  # plan_training reads the module's name at each call
        runs = compare_options(settings, {name: {}}, seeds=3, log=print)
        rows += runs if not rows else runs[1:]  # "before fine-tuning" once
    training.build_scheduler = COUNTED_FROM_1
    summary = summarise(rows)
    machine = {"machine": platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
               "seconds": round(time.perf_counter() - started)}  # fmt: skip
    atomic_write_text(RESULTS / "warmup_quality.json", json.dumps({"machine": machine, "summary": summary}, indent=2))
    lines = [f"`python benchmarks/warmup_quality.py {profile}` on {machine}: 3 seeds each, same rows and frozen masks.", "",
             "| schedule | held-out top-1, mean [min, max] | perplexity, mean [min, max] |", "| --- | --- | --- |"]  # fmt: skip
    for s in summary:
        t, p = s["top1"], s["perplexity"]
        lines.append(f"| {s['option']} | {t['mean']:.2%} [{t['min']:.2%}, {t['max']:.2%}] | "
                     f"{p['mean']:.2f} [{p['min']:.2f}, {p['max']:.2f}] |")  # fmt: skip
    atomic_write_text(RESULTS / "warmup_quality.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
