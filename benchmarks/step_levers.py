"""The course's training step today against the step with a lever, interleaved in one process, and a profile.

The step is the course's own: ``config.get_settings("offline")`` at the shape asked (batch 16, every row
``length`` tokens long, random token ids), settings resolved as the main job resolves them (bf16 on a CPU with
bf16 instructions, ``attention="auto"``, attention and hidden-state dropout off), ``training.plan_training`` and
``training.training_step`` inside ``allocator.reuse_freed_memory``, as ``ops.job.run_training`` trains. The models:
MiniLM-L6 (``hp_mlm:minilm-l6``, the offline profile's) and a random ``BertConfig()`` of bert-base's shape, as
``ceiling.py`` builds it (with the course's dropout settings and attention kernel).

Each variant has its own copy of the same model and its own plan; the variants take one step each in turn (the
order reversed every other round), on the same batches, so the host's load moves both alike. The ratio of each
round (new / today) is the figure; its median and quartiles over the rounds are printed with
``os.getloadavg()``. On a host shared with other work two clocks are kept: the wall clock with the course's
threads (what the learner waits for, moved by the load), and with ``--threads 1`` the process's CPU time
(``time.process_time``, much less moved by other processes). Peak memory (ru_maxrss) is measured in a fresh
process per variant (``--peak``). ``--profile`` prints the operators with the most CPU time of their own
(``torch.profiler``), for today's step and the new one.

    python benchmarks/step_levers.py --models minilm-l6 bert-base --lengths 128 --rounds 10
    python benchmarks/step_levers.py --models bert-base --lengths 512 --rounds 4
    python benchmarks/step_levers.py --threads 1 --rounds 12 --name step_levers_cpu_time
    python benchmarks/step_levers.py --profile --rounds 0 --name step_profile

Writes benchmarks/results/<name>.{json,md} (default ``step_levers``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
#: The variants: the course's step before this lever, and with it (``ops.master_weights.bf16_weights``).
VARIANTS = ("fp32 weights, autocast", "bf16 weights, fp32 master")


def course_plan(model_name: str, length: int, master: bool, rows: int = 96, precision=None, attention=None):
    """The course's plan for ``model_name`` at 16 x ``length`` and its first epoch's batches, inside what the main
    job wraps training in (``reuse_freed_memory``; ``bf16_weights`` with ``master``): ``(plan, batches, stack)``,
    ``stack`` an ``ExitStack`` the caller closes. ``precision``, ``attention``: instead of the profile's ``auto``."""
    import contextlib

    import torch
    from transformers import BertConfig, BertForMaskedLM

    from hp_mlm.config import get_settings, model_options, resolve_auto
    from hp_mlm.models import load_model
    from hp_mlm.ops import master_weights
    from hp_mlm.ops.allocator import reuse_freed_memory
    from hp_mlm.training import plan_training

    chosen = {k: v for k, v in {"precision": precision, "attention": attention}.items() if v}
    settings = get_settings("offline", max_length=length, batch_size=16, progress=False, output_dir=None, **chosen)
    settings = resolve_auto(settings, new_head=True)
    options = model_options(settings)
    loaded = load_model(settings.model, **options)
    model = loaded.model
    if model_name == "bert-base":
        config = BertConfig(
            hidden_dropout_prob=model.config.hidden_dropout_prob,
            attention_probs_dropout_prob=model.config.attention_probs_dropout_prob,
        )
        config._attn_implementation = model.config._attn_implementation
        torch.manual_seed(0)
        model = BertForMaskedLM(config)
    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (rows, length), generator=draw).tolist()
    data = [
        {
            "input_ids": [101, *r[1:-1], 102],
            "attention_mask": [1] * length,
            "special_tokens_mask": [1] + [0] * (length - 2) + [1],
        }
        for r in ids
    ]
    plan = plan_training(model, loaded.tokenizer, data, settings)
    plan.start()
    loader, _ = plan.epoch_batches(0)
    batches = list(loader)
    plan.objective.train()
    stack = contextlib.ExitStack()
    stack.enter_context(reuse_freed_memory(True))
    stack.enter_context(master_weights.bf16_weights(plan, enabled=master))
    return plan, batches, stack


def interleaved(model_name: str, length: int, rounds: int, threads: int) -> dict:
    """Each variant's step in turns; per-round ratios against today's."""
    import torch

    from hp_mlm.training import training_step

    if threads:
        torch.set_num_threads(threads)
    clock = time.process_time if threads == 1 else time.perf_counter
    plans = {v: course_plan(model_name, length, v != VARIANTS[0]) for v in VARIANTS}
    for plan, batches, _ in plans.values():  # warm-up: AdamW's state, the allocator's heap
        for batch in batches[:2]:
            training_step(plan, [batch], 0)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    loads = []
    for r in range(rounds):
        for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            plan, batches, _ = plans[v]
            started = clock()
            training_step(plan, [batches[r % len(batches)]], 0)
            seconds[v].append(clock() - started)
        loads.append(os.getloadavg()[0])
        print(
            f"round {r + 1}: "
            + ", ".join(f"{v} {s[-1]:.3f} s" for v, s in seconds.items())
            + f", load {loads[-1]:.1f}",
            flush=True,
        )
    for _, _, stack in plans.values():
        stack.close()
    ratios = sorted(b / a for a, b in zip(seconds[VARIANTS[0]], seconds[VARIANTS[1]]))
    plan = plans[VARIANTS[0]][0]
    return {
        "model": model_name,
        "shape": f"16 x {length}",
        "precision": plan.settings.precision,
        "attention": plan.model.config._attn_implementation,
        "threads": torch.get_num_threads(),
        "clock": "process CPU time" if threads == 1 else "wall",
        "rounds": rounds,
        "step_median_s": {v: round(statistics.median(s), 3) for v, s in seconds.items()},
        "step_quartiles_s": {v: quartiles(s) for v, s in seconds.items()},
        "new_over_today": {"median": round(statistics.median(ratios), 3), "quartiles": quartiles(ratios)},
        "loadavg_1min": {"min": min(loads), "max": max(loads)},
    }


def quartiles(values: list[float]) -> list[float]:
    values = sorted(values)
    return [round(values[len(values) // 4], 3), round(values[(3 * len(values)) // 4], 3)]


def peak(model_name: str, length: int, variant: str, steps: int = 3) -> dict:
    """Peak resident memory (GB) of a fresh process taking ``steps`` of the variant's step."""
    from hp_mlm.training import training_step

    plan, batches, stack = course_plan(model_name, length, variant != VARIANTS[0], rows=16 * steps)
    for batch in batches[:steps]:
        training_step(plan, [batch], 0)
    stack.close()
    return {"peak_memory_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)}


def profile_ops(model_name: str, length: int, steps: int = 3, top: int = 14) -> dict:
    """The operators with the most CPU time of their own over ``steps`` steps, per variant, as shares."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from hp_mlm.training import training_step

    out = {}
    for variant in VARIANTS:
        plan, batches, stack = course_plan(model_name, length, variant != VARIANTS[0])
        for batch in batches[:2]:
            training_step(plan, [batch], 0)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in batches[2 : 2 + steps]:
                training_step(plan, [batch], 0)
        stack.close()
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
        out[variant] = [
            {"op": e.key, "calls_per_step": e.count // steps, "share": round(e.self_cpu_time_total / total, 3)}
            for e in ranked
        ]
    return {
        "model": model_name,
        "shape": f"16 x {length}",
        "ops": out,
        "loadavg": os.getloadavg(),
        "threads": torch.get_num_threads(),
    }


def report(data: dict) -> str:
    lines = [
        f"`{data['command']}`: the course's step with {VARIANTS[0]} against {VARIANTS[1]} (`ops.master_weights`), one step each",
        "in turns in one process; median of the rounds [quartiles]; new / before per round, median [quartiles] (below",
        f"1: faster). Machine: {data['machine']}. The host was shared with other work: the load average is printed.",
        "",
        "| model | shape | precision | attention | threads, clock | rounds | before (s) | new (s) | new / before | load (1 min) | peak GB before / new |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for r in data["rows"]:
        t, q, x = r["step_median_s"], r["step_quartiles_s"], r["new_over_today"]
        p = r.get("peak_memory_gb", {})
        lines.append(
            f"| {r['model']} | {r['shape']} | {r['precision']} | {r['attention']} | {r['threads']}, {r['clock']} | {r['rounds']} | "
            f"{t[VARIANTS[0]]} {q[VARIANTS[0]]} | {t[VARIANTS[1]]} {q[VARIANTS[1]]} | {x['median']:.2f} {x['quartiles']} | "
            f"{r['loadavg_1min']['min']:.1f}-{r['loadavg_1min']['max']:.1f} | {p.get(VARIANTS[0], 'n/a')} / {p.get(VARIANTS[1], 'n/a')} |"
        )
    for p in data.get("profiles", []):
        lines += [
            "",
            f"Profile, {p['model']} {p['shape']} (`torch.profiler`, self CPU time, {p.get('threads')} thread(s); load {p['loadavg'][0]:.1f}):",
            "",
        ]
        lines += ["| variant | top operators (share of the step's CPU time) |", "| --- | --- |"]
        for variant, ops in p["ops"].items():
            lines.append(f"| {variant} | " + ", ".join(f"`{o['op']}` {o['share']:.1%}" for o in ops) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=["minilm-l6", "bert-base"], default=["minilm-l6", "bert-base"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[128])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default; 1: one thread, CPU time")
    parser.add_argument("--peak", action="store_true", help="also each variant's peak memory, a fresh process each")
    parser.add_argument("--profile", action="store_true", help="also torch.profiler's top operators per variant")
    parser.add_argument("--name", default="step_levers")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(peak(args.one[0], int(args.one[1]), args.one[2])))
        return
    import torch

    from hp_mlm.common import atomic_write_text, cpu_has_native_bf16

    if args.threads:  # the profile too
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    rows, profiles = [], []
    for model_name in args.models:
        for length in args.lengths:
            if args.rounds:
                rows.append(interleaved(model_name, length, args.rounds, args.threads))
            if args.peak and rows:
                rows[-1]["peak_memory_gb"] = {}
                for v in VARIANTS:
                    done = subprocess.run(
                        [sys.executable, __file__, "--one", model_name, str(length), v],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    rows[-1]["peak_memory_gb"][v] = json.loads(done.stdout.strip().splitlines()[-1])["peak_memory_gb"]
            if args.profile:
                profiles.append(profile_ops(model_name, length))
    machine = {
        "cores": os.cpu_count(),
        "native_bf16": cpu_has_native_bf16(),
        "seconds": round(time.perf_counter() - started),
    }
    command = "python benchmarks/step_levers.py " + " ".join(sys.argv[1:])
    data = {
        "command": command,
        "machine": machine,
        "rows": rows,
        "profiles": profiles,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / f"{args.name}.json", json.dumps(data, indent=2) + "\n")
    atomic_write_text(RESULTS / f"{args.name}.md", report(data))
    print(report(data))


if __name__ == "__main__":
    main()
