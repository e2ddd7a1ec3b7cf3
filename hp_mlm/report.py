"""What the main job reports: the probes whose answer changed, and the plain-text before/after
table that ``python -m hp_mlm train`` prints from ``metrics.json``'s contents."""

from __future__ import annotations

from typing import Any


def changed_probes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes whose top-1 answer changed with fine-tuning: ``[{"text", "answer", "before", "after", "right"}]``."""
    return [
        {"text": a["text"], "answer": a["answer"], "before": b["top1"], "after": a["top1"], "right": a["hit_top1"]}
        for b, a in zip(before["rows"], after["rows"])
        if a["top1"] != b["top1"]
    ]


def format_report(metrics: dict[str, Any]) -> str:
    """A plain-text before/after table, example predictions and probe hits."""
    b, a = metrics["before"], metrics["after"]
    lines = [
        "",
        f"{'held-out (frozen masks)':<28}{'before':>10}{'after':>10}",
        f"{'top-1 accuracy':<28}{b['top1']:>10.1%}{a['top1']:>10.1%}",
        f"{'top-5 accuracy':<28}{b['top5']:>10.1%}{a['top5']:>10.1%}",
        f"{'perplexity':<28}{b['perplexity']:>10.1f}{a['perplexity']:>10.1f}",
        f"{'masked tokens scored':<28}{b['n_positions']:>10}{a['n_positions']:>10}",
    ]
    o = metrics["original_tutorial_accuracy"]
    lines.append(f"{'original accuracy (train)':<28}{o['before']['accuracy']:>10.1%}{o['after']['accuracy']:>10.1%}")
    p = metrics["probes"]
    if p["after"]["n"]:
        lines.append(
            f"{'probes right (top-1)':<28}{p['before']['hits_top1']:>10}{p['after']['hits_top1']:>10}  of {p['after']['n']}"
        )
    lines.append("")
    for example in metrics["examples"]:
        guesses = " | ".join(", ".join(c["token"] for c in mask[:3]) for mask in example["predictions"])
        lines.append(f"{example['text']}  ->  {guesses}")
    for row in p["after"]["rows"]:
        mark = "right" if row["hit_top1"] else "wrong"
        lines.append(f"[{mark}] {row['text']}  ->  {row['top1']} (answer: {row['answer']})")
    return "\n".join(lines)
