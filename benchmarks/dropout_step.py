"""Hidden-state dropout on or off in the course's own training step, on the course's own batches, in turns.

A profile of notebook 03's step (MiniLM-L6, bf16 autocast, 2 cores, the offline corpus's rows of about 60
tokens) put PyTorch's dropout among its largest costs after the matrix products: ``aten::bernoulli_``, the
random draw of every dropout mask (13 masks a step: after the embeddings and after each layer's attention
output and feed-forward block, BERT's ``hidden_dropout_prob``). So this measures the step with and without
that dropout (``Settings.hidden_dropout``), everything else the course's, and then profiles the step without
it (the operators with the most CPU time of their own: what is left in the way).

The variants train **the same model in the same process on the same batches, in turns** (the order reversed
every other round), each round giving one ratio against the dropout-on step; the spread of the rounds'
ratios is the figure's error bar. The step is ``training.training_step`` itself, inside
``ops.allocator.reuse_freed_memory`` as the notebooks and the main job train; the batches are the first
epoch's, built by ``plan_training`` from the profile's rows. The switch is each dropout module's ``p``, read at
every forward, so one set of weights serves both (they move on as they train). Held-out quality over seeds is
``benchmarks/levers_quality.py --levers hidden``.

    python benchmarks/dropout_step.py                                   # offline profile, bf16 and fp32
    python benchmarks/dropout_step.py --profile quick --dataset ../shared/data/oz/oz_mlm.parquet \\
        --model hp_mlm:minilm-l6 --name dropout_step_quick_oz

Writes benchmarks/results/<name>.{json,md} (default ``dropout_step``) with ``attention_kernel.save``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_kernel import save  # noqa: E402

VARIANTS = ("hidden dropout on", "hidden dropout off")


def interleaved(settings, rounds: int, steps: int) -> dict:
    """Seconds per optimiser step of each variant, in turns on one model and the first epoch's batches, and
    each round's ratio (off / on: below 1 is faster without hidden dropout)."""
    import torch

    from hp_mlm.ops.allocator import reuse_freed_memory
    from hp_mlm.prepare import prepare
    from hp_mlm.training import plan_training, training_step

    prep = prepare(settings.replace(hidden_dropout=True))
    model, s = prep.loaded.model, prep.settings
    plan = plan_training(model, prep.loaded.tokenizer, prep.train_tokens, s)
    plan.start()
    loader, _ = plan.epoch_batches(0)
    batches = list(loader)[:steps]
    hidden = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    assert hidden and not any(n.endswith("attention.self.dropout") for n, m in model.named_modules() if m in hidden)
    p = hidden[0].p
    plan.objective.train()

    def run(variant: str) -> float:
        for module in hidden:
            module.p = p if variant == VARIANTS[0] else 0.0
        started = time.perf_counter()
        for batch in batches:
            training_step(plan, [batch], 0)
        return (time.perf_counter() - started) / len(batches)

    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ratios = []
    with reuse_freed_memory(plan.accelerator.device.type == "cpu"):
        for variant in VARIANTS:  # warm-up: allocations, each path's first call
            run(variant)
        for i in range(rounds):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
            taken = {v: run(v) for v in order}
            for v, t in taken.items():
                seconds[v].append(t)
            ratios.append(taken[VARIANTS[1]] / taken[VARIANTS[0]])
            print(f"round {i + 1}: " + ", ".join(f"{v} {t:.3f} s" for v, t in taken.items()), flush=True)
        ops = profile_ops(plan, batches, hidden)  # inside the allocator, as the course trains
    widths = [b["input_ids"].shape[1] for b in batches]
    return {
        "model": s.model,
        "precision": s.precision,
        "attention": s.attention,
        "batch_size": s.batch_size,
        "steps_per_round": len(batches),
        "mean_width": round(statistics.mean(widths), 1),
        "dropout_modules": len(hidden),
        "rounds": rounds,
        "step_median_s": {v: round(statistics.median(x), 3) for v, x in seconds.items()},
        "ops_without_hidden_dropout": ops,
        "off_over_on": {
            "median": round(statistics.median(ratios), 3),
            "min": round(min(ratios), 3),
            "max": round(max(ratios), 3),
            "rounds": [round(x, 3) for x in ratios],
        },
    }


def profile_ops(plan, batches, hidden, top: int = 12) -> list[dict]:
    """Where the course's step (hidden dropout off) spends its CPU time: ``torch.profiler`` over the batches,
    the ``top`` operators by their own CPU time with their input shapes, as shares of the whole."""
    from torch.profiler import ProfilerActivity, profile

    from hp_mlm.training import training_step

    for module in hidden:
        module.p = 0.0
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for batch in batches:
            training_step(plan, [batch], 0)
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [
        {
            "op": e.key,
            "shapes": str(e.input_shapes)[:60],
            "calls": e.count,
            "share": round(e.self_cpu_time_total / total, 3),
        }
        for e in ranked
    ]


def report(machine: dict, rows: list[dict]) -> str:
    lines = [
        "Hidden-state dropout in the course's training step (`training.training_step`, the profile's own first-epoch",
        "batches, freed memory reused), on and off in turns on one model: seconds per optimiser step (median of the",
        "rounds) and off / on per round, median [min, max] (below 1: faster without it).",
        f"Command: `{machine['command']}`.",
        "",
        f"Machine: {machine}.",
        "",
        "| model | precision | attention | batch x mean tokens | on (s) | off (s) | off / on |",
        "| --- | --- | --- | --- | ---: | ---: | --- |",
    ]
    for r in rows:
        t, x = r["step_median_s"], r["off_over_on"]
        read = "faster" if x["max"] < 1 else "slower" if x["min"] > 1 else "the rounds disagree"
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['attention']} | {r['batch_size']} x {r['mean_width']} | "
            f"{t[VARIANTS[0]]} | {t[VARIANTS[1]]} | {x['median']:.2f} [{x['min']:.2f}, {x['max']:.2f}], {read} |"
        )
    for r in rows:
        if r.get("ops_without_hidden_dropout"):
            lines += [
                "",
                f"Where the course's step goes ({r['model']}, {r['precision']}, hidden dropout off; `torch.profiler`, "
                "the operators with the most CPU time of their own, by input shapes):",
                "",
                "| operator | input shapes | calls | share of the step's CPU time |",
                "| --- | --- | ---: | ---: |",
            ]
            for op in r["ops_without_hidden_dropout"]:
                lines.append(f"| `{op['op']}` | `{op['shapes']}` | {op['calls']} | {op['share']:.1%} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="offline")
    parser.add_argument("--model")
    parser.add_argument("--dataset")
    parser.add_argument("--precisions", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="optimiser steps per variant per round")
    parser.add_argument("--name", default="dropout_step", help="results file name (without .json/.md)")
    args = parser.parse_args()
    from hp_mlm.common import cpu_has_native_bf16
    from hp_mlm.config import get_settings

    overrides = {k: getattr(args, k) for k in ("model", "dataset") if getattr(args, k)}
    rows, started = [], time.perf_counter()
    for precision in args.precisions:
        if precision == "bf16" and not cpu_has_native_bf16():
            print("bf16: skipped, this CPU has no bf16 instructions")
            continue
        settings = get_settings(args.profile, progress=False, precision=precision, **overrides)
        rows.append(interleaved(settings, args.rounds, args.steps))
        print(json.dumps(rows[-1]), flush=True)
    print(save("dropout_step.py", args.name, rows, started, report))


if __name__ == "__main__":
    main()
