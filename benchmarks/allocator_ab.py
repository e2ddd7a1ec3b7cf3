"""The allocator setting at the quick profile's shape: glibc's defaults against the course's, in turns.

``ceiling.py`` runs each variant in its own process, one after the other; at 16 x 128 tokens the
difference is a few per cent, within what the machine's load moves between processes. Here one
process per model and precision trains the same model in alternating rounds: a round of steps with
glibc's defaults, then a round inside ``allocator.reuse_freed_memory`` (what ``training.train`` does
on the CPU), and so on, so both sides meet the same load. Each round starts with one untimed step
(the allocator settles; in the default round, the memory the other round kept has been handed back).

    python benchmarks/allocator_ab.py                 # MiniLM-L6 fp32 and bf16, bert-base bf16 (about 6 minutes)
    python benchmarks/allocator_ab.py --rounds 3

Writes benchmarks/results/allocator_ab.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ceiling  # noqa: E402 - the step, the models and the FLOP count are ceiling.py's

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = [("minilm-l6", "fp32"), ("minilm-l6", "bf16"), ("bert-base", "bf16")]


def rounds_of(model_name: str, precision: str, rounds: int, steps: int) -> dict:
    """Alternating rounds in this process; the median step of each round, per side."""
    from hp_mlm.ops.allocator import reuse_freed_memory

    batch, length = ceiling.SHAPES["quick"]
    model = ceiling.build(model_name)
    sides: dict[str, list[float]] = {"default allocator": [], "course": []}
    faults: dict[str, list[int]] = {"default allocator": [], "course": []}
    for _ in range(rounds):
        for side in sides:
            with reuse_freed_memory(side == "course"):
                seconds, _, system = ceiling.time_steps(model, batch, length, precision, steps)
            sides[side].append(statistics.median(seconds))
            faults[side].append(system["page_faults_per_step"])
    default, course = sides["default allocator"], sides["course"]
    return {
        "model": model_name,
        "shape": f"{batch} x {length}",
        "precision": precision,
        "round_medians_s": {k: [round(s, 3) for s in v] for k, v in sides.items()},
        "page_faults_per_step": {k: int(statistics.median(v)) for k, v in faults.items()},
        "speedup_per_round": [round(d / c, 3) for d, c in zip(default, course)],
        "speedup_median": round(statistics.median(d / c for d, c in zip(default, course)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round (after one untimed)")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(rounds_of(*args.one, args.rounds, args.steps)))
        return
    from hp_mlm.common import atomic_write_text, cpu_has_native_bf16

    runs = [r for r in RUNS if r[1] == "fp32" or cpu_has_native_bf16()]
    rows = []
    for model_name, precision in runs:
        argv = [sys.executable, __file__, "--one", model_name, precision, "--rounds", str(args.rounds)]
        argv += ["--steps", str(args.steps)]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    machine = {"cores": os.cpu_count(), "native_bf16": cpu_has_native_bf16(), "loadavg_end": os.getloadavg()}
    lines = [
        f"`python benchmarks/allocator_ab.py` ({args.rounds} alternating rounds of {args.steps} timed steps, "
        f"16 x 128 tokens) on {machine}:",
        "",
        "| model | precision | step, default allocator (s, median of rounds) | step, course (s) | page faults / step "
        "(default / course) | speed-up, median [min, max] over rounds |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        m, f, s = r["round_medians_s"], r["page_faults_per_step"], r["speedup_per_round"]
        lines.append(
            f"| {r['model']} | {r['precision']} | {statistics.median(m['default allocator']):.3f} | "
            f"{statistics.median(m['course']):.3f} | {f['default allocator']:,} / {f['course']:,} | "
            f"{r['speedup_median']:.2f}x [{min(s):.2f}, {max(s):.2f}] |"
        )
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / "allocator_ab.json", json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    atomic_write_text(RESULTS / "allocator_ab.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
