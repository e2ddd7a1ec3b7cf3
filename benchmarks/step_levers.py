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
(``torch.profiler``), for today's step and the new one, and today's matrix products replayed alone
(:func:`matmul_floor`): how much faster the step could be if nothing else took time.

    python benchmarks/step_levers.py --models minilm-l6 bert-base --lengths 128 512 --rounds 5 --profile --peak \\
        --name step_levers_quiet                                    # about 10.5 minutes on 2 quiet cores
    python benchmarks/step_levers.py --threads 1 --rounds 12       # on a host busy with other work

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
#: The variants: the course's step before this lever, and with it (``studies.master_weights.bf16_weights``).
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
    from hp_mlm.ops.allocator import reuse_freed_memory
    from hp_mlm.studies import master_weights
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
    cls, sep = loaded.tokenizer.cls_token_id, loaded.tokenizer.sep_token_id
    data = [
        {
            "input_ids": [cls, *r[1:-1], sep],
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


#: The matrix products of a step, as the profiler names them.
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def profile_ops(model_name: str, length: int, steps: int = 3, top: int = 14) -> dict:
    """The operators with the most CPU time of their own over ``steps`` steps, per variant, as shares; and for
    today's step, its matrix products replayed alone (:func:`matmul_floor`) against the step's own seconds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from hp_mlm.training import training_step

    out, floor = {}, None
    for variant in VARIANTS:
        plan, batches, stack = course_plan(model_name, length, variant != VARIANTS[0])
        for batch in batches[:2]:
            training_step(plan, [batch], 0)
        started = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for batch in batches[2 : 2 + steps]:
                training_step(plan, [batch], 0)
        step_s = (time.perf_counter() - started) / steps
        stack.close()
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
        out[variant] = [
            {"op": e.key, "calls_per_step": e.count // steps, "share": round(e.self_cpu_time_total / total, 3)}
            for e in ranked
        ]
        if floor is None:  # today's step
            dtype = torch.bfloat16 if plan.settings.precision == "bf16" else torch.float32
            floor = matmul_floor(prof.key_averages(group_by_input_shape=True), steps, dtype)
            floor["step_s_profiled"] = round(step_s, 3)
            floor["share_of_step_in_matmuls"] = round(
                sum(e.self_cpu_time_total for e in events if e.key in MATMULS) / total, 3
            )
    return {
        "model": model_name,
        "shape": f"16 x {length}",
        "ops": out,
        "matmul_floor": floor,
        "loadavg": os.getloadavg(),
        "threads": torch.get_num_threads(),
    }


def matmul_floor(events, steps: int, dtype, calls: int = 5) -> dict:
    """The step's matrix products alone: every ``mm``, ``addmm`` and ``bmm`` shape the profiler recorded, run on
    contiguous random ``dtype`` tensors (after a warm-up call, the best of ``calls``), times its calls per step.
    Their sum is the seconds a step would take if everything else took none and its products ran as fast as they
    do alone: the step cannot be sped up past ``step / floor`` without faster matrix products.
    Returns ``{"floor_s", "gflop", "gflops", "shapes"}``."""
    import torch

    floor = flop = 0.0
    shapes = 0
    for e in events:
        if e.key not in MATMULS or not e.input_shapes:
            continue
        dims = [d for d in e.input_shapes if d]
        a_shape, b_shape = dims[-2], dims[-1]  # addmm's bias comes first
        a, b = torch.randn(a_shape, dtype=dtype), torch.randn(b_shape, dtype=dtype)
        product = torch.bmm if e.key == "aten::bmm" else torch.mm
        product(a, b)  # warm-up: oneDNN builds its kernel for the shape
        best = float("inf")
        for _ in range(calls):
            started = time.perf_counter()
            product(a, b)
            best = min(best, time.perf_counter() - started)
        per_step = e.count / steps
        floor += best * per_step
        flop += 2 * a.numel() * b_shape[-1] * per_step
        shapes += 1
    return {
        "floor_s": round(floor, 3),
        "gflop": round(flop / 1e9, 1),
        "gflops": round(flop / floor / 1e9),
        "shapes": shapes,
    }


def cpu_kind() -> str:
    """ "bf16 with AMX", "bf16" or "fp32 only", from ``/proc/cpuinfo``'s flags (the kinds the course's figures name)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text(errors="replace").split())
    except OSError:
        return "unknown"
    return "bf16 with AMX" if "amx_bf16" in flags else "bf16" if "avx512_bf16" in flags else "fp32 only"


def report(data: dict) -> str:
    lines = [
        f"`{data['command']}`: the course's step with {VARIANTS[0]} against {VARIANTS[1]} (`studies.master_weights`), one step each",
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
        f = p.get("matmul_floor")
        if f:
            today = next(iter(p["ops"].values()))  # today's step's top operators
            attention = sum(o["share"] for o in today if "scaled_dot_product" in o["op"])
            kept = f["share_of_step_in_matmuls"] + attention
            lines += [
                "",
                f"Its matrix products ({f['shapes']} shapes, {f['gflop']} GFLOP a step, {f['share_of_step_in_matmuls']:.0%} of "
                f"the profiled step) replayed alone take {f['floor_s']} s a step ({f['gflops']} GFLOP/s) against the "
                f"step's {f['step_s_profiled']} s under the profiler. With every other operator at zero a step would be "
                f"at most {1 / kept:.2f}x faster with its products"
                + (f" and SDPA's attention ({attention:.0%} of the step)" if attention else "")
                + f" as fast as in the step; {f['step_s_profiled'] / f['floor_s']:.1f}x if the products ran as fast as "
                "alone (their operands hot in the cache)" + (" and the attention took no time." if attention else "."),
            ]
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
        "cpu_kind": cpu_kind(),
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
