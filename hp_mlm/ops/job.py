"""The main job, end to end: load, split, evaluate before, fine-tune, evaluate after, predict, save.

``python -m hp_mlm train`` calls :func:`run_job`, a short sequence of named phases; the notebooks
take the same steps one by one (03 trains and saves, 04 evaluates).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hp_mlm import evaluation
from hp_mlm.callbacks import SaveCheckpoints, Validate, time_budget
from hp_mlm.checkpoints import (
    CHECKPOINTS,
    LOCK,
    MODEL_DIR,
    clear_checkpoints,
    hold_output_dir,
    latest_checkpoint,
    release_output_dir,
    save_model,
)
from hp_mlm.common import atomic_write_text, device_kind, generator, process_state
from hp_mlm.config import Settings
from hp_mlm.course.examples import Examples, read_examples, run_examples
from hp_mlm.course.runs import run_length
from hp_mlm.data import CorpusReport, parse_split
from hp_mlm.evaluation import evaluate
from hp_mlm.inference import fill_mask
from hp_mlm.ops.allocator import reuse_freed_memory
from hp_mlm.ops.card import write_model_card
from hp_mlm.ops.push import PushError, check_push, upload_model
from hp_mlm.ops.report import changed_probes
from hp_mlm.prepare import Prepared, check_inputs, prepare
from hp_mlm.profiles import AUTO_SETTINGS, HEAD_AUTO, HEAD_KNOWS
from hp_mlm.studies.breakdowns import BY_KIND, BY_WORD, freeze_whole_words
from hp_mlm.studies.names import Followed, PerWord, follow_names, hidden_words, score_names, taught
from hp_mlm.studies.original import original_tutorial_accuracy
from hp_mlm.studies.probes import load_probes, read_candidates, score_probes
from hp_mlm.training import Callback, TrainingPlan, plan_training, train

#: What the log says when ``accelerate launch --cpu --num_processes N`` started a single process.
ONE_CPU_PROCESS = (
    "note: `accelerate launch --cpu` starts one process; for N CPU processes use "
    "`accelerate launch --multi_gpu --num_processes N` (it works without GPUs) or `torchrun --nproc_per_node N`"
)
#: Rows of the training split scored by the original tutorial's accuracy function (one position each).
ORIGINAL_ACCURACY_ROWS = 100


def stored_dtype(name: str) -> str | None:
    """The dtype a checkpoint's ``config.json`` records when it is half precision (``"float16"``,
    ``"bfloat16"``), else None (float32, none recorded, or the course's own models). ``models.load_model``
    loads every checkpoint in float32; this is what the log, ``metrics.json`` and the card say was upcast.
    Reads the folder, or the Hugging Face cache that loading filled: no network."""
    from transformers import AutoConfig

    from hp_mlm.profiles import OFFLINE_MODEL, RANDOM_HEAD_MODEL, SMOKE_MODEL

    if name in (SMOKE_MODEL, OFFLINE_MODEL, RANDOM_HEAD_MODEL):
        return None
    try:
        config = AutoConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError):
        return None
    dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "").removeprefix("torch.")
    return dtype if dtype in ("float16", "bfloat16") else None


def upcast_note(name: str) -> str | None:
    """One line for a log when ``name`` is stored in half precision (:func:`stored_dtype`), else None."""
    if (dtype := stored_dtype(name)) is None:
        return None
    return f"note: {name} is stored in {dtype}; its weights were loaded in float32"


def check_output_dir(output_dir: Path, overwrite: bool, resume: bool) -> None:
    """Refuse to overwrite a finished model unless asked.

    Raises:
        FileExistsError: ``output_dir/model`` or checkpoints exist and neither ``overwrite`` nor
            ``resume`` was given; the message names both, or, for a finished run (a model, no checkpoint,
            nothing to resume), how to train it further (:func:`train_further`).
    """
    existing = [p for p in (output_dir / MODEL_DIR, output_dir / CHECKPOINTS) if p.exists()]
    if existing == [output_dir / MODEL_DIR] and not (overwrite or resume):  # finished: no checkpoint to resume
        raise FileExistsError(f"{train_further(output_dir)}; or choose another `output_dir`")
    if existing and not (overwrite or resume):
        raise FileExistsError(
            f"{str(output_dir)!r} already holds a model or checkpoints ({', '.join(p.name for p in existing)}). "
            "Pass `overwrite` to replace it, `resume` to continue its training, or choose another output_dir."
        )


def run_job(
    settings: Settings,
    probes: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    log: Callable[[str], None] = print,
    push_to_hub: str | None = None,
    candidates: str | Path | None = None,
    watch_every: int | None = None,
    examples_file: str | Path | None = None,
) -> dict[str, Any]:
    """The whole main job; writes ``model/`` (with its model card, ``model/README.md``: ``card.write_model_card``),
    ``metrics.json``, ``history.json`` and two PNG plots.

    Each thing is measured once: the "after" is the last epoch's validation (or, with early
    stopping, the best epoch's, whose weights the model then holds). With ``push_to_hub="user/name"``
    the saved model folder, card included, is uploaded to that Hub repository at the end, after every file
    of the run is written (a Hugging Face token and a Hub that answers are checked for before training
    starts); an upload that fails leaves ``metrics["push_error"]``, its one-line message. ``candidates``:
    a file of words ranked at every probe's mask that lists none of its own (``probes.read_candidates``).
    ``watch_every``: optimiser steps between two
    frames of ``course.watch.WatchLearning`` (a line each in the log; None: about 12 in the run; 0: none).
    ``examples_file``: the example sentences, one JSON object a line (``course.examples.read_examples``); without
    it, those shipped with the corpus, else those picked from the held-out rows (``course.examples.run_examples``).

    Returns:
        The metrics dict written to ``metrics.json``: ``before`` / ``after`` (``top1``, ``top5``,
        ``cross_entropy``, ``perplexity``, ``n_positions``, ...), ``original_tutorial_accuracy``,
        ``probes``, ``examples``, ``watch`` (the frames, and the step at which each example's word first
        came first), ``ending`` (when none did: why, and what to do next; else ""), ``data``, ``settings``, ``run`` (device, processes, precision), ``trained_on`` (the model, ``@`` its Hub
        commit where it came from the Hub, and the training rows' fingerprint: ``checkpoints.resume_key``) and ``seconds`` (wall
        time per phase: ``load``, ``tokenise``, ``evaluate_before``, ``train``, ``watch``,
        ``evaluate_after``, ``predict``, ``save``, ``total``; validation between epochs is in ``train``'s
        wall time but not in ``train_clock``, the loop's own clock; the watch's frames are in neither).
    """
    started = time.perf_counter()
    out = Path(settings.output_dir)
    state = process_state()  # under accelerate launch: every process trains, process 0 logs and writes
    log = log if state.is_main_process else (lambda _: None)
    try:  # a run refused or failed in a live process (a notebook kernel) leaves the folder free
        probe_list = check_before_loading(settings, probes, overwrite, resume, push_to_hub, log, candidates)
        if examples_file:
            read_examples(examples_file)  # a broken file is refused before any loading
        prep = prepare(settings, inputs_checked=True)
        log_data(prep, log)
        shown = run_examples(prep, examples_file, log)  # picked with the stock model, before any training step
        probe_list = probe_list + shown.scored_whole
        if note := auto_note(settings, prep):
            log(note)
        if note := upcast_note(prep.loaded.name):
            log(
                f"{note} (the weights AdamW updates: its small steps round away in half precision; `precision` is the autocast)"
            )
        seconds = dict(prep.seconds)
        phase = time.perf_counter()
        tok, s = prep.loaded.tokenizer, prep.settings  # held-out words hidden whole, frozen once for before and after
        words = freeze_whole_words(prep.validation_tokens, tok, s.mlm_probability, s.seed)
        book = follow_names(prep.validation_tokens, tok, prep.entities), PerWord(hidden_words(words or [], tok), tok)
        before = measure(prep, prep.loaded.model, "before", words, probe_list, shown=shown, book=book)
        seconds["evaluate_before"] = time.perf_counter() - phase
        log_before_training(prep, before, state.num_processes, log, book[0])
        log(f"this run: {run_length(prep, settings.epochs is None)}")
        watched = (probe_list, watch_every, book)
        history, after = train_and_measure(prep, out, resume, seconds, log, words, watched, shown)
        phase = time.perf_counter()
        after["probes"] = predict(prep, probe_list)
        seconds["predict"] = time.perf_counter() - phase
        metrics = collect_metrics(prep, before, after, history, seconds, shown, book[0])
        phase = time.perf_counter()
        if state.is_main_process:
            save_outputs(prep, history, metrics, out, push_to_hub)
        seconds["save"] = time.perf_counter() - phase
        seconds["total"] = time.perf_counter() - started
        if state.is_main_process:  # everything the run made is written before any upload
            atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
        if push_to_hub and state.is_main_process:
            try:
                metrics["pushed_to"] = upload_model(out / MODEL_DIR, push_to_hub)
                log(f"uploaded to {metrics['pushed_to']}")
            except PushError as error:  # all of the above is kept; the caller says it after the report
                metrics["push_error"] = str(error)
            atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
        state.wait_for_everyone()
        return metrics
    finally:
        if state.is_main_process:
            drop_if_nothing_written(out)
        release_output_dir(out)


def drop_if_nothing_written(out: Path) -> None:
    """Remove the run's folder when it holds nothing but this process's own lock (``checkpoints.hold_output_dir``):
    a run refused or failed before writing anything (an empty file, a Hub out of reach) leaves no empty folder to
    puzzle over. A lock another process holds names that process, so it is never touched."""
    lock = out / LOCK
    try:
        if [p.name for p in out.iterdir()] != [LOCK]:
            return
        holder = lock.read_text(encoding="utf-8").strip()
        if holder == f"process {os.getpid()} on {socket.gethostname()}":
            lock.unlink()
            out.rmdir()
    except OSError:  # gone already, or not ours to remove: nothing is lost either way
        return


def check_before_loading(
    settings: Settings,
    probes: str | Path | None,
    overwrite: bool,
    resume: bool,
    push_to_hub: str | None,
    log: Callable[[str], None],
    candidates: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Every check that needs no model, in the order a user would fix them: the paths given, the
    probes file, the output folder (no other run training into it, then what it holds), a checkpoint
    to resume, the Hub token. Returns the probes."""
    out = Path(settings.output_dir)
    check_inputs(settings, probes=probes)
    shared = read_candidates(candidates) if candidates else None  # broken files are found before any loading
    probe_list = load_probes(probes, shared) if probes else []
    if process_state().is_main_process:
        hold_output_dir(out)  # another run's folder is refused now, not after loading and evaluating
    check_output_dir(out, overwrite, resume)
    if resume and latest_checkpoint(out) is None:
        if (out / MODEL_DIR).exists():
            raise FileExistsError(train_further(out))
        log("no checkpoint to resume from; starting from the beginning")
    if push_to_hub:
        check_push(push_to_hub)  # a token and a Hub that answers: fail now, not after training
    log(
        f"profile {settings.profile}, recipe {settings.recipe}: model {settings.model}, "
        f"data {settings.dataset} [{settings.split}]"
    )
    return probe_list


def train_further(out: Path) -> str:
    """The line for ``resume`` into a finished run's folder: its training ended (its schedule ran to its last
    step), so more epochs start from its saved model, as a new run in a new folder; ``overwrite`` would throw
    that model away."""
    more = shlex.quote(f"{out}-more")
    return (
        f"{str(out)!r} holds a finished run (its model, no checkpoint): to train it further, start from its model in "
        f"a new folder (`model` {shlex.quote(str(out / MODEL_DIR))} `output_dir` {more}, with the `epochs` you want "
        "more of); `overwrite` trains again from the start and replaces it"
    )


#: How the log names the encodings ``data.text_encoding`` reads a .txt in.
TEXT_ENCODINGS = {"utf-8-sig": "UTF-8", "utf-16": "UTF-16 (its byte-order mark dropped)", "cp1252": "Windows cp1252"}


def log_data(prep: Prepared, log: Callable[[str], None]) -> None:
    """Say what was loaded: the slice, the rows kept and held out, a new head, what truncation dropped and
    the rows that open inside a word longer than a row."""
    if note := slice_note(prep.report):
        log(note)
    log(
        f"rows: {prep.report.n_loaded} loaded, {prep.report.n_dropped} empty dropped, "
        f"{len(prep.train_rows)} train / {len(prep.validation_rows)} validation"
    )
    if prep.report.encoding:  # a .txt: UTF-8, UTF-16 or Windows cp1252 (data.text_encoding)
        log(f"text read as {TEXT_ENCODINGS[prep.report.encoding]}")
    b, rows = prep.batches, f"{prep.batches['rows']} rows"
    if prep.settings.padding == "pack":
        rows = f"{len(prep.train_rows)} rows packed into {b['rows']} blocks (cut at word starts)"
    elif b["rows"] > len(prep.train_rows):  # split_long_rows: always for your own text (profiles.own_text)
        rows = f"{len(prep.train_rows)} rows, the long ones cut at word starts: {b['rows']} rows (the whole text)"
    log(
        f"training data: {rows}, {b['tokens']:,} tokens; padding "
        f"{b['padding_share']:.1%} of the first epoch's batch positions ({prep.settings.padding} padding)"
    )
    if prep.loaded.head_newly_initialised:
        log("note: this checkpoint has no trained MLM head; it starts random, so 'before' scores are near zero")
    if cut := prep.truncated["rows_cut"]:  # text dropped by truncation is always counted
        log(
            f"note: {cut} row(s) longer than max_length {prep.settings.max_length} lost "
            f"{prep.truncated['tokens_dropped']} tokens to truncation; split_long_rows keeps them as extra rows"
        )
    if cut := prep.truncated["words_cut"]:  # a word longer than a row: its leading pieces open the next row
        log(
            f"note: {cut} row(s) open inside a word of more than max_length - 2 = {prep.settings.max_length - 2} "
            "pieces; whole-word masking reads their leading pieces as a word of their own"
        )


def slice_note(report: CorpusReport) -> str | None:
    """One line for the log when the split's slice left rows out (e.g. ``train[:10%]``), naming the split that
    keeps them all; else None."""
    if report.n_loaded >= report.n_available:
        return None
    return (
        f"using {report.n_loaded / report.n_available:.0%} of the rows ({report.n_loaded} of {report.n_available}; "
        f"split {report.split!r}): set `split` to {parse_split(report.split)[0]} for all of them"
    )


def auto_note(settings: Settings, prep: Prepared) -> str | None:
    """One line for the log: the values ``auto`` settled and why, from what the model's MLM head knows before
    training (``prepare.head_check``), not from its name, e.g. ``auto: learning rate 0.0005, constant
    schedule, 12 epochs: a new head's (benchmarks/results/stock_head_study.md): its held-out top-1 before
    training, 7.8%, is under 2 times the 8.2% of always guessing 'the'``; None when ``settings`` set them all."""
    unset = [name for name in AUTO_SETTINGS if getattr(settings, name) in (None, "auto")]
    if not unset:
        return None
    s, head = prep.settings, prep.head
    said = {"learning_rate": f"learning rate {s.learning_rate:g}", "schedule": f"{s.schedule} schedule"}
    said["epochs"] = f"{s.epochs} epochs"
    kind, than = ("new", "under") if head["new"] else ("pretrained", "at least")
    return (
        f"auto: {', '.join(said[name] for name in unset)}: a {kind} head's ({HEAD_AUTO[kind]['source']}): its "
        f"held-out top-1 before training, {head['top1']:.1%}, is {than} {HEAD_KNOWS:g} times the "
        f"{head['constant']:.1%} of always guessing {head['commonest']!r}"
    )


def held_out(prep: Prepared, model) -> dict[str, Any]:
    """``evaluation.evaluate`` on the frozen held-out masks, in the run's precision."""
    s = prep.settings
    tok = prep.loaded.tokenizer
    return evaluate(model, prep.frozen_validation, tok, s.eval_batch_size, precision=s.precision, breakdowns=(BY_KIND,))


def measure(
    prep: Prepared,
    model,
    when: str,
    words: list | None,
    probe_list: list | None = None,
    held: dict | None = None,
    shown: Examples | None = None,
    book: tuple[Followed, PerWord] | None = None,
) -> dict:
    """What is measured ``when`` ("before" or "after"): held-out scores (``held`` when the loop has
    scored them already), the original tutorial's accuracy (a fresh draw), the held-out ``words``
    hidden whole (``studies.breakdowns.freeze_whole_words``, frozen once a run) and, given, the probes,
    the run's example sentences (``shown``, ``course.examples.run_examples``; none: ``[]``) and the book's
    words (``book``: its names followed at every held-out occurrence, and each hidden word's hits, ``per_word``,
    for ``studies.names.taught``)."""
    s, tok = prep.settings, prep.loaded.tokenizer
    result = {"held_out": held or held_out(prep, model)}
    sample = prep.train_rows[s.text_column][:ORIGINAL_ACCURACY_ROWS]
    result["original"] = original_tutorial_accuracy(
        model, tok, sample, generator(s.seed, f"original-{when}"), s.max_length, s.eval_batch_size, s.precision
    )
    # the same scoring on other frozen masks, not the held-out evaluation (`evaluate` above, once a measure)
    followed, per_word = book or (None, None)
    each = (per_word,) if per_word and per_word.words else ()
    result["whole_words"] = (
        evaluation.evaluate(model, words, tok, s.eval_batch_size, precision=s.precision, breakdowns=(BY_WORD, *each))
        if words
        else None
    )
    result["per_word"] = result["whole_words"].pop("per_word", {}) if words else {}
    result["names"] = score_names(model, followed, tok, s.eval_batch_size, s.precision) if followed else {}
    if probe_list is not None:
        result["probes"] = score_probes(model, tok, probe_list, s.top_k)
    sentences = [text for text, _ in shown.examples] if shown else []
    result["examples"] = fill_mask(model, tok, sentences, top_k=s.top_k, max_length=s.max_length) if sentences else []
    return result


def log_before_training(
    prep: Prepared, before: dict, processes: int, log: Callable[[str], None], followed: Followed | None = None
) -> None:
    """The "before" line, the book's names followed (``followed``), and where and how training runs."""
    s, b = prep.settings, before["held_out"]
    log(
        f"before: top-1 {b['top1']:.1%}, top-5 {b['top5']:.1%}, perplexity {b['perplexity']:.1f} "
        f"({b['n_positions']} masked tokens)"
    )
    if followed and followed.names:
        right = before["names"]
        log(
            "names followed at every held-out occurrence (right = the first guess): "
            + ", ".join(f"{n} {right.get(n, 0)}/{seen}" for n, seen in followed.occurrences.items())
        )
    log(
        f"training on {describe_device(processes)} in {s.precision}: learning rate {s.learning_rate:g} "
        f"({s.schedule} schedule), {s.epochs} epoch(s), attention dropout {'on' if s.attention_dropout else 'off'}, "
        f"hidden dropout {'on' if s.hidden_dropout else 'off'}, {s.attention} attention"
    )
    if s.precision == "fp16":
        log("fp16 with loss scaling: AdamW unfused, so that a step it skips is seen (not counted; the schedule waits)")
    if s.time_budget_minutes:
        log(f"time budget: training stops after {s.time_budget_minutes:g} min, saves a checkpoint, evaluates and saves")
    if processes == 1 and os.environ.get("MASTER_PORT") and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true":
        log(ONE_CPU_PROCESS)


def train_and_measure(
    prep: Prepared,
    out: Path,
    resume: bool,
    seconds: dict[str, float],
    log: Callable[[str], None],
    words: list | None,
    watched: tuple[list, int | None, tuple] = ([], 0, (None, None)),
    shown: Examples | None = None,
) -> tuple[dict, dict]:
    """Fine-tune with validation after every epoch (and the time box, if set), then measure "after";
    ``seconds`` gains ``train``, ``train_clock``, ``watch`` and ``evaluate_after``. ``watched``: the probes,
    the steps between two frames of the watch (``course.watch``; 0: none) and the book's words (names followed,
    per-word hits: :func:`measure`'s ``book``); ``shown``: the run's examples."""
    from tqdm.auto import tqdm

    from hp_mlm.callbacks import TIME_BUDGET
    from hp_mlm.course.watch import RunClock, WatchLearning, run_ending, stop_reason

    s, model = prep.settings, prep.loaded.model
    phase = time.perf_counter()
    plan = plan_training(model, prep.loaded.tokenizer, prep.train_tokens, s, output_dir=out, resume=resume)
    # a time budget stops the epoch in progress, which is validated and checkpointed as usual
    budget = time_budget(plan)
    validate = Validate(lambda m: held_out(prep, m), s.early_stopping_patience, plan)  # its best survives a resume
    epochs = [] if s.progress else [LogEpochs(log, s.epochs)]  # without progress bars, a line per epoch
    if plan.history["optimizer_steps"]:
        log(
            f"resuming at optimiser step {plan.history['optimizer_steps']} (epoch {plan.start_epoch + 1}, "
            f"after {plan.batches_done} of its batches)"
        )
        if s.time_budget_minutes:  # time_budget(plan) counts this run's minutes only
            before = sum(e["seconds"] for e in plan.history["epochs"])
            log(
                f"time budget starts again: {s.time_budget_minutes:g} min of training from here; the "
                f"{before / 60:.1f} min trained before the resume are not counted (each run's budget is its own)"
            )
    probe_list, every, (followed, per_word) = watched
    say = tqdm.write if s.progress else log
    watch = (
        []
        if every == 0 or not plan.accelerator.is_main_process
        else [WatchLearning(plan, prep.loaded.tokenizer, probe_list, every, say, shown, followed)]
    )  # first: its last frame shows the weights trained, before early stopping takes the best epoch's
    clock = RunClock(plan, tqdm.write if s.progress and plan.accelerator.is_main_process else log)
    callbacks: list[Callback] = [*watch, clock, validate, *epochs, budget, SaveCheckpoints(plan)]  # checkpoints last
    history = run_training(plan, callbacks)
    if stop_reason(history, s.epochs) == TIME_BUDGET:  # the reason the budget returned, before the run's end
        history["time_budget_stop"] = {"step": history["optimizer_steps"], "planned_steps": plan.total_steps}
        log(
            f"time budget reached: stopped at optimiser step {history['optimizer_steps']} of {plan.total_steps} "
            f"(epoch {budget.stopped_at['epoch']} of {s.epochs}); the model so far is evaluated and saved, "
            "and its checkpoint kept: rerun the same command with --resume to continue, or use a model trained once "
            "on a fast machine (`python -m hp_mlm handout`, then HP_MLM_TRAINED_MODEL)"
        )
    further = f"train further from the saved model into a new folder ({train_further_command(s)})"
    history["ending"] = run_ending(
        history, "rerun the same command with --resume", further
    )  # "" once a word came first
    if history["ending"]:
        log(history["ending"])
    validated = history.get("final_validation") or history["epochs"][-1]["validation"]
    seconds["watch"] = watch[0].seconds if watch else 0.0
    seconds["train"] = time.perf_counter() - phase - validated["seconds"] - seconds["watch"]
    seconds["train_clock"] = sum(e["seconds"] for e in history["epochs"])
    phase = time.perf_counter()
    after = measure(prep, model, "after", words, held=validated, shown=shown, book=(followed, per_word))
    seconds["evaluate_after"] = validated["seconds"] + time.perf_counter() - phase
    return history, after


def train_further_command(settings: Settings) -> str:
    """The command that trains a finished run's saved model further, into a new folder (each path one word
    in a shell), e.g. ``python -m hp_mlm train --profile offline --model outputs/offline/model --output-dir
    outputs/offline-more`` (with ``--dataset`` too)."""
    out = Path(settings.output_dir)
    new = out.with_name(out.name + "-more")
    return (
        f"python -m hp_mlm train --profile {settings.profile} --dataset {shlex.quote(settings.dataset)} "
        f"--model {shlex.quote(str(out / MODEL_DIR))} --output-dir {shlex.quote(str(new))}"
    )


def predict(prep: Prepared, probe_list: list[dict[str, str]]) -> dict[str, Any]:
    """The fine-tuned model's probes."""
    return score_probes(prep.loaded.model, prep.loaded.tokenizer, probe_list, prep.settings.top_k)


def collect_metrics(
    prep: Prepared,
    before: dict,
    after: dict,
    history: dict,
    seconds: dict[str, float],
    shown: Examples | None = None,
    followed: Followed | None = None,
) -> dict[str, Any]:
    """The dict written to ``metrics.json`` (see :func:`run_job`); ``examples_source`` says where the run's
    examples came from (``course.examples``: shipped, given or picked); ``names``, the book's names followed at
    every held-out occurrence (``{"followed": {name: occurrences}, "before", "after": {name: right}, "learned"``:
    when each was first right at a third of them, ``studies.names.first_learned``), and ``taught``, the words
    right at held-out gaps after training and not before (``studies.names.taught``)."""
    watch = history.get("watch") or {}
    rows_note = "training rows, one random position per row (specials included), a fresh draw per call"
    return {
        "before": before["held_out"],
        "after": after["held_out"],
        "original_tutorial_accuracy": {"before": before["original"], "after": after["original"], "rows": rows_note},
        "whole_words": {"before": before["whole_words"], "after": after["whole_words"]},
        "probes": {
            "before": before["probes"],
            "after": after["probes"],
            "changed": changed_probes(before["probes"], after["probes"]),
            "from_examples": len(shown.scored_whole) if shown else 0,  # the last rows: examples of several pieces
        },
        "watch": history.get("watch"),
        "names": {
            "followed": followed.occurrences if followed else {},
            "before": before.get("names", {}),
            "after": after.get("names", {}),
            "learned": watch.get("names_learned", []),
        },
        "taught": taught(before.get("per_word") or {}, after.get("per_word") or {}),
        "ending": history.get("ending", ""),
        "entities": prep.entities[:50],
        "examples": [
            {"text": text, "answers": list(answers), "before": b, "after": a}
            for (text, answers), b, a in zip(shown.examples if shown else (), before["examples"], after["examples"])
        ],
        "examples_source": shown.source if shown else None,
        "examples_decided_by": list(shown.decided_by) if shown else [],  # picked: the neighbour deciding each word
        "data": {
            **prep.report.__dict__,
            "n_train": len(prep.train_rows),
            "n_validation": len(prep.validation_rows),
            **prep.truncated,
            "train_batches": prep.batches,
        },
        "learning_rate": prep.settings.learning_rate,
        "head_newly_initialised": prep.loaded.head_newly_initialised,
        "head_check": prep.head,
        "run": {
            "device": history["device"],
            "processes": history["processes"],
            "precision": history["precision"],
            "checkpoint_dtype": stored_dtype(prep.loaded.name) or "float32",
            "weights_dtype": str(next(prep.loaded.model.parameters()).dtype).removeprefix("torch."),
        },
        "trained_on": {k: history["run"][k] for k in ("model", "training_rows")},  # as a resume checks it
        "settings": prep.settings.as_dict(),
        "seconds": seconds,
    }


def save_outputs(prep: Prepared, history: dict, metrics: dict, out: Path, repo_id: str | None = None) -> None:
    """The model with its model card (replacing the checkpoints, unless a time budget stopped training),
    the history and the plots. ``repo_id``: the Hub repository the model will be pushed to, named in the card."""
    from hp_mlm.course.plots import plot_before_after, plot_loss_curve, save_figure

    save_model(prep.loaded.model, prep.loaded.tokenizer, out / MODEL_DIR)
    write_model_card(out / MODEL_DIR, prep.settings, metrics=metrics, history=history, repo_id=repo_id)
    if "time_budget_stop" not in history:  # the finished model replaces them; a stopped run keeps them
        clear_checkpoints(out)
    atomic_write_text(out / "history.json", json.dumps(history, indent=2))
    save_figure(plot_loss_curve(history), out / "loss_curve.png")
    save_figure(plot_before_after(metrics), out / "before_after.png")


def describe_device(processes: int = 1) -> str:
    """Where training runs: ``cuda`` (with the GPU's name), ``mps`` (Apple silicon) or ``cpu``, and how
    many processes share it."""
    import torch

    kind = device_kind()
    device = (
        f"cuda ({torch.cuda.get_device_name()})" if kind == "cuda" else {"mps": "mps (Apple silicon)"}.get(kind, kind)
    )
    return device + (f" x {processes} processes (each takes 1/{processes} of the batches)" if processes > 1 else "")


def run_training(plan: TrainingPlan, callbacks: list[Callback]) -> dict:
    """``training.train``, on the CPU inside ``allocator.reuse_freed_memory``: the memory a step frees
    is kept for the next (faster steps, the same numbers; meanwhile the process holds about its
    largest step's memory)."""
    with reuse_freed_memory(plan.accelerator.device.type == "cpu"):
        return train(plan, callbacks)


class LogEpochs(Callback):
    """One line per epoch, for a log without progress bars (``progress`` off): the epoch's training loss
    and held-out loss (both per masked token) and its seconds of training."""

    def __init__(self, log: Callable[[str], None], epochs: int) -> None:
        self.log, self.epochs = log, epochs

    def on_epoch_end(self, model, record: dict[str, Any]) -> bool:  # noqa: ARG002 - a hook's signature
        train, held = record["train_loss"], (record.get("validation") or {}).get("cross_entropy")
        losses = [
            f"{name} loss {value:.3f}" for name, value in (("training", train), ("held-out", held)) if value is not None
        ]
        self.log(
            f"epoch {record['epoch']}/{self.epochs}: {', '.join(losses) or 'nothing masked'}, {record['seconds']:.0f} s"
        )
        return False
