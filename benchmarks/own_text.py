"""Your own text: the examples the course picks from a corpus that ships none, and whether the live view shows
them being learned, on books the course did not write (the Oz books and the Carroll books).

For each corpus and seed this runs the main job as a learner would,

    python -m hp_mlm train --profile quick --model hp_mlm:minilm-l6 --dataset <corpus> --seed S \\
        --output-dir <out>/<name>-S --no-progress

(the offline MiniLM with the course's stock head, whose head was trained on the Carroll books: fewer of their
names are new to it), one run at a time, and reads its ``metrics.json``: the words picked
(``course.examples.pick_examples``), the optimiser step at which the live view (``course.watch``) first saw
each one first, the name of several pieces scored whole, and held-out top-1 before and after. It checks that
no picked sentence (its word put back) is in a training row of the run's split. Book text stays out of the
repository: the results hold the picked *words*, never the sentences.

    python benchmarks/own_text.py                       # both corpora, seeds 1 2 3
    python benchmarks/own_text.py --corpora oz --seeds 1 --reuse
    python benchmarks/own_text.py --pick-only            # what is picked for each seed, no training (seconds)

Writes ``benchmarks/results/own_text.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from hp_mlm.common import atomic_write_text
from hp_mlm.config import get_settings
from hp_mlm.data import load_corpus, train_validation_split
from hp_mlm.profiles import OFFLINE_MODEL

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CORPORA = {"oz": "oz/oz_mlm.parquet", "carroll": "carroll/carroll_mlm.parquet"}


def so_far(out: Path) -> dict | None:
    """A run still training (or stopped) in ``out``, read from its last checkpoint, as ``metrics.json``'s parts
    :func:`summary` reads: the watch so far, "after" the last epoch's validation, "before" from the run's log
    (``<out>.log``, the job's printed lines) where kept; None without a checkpoint."""
    latest = out / "checkpoints" / "latest.json"
    if not latest.is_file():
        return None
    state = json.loads((out / "checkpoints" / json.loads(latest.read_text())["checkpoint"] / "state.json").read_text())
    history, log = state["history"], out.with_suffix(".log")
    lines = log.read_text().splitlines() if log.is_file() else []
    said = {line.split(":")[0]: line for line in lines}  # the log's first word -> its line
    before = float(said["before"].split("top-1 ")[1].split("%")[0]) / 100 if "before" in said else None
    decided = [
        {"word": w, "phrase": p, "together": int(t), "neighbour": int(n)}
        for w, p, t, n in re.findall(r"(\w+) \(([^:()]+): (\d+) of (\d+)\)", said.get("examples", ""))
    ]
    rows = re.search(r"(\d+) train /", said.get("rows", ""))
    trained = re.search(r": (\d+) rows \(the whole text\), ([\d,]+) tokens", said.get("training data", ""))
    return {
        "examples_source": "picked from your held-out rows",
        "examples_decided_by": decided,
        "examples": [{"answers": [hit["answer"]], "text": ""} for hit in history["watch"]["first_right"]],
        "watch": history["watch"],
        "probes": {"before": {"rows": []}, "after": {"rows": []}},
        "before": {"top1": before},
        "after": {"top1": history["epochs"][-1]["validation"]["top1"]},
        "data": {
            "n_train": int(rows.group(1)) if rows else None,
            "n_validation": history["epochs"][-1]["validation"]["n_rows"],
            "train_batches": {"rows": int(trained.group(1)), "tokens": int(trained.group(2).replace(",", ""))}
            if trained
            else {},
        },
        "seconds": {"train_clock": sum(e["seconds"] for e in history["epochs"])},
        "stopped_at_epoch": history["epochs"][-1]["epoch"],
    }


def run(dataset: str, seed: int, out: Path, reuse: bool) -> tuple[dict, float | None]:
    """The main job on ``dataset`` with ``seed`` into ``out`` (kept when ``reuse`` and it finished, or read from
    its last checkpoint when it has not: :func:`so_far`); its metrics and wall seconds (None when reused)."""
    if reuse and (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text()), None
    if reuse and (partial := so_far(out)) is not None:
        return partial, None
    command = [sys.executable, "-m", "hp_mlm", "train", "--profile", "quick", "--model", OFFLINE_MODEL]
    command += ["--dataset", dataset, "--seed", str(seed), "--output-dir", str(out), "--no-progress", "--overwrite"]
    started = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".log").open("w") as log:  # the job's printed lines, beside its folder
        subprocess.run(command, check=True, stdout=log)
    return json.loads((out / "metrics.json").read_text()), time.perf_counter() - started


def picked_only(dataset: str, seed: int) -> dict:
    """What the job would pick for ``seed`` (``course.examples.run_examples`` with the stock model), without
    training: the words, the name scored whole, and how many picked sentences a training row holds."""
    from hp_mlm.course.examples import run_examples
    from hp_mlm.prepare import prepare

    s = get_settings("quick", environ={}, model=OFFLINE_MODEL, dataset=dataset, seed=seed, progress=False)
    prep = prepare(s)
    started = time.perf_counter()
    shown = run_examples(prep, log=lambda _: None)
    trained = "\n".join(prep.train_rows[s.text_column]).lower()
    return {
        "picked": [answers[0] for _, answers in shown.examples],
        "decided_by": {d["word"]: f"{d['phrase']} ({d['together']} of {d['neighbour']})" for d in shown.decided_by},
        "scored_whole": [p["answer"] for p in shown.scored_whole],
        "known_to_the_stock_model": list(shown.known),
        "candidate_sentences": shown.candidates,
        "stock_model_already_right": shown.already_right,
        "picked_in_training_rows": sum(t.replace("[MASK]", a[0]).lower() in trained for t, a in shown.examples),
        "names_in_training_rows": len(prep.entities),
        "seconds_to_pick": time.perf_counter() - started,
    }


def training_text(dataset: str, seed: int) -> str:
    """The run's training rows, joined: the same split the job makes (``data.train_validation_split``)."""
    s = get_settings("quick", environ={}, model=OFFLINE_MODEL, dataset=dataset, seed=seed)
    rows, _ = load_corpus(s.dataset, s.split, s.text_column)
    train, _ = train_validation_split(rows, s.validation_fraction, s.seed, s.max_validation_rows)
    return "\n".join(train[s.text_column]).lower()


def summary(metrics: dict, trained: str, seconds: float | None) -> dict:
    """What one run shows, without the book's sentences: the words, when each came first, the scores."""
    firsts = {hit["answer"]: hit["step"] for hit in (metrics.get("watch") or {}).get("first_right", [])}
    picked = [e["answers"][0] for e in metrics["examples"]]
    in_training = sum(
        bool(e["text"]) and e["text"].replace("[MASK]", e["answers"][0]).lower() in trained for e in metrics["examples"]
    )
    rows = list(zip(metrics["probes"]["before"]["rows"], metrics["probes"]["after"]["rows"]))
    picked_rows = rows[len(rows) - metrics["probes"].get("from_examples", len(rows)) :]  # the last: picked, not given
    whole = [{"answer": b["answer"], "before": b["hit_top1"], "after": a["hit_top1"]} for b, a in picked_rows]
    decided = {
        d["word"]: f"{d['phrase']} ({d['together']} of {d['neighbour']})"
        for d in metrics.get("examples_decided_by", [])
    }
    return {
        "source": metrics.get("examples_source"),
        "picked": picked,
        "decided_by": decided,
        "first_step": {w: firsts.get(w) for w in picked},
        "came_first": sum(firsts.get(w) not in (None, 0) for w in picked),
        "every": (metrics.get("watch") or {}).get("every"),
        "steps": metrics["watch"]["frames"][-1]["step"] if metrics.get("watch") else None,
        "picked_in_training_rows": in_training,
        "scored_whole": whole,
        "top1": {"before": metrics["before"]["top1"], "after": metrics["after"]["top1"]},
        "n_train": metrics["data"]["n_train"],
        "train_batches": {k: metrics["data"].get("train_batches", {}).get(k) for k in ("rows", "tokens")},
        "n_validation": metrics["data"]["n_validation"],
        "seconds": seconds,
        "train_clock": metrics["seconds"].get("train_clock"),
        "stopped_at_epoch": metrics.get("stopped_at_epoch"),  # a run read from its checkpoint, not finished
    }


def markdown(results: dict) -> str:
    lines = [
        "# Your own text: examples picked from the held-out rows, learned while you watch",
        "",
        f"`python benchmarks/own_text.py` on {results['machine']}, torch {results['torch']}: the main job, quick",
        f"profile, `--model {OFFLINE_MODEL}` (the offline MiniLM with the course's stock head, trained on the",
        "Carroll books), one run per corpus and seed. Picked: the words the course hid in sentences of the run's",
        "held-out rows, each with the neighbour that decides it in the training rows (the phrase, and how often the",
        "word stands there of the times the neighbour occurs; the sentences are book text and stay out of the",
        "repository). First at step: the optimiser step of the live view's first frame whose first guess was the",
        "word (a frame every `every` steps; -: never). Trained: the rows (your long rows cut at word starts) and",
        "tokens of the training data.",
        "",
        "| corpus | seed | picked: decided by | first at step (of steps, every) | came first | top-1 before -> after |"
        " scored whole: first before -> after | picked in a training row | trained: rows (of rows), tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for corpus, runs in results["runs"].items():
        for seed, r in sorted(runs.items(), key=lambda run: int(run[0])):
            decided = r.get("decided_by", {})
            picked = "; ".join(f"{w}: {decided.get(w, '?')}" for w in r["picked"]) or "none"
            steps = ", ".join(f"{w} {'-' if s is None else s}" for w, s in r["first_step"].items()) or "none"
            whole = "; ".join(f"{w['answer']}: {w['before']} -> {w['after']}" for w in r["scored_whole"]) or "none"
            before = "?" if r["top1"]["before"] is None else f"{r['top1']['before']:.1%}"
            upto = f" (so far: epoch {r['stopped_at_epoch']} of 12)" if r.get("stopped_at_epoch") else ""
            trained = r.get("train_batches") or {}
            rows = f"{trained.get('rows')} ({r['n_train']}), {trained.get('tokens'):,}" if trained.get("rows") else "?"
            lines.append(
                f"| {corpus} | {seed} | {picked} | {steps} ({r['steps']}, {r['every']}){upto} | "
                f"{r['came_first']} of {len(r['picked'])} | {before} -> {r['top1']['after']:.1%} | "
                f"{whole} | {r['picked_in_training_rows']} | {rows} |"
            )
    if results.get("picked"):
        lines += ["", "Picked without training (`--pick-only`, the same picking as the job's), per seed:", ""]
        lines += ["| corpus | seed | picked: decided by | scored whole | candidate sentences: the stock model already "
                  "right | names in the training rows | picked in a training row |"]  # fmt: skip
        lines += ["| --- | --- | --- | --- | --- | --- | --- |"]
        for corpus, seeds in results["picked"].items():
            for seed, p in sorted(seeds.items(), key=lambda run: int(run[0])):
                decided = "; ".join(f"{w}: {p.get('decided_by', {}).get(w, '?')}" for w in p["picked"]) or "none"
                lines.append(
                    f"| {corpus} | {seed} | {len(p['picked'])}: {decided} | "
                    f"{', '.join(p['scored_whole']) or 'none'} | {p['stock_model_already_right']} of {p['candidate_sentences']} | "
                    f"{p['names_in_training_rows']} | "
                    f"{p['picked_in_training_rows']} |"
                )
    if not results["runs"]:
        return "\n".join(lines) + "\n"
    lines += ["", "Per corpus (mean over seeds): words picked, and of them those that came first during training.", ""]
    for corpus, runs in results["runs"].items():
        n = len(runs)
        picked = sum(len(r["picked"]) for r in runs.values()) / n
        came = sum(r["came_first"] for r in runs.values()) / n
        least = min(r["came_first"] / max(len(r["picked"]), 1) for r in runs.values())
        clocks = [r["train_clock"] for r in runs.values() if r.get("train_clock")]
        walls = [r["seconds"] for r in runs.values() if r.get("seconds")]
        lines.append(
            f"- {corpus}: {picked:.1f} picked, {came:.1f} came first (at least {least:.0%} of the picked in every seed); "
            f"training clock {min(clocks, default=0):.0f}-{max(clocks, default=0):.0f} s, whole command "
            f"{min(walls, default=0):.0f}-{max(walls, default=0):.0f} s a run"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", choices=sorted(CORPORA), default=["oz", "carroll"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--data", type=Path, default=SHARED, help="the folder that holds oz/ and carroll/")
    parser.add_argument("--out", type=Path, default=Path("/tmp/own51"), help="where the runs write")
    parser.add_argument("--reuse", action="store_true", help="read a finished run's metrics.json instead of rerunning")
    parser.add_argument("--pick-only", action="store_true", help="record what is picked for each seed; no training")
    args = parser.parse_args()
    import torch

    path = RESULTS / "own_text.json"
    results = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    results.update(machine=f"{platform.machine()}, {os.cpu_count()} CPU cores", torch=torch.__version__)
    for corpus in args.corpora:
        dataset = str(args.data / CORPORA[corpus])
        for seed in args.seeds:
            if args.pick_only:
                results.setdefault("picked", {}).setdefault(corpus, {})[str(seed)] = picked_only(dataset, seed)
                print(corpus, seed, results["picked"][corpus][str(seed)], flush=True)
                atomic_write_text(path, json.dumps(results, indent=2))
                atomic_write_text(RESULTS / "own_text.md", markdown(results))
                continue
            metrics, seconds = run(dataset, seed, args.out / f"{corpus}-{seed}", args.reuse)
            found = summary(metrics, training_text(dataset, seed), seconds)
            results["runs"].setdefault(corpus, {})[str(seed)] = found
            print(corpus, seed, found["picked"], found["first_step"], found["top1"], flush=True)
            atomic_write_text(path, json.dumps(results, indent=2))
            atomic_write_text(RESULTS / "own_text.md", markdown(results))


if __name__ == "__main__":
    main()
