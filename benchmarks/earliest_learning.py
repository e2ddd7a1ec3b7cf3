"""When does fine-tuning first show? The optimiser steps and training minutes after which the probes and
the example sentences first change, in the offline profile (the laptop route), on this machine.

A teacher sets a time budget (``HP_MLM_TIME_BUDGET``) for a room; a budget that stops before this point
shows nothing (0 of 35 probes before and after). The run is the offline profile's own (notebook 03's
plan, 12 epochs); every ``--every`` optimiser steps a callback scores the 35 probes (top-1) and the
profile's example sentences (the corpus's word first at each mask) with the model in eval mode, then goes
on. The callback's time is not training time (the loop's clock stops for callbacks), so the minutes
are those a time budget counts. Steps do not depend on the machine; minutes do: a machine's own
seconds per step (notebook 03 prints an epoch's) converts them.

    python benchmarks/earliest_learning.py                 # seeds 42 and 43, every 10 steps
    python benchmarks/earliest_learning.py --seeds 42 --every 5

Writes ``benchmarks/results/earliest_learning.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from hp_mlm.common import atomic_write_text, resolve_precision
from hp_mlm.config import get_settings
from hp_mlm.course.shipped import examples
from hp_mlm.inference import fill_mask
from hp_mlm.ops.allocator import reuse_freed_memory
from hp_mlm.prepare import prepare
from hp_mlm.profiles import HEAD_AUTO
from hp_mlm.studies.probes import default_probes, load_probes, score_probes
from hp_mlm.training import Callback, plan_training, train

RESULTS = Path(__file__).resolve().parent / "results"


class Watch(Callback):
    """Every ``every`` steps (and at step 0, before training): probes right and examples' first guesses."""

    def __init__(self, tokenizer, probes, sentences, answers, every: int) -> None:
        self.tokenizer, self.probes, self.sentences, self.answers, self.every = (
            tokenizer,
            probes,
            sentences,
            answers,
            every,
        )
        self.seen: list[dict] = []

    def look(self, model, step: int, seconds: float) -> None:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            hits = score_probes(model, self.tokenizer, self.probes, top_k=5)["hits_top1"]
            firsts = [m[0]["token"] for s in fill_mask(model, self.tokenizer, self.sentences, top_k=1) for m in s]
        model.train(was_training)
        right = sum(first == answer for first, answer in zip(firsts, self.answers))
        self.seen.append(
            {
                "step": step,
                "train_seconds": round(seconds, 1),
                "probes_top1": hits,
                "examples_right": right,
                "firsts": firsts,
            }
        )

    def on_step(self, model, step) -> bool:
        if step["step"] % self.every == 0:
            self.look(model, step["step"], step["seconds"])
        return False


def first(seen: list[dict], key: str) -> dict | None:
    """The first look where ``key`` rose above its value before training."""
    return next((s for s in seen if s[key] > seen[0][key]), None)


def run(seed: int, every: int) -> dict:
    settings = get_settings("offline", environ={}, seed=seed, progress=False, output_dir=f"/tmp/earliest-{seed}")
    started = time.perf_counter()
    prep = prepare(settings)
    s, tok, model = prep.settings, prep.loaded.tokenizer, prep.loaded.model
    pairs = examples(s.dataset)
    sentences = [text for text, _ in pairs]
    answers = [word for _, words in pairs for word in words]
    watch = Watch(tok, load_probes(default_probes(s)), sentences, answers, every)
    watch.look(model, 0, 0.0)
    plan = plan_training(model, tok, prep.train_tokens, s)
    with reuse_freed_memory(plan.accelerator.device.type == "cpu"):
        history = train(plan, [watch])
    wall = time.perf_counter() - started
    steps = history["optimizer_steps"]
    per_step = history["steps"][-1]["seconds"] / steps
    return {
        "seed": seed,
        "total_steps": steps,
        "seconds_per_step": round(per_step, 3),
        "wall_seconds": round(wall),
        "first_probe": first(watch.seen, "probes_top1"),
        "first_example": first(watch.seen, "examples_right"),
        "half_final_probes": next(x for x in watch.seen if x["probes_top1"] >= watch.seen[-1]["probes_top1"] / 2),
        "seen": watch.seen,
    }


def report(runs: list[dict], every: int) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, CPU precision {resolve_precision('auto', 'cpu')}"
    lines = [
        "# The earliest visible learning (offline profile)",
        "",
        f"`python benchmarks/earliest_learning.py`, {time.strftime('%Y-%m-%d')}, on {machine}; the probes and the "
        f"examples scored every {every} optimiser steps. Steps do not depend on the machine; minutes are this "
        "machine's training clock (what a time budget counts).",
        "",
        "| seed | steps in all | s per step | first probe right: step (min) | first example right: step (min) "
        "| half the final probes: step (min) | probes right before / at the end | whole run (min) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        at = {
            k: f"{r[k]['step']} ({r[k]['train_seconds'] / 60:.1f})" if r[k] else "never"
            for k in ("first_probe", "first_example", "half_final_probes")
        }
        lines.append(
            f"| {r['seed']} | {r['total_steps']} | {r['seconds_per_step']} | {at['first_probe']} | {at['first_example']} "
            f"| {at['half_final_probes']} | {r['seen'][0]['probes_top1']} / {r['seen'][-1]['probes_top1']} "
            f"| {r['wall_seconds'] / 60:.1f} |"
        )
    latest = max((r["first_example"] or {"step": r["total_steps"]})["step"] for r in runs)
    epoch = (
        runs[0]["total_steps"] // HEAD_AUTO["new"]["epochs"]
    )  # the offline profile's epochs (its stock head: a new head's)
    half = max(r["half_final_probes"]["step"] for r in runs)
    lines += [
        "",
        f"Over the seeds, an example's first guess first turns into the corpus's word by step {latest} at the latest, "
        f"and half of the final probe hits come by step {half} (of {runs[0]['total_steps']}, {epoch} per epoch). A time "
        f"budget that stops before step {latest} shows no change in the examples, and one before step {half} shows "
        f"little in the probes: on a laptop, set it to at least {math.ceil(half / epoch)} epochs' time (the seconds of "
        f"its first epoch, which `python -m hp_mlm train --profile offline --no-progress` prints, times "
        f"{math.ceil(half / epoch)}). Here that is "
        f"{half * statistics.mean(r['seconds_per_step'] for r in runs) / 60:.1f} min of training, at "
        f"{statistics.mean(r['seconds_per_step'] for r in runs):.2f} s per step.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--report", action="store_true", help="rewrite the .md from the saved .json, without training")
    args = parser.parse_args()
    if args.report:
        text = report(json.loads((RESULTS / "earliest_learning.json").read_text(encoding="utf-8")), args.every)
        atomic_write_text(RESULTS / "earliest_learning.md", text)
        print(text)
        return
    runs = []
    for seed in args.seeds:
        runs.append(run(seed, args.every))
        print(
            f"seed {seed}: first probe {runs[-1]['first_probe']}, first example {runs[-1]['first_example']}", flush=True
        )
    atomic_write_text(RESULTS / "earliest_learning.json", json.dumps(runs, indent=2) + "\n")
    text = report(runs, args.every)
    atomic_write_text(RESULTS / "earliest_learning.md", text)
    print(text)


if __name__ == "__main__":
    main()
