"""What a speed lever costs in quality: held-out top-1 over seeds, the lever on against off, in one run.

Each lever is trained from the same start on the same rows with the same seeds and scored on the same
frozen held-out masks (``studies.options.compare_options``, the study of notebook 05), so a difference
smaller than the seeds' spread is not read as a finding. The speed and memory of a step are measured
apart, on a quiet machine, by ``benchmarks/ceiling.py``; the seconds here are whole training runs.

    python benchmarks/levers_quality.py --profile offline
    python benchmarks/levers_quality.py --profile offline --levers kernel --name offline_kernel
    python benchmarks/levers_quality.py --profile offline --levers hidden --name offline_hidden
    python benchmarks/levers_quality.py --profile offline --levers weights --name offline_weights
    python benchmarks/levers_quality.py --profile quick --model hp_mlm:minilm-l6 \\
        --dataset ../shared/data/oz/oz_mlm.parquet --probes ../shared/data/oz/probes.jsonl --name quick_oz

Writes benchmarks/results/levers_quality_<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from hp_mlm.common import atomic_write_text, cpu_has_native_bf16
from hp_mlm.config import get_settings
from hp_mlm.studies.options import compare_options, options_table, summarise
from hp_mlm.studies.probes import default_probes, load_probes

RESULTS = Path(__file__).parent / "results"
#: name -> settings changed from the course's (the course's default first: every other row is read against it).
LEVER_SETS = {
    "dropout": {"course (attention dropout off)": {}, "attention dropout on": {"attention_dropout": True}},
    # the course's attention="auto" (eager on a CPU in bf16 at max_length <= 128) against SDPA, all else equal
    "kernel": {"course (attention auto)": {}, "sdpa attention": {"attention": "sdpa"}},
    # dropout on hidden states (BERT's hidden_dropout_prob, 0.1) off (the course's since levers.md) against on
    "hidden": {"course (hidden dropout off)": {}, "hidden dropout on": {"hidden_dropout": True}},
    # bf16 weights with fp32 master weights (studies.master_weights, a lever measured, not kept) against the course's step
    "weights": {"course (fp32 weights, autocast)": {}, "bf16 weights, fp32 master": {"master_weights": True}},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="offline")
    parser.add_argument("--model")
    parser.add_argument("--dataset")
    parser.add_argument("--probes")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--levers", choices=LEVER_SETS, default="dropout", help="which levers to set side by side")
    parser.add_argument("--name", help="results file suffix (default: the profile)")
    args = parser.parse_args()
    overrides = {k: getattr(args, k) for k in ("model", "dataset") if getattr(args, k)}
    settings = get_settings(args.profile, progress=False, output_dir=f"outputs/levers_{args.profile}", **overrides)
    probes_file = args.probes or default_probes(settings)
    started = time.perf_counter()
    rows = compare_options(
        settings, LEVER_SETS[args.levers], seeds=args.seeds, probes=load_probes(probes_file) if probes_file else None
    )
    machine = {
        "cpu": platform.machine(),
        "cores": os.cpu_count(),
        "native_bf16": cpu_has_native_bf16(),
        "loadavg_end": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    summary = summarise(rows)
    name = args.name or args.profile
    command = "python benchmarks/levers_quality.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items() if v is not None and k != "seeds"
    )
    runs = "\n".join(
        f"| {r['option']} | {r['seed']} | {100 * r['top1']:.1f} | {r['perplexity']:.1f} | {r['seconds']:.0f} |"
        for r in rows
    )
    text = (
        f"`{command}` ({args.seeds} seeds) on {machine}, settings {settings.profile} "
        f"(model {settings.model}, dataset {settings.dataset}, split {settings.split}):\n\n{options_table(summary)}\n\n"
        "Each run (seconds: the whole run, training and scoring, on a machine that may have been busy):\n\n"
        f"| option | seed | top-1 % | perplexity | seconds |\n| --- | ---: | ---: | ---: | ---: |\n{runs}\n"
    )
    data = {"machine": machine, "settings": settings.as_dict(), "rows": rows, "summary": summary}
    atomic_write_text(RESULTS / f"levers_quality_{name}.json", json.dumps(data, indent=2))
    atomic_write_text(RESULTS / f"levers_quality_{name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
