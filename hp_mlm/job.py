"""The main job, end to end: load, split, evaluate before, fine-tune, evaluate after, predict, save.

``python -m hp_mlm train`` calls :func:`run_job`; the notebooks call :func:`prepare` and
:func:`ensure_trained` so that each notebook can recreate what it needs with one call.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset

from .config import PACKAGE_PROBES, Settings, resolve_learning_rate
from .data import CorpusReport, load_corpus, train_validation_split
from .evaluation import evaluate, original_tutorial_accuracy
from .inference import EXAMPLE_SENTENCES, fill_mask, load_probes, score_probes
from .masking import find_entities, freeze_masks
from .models import LoadedModel, load_model, model_max_positions
from .tokens import check_max_length, tokenize_rows
from .training import CHECKPOINTS, latest_checkpoint, save_model, train

MODEL_DIR = "model"
#: Rows of the training split scored by the original tutorial's (batch-1) accuracy function.
ORIGINAL_ACCURACY_ROWS = 100


@dataclass
class Prepared:
    """Everything the job needs before training.

    Attributes:
        settings: the run's settings.
        loaded: model, tokenizer and what the loader found.
        report: rows loaded and dropped.
        train_rows, validation_rows: raw text rows (a ``Dataset`` with one text column).
        train_tokens, validation_tokens: tokenised rows (``input_ids``, ``attention_mask``,
            ``special_tokens_mask``, ``length``).
        frozen_validation: validation rows with masks frozen by ``settings.seed``.
        learning_rate: the peak learning rate in use.
        entities: entity words found in the training rows (``masking.find_entities``); their
            pieces are marked in the tokenised rows' ``entity_mask``.
    """

    settings: Settings
    loaded: LoadedModel
    report: CorpusReport
    train_rows: Dataset
    validation_rows: Dataset
    train_tokens: Dataset
    validation_tokens: Dataset
    frozen_validation: list[dict[str, list[int]]]
    learning_rate: float
    entities: list[str]


def prepare(settings: Settings, model: str | None = None) -> Prepared:
    """Load the model and the corpus, hold out validation rows, tokenise, and freeze evaluation masks.

    Args:
        model: load this model (id or folder) instead of ``settings.model``, e.g. a fine-tuned one.
    Raises:
        everything the loaders raise (see ``data.load_corpus``, ``models.load_model``), and
        ValueError when ``max_length`` exceeds the model's limit or nothing is held out.
    """
    loaded = load_model(model or settings.model, seed=settings.seed)
    check_max_length(settings.max_length, model_max_positions(loaded.model))
    rows, report = load_corpus(settings.dataset, settings.split, settings.text_column)
    train_rows, validation_rows = train_validation_split(
        rows, settings.validation_fraction, settings.seed, settings.max_validation_rows
    )
    if len(validation_rows) == 0:
        raise ValueError("validation_fraction is 0, so there is nothing to evaluate on; use e.g. 0.1")
    tok = loaded.tokenizer
    entities = find_entities(train_rows[settings.text_column], settings.entity_min_count)
    train_tokens, validation_tokens = (
        tokenize_rows(part, tok, settings.max_length, settings.text_column, settings.split_long_rows, entities)
        for part in (train_rows, validation_rows)
    )
    frozen = freeze_masks(validation_tokens, tok, settings.mlm_probability, settings.seed)
    return Prepared(
        settings,
        loaded,
        report,
        train_rows,
        validation_rows,
        train_tokens,
        validation_tokens,
        frozen,
        resolve_learning_rate(settings, loaded.head_newly_initialised),
        entities,
    )


def default_probes(settings: Settings) -> Path | None:
    """The corpora shipped with the package come with probes; others have none unless ``--probes`` is given."""
    if settings.dataset in PACKAGE_PROBES:
        from importlib import resources

        return Path(str(resources.files("hp_mlm") / "data" / PACKAGE_PROBES[settings.dataset]))
    return None


def check_output_dir(output_dir: Path, overwrite: bool, resume: bool) -> None:
    """Refuse to overwrite a finished model unless asked.

    Raises:
        FileExistsError: ``output_dir/model`` or checkpoints exist and neither ``overwrite`` nor
            ``resume`` was given; the message names both flags.
    """
    existing = [p for p in (output_dir / MODEL_DIR, output_dir / "checkpoints") if p.exists()]
    if existing and not (overwrite or resume):
        raise FileExistsError(
            f"{str(output_dir)!r} already holds a model or checkpoints ({', '.join(p.name for p in existing)}). "
            "Pass --overwrite to replace it, --resume to continue its training, or choose another --output-dir."
        )


def run_job(
    settings: Settings,
    probes: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    log: Callable[[str], None] = print,
    stop_after_steps: int | None = None,
    push_to_hub: str | None = None,
) -> dict[str, Any]:
    """The whole main job; writes ``model/``, ``metrics.json``, ``history.json`` and two PNG plots.

    With ``push_to_hub="user/name"`` the saved model folder is uploaded to that Hub repository at
    the end (a Hugging Face token is checked for before training starts).

    Returns:
        The metrics dict written to ``metrics.json``: ``before`` / ``after`` (``top1``, ``top5``,
        ``cross_entropy``, ``perplexity``, ``n_positions``, ...), ``original_tutorial_accuracy``,
        ``probes``, ``examples``, ``data``, ``settings``, ``seconds``.
    """
    from .plots import plot_before_after, plot_loss_curve, save_figure
    from .training import atomic_write_text

    started = time.perf_counter()
    out = Path(settings.output_dir)
    check_output_dir(out, overwrite, resume)
    if resume and latest_checkpoint(out) is None:
        if (out / MODEL_DIR).exists():
            raise FileExistsError(
                f"{str(out)!r} holds a finished model and no checkpoint to resume; pass --overwrite to train again"
            )
        log("no checkpoint to resume from; starting from the beginning")
    if push_to_hub:
        hub_token(push_to_hub)  # fail now, not after training
    log(f"profile {settings.profile}, recipe {settings.recipe}: model {settings.model}, data {settings.dataset} [{settings.split}]")
    prep = prepare(settings)
    tok, model = prep.loaded.tokenizer, prep.loaded.model
    log(
        f"rows: {prep.report.n_loaded} loaded, {prep.report.n_dropped} empty dropped, "
        f"{len(prep.train_rows)} train / {len(prep.validation_rows)} validation"
    )
    if prep.loaded.head_newly_initialised:
        log("note: this checkpoint has no trained MLM head; it starts random, so 'before' scores are near zero")
    probe_list = load_probes(probes) if probes else []

    def score(m) -> dict[str, Any]:
        return evaluate(m, prep.frozen_validation, tok, settings.eval_batch_size)

    sample = prep.train_rows[settings.text_column][:ORIGINAL_ACCURACY_ROWS]
    before = score(model)
    original_before = original_tutorial_accuracy(model, tok, sample, torch.Generator().manual_seed(1), settings.max_length)
    probes_before = score_probes(model, tok, probe_list, settings.top_k)
    log(f"before: top-1 {before['top1']:.1%}, top-5 {before['top5']:.1%}, perplexity {before['perplexity']:.1f} ({before['n_positions']} masked tokens)")
    log(f"training at learning rate {prep.learning_rate:g} for {settings.epochs} epoch(s)")
    history = train(
        model,
        tok,
        prep.train_tokens,
        settings,
        prep.learning_rate,
        evaluate_fn=score,
        output_dir=out,
        resume=resume,
        stop_after_steps=stop_after_steps,
    )
    after = score(model)
    original_after = original_tutorial_accuracy(model, tok, sample, torch.Generator().manual_seed(2), settings.max_length)
    probes_after = score_probes(model, tok, probe_list, settings.top_k)
    examples = fill_mask(model, tok, list(EXAMPLE_SENTENCES), top_k=settings.top_k, max_length=settings.max_length)
    save_model(model, tok, out / MODEL_DIR)
    shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)  # the finished model replaces them
    metrics: dict[str, Any] = {
        "before": before,
        "after": after,
        "original_tutorial_accuracy": {"before": original_before, "after": original_after, "rows": "training rows, one row at a time, one random position per row, redrawn per call"},
        "probes": {"before": probes_before, "after": probes_after,
                   "changed": changed_probes(probes_before, probes_after)},
        "entities": prep.entities[:50],
        "examples": [{"text": s, "predictions": p} for s, p in zip(EXAMPLE_SENTENCES, examples)],
        "data": {**prep.report.__dict__, "n_train": len(prep.train_rows), "n_validation": len(prep.validation_rows)},
        "learning_rate": prep.learning_rate,
        "head_newly_initialised": prep.loaded.head_newly_initialised,
        "settings": settings.as_dict(),
        "seconds": time.perf_counter() - started,
    }
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    atomic_write_text(out / "history.json", json.dumps(history, indent=2))
    save_figure(plot_loss_curve(history), out / "loss_curve.png")
    save_figure(plot_before_after(metrics), out / "before_after.png")
    if push_to_hub:
        metrics["pushed_to"] = upload_model(out / MODEL_DIR, push_to_hub)
        log(f"uploaded to {metrics['pushed_to']}")
    log(format_report(metrics))
    return metrics


def changed_probes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes whose top-1 answer changed with fine-tuning: ``[{"text", "answer", "before", "after", "right"}]``."""
    return [
        {"text": a["text"], "answer": a["answer"], "before": b["top1"], "after": a["top1"], "right": a["hit_top1"]}
        for b, a in zip(before["rows"], after["rows"])
        if a["top1"] != b["top1"]
    ]


def hub_token(repo_id: str) -> str:
    """The Hugging Face token to upload with (``HF_TOKEN`` or ``hf auth login``).

    Raises:
        ValueError: no token is available (says how to log in), or ``repo_id`` is not ``user/name``.
    """
    from huggingface_hub import get_token

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"--push-to-hub needs a repository id like 'your-name/hp-mlm-bert', got {repo_id!r}")
    token = get_token()
    if not token:
        raise ValueError(
            f"--push-to-hub {repo_id}: no Hugging Face token found; run `hf auth login` or set HF_TOKEN"
        )
    return token


def upload_model(model_dir: Path, repo_id: str) -> str:
    """Upload a saved model folder to the Hub repository ``repo_id`` (created if missing) with
    ``huggingface_hub``; returns the repository URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=hub_token(repo_id))
    url = api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(folder_path=str(model_dir), repo_id=repo_id, commit_message="Upload a model fine-tuned with hp-mlm")
    return str(url)


#: The options ``compare_options`` measures by default: name -> settings changed from the course's.
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "course (mask, warmup+decay)": {},
    "BERT 80/10/10": {"masking": "bert"},
    "whole-word masking": {"masking": "whole_word"},
    "entity masking": {"masking": "entity"},
    "constant learning rate": {"schedule": "constant"},
    "static masks": {"mask_once": True},
    "labels on every token": {"label_all_tokens": True},
}


def compare_options(
    settings: Settings,
    options: dict[str, dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Fine-tune once per option from the same start, on the same rows, and score each on the same
    frozen validation masks.

    Args:
        options: name -> settings to change (default ``DEFAULT_OPTIONS``).
    Returns:
        One dict per option: ``option``, ``top1``, ``top5``, ``perplexity``, ``entity_top1``,
        ``word_piece_top1``, ``epochs_run``, ``seconds``; the first row is the model before training.
    """
    options = DEFAULT_OPTIONS if options is None else options
    prep = prepare(settings)
    tok = prep.loaded.tokenizer

    def score(model) -> dict[str, Any]:
        return evaluate(model, prep.frozen_validation, tok, settings.eval_batch_size)

    def row(name: str, result: dict[str, Any], epochs: int, seconds: float) -> dict[str, Any]:
        kinds = result["kinds"]
        return {
            "option": name,
            "top1": result["top1"],
            "top5": result["top5"],
            "perplexity": result["perplexity"],
            "entity_top1": kinds.get("entity", {}).get("top1"),
            "word_piece_top1": kinds.get("word_piece", {}).get("top1"),
            "epochs_run": epochs,
            "seconds": seconds,
        }

    rows = [row("before fine-tuning", score(prep.loaded.model), 0, 0.0)]
    for name, changes in options.items():
        run_settings = settings.replace(**changes)
        model = load_model(settings.model, tok, seed=settings.seed).model  # the same start for every option
        started = time.perf_counter()
        history = train(
            model,
            tok,
            prep.train_tokens,
            run_settings,
            resolve_learning_rate(run_settings, prep.loaded.head_newly_initialised),
            evaluate_fn=score if run_settings.early_stopping_patience else None,
        )
        rows.append(row(name, score(model), len(history["epochs"]), time.perf_counter() - started))
        log(f"{name}: top-1 {rows[-1]['top1']:.1%}, perplexity {rows[-1]['perplexity']:.1f}")
    return rows


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
        lines.append(f"{'probes right (top-1)':<28}{p['before']['hits_top1']:>10}{p['after']['hits_top1']:>10}  of {p['after']['n']}")
    lines.append("")
    for example in metrics["examples"]:
        guesses = " | ".join(", ".join(c["token"] for c in mask[:3]) for mask in example["predictions"])
        lines.append(f"{example['text']}  ->  {guesses}")
    for row in p["after"]["rows"]:
        mark = "right" if row["hit_top1"] else "wrong"
        lines.append(f"[{mark}] {row['text']}  ->  {row['top1']} (answer: {row['answer']})")
    return "\n".join(lines)


def ensure_trained(settings: Settings, log: Callable[[str], None] = print) -> Path:
    """The fine-tuned model folder for ``settings``: reused when present (saved by the main job or
    by ``training.save_model``, e.g. in notebook 03), else trained now by :func:`run_job`.

    Returns:
        ``Path(settings.output_dir) / "model"``.
    """
    target = Path(settings.output_dir) / MODEL_DIR
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        log(f"reusing the fine-tuned model in {settings.output_dir}/{MODEL_DIR}")
        return target
    log(f"no fine-tuned model in {settings.output_dir}/{MODEL_DIR} yet: running the main job to make it")
    run_job(settings, probes=default_probes(settings), overwrite=True, log=log)
    return target
