"""The options study: what each of the original tutorial's ideas and BERT's variants is worth.

Taught in ``notebooks/05_going_further.ipynb``; ``python -m hp_mlm compare`` runs it. Every option
is trained from the same start on the same rows, with the same few seeds, and scored on the same
frozen held-out masks, so the table shows each option's mean and its spread over seeds, and a
difference smaller than the spread is not read as a finding.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from datasets import Dataset

from hp_mlm.callbacks import Validate
from hp_mlm.config import Settings, model_options
from hp_mlm.evaluation import evaluate
from hp_mlm.models import load_model
from hp_mlm.ops.allocator import reuse_freed_memory
from hp_mlm.prepare import Prepared, packed_rows, prepare
from hp_mlm.studies.breakdowns import BY_KIND, BY_WORD, freeze_whole_words
from hp_mlm.studies.master_weights import bf16_weights
from hp_mlm.studies.probes import candidate_rank
from hp_mlm.training import plan_training, train

#: The options ``compare_options`` measures by default: name -> settings changed from the course's.
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "course": {},
    "warmup + linear decay": {"schedule": "linear"},
    "static masks": {"mask_once": True},
    "labels on every token": {"label_all_tokens": True},
    "BERT 80/10/10": {"masking": "bert"},
    "whole-word masking": {"masking": "whole_word"},
    "entity masking": {"masking": "entity"},
    "original recipe": {"recipe": "original"},
}


def training_tokens(prep: Prepared, settings: Settings) -> Dataset:
    """The tokenised rows a run with ``settings`` trains on: ``prep.train_tokens``, or, when
    ``settings.padding`` is ``"pack"`` and ``prep`` was prepared unpacked, its training rows packed."""
    if settings.padding != "pack" or prep.settings.padding == "pack":
        return prep.train_tokens
    return packed_rows(prep.train_rows, prep.loaded.tokenizer, settings, prep.entities)


def compare_options(
    settings: Settings,
    options: dict[str, dict[str, Any]] | None = None,
    seeds: int = 3,
    log: Callable[[str], None] = print,
    probes: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Fine-tune once per option and seed from the same start, on the same rows, and score each on
    the same frozen validation masks, and on held-out words hidden whole.

    Seeds ``settings.seed``, ``+1``, ... change the new head's initialisation (if any), the
    shuffling, the masks and dropout; the split and the held-out masks stay those of ``settings.seed``.

    Args:
        options: name -> settings to change (default ``DEFAULT_OPTIONS``); ``"master_weights": True`` trains
            with ``studies.master_weights`` (bf16 weights, fp32 master weights), a lever measured, not kept.
        seeds: runs per option (>= 1).
        probes: probes (``probes.load_probes``); those that list ``candidates`` are ranked after each
            run (``names_ranked_first``).
    Returns:
        One dict per run: ``option``, ``seed``, ``top1``, ``top5`` (fractions), ``perplexity``,
        ``entity_top1``, ``word_piece_top1``, ``multi_piece_words_top1`` (held-out words of several
        pieces hidden whole, right when every piece is), ``names_ranked_first`` (share of the probes with
        candidates whose answer ranks first) (each None when nothing of that kind was scored),
        ``epochs_run``, ``seconds``; the first row is the model before training (``seed`` None).
    Raises:
        ValueError: ``seeds`` < 1.
    """
    if seeds < 1:
        raise ValueError(f"`seeds` must be >= 1, got {seeds}")
    options = DEFAULT_OPTIONS if options is None else options
    # one row per example here; a run with padding="pack" packs these rows itself
    prep = prepare(settings.replace(padding="batch") if settings.padding == "pack" else settings)
    tok, base = prep.loaded.tokenizer, prep.settings.replace(padding=settings.padding)

    def score(model) -> dict[str, Any]:
        return evaluate(
            model, prep.frozen_validation, tok, base.eval_batch_size, precision=base.precision, breakdowns=(BY_KIND,)
        )

    named = [p for p in probes or [] if p.get("candidates")]
    frozen_words = freeze_whole_words(prep.validation_tokens, tok, base.mlm_probability, base.seed)  # once a study

    def final(model) -> dict[str, Any]:
        """``score`` and the word-level measures, once per run (not every epoch)."""
        words = (
            evaluate(model, frozen_words, tok, base.eval_batch_size, precision=base.precision, breakdowns=(BY_WORD,))
            if frozen_words
            else None
        )
        ranks = [candidate_rank(model, tok, p)[0] for p in named]
        return {
            **score(model),
            "multi_piece_words_top1": words["words"]["multi_piece"]["top1"] if words else None,
            "names_ranked_first": sum(r == 1 for r in ranks) / len(ranks) if ranks else None,
        }

    rows = [_row("before fine-tuning", None, final(prep.loaded.model), 0, 0.0)]
    for k in range(seeds):  # seed by seed, every option: a study cut short still holds comparable runs
        for name, changes in options.items():
            master = changes.get("master_weights", False)  # studies.master_weights: not a setting, not the course's
            run = base.replace(seed=base.seed + k, **{c: v for c, v in changes.items() if c != "master_weights"})
            # the same start for every option
            model = load_model(base.model, tok, seed=run.seed, **model_options(run)).model
            started = time.perf_counter()
            callbacks = [Validate(score, run.early_stopping_patience)] if run.early_stopping_patience else []
            rows_of_run = training_tokens(prep, run)  # packed into blocks for a padding="pack" option
            plan = plan_training(model, tok, rows_of_run, run)
            with reuse_freed_memory(plan.accelerator.device.type == "cpu"), bf16_weights(plan, master):
                history = train(plan, callbacks)
            seconds = time.perf_counter() - started
            rows.append(_row(name, run.seed, final(model), len(history["epochs"]), seconds))
            log(f"{name}, seed {run.seed}: top-1 {rows[-1]['top1']:.1%}, perplexity {rows[-1]['perplexity']:.1f}")
    order = list(options)
    return rows[:1] + sorted(rows[1:], key=lambda r: order.index(r["option"]))  # option by option, as before


def _row(name: str, seed: int | None, result: dict[str, Any], epochs: int, seconds: float) -> dict[str, Any]:
    kinds = result["kinds"]
    return {
        "option": name,
        "seed": seed,
        "top1": result["top1"],
        "top5": result["top5"],
        "perplexity": result["perplexity"],
        "entity_top1": kinds.get("entity", {}).get("top1"),
        "word_piece_top1": kinds.get("word_piece", {}).get("top1"),
        "multi_piece_words_top1": result.get("multi_piece_words_top1"),
        "names_ranked_first": result.get("names_ranked_first"),
        "epochs_run": epochs,
        "seconds": seconds,
    }


#: What :func:`summarise` summarises per option.
METRICS = (
    "top1",
    "top5",
    "perplexity",
    "entity_top1",
    "word_piece_top1",
    "multi_piece_words_top1",
    "names_ranked_first",
    "seconds",
)


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per option, in first-seen order: ``n`` runs and ``mean``/``min``/``max`` of each metric
    (``{metric: {"mean", "min", "max"}}``; a metric that is None in every run stays None)."""
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        summary.setdefault(r["option"], {"option": r["option"], "runs": []})["runs"].append(r)
    out = []
    for item in summary.values():
        entry: dict[str, Any] = {"option": item["option"], "n": len(item["runs"])}
        for metric in METRICS:
            values = [r[metric] for r in item["runs"] if r[metric] is not None]
            entry[metric] = (
                {"mean": statistics.fmean(values), "min": min(values), "max": max(values)} if values else None
            )
        out.append(entry)
    return out


def options_table(summary: Sequence[dict[str, Any]]) -> str:
    """A markdown table of :func:`summarise` output: mean and [min, max] over seeds (accuracies in %).

    Wall times are left out on purpose: they differ from run to run; they are in the rows.
    """

    def cell(stat: dict[str, float] | None, scale: float = 100.0, digits: int = 1) -> str:
        if stat is None:
            return "n/a"
        mean, low, high = (scale * stat[k] for k in ("mean", "min", "max"))
        return f"{mean:.{digits}f}" if low == high else f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    names = any(s.get("names_ranked_first") for s in summary)  # a column only where probes had candidates
    lines = [
        "| option | runs | top-1 % | top-5 % | entity top-1 % | perplexity | words of several pieces right %"
        + (" | names ranked first % |" if names else " |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---:" + (" | ---: |" if names else " |"),
    ]
    for s in summary:
        lines.append(
            f"| {s['option']} | {s['n']} | {cell(s['top1'])} | {cell(s['top5'])} | "
            f"{cell(s['entity_top1'])} | {cell(s['perplexity'], 1.0, 0)} | {cell(s.get('multi_piece_words_top1'))} |"
            + (f" {cell(s.get('names_ranked_first'))} |" if names else "")
        )
    return "\n".join(lines)
