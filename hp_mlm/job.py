"""The main job, end to end: load, split, evaluate before, fine-tune, evaluate after, predict, save.

``python -m hp_mlm train`` calls :func:`run_job`; notebook 04 calls :func:`ensure_trained` so that
it can recreate the fine-tuned model with one call when notebook 03 has not been run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .callbacks import Validate
from .checkpoints import CHECKPOINTS, MODEL_DIR, finished_model, latest_checkpoint, save_model
from .common import atomic_write_text, generator, process_state
from .config import Settings
from .evaluation import evaluate, original_tutorial_accuracy
from .hub import hub_token, upload_model
from .inference import EXAMPLE_SENTENCES, fill_mask, load_probes, score_probes
from .prepare import check_inputs, default_probes, prepare
from .training import train

#: What the log says when ``accelerate launch --cpu --num_processes N`` started a single process.
ONE_CPU_PROCESS = ("note: `accelerate launch --cpu` starts one process; for N CPU processes use "
                   "`accelerate launch --multi_gpu --num_processes N` (it works without GPUs) or `torchrun --nproc_per_node N`")
#: Rows of the training split scored by the original tutorial's accuracy function (one position each).
ORIGINAL_ACCURACY_ROWS = 100


def check_output_dir(output_dir: Path, overwrite: bool, resume: bool) -> None:
    """Refuse to overwrite a finished model unless asked.

    Raises:
        FileExistsError: ``output_dir/model`` or checkpoints exist and neither ``overwrite`` nor
            ``resume`` was given; the message names both flags.
    """
    existing = [p for p in (output_dir / MODEL_DIR, output_dir / CHECKPOINTS) if p.exists()]
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
    push_to_hub: str | None = None,
) -> dict[str, Any]:
    """The whole main job; writes ``model/``, ``metrics.json``, ``history.json`` and two PNG plots.

    Each thing is measured once: the "after" is the last epoch's validation (or, with early
    stopping, the best epoch's, whose weights the model then holds). With ``push_to_hub="user/name"``
    the saved model folder is uploaded to that Hub repository at the end (a Hugging Face token is
    checked for before training starts).

    Returns:
        The metrics dict written to ``metrics.json``: ``before`` / ``after`` (``top1``, ``top5``,
        ``cross_entropy``, ``perplexity``, ``n_positions``, ...), ``original_tutorial_accuracy``,
        ``probes``, ``examples``, ``data``, ``settings``, ``run`` (device, processes, precision) and
        ``seconds`` (wall time per phase: ``load``, ``tokenise``, ``evaluate_before``, ``train``,
        ``evaluate_after``, ``predict``, ``save``, ``total``; validation between epochs is in
        ``train``'s wall time but not in ``train_clock``, the loop's own clock).
    """
    from .plots import plot_before_after, plot_loss_curve, save_figure

    started = time.perf_counter()
    out = Path(settings.output_dir)
    check_inputs(settings, probes=probes)  # what the user gave first, then what is already on disk
    probe_list = load_probes(probes) if probes else []  # a broken probes file is found before any loading
    check_output_dir(out, overwrite, resume)
    state = process_state()  # under accelerate launch: every process trains, process 0 logs and writes
    log = log if state.is_main_process else (lambda _: None)
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
    settings, tok, model, precision = prep.settings, prep.loaded.tokenizer, prep.loaded.model, prep.precision
    seconds = dict(prep.seconds)
    if note := prep.report.slice_note():
        log(note)
    log(f"rows: {prep.report.n_loaded} loaded, {prep.report.n_dropped} empty dropped, "
        f"{len(prep.train_rows)} train / {len(prep.validation_rows)} validation")
    if prep.loaded.head_newly_initialised:
        log("note: this checkpoint has no trained MLM head; it starts random, so 'before' scores are near zero")

    def score(m) -> dict[str, Any]:
        return evaluate(m, prep.frozen_validation, tok, settings.eval_batch_size, precision=precision)

    def original(m, draw: str) -> dict[str, Any]:
        return original_tutorial_accuracy(m, tok, sample, generator(settings.seed, draw), settings.max_length,
                                          settings.eval_batch_size, precision)

    sample = prep.train_rows[settings.text_column][:ORIGINAL_ACCURACY_ROWS]
    phase = time.perf_counter()
    before, original_before = score(model), original(model, "original-before")
    probes_before = score_probes(model, tok, probe_list, settings.top_k)
    seconds["evaluate_before"] = time.perf_counter() - phase
    log(f"before: top-1 {before['top1']:.1%}, top-5 {before['top5']:.1%}, perplexity {before['perplexity']:.1f} "
        f"({before['n_positions']} masked tokens)")
    log(f"training on {history_device(state.num_processes)} in {precision}: learning rate {prep.learning_rate:g} "
        f"({settings.schedule} schedule), {settings.epochs} epoch(s)")
    if state.num_processes == 1 and os.environ.get("MASTER_PORT") and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true":
        log(ONE_CPU_PROCESS)
    phase = time.perf_counter()
    history = train(model, tok, prep.train_tokens, settings, prep.learning_rate, output_dir=out, resume=resume,
                    callbacks=[Validate(score, settings.early_stopping_patience)])
    after = history.get("final_validation") or history["epochs"][-1]["validation"]
    seconds["evaluate_after"] = after["seconds"]
    phase_after = time.perf_counter()
    original_after = original(model, "original-after")
    seconds["train"] = phase_after - phase - after["seconds"]
    seconds["train_clock"] = sum(e["seconds"] for e in history["epochs"])
    seconds["evaluate_after"] += time.perf_counter() - phase_after
    phase = time.perf_counter()
    probes_after = score_probes(model, tok, probe_list, settings.top_k)
    examples = fill_mask(model, tok, list(EXAMPLE_SENTENCES), top_k=settings.top_k, max_length=settings.max_length)
    seconds["predict"] = time.perf_counter() - phase
    metrics: dict[str, Any] = {
        "before": before,
        "after": after,
        "original_tutorial_accuracy": {"before": original_before, "after": original_after,
                                       "rows": "training rows, one random position per row (specials included), "
                                               "a fresh draw per call"},
        "probes": {"before": probes_before, "after": probes_after,
                   "changed": changed_probes(probes_before, probes_after)},
        "entities": prep.entities[:50],
        "examples": [{"text": s, "predictions": p} for s, p in zip(EXAMPLE_SENTENCES, examples)],
        "data": {**prep.report.__dict__, "n_train": len(prep.train_rows), "n_validation": len(prep.validation_rows)},
        "learning_rate": prep.learning_rate,
        "head_newly_initialised": prep.loaded.head_newly_initialised,
        "run": {"device": history["device"], "processes": history["processes"], "precision": history["precision"]},
        "settings": settings.as_dict(),
        "seconds": seconds,
    }
    phase = time.perf_counter()
    if state.is_main_process:
        save_model(model, tok, out / MODEL_DIR)
        shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)  # the finished model replaces them
        atomic_write_text(out / "history.json", json.dumps(history, indent=2))
        save_figure(plot_loss_curve(history), out / "loss_curve.png")
        save_figure(plot_before_after(metrics), out / "before_after.png")
    seconds["save"] = time.perf_counter() - phase
    if push_to_hub and state.is_main_process:
        metrics["pushed_to"] = upload_model(out / MODEL_DIR, push_to_hub)
        log(f"uploaded to {metrics['pushed_to']}")
    seconds["total"] = time.perf_counter() - started
    if state.is_main_process:
        atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    state.wait_for_everyone()
    return metrics


def history_device(processes: int = 1) -> str:
    """Where training runs: ``cuda`` (with the GPU's name) or ``cpu``, and how many processes share it."""
    import torch

    device = f"cuda ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else "cpu"
    return device + (f" x {processes} processes (each takes 1/{processes} of the batches)" if processes > 1 else "")


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
    by ``checkpoints.save_model``, e.g. in notebook 03), else trained now by :func:`run_job`.

    Returns:
        ``Path(settings.output_dir) / "model"``.
    """
    target = finished_model(settings.output_dir)
    if target is not None:
        log(f"reusing the fine-tuned model in {settings.output_dir}/{MODEL_DIR}")
        return target
    log(f"no fine-tuned model in {settings.output_dir}/{MODEL_DIR} yet: running the main job to make it")
    run_job(settings, probes=default_probes(settings), overwrite=True, log=log)
    return Path(settings.output_dir) / MODEL_DIR
