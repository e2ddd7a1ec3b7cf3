"""A learner's whole book in a room's time: what the live view and the report show of it, on books as learners bring them.

For each book and seed this runs the main job as notebook 03 runs it with ``MY_TEXT`` and ``OFFLINE = True``
(the offline profile; the run's length on auto, sized to the room: ``profiles.ROOM_STEPS``),

    python -m hp_mlm train --profile offline --dataset <book.txt> --seed S --output-dir <out>/<book>-S --no-progress

one run at a time, and reads its ``metrics.json``: the training clock and the whole command's wall time, the names
followed at every held-out occurrence (``studies.names``), right before and after, when the first of them was right
at a third of its occurrences, held-out top-1 before and after, and the watch's cost beside the training clock.
Book text stays out of the repository: the results hold names and counts, never sentences.

    python benchmarks/book_names.py                       # the three books, seeds 1 2 3
    python benchmarks/book_names.py --books garden --seeds 1

Writes ``benchmarks/results/book_names.{json,md}`` (``--name`` for another name).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from hp_mlm.common import atomic_write_text
from hp_mlm.studies.names import LEARNED

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
BOOKS = {
    "oz": "oz/books/01_the_wonderful_wizard_of_oz.txt",
    "alice": "carroll/books/alices_adventures_in_wonderland.txt",
    "garden": "books/the_secret_garden.txt",
}


def cpu_kind() -> str:
    """ "bf16 with AMX", "bf16" or "fp32 only", from ``/proc/cpuinfo``'s flags (the kinds the course's figures name)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return "bf16 with AMX" if "amx_bf16" in flags else "bf16" if "avx512_bf16" in flags else "fp32 only"


def run(book: str, seed: int, out: Path) -> dict:
    """One main job on ``book`` with ``seed``, its log beside it; the summary of its metrics."""
    command = [sys.executable, "-m", "hp_mlm", "train", "--profile", "offline", "--dataset", str(SHARED / BOOKS[book])]
    command += ["--seed", str(seed), "--output-dir", str(out), "--no-progress", "--overwrite"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - started
    out.with_suffix(".log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"{book} seed {seed} failed:\n{done.stderr[-3000:]}")
    return summary(json.loads((out / "metrics.json").read_text()), book, seed, wall)


def summary(metrics: dict, book: str, seed: int, wall: float) -> dict:
    """What the table reports of one run's ``metrics``."""
    names, watch = metrics["names"], metrics["watch"] or {}
    followed = names["followed"]
    learned = [n for n, seen in followed.items() if names["after"][n] >= LEARNED * seen]
    from_low = [n for n in learned if names["before"][n] <= 0.1 * followed[n]]
    first = (names["learned"] or [{}])[0]
    return {
        "book": book,
        "seed": seed,
        "steps": watch.get("planned", {}).get("steps"),
        "epochs": metrics["settings"]["epochs"],
        "train_clock": metrics["seconds"]["train_clock"],
        "watch": metrics["seconds"].get("watch", 0.0),
        "wall": wall,
        "top1_before": metrics["before"]["top1"],
        "top1_after": metrics["after"]["top1"],
        "followed": followed,
        "right_before": names["before"],
        "right_after": names["after"],
        "learned": learned,
        "learned_from_low": from_low,
        "first": {"name": first.get("name"), "seconds": first.get("seconds"), "step": first.get("step")},
        "taught": [t["word"] for t in metrics.get("taught", [])],
        "examples": [e["answers"] for e in metrics.get("examples", [])],
    }


def table(rows: list[dict]) -> list[str]:
    """The markdown table, a row per run, and the medians per book."""
    lines = [
        "| book | seed | steps (passes) | training clock | whole command | watch | top-1 before -> after | names "
        "followed | right at a third or more after (from <= 10% before) | first followed name at a third |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for r in rows:
        first = r["first"]
        when = "never" if first["seconds"] is None else f"{first['seconds']:.0f} s (step {first['step']})"
        lines.append(
            f"| {r['book']} | {r['seed']} | {r['steps']} ({r['epochs']}) | {r['train_clock']:.0f} s | {r['wall']:.0f} s "
            f"| {r['watch']:.1f} s ({r['watch'] / r['train_clock']:.1%}) | {r['top1_before']:.1%} -> "
            f"{r['top1_after']:.1%} | {len(r['followed'])} | {len(r['learned_from_low'])}: "
            f"{', '.join(r['learned_from_low'])} | {first['name']}: {when} |"
        )
    lines += ["", "Medians over the seeds:", ""]
    lines += ["| book | training clock | top-1 gain (points) | names at a third or more (from <= 10%) |"]
    lines += ["| --- | ---: | ---: | ---: |"]
    for book in dict.fromkeys(r["book"] for r in rows):
        mine = [r for r in rows if r["book"] == book]
        clock = statistics.median(r["train_clock"] for r in mine)
        gain = statistics.median(100 * (r["top1_after"] - r["top1_before"]) for r in mine)
        learned = statistics.median(len(r["learned_from_low"]) for r in mine)
        lines.append(f"| {book} | {clock:.0f} s | {gain:.1f} | {learned:g} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--books", nargs="+", default=list(BOOKS), choices=list(BOOKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--out", default="/tmp/book_names")
    parser.add_argument("--name", default="book_names")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:  # every book once, then again: a run cut short still has every book
        for book in args.books:
            rows.append(run(book, seed, Path(args.out) / f"{book}-{seed}"))
            print(json.dumps(rows[-1]), flush=True)
            write(rows, args.name)


def write(rows: list[dict], name: str) -> None:
    """The results so far, ``benchmarks/results/<name>.{json,md}``, with the host and the command."""
    host = {"cpu": cpu_kind(), "cores": os.cpu_count(), "machine": platform.machine(), "load": os.getloadavg()}
    command = "python benchmarks/" + Path(__file__).name + " " + " ".join(sys.argv[1:])
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / f"{name}.json", json.dumps({"host": host, "command": command, "runs": rows}, indent=1))
    head = [
        f"# {name}: a whole book in a room's time, its names followed at every held-out occurrence",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d')}, on {host['cores']} cores ({host['cpu']}, {host['machine']}), one run "
        f"at a time; load average at the end {host['load'][0]:.1f}. Each run: `python -m hp_mlm train --profile offline "
        "--dataset <book.txt> --seed S` (notebook 03's defaults with MY_TEXT and OFFLINE = True), its length on auto.",
        "",
    ]
    atomic_write_text(RESULTS / f"{name}.md", "\n".join(head + table(rows)) + "\n")


if __name__ == "__main__":
    main()
