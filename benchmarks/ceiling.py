"""How close a training step comes to what this machine can do: achieved FLOP/s against the ceiling.

For MiniLM-L6 (the offline stand-in, 22M parameters) and bert-base size (``BertConfig()`` with random
weights: exactly ``bert-base-uncased``'s shapes, 110M parameters), at the quick profile's shape
(16 rows x 128 tokens) and the full profile's (16 x 512), in fp32 and, where the CPU has bf16
instructions, bf16 autocast:

1. the ceiling: the matrix product of the step's largest shape (the feed-forward up-projection,
   ``[batch x length, hidden] @ [4 x hidden, hidden].T``, as ``nn.Linear`` calls it): 3 warm-up calls, then 7
   repeats of the best of 5 calls; the median of the repeats is the ceiling, and their spread ((max - min) /
   median) is printed beside it. On a quiet machine the repeats agree within 10%; where they do not, the run
   says so (the host was busy) and its shares are not to be trusted;
2. the arithmetic of one step: 6 x (linear weights) x tokens for the encoder's linear layers
   (forward 2, backward 4), 12 x batch x length^2 x hidden per layer for attention, and 6 x (the
   head's weights) x the masked tokens for the MLM head, which runs only there (as the course's
   ``training.masked_lm_loss``); embeddings and element-wise work are left out, so the share is
   if anything a little low;
3. real steps, timed after two warm-up steps (``--steps`` of them, 6 by default; their spread is printed), and
   the peak memory of the process (each configuration runs in a fresh process, so its peak is its own).

Each model, shape and precision runs in these variants, one after the other in the same run:

- ``default allocator`` and ``attention dropout on``: the course as it was (this file's own copy of the step:
  forward, loss at the masked positions, backward, clip, the fused AdamW, with attention and hidden-state dropout
  on), with glibc's default allocator and with freed memory reused (``allocator.reuse_freed_memory``);
- ``course``: exactly the course's step today: ``training.plan_training`` and ``training.training_step`` with the
  offline profile's settings at this shape (``benchmarks/step_levers.py``'s ``course_plan``): attention and
  hidden-state dropout off as the course sets them, the attention kernel ``attention="auto"`` picks, freed memory
  reused, as ``ops.job.run_training`` trains;
- ``course, master weights``: the same with ``studies.master_weights`` (bf16 weights in the model, fp32 master weights
  in the optimiser; measured, not kept);
- ``course, sdpa attention`` / ``course, eager attention``: the same with that kernel whatever ``auto`` picks;
- ``course, compiled``: the same with the encoder and head compiled by ``torch.compile`` (inductor's C++
  kernels); its warm-up steps, which compile, are reported apart (``first_step_s``).

The minor page faults and the kernel (system) time per step are printed beside the times, and the 1-minute load
average. The share is taken against the best ceiling measured for that model, shape and precision in the same run
(a row kept by ``--merge`` keeps its run's tag, ``run``, since a shared host's speed also moves from one run to the
next). Which variant is faster is measured interleaved in one process: ``benchmarks/step_levers.py`` (the
course's step with and without a lever) and ``benchmarks/attention_kernel.py``.

    python benchmarks/ceiling.py                          # everything (about 40 minutes on 2 cores)
    python benchmarks/ceiling.py --shapes quick --merge   # the 16 x 128 steps again, the rest kept
    python benchmarks/ceiling.py --shapes full --models bert-base --precisions bf16 --variants course --merge

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
#: The variants, each a lever on top of the one before it where it says so. "course" is what ``training.train``
#: does on the CPU today (freed memory reused, attention dropout off); the two before it are the course as it
#: was; the last two try another attention kernel and ``torch.compile`` on top of the course.
VARIANTS = (
    "default allocator",  # glibc's allocator, attention dropout on (the course before allocator.py)
    "attention dropout on",  # freed memory reused, the model's attention dropout (the course before levers.md)
    "course",  # the course's own step (plan_training, training_step): dropout off, attention "auto"
    "course, master weights",  # the same with studies.master_weights: bf16 weights, fp32 master weights (not kept)
    "course, sdpa attention",  # the same with SDPA's fused attention kernel whatever "auto" picks
    "course, eager attention",  # the same with attention as matmul-softmax-matmul (attn_implementation="eager")
    "course, compiled",  # the same, the model compiled by torch.compile (inductor, C++ kernels on the CPU)
)
#: The variants with the model's attention dropout on.
DROPOUT_ON = VARIANTS[:2]


def build(model_name: str, attention_dropout: bool = True, attention: str = "sdpa"):
    """The model, on the CPU, in train mode: MiniLM-L6's real config, or ``BertConfig()`` (random)."""
    from transformers import BertConfig, BertForMaskedLM

    if model_name == "bert-base":
        config = BertConfig()
    else:
        from hp_mlm.models import offline_model_path

        config = BertConfig.from_pretrained(offline_model_path())
    if not attention_dropout:
        config.attention_probs_dropout_prob = 0.0
    config._attn_implementation = attention
    return BertForMaskedLM(config).train()


def step_flops(config, batch: int, length: int, masked: int) -> float:
    """FLOP of one training step (forward + backward), as in the module docstring."""
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    linear = layers * (4 * hidden * hidden + 2 * hidden * config.intermediate_size)
    attention = layers * 12 * batch * length * length * hidden
    head = 6 * (hidden * hidden + hidden * vocab) * masked
    return 6 * linear * batch * length + attention + head


def matmul_ceiling(
    rows: int, hidden: int, precision: str, repeats: int = 7, calls: int = 5
) -> tuple[float, list[float]]:
    """FLOP/s of ``[rows, hidden] @ [hidden, 4 hidden]`` in ``precision`` (the linear layer's ``x @ W.T``, as
    ``nn.Linear`` calls it): after a warm-up of 3 calls, ``repeats`` repeats, each the best of ``calls`` calls.
    Returns the median of the repeats and the repeats (their spread is printed beside each row: on a quiet
    machine they agree within 10%; a busy one moves them)."""
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, w = torch.randn(rows, hidden, dtype=dtype), torch.randn(4 * hidden, hidden, dtype=dtype)
    for _ in range(3):  # warm-up: oneDNN's kernels are built at the first call of a shape
        a @ w.t()
    measured = []
    for _ in range(repeats):
        best = float("inf")
        for _ in range(calls):
            started = time.perf_counter()
            a @ w.t()
            best = min(best, time.perf_counter() - started)
        measured.append(2 * rows * hidden * 4 * hidden / best)
    return statistics.median(measured), measured


def train_step(model, optimizer, ids, mask, chosen, precision: str) -> None:
    """One training step as the course's loop takes it on the CPU: forward (the head at the masked positions
    only), cross-entropy there, backward, clipping at 1.0, the optimiser's step."""
    import torch

    from hp_mlm.common import autocast, mlm_logits

    with autocast(precision, "cpu"):
        logits = mlm_logits(model, ids, mask, chosen)
    torch.nn.functional.cross_entropy(logits.float(), ids[chosen]).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()


def time_steps(
    model, batch: int, length: int, precision: str, steps: int, compiled: bool = False
) -> tuple[list[float], int, dict]:
    """Seconds of each of ``steps`` training steps after one warm-up, the masked tokens per step, and
    the timed steps' minor page faults and kernel seconds (medians per step). ``compiled``: the forward
    runs through the encoder and head compiled by ``torch.compile`` (the warm-up step compiles them, forward and
    backward)."""
    import torch

    from hp_mlm.training import build_optimizer

    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, length), generator=draw)
    mask, chosen = torch.ones_like(ids), torch.rand(ids.shape, generator=draw) < 0.15
    optimizer = build_optimizer(model, 1e-5)
    if compiled:  # in place: mlm_logits calls the encoder and the head apart (the head at the masked rows only)
        model.bert.compile()
        model.cls.compile()
    # one warm-up step (allocations, AdamW's state)
    seconds, system = timed(lambda _: train_step(model, optimizer, ids, mask, chosen, precision), steps, warmup=1)
    return seconds, int(chosen.sum()), system


def timed(step, count: int, warmup: int) -> tuple[list[float], dict]:
    """Call ``step(i)`` for ``i`` in ``range(warmup + count)``: the seconds of the last ``count`` calls, and their
    minor page faults and kernel seconds (medians per step)."""
    seconds, faults, kernel = [], [], []
    for i in range(warmup + count):
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        step(i)
        if i >= warmup:
            seconds.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_SELF)
            faults.append(after.ru_minflt - before.ru_minflt)
            kernel.append(after.ru_stime - before.ru_stime)
    return seconds, {
        "page_faults_per_step": int(statistics.median(faults)),
        "kernel_s_per_step": statistics.median(kernel),
    }


def course_steps(model_name: str, length: int, precision: str, variant: str, steps: int):
    """The course's own step (``step_levers.course_plan``: ``plan_training`` and ``training_step`` with the offline
    profile's settings at this shape and precision, hidden and attention dropout off, the kernel ``auto`` picks,
    freed memory reused), timed as :func:`time_steps` does, after two warm-up steps; ``course, master weights`` adds
    ``studies.master_weights``, ``course, sdpa attention`` /
    ``course, eager attention`` force that kernel, ``course, compiled`` compiles encoder and head."""
    from step_levers import course_plan

    from hp_mlm.training import training_step

    attention = {"course, sdpa attention": "sdpa", "course, eager attention": "eager"}.get(variant)
    master = variant == "course, master weights"
    plan, batches, stack = course_plan(model_name, length, master, 16 * (steps + 2), precision, attention)
    if variant.endswith("compiled"):
        plan.model.bert.compile()
        plan.model.cls.compile()
    with stack:  # two warm-up steps (allocations, AdamW's state, a compile)
        seconds, system = timed(lambda i: training_step(plan, [batches[i]], 0), steps, warmup=2)
    masked = int(statistics.median(int((b["labels"] != -100).sum()) for b in batches[2 : steps + 2]))
    return plan.model, seconds, masked, system


def measure_one(model_name: str, shape: str, precision: str, variant: str, steps: int) -> dict:
    """One configuration, in this process: the ceiling, the step's FLOP, its times and peak memory."""
    import torch

    from hp_mlm.ops.allocator import reuse_freed_memory

    batch, length = SHAPES[shape]
    started = time.perf_counter()
    if variant in DROPOUT_ON:  # the course as it was: this file's own step, attention and hidden dropout on
        model = build(model_name, attention_dropout=True)
        with reuse_freed_memory(variant != VARIANTS[0]) as switched:
            seconds, masked, system = time_steps(model, batch, length, precision, steps)
    else:
        switched = True
        model, seconds, masked, system = course_steps(model_name, length, precision, variant, steps)
    whole = time.perf_counter() - started
    ceiling, repeats = matmul_ceiling(batch * length, model.config.hidden_size, precision)
    flops = step_flops(model.config, batch, length, masked)
    median = statistics.median(seconds)
    return {
        "model": model_name,
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "shape": f"{batch} x {length}",
        "precision": precision,
        "variant": variant,
        "freed_memory_reused": switched,
        **system,
        "step_seconds": [round(s, 3) for s in seconds],
        "step_median_s": round(median, 3),
        "first_step_s": round(
            whole - sum(seconds), 1
        ),  # the warm-up steps and the setup: with torch.compile, the compiling
        "gflop_per_step": round(flops / 1e9, 1),
        "achieved_gflops": round(flops / median / 1e9, 1),
        "ceiling_gflops": round(ceiling / 1e9, 1),
        "ceiling_repeats_gflops": [round(c / 1e9) for c in repeats],
        "ceiling_spread": round((max(repeats) - min(repeats)) / ceiling, 3),
        "step_spread": round((max(seconds) - min(seconds)) / median, 3),
        "loadavg": os.getloadavg(),
        "share_of_ceiling": round(flops / median / ceiling, 3),
        "peak_memory_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        "threads": torch.get_num_threads(),
    }


def run_all(shapes: list[str], steps: int, models=MODELS, precisions=None, variants=VARIANTS) -> list[dict]:
    """Every configuration asked, each in a fresh process (its own peak memory); fp32 then bf16, each in
    every variant, in turn."""
    from hp_mlm.common import cpu_has_native_bf16

    precisions = precisions or (["fp32", "bf16"] if cpu_has_native_bf16() else ["fp32"])
    rows = []
    for shape in shapes:
        for model_name in models:
            for precision, variant in [(p, v) for p in precisions for v in variants]:
                argv = [sys.executable, __file__, "--one", model_name, shape, precision, variant, "--steps", str(steps)]
                done = subprocess.run(argv, capture_output=True, text=True, check=True)
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(format_row(rows[-1]), flush=True)  # against its own ceiling; the report, the best
                if rows[-1]["ceiling_spread"] > 0.1:
                    print(
                        f"  (the ceiling's repeats spread {rows[-1]['ceiling_spread']:.0%}, more than 10%: the host "
                        f"is busy, load {rows[-1]['loadavg'][0]:.1f}; its figures are not to be trusted)",
                        flush=True,
                    )
    return rows


#: Earlier runs' names of today's variants (before attention dropout was turned off in the course).
RENAMED = {"course": "attention dropout on", "course, no attention dropout": "course"}


def key(row: dict) -> tuple:
    return row["model"], row["shape"], row["precision"], row["variant"]


HEADER = (
    "| model | batch x tokens | precision | variant | step (s, median) | step spread | first step (s) | page faults / step | "
    "kernel s / step | GFLOP / step | achieved GFLOP/s | ceiling GFLOP/s (this row / best) | ceiling spread | "
    "share of best | peak memory (GB) | load (1 min) |\n"
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def format_row(r: dict, best: float | None = None) -> str:
    """One table row, a cell under each header; ``best``: the best ceiling of the run for this row's model, shape
    and precision. Rows of runs before a figure was kept (the spreads, the load) say n/a there."""
    best = best or r["ceiling_gflops"]
    load = r.get("loadavg")
    cells = [
        f"{r['model']} ({r['parameters_m']}M)",
        r["shape"],
        r["precision"],
        r["variant"],
        r["step_median_s"],
        spread(r.get("step_spread")),
        r.get("first_step_s", "n/a"),
        f"{r['page_faults_per_step']:,}",
        f"{r['kernel_s_per_step']:.2f}",
        r["gflop_per_step"],
        r["achieved_gflops"],
        f"{r['ceiling_gflops']} / {best}",
        spread(r.get("ceiling_spread")),
        f"{r['achieved_gflops'] / best:.0%}",
        r["peak_memory_gb"],
        "n/a" if load is None else f"{load[0]:.1f}",
    ]
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def spread(value: float | None) -> str:
    """(max - min) / median of the repeats, as a percentage; n/a for rows of runs before it was kept."""
    return "n/a" if value is None else f"{value:.0%}"


def best_ceilings(rows: list[dict]) -> dict[tuple, float]:
    """The best matmul ceiling (GFLOP/s) of each run for each model, shape and precision: a share is taken
    against its own run's, since the machine's speed moves between runs (rows kept by ``--merge``)."""
    best: dict[tuple, float] = {}
    for r in rows:
        k = ceiling_key(r)
        best[k] = max(best.get(k, 0.0), r["ceiling_gflops"])
    return best


def ceiling_key(row: dict) -> tuple:
    return row["model"], row["shape"], row["precision"], row.get("run", "")


def report(machine: dict, rows: list[dict]) -> str:
    """The markdown table, each share against the best ceiling of its run, model, shape and precision."""
    best = best_ceilings(rows)
    lines = [format_row(r, best[ceiling_key(r)]) for r in rows]
    note = (
        "Each share is against the best ceiling of its own run. A row whose spreads say n/a is from a run before "
        "the ceiling was warmed up and repeated: its ceiling was one measurement on a busy host, so its share is "
        "not to be compared with the others'."
    )
    return "\n".join([f"`python benchmarks/ceiling.py` on {machine}:", "", note, "", HEADER, *lines]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--steps", type=int, default=6, help="timed steps per configuration (after warm-up steps)")
    parser.add_argument("--merge", action="store_true", help="keep the earlier results' rows not measured again")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--one", nargs=4, metavar=("MODEL", "SHAPE", "PRECISION", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(*args.one, args.steps)))
        return
    from step_levers import cpu_kind

    from hp_mlm.common import atomic_write_text, cpu_has_native_bf16

    started, run = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M")
    print(HEADER)
    rows = [{**r, "run": run} for r in run_all(args.shapes, args.steps, args.models, args.precisions, args.variants)]
    machine = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "native_bf16": cpu_has_native_bf16(),
        "cpu_kind": cpu_kind(),
        "loadavg_end": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
        "run": run,
        "measured": {"shapes": args.shapes, "models": args.models, "variants": args.variants, "steps": args.steps},
    }
    earlier = RESULTS / "ceiling.json"
    if args.merge and earlier.exists():
        kept = json.loads(earlier.read_text())
        if not kept["machine"].get("measured"):  # a run from before the variants were renamed
            kept["rows"] = [{**r, "variant": RENAMED.get(r["variant"], r["variant"])} for r in kept["rows"]]
        measured = {key(r) for r in rows}
        earlier_run = kept["machine"].get("run", "earlier")  # runs from before rows were tagged with theirs
        rows = [{"run": earlier_run, **r} for r in kept["rows"] if key(r) not in measured] + rows
        machine = {**machine, "earlier_runs": [kept["machine"], *kept["machine"].get("earlier_runs", [])]}
        machine["earlier_runs"][0].pop("earlier_runs", None)
    rows.sort(
        key=lambda r: (
            list(SHAPES.values()).index(tuple(map(int, r["shape"].split(" x ")))),
            MODELS.index(r["model"]),
            r["precision"],
            VARIANTS.index(r["variant"]),
        )
    )
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / "ceiling.json", json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    atomic_write_text(RESULTS / "ceiling.md", report(machine, rows))


if __name__ == "__main__":
    main()
