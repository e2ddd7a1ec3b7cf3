"""What the main job reports: the probes whose answer changed, and the plain-text before/after
table that ``python -m hp_mlm train`` prints from ``metrics.json``'s contents."""

from __future__ import annotations

from typing import Any

from hp_mlm.ops.card import clock_spans_sessions, first_right_text

#: The course's glossary, where the report's terms are explained (a terminal shows the address; a click opens it).
GLOSSARY = "https://github.com/hp-mlm/hp-mlm/blob/main/docs/glossary.md"


def changed_probes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes whose top-1 answer changed with fine-tuning: ``[{"text", "answer", "before", "after", "right"}]``."""
    return [
        {"text": a["text"], "answer": a["answer"], "before": b["top1"], "after": a["top1"], "right": a["hit_top1"]}
        for b, a in zip(before["rows"], after["rows"])
        if a["top1"] != b["top1"]
    ]


def format_report(metrics: dict[str, Any]) -> str:
    """A plain-text before/after table, example predictions and probe hits, under a line that names its terms and
    the glossary that explains them (frozen masks, whole words when scored, probes)."""
    b, a = metrics["before"], metrics["after"]
    words = _whole_word_lines(metrics.get("whole_words") or {})
    terms = ", ".join(["frozen masks", *(["whole words"] if words else []), "probes"])
    lines = [
        "",
        f"the terms below ({terms}): {GLOSSARY}",
        f"{'held-out (frozen masks)':<28}{'before':>10}{'after':>10}",
        f"{'top-1 accuracy':<28}{b['top1']:>10.1%}{a['top1']:>10.1%}",
        f"{'top-5 accuracy':<28}{b['top5']:>10.1%}{a['top5']:>10.1%}",
        f"{'perplexity':<28}{b['perplexity']:>10.1f}{a['perplexity']:>10.1f}",
        f"{'masked tokens scored':<28}{b['n_positions']:>10}{a['n_positions']:>10}",
    ]
    for kind, label in (("whole_word", "  top-1, one-piece words"), ("word_piece", "  top-1, in longer words")):
        bk, ak = b.get("kinds", {}).get(kind, {}), a.get("kinds", {}).get(kind, {})
        if bk.get("top1") is not None and ak.get("top1") is not None:
            lines.append(f"{label:<28}{bk['top1']:>10.1%}{ak['top1']:>10.1%}  of {ak['n_positions']}")
    o = metrics["original_tutorial_accuracy"]
    lines.append(f"{'original accuracy (train)':<28}{o['before']['accuracy']:>10.1%}{o['after']['accuracy']:>10.1%}")
    lines += _trained_lines(metrics.get("data") or {})
    lines += words
    p = metrics["probes"]
    given = len(p["after"]["rows"]) - p.get("from_examples", 0)  # the last rows: examples of several pieces
    if given:
        lines += _probe_lines(p["before"], p["after"])
        lines += (
            [f"    of them {p['from_examples']} example(s) of several pieces (below)"] if p.get("from_examples") else []
        )
    else:  # own data without probes: the held-out scores above are the whole story
        lines.append("probes: none given (a .jsonl of sentences with [MASK] and their answers: --probes FILE)")
    lines.append("")
    lines += _example_lines(metrics["examples"], metrics.get("examples_source"))
    lines += _scored_whole_lines(p["before"]["rows"][given:], p["after"]["rows"][given:])
    lines += _first_right_lines(metrics.get("watch"))
    lines += book_lines(metrics)
    lines += [metrics["ending"]] if metrics.get("ending") else []  # why no word came first, and what next
    for row in p["after"]["rows"][:given]:
        mark = "right" if row["hit_top1"] else "wrong"
        pieces = f", {' '.join(row['pieces'])}" if len(row.get("pieces", [])) > 1 else ""
        lines.append(f"[{mark}] {row['text']}  ->  {row['top1']} (answer: {row['answer']}{pieces})")
    lines += _time_lines(metrics.get("seconds", {}))
    return "\n".join(lines)


def _trained_lines(data: dict[str, Any]) -> list[str]:
    """What trained: rows and tokens (``metrics["data"]["train_batches"]``), and the rows that long rows of your
    own text were cut into at word starts (``prepare.prepare``); [] for metrics without them."""
    batches = data.get("train_batches") or {}
    if not batches.get("rows"):
        return []
    cut = f", from {data['n_train']} rows cut at word starts" if batches["rows"] > data.get("n_train", 0) else ""
    return [f"trained on {batches['rows']} rows, {batches['tokens']:,} tokens{cut}"]


def _scored_whole_lines(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """The examples whose word is several pieces (``course.examples``), scored whole: the first whole-word
    guess before -> after (``studies.probes.score_probes``); one token's guess, as the live view's, is never one."""
    if not after:
        return []
    lines = ["examples of several word pieces, scored whole: the first whole-word guess, before -> after"]
    for b, a in zip(before, after):
        mark = "now first" if a["hit_top1"] else "not first"
        lines += [a["text"], f"    {b['top1']}  ->  {a['top1']}   ({a['answer']}, {' '.join(a['pieces'])}: {mark})"]
    return lines


def _first_right_lines(watch: dict[str, Any] | None) -> list[str]:
    """When each example's corpus word first came first, from the watch's frames (``course.watch``)."""
    if not watch or not watch.get("frames"):
        return []
    lines = [f"when the corpus's word first came first (a frame every {watch['every']} optimiser steps):"]
    return lines + [f"    {first_right_text(hit)}" for hit in watch["first_right"]]


def book_lines(metrics: dict[str, Any]) -> list[str]:
    """What the book taught: its names followed at every held-out occurrence, right before -> after, and when each
    was first right at a third of them (``metrics["names"]``); the words right at held-out gaps after training and
    not before (``metrics["taught"]``). [] for metrics without them."""
    names, lines = metrics.get("names") or {}, []
    if names.get("followed"):
        learned = {hit["name"]: hit for hit in names.get("learned", [])}
        lines.append("the book's names at every held-out occurrence: right (the first guess), before -> after")
        for name, seen in names["followed"].items():
            hit = learned.get(name, {})
            when = f"; right at a third of them from step {hit['step']}" if hit.get("step") is not None else ""
            lines.append(
                f"    {name:<16}{names['before'].get(name, 0):>4} -> {names['after'].get(name, 0):>4} of {seen}{when}"
            )
    if metrics.get("taught"):
        lines.append("what the book taught: words right at held-out gaps after training and not before (right of seen)")
        lines.append(
            "    " + ", ".join(f"{t['word']} {t['before']} -> {t['after']} of {t['seen']}" for t in metrics["taught"])
        )
    return lines


def _time_lines(seconds: dict[str, float]) -> list[str]:
    """The training clock, the watch's cost beside it, and the whole job's wall time (a resumed run's clock counts
    its earlier sessions too, so it can pass this session's wall time: said so)."""
    if "train_clock" not in seconds:
        return []
    line = f"time: training clock {seconds['train_clock']:.0f} s"
    if seconds.get("watch"):
        share = seconds["watch"] / seconds["train_clock"] if seconds["train_clock"] else 0.0
        line += f", watch {seconds['watch']:.1f} s ({share:.1%} of it, off the clock)"
    if clock_spans_sessions(seconds):  # resumed: the clock has every session's steps
        return [line + f" (every session of the run), this session's whole job {seconds['total']:.0f} s"]
    return [line + (f", whole job {seconds['total']:.0f} s" if "total" in seconds else "")]


def _whole_word_lines(words: dict[str, Any]) -> list[str]:
    """Held-out words hidden whole, right only when every piece is: all, then the multi-piece ones."""
    b, a = words.get("before"), words.get("after")
    if not b or not a or not b["words"]["n_words"]:
        return []
    bw, aw = b["words"], a["words"]
    lines = [f"{'whole words right (top-1)':<28}{bw['top1']:>10.1%}{aw['top1']:>10.1%}  of {aw['n_words']}"]
    if aw["multi_piece"]["n_words"]:
        bm, am = bw["multi_piece"], aw["multi_piece"]
        lines.append(f"{'  of several pieces':<28}{bm['top1']:>10.1%}{am['top1']:>10.1%}  of {am['n_words']}")
    return lines


def _probe_lines(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Probe hits, one-piece and multi-piece answers apart, and the rank among candidates where given."""
    lines = [f"{'probes right (top-1)':<28}{before['hits_top1']:>10}{after['hits_top1']:>10}  of {after['n']}"]
    kinds = after.get("by_kind", {})
    for kind, label in (("one_piece", "  one-piece answers"), ("multi_piece", "  of several pieces")):
        if kinds.get(kind, {}).get("n") and kinds.get("multi_piece", {}).get("n"):
            b, a = before["by_kind"][kind], kinds[kind]
            lines.append(f"{label + ' (top-k)':<28}{b['hits_topk']:>10}{a['hits_topk']:>10}  of {a['n']}")
    if after.get("n_with_candidates"):
        label = "ranked first of candidates"
        lines.append(
            f"{label:<28}{before['candidates_top1']:>10}{after['candidates_top1']:>10}  of {after['n_with_candidates']}"
        )
    return lines


def _example_lines(examples: list[dict[str, Any]], source: str | None = None) -> list[str]:
    """Where the examples came from (``course.examples``), each example sentence, then at each mask the 3
    likeliest tokens before and after fine-tuning, and the corpus's word (marked where the model now puts it
    first); a line saying there are none when no example was shipped, given or picked."""
    where = f" ({source})" if source else ""
    if not examples:
        return [f"examples{where}: none (a .jsonl of sentences with [MASK] and their answers: --examples FILE)"]
    lines = [f"examples{where}: the 3 likeliest tokens at each [MASK], before -> after fine-tuning (the corpus's word)"]
    for example in examples:
        lines.append(example["text"])
        for before, after, answer in zip(example["before"], example["after"], example["answers"]):
            first = ", ".join(c["token"] for c in before[:3]), ", ".join(c["token"] for c in after[:3])
            mark = "now first" if after and after[0]["token"] == answer else "not first"
            lines.append(f"    {first[0]}  ->  {first[1]}   ({answer}: {mark})")
    return lines
