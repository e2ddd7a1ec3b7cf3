"""Command line: ``python -m hp_mlm train | predict | evaluate`` over the same functions the notebooks use."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from hp_mlm.config import Settings, get_settings
from hp_mlm.ops.flags import as_flags, build_parser


def _settings(args: argparse.Namespace) -> Settings:
    """The settings the flags ask for; a number flag given as ``auto`` (``--lr auto``) leaves that setting
    to the model, over the profile's and the variables' values."""
    known = {f.name for f in fields(Settings)} - {"profile"}
    given = {k: v for k, v in vars(args).items() if k in known}
    # a number left to the model is None; a word setting (precision, schedule) has "auto" as a value of its own
    unset_is_auto = {f.name for f in fields(Settings) if f.type in ("float | None", "int | None")}
    auto = {k for k, v in given.items() if v == "auto" and k in unset_is_auto}
    settings = get_settings(args.profile, **{k: v for k, v in given.items() if k not in auto})
    return settings.replace(**dict.fromkeys(auto)) if auto else settings


def _cmd_train(args: argparse.Namespace) -> int:
    from hp_mlm.common import process_state
    from hp_mlm.ops.job import run_job
    from hp_mlm.ops.report import format_report
    from hp_mlm.studies.probes import default_probes

    if args.watch_every is not None and args.watch_every < 0:  # before anything loads
        raise ValueError(f"--watch-every must be 0 (no watch) or a number of optimiser steps, got {args.watch_every}")
    settings = _settings(args)
    metrics = run_job(
        settings,
        probes=args.probes or default_probes(settings),
        overwrite=args.overwrite,
        resume=args.resume,
        push_to_hub=args.push_to_hub,
        log=lambda line: print(as_flags(line)),
        candidates=args.candidates,
        watch_every=args.watch_every,
        examples_file=args.examples,
    )
    if not process_state().is_main_process:  # under accelerate launch, one report
        return 0
    print(format_report(metrics))
    print(f"\nsaved to {settings.output_dir}/ (model/, metrics.json, history.json, loss_curve.png, before_after.png)")
    if "push_error" in metrics:  # after the report: the run is kept, only the upload failed
        from hp_mlm.ops.push import PushError

        raise PushError(metrics["push_error"])
    return 0


def default_model(settings: Settings, log=print) -> str:
    """The model ``predict``/``evaluate`` use without ``--model``: a handed-out model (``trained_model``,
    ``ops.handout``), else the profile's fine-tuned model when ``<output_dir>/model`` holds one, else the
    profile's base model; says which (on stderr)."""
    from hp_mlm.checkpoints import MODEL_DIR, finished_model
    from hp_mlm.ops.handout import handed_out_model

    handed = handed_out_model(settings)
    if handed is not None:
        log(f"using the model handed out in {settings.trained_model} (trained_model; pass --model to choose another)")
        return str(handed)
    trained = finished_model(settings.output_dir)
    if trained is not None:
        log(f"using the fine-tuned model in {trained} (pass --model to choose another)")
        return str(trained)
    log(
        f"using the untrained base model {settings.model}: no fine-tuned model in {settings.output_dir}/{MODEL_DIR} yet "
        "(run `python -m hp_mlm train` with the same profile first, or pass the --dataset you trained on, or --model)"
    )
    return settings.model


def _cmd_predict(args: argparse.Namespace) -> int:
    from hp_mlm.common import run_device
    from hp_mlm.inference import fill_mask, fill_words
    from hp_mlm.models import load_model
    from hp_mlm.ops.job import upcast_note

    if args.max_pieces < 1:  # before the model loads
        raise ValueError(f"--max-pieces must be >= 1, got {args.max_pieces}")
    if args.whole_words and args.targets is not None:
        raise ValueError("pass --targets (score these words) or --whole-words (predict words), not both")
    changes = {"trained_model": args.trained_model, "dataset": args.dataset}  # None: the profile's
    model_name = args.model or default_model(get_settings(args.profile, **changes), log=_note)
    loaded = load_model(model_name)
    loaded.model.to(run_device())
    if note := upcast_note(model_name):
        _note(note)
    targets = [t.strip() for t in args.targets.split(",")] if args.targets is not None else None
    top_k = args.top_k if args.top_k is not None else len(targets or []) or 5
    if args.whole_words:
        results = fill_words(loaded.model, loaded.tokenizer, args.sentences, top_k, max_pieces=args.max_pieces)
    else:
        results = fill_mask(loaded.model, loaded.tokenizer, args.sentences, top_k, targets=targets)
    if args.json:
        print(
            json.dumps(
                [
                    [[{k: c[k] for k in ("token", "score", "is_subword", "pieces")} for c in mask] for mask in sentence]
                    for sentence in results
                ],
                indent=2,
            )
        )
        return 0
    for sentence, masks in zip(args.sentences, results):
        print(sentence)
        for m, candidates in enumerate(masks, start=1):
            shown = ", ".join(_answer(c) for c in candidates)
            print(f"  mask {m}: {shown}")
    return 0


def _answer(candidate: dict[str, Any]) -> str:
    """One answer as text: the token, "(piece)" for a word piece, its probability (small ones as 1.2e-05)."""
    piece = " (piece)" if candidate["is_subword"] else ""
    if len(candidate["pieces"]) > 1:
        piece = f" ({' '.join(candidate['pieces'])})"
    score = candidate["score"]
    return f"{candidate['token']}{piece} " + (f"{score:.3f}" if score >= 0.001 else f"{score:.1e}")


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from hp_mlm.evaluation import evaluate
    from hp_mlm.masking import freeze_masks
    from hp_mlm.ops.job import upcast_note
    from hp_mlm.prepare import prepare
    from hp_mlm.studies.breakdowns import BY_KIND

    settings = _settings(args)
    if args.model is None:
        settings = settings.replace(model=default_model(settings, log=_note))
    prep = prepare(settings)
    settings, frozen = prep.settings, prep.frozen_validation
    if args.all_rows:
        from datasets import concatenate_datasets

        frozen = freeze_masks(
            concatenate_datasets([prep.train_tokens, prep.validation_tokens]),
            prep.loaded.tokenizer,
            settings.mlm_probability,
            settings.seed,
        )
    if note := upcast_note(prep.loaded.name):
        _note(note)
    tok, size = prep.loaded.tokenizer, settings.eval_batch_size
    result = evaluate(prep.loaded.model, frozen, tok, size, precision=settings.precision, breakdowns=(BY_KIND,))
    print(json.dumps(result, indent=2))
    return 0


def _cmd_handout(args: argparse.Namespace) -> int:
    from hp_mlm.ops.handout import make_handout

    settings = _settings(args)
    archive = make_handout(settings, args.output)
    size = archive.stat().st_size / 2**20
    print(f"wrote {archive} ({size:.0f} MB), the model in {settings.output_dir}/model with its settings")
    print(f"on each laptop: HP_MLM_PROFILE={settings.profile} HP_MLM_TRAINED_MODEL=<path to it> (docs/teaching.md)")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hp_mlm.common import atomic_write_text
    from hp_mlm.course.plots import plot_options, save_figure
    from hp_mlm.studies.options import DEFAULT_OPTIONS, compare_options, options_table, summarise

    settings = _settings(args)
    options = DEFAULT_OPTIONS
    if args.only:
        unknown = set(args.only) - set(DEFAULT_OPTIONS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}; choose from {list(DEFAULT_OPTIONS)}")
        options = {k: v for k, v in DEFAULT_OPTIONS.items() if k in args.only}
    from hp_mlm.studies.probes import default_probes, load_probes

    shipped = default_probes(settings)  # the corpus's probes with candidates are ranked after each run
    rows = compare_options(settings, options, seeds=args.seeds, probes=load_probes(shipped) if shipped else None)
    summary = summarise(rows)
    table = options_table(summary)
    out = Path(settings.output_dir)
    atomic_write_text(
        out / "comparison.json",
        json.dumps({"settings": settings.as_dict(), "rows": rows, "summary": summary}, indent=2),
    )
    atomic_write_text(out / "comparison.md", table + "\n")
    save_figure(plot_options(summary), out / "comparison.png")
    print(table)
    print(f"\nsaved to {settings.output_dir}/ (comparison.json, comparison.md, comparison.png)")
    return 0


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def raised_by_the_package(error: BaseException) -> bool:
    """True when the ``raise`` that threw ``error`` is in hp_mlm's own code (an error raised on purpose,
    with a message for the user), False when it came from a library or Python itself."""
    from hp_mlm.ops.troubleshooting import raised_in

    return raised_in(error) is not None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status: 0 ok; 2 for every error the package raises on purpose
    (bad input, an unreachable Hub, out of memory, a diverged loss...), printed as one line
    ``error: ...`` without a traceback; 1 for an error from a library or a bug, also one line,
    with ``HP_MLM_DEBUG=1`` to see its traceback; 130 when interrupted."""
    import os
    import warnings

    from hp_mlm.ops.doctor import run_if_asked
    from hp_mlm.ops.troubleshooting import pointer

    argv = sys.argv[1:] if argv is None else list(argv)
    if (status := run_if_asked(argv)) is not None:  # its own flags, and it needs no settings
        return status
    args = build_parser().parse_args(argv)
    handlers = {
        "train": _cmd_train,
        "predict": _cmd_predict,
        "evaluate": _cmd_evaluate,
        "compare": _cmd_compare,
        "handout": _cmd_handout,
    }
    # a warning is one line too, its settings named as flags (e.g. bf16 forced on a CPU without it)
    shown = warnings.formatwarning
    warnings.formatwarning = lambda message, *_, **__: f"warning: {as_flags(str(message))}\n"
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print("\ninterrupted; rerun with --resume to continue from the last checkpoint", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - every error becomes one line at the command line
        if os.environ.get("HP_MLM_DEBUG", "").strip() not in ("", "0"):
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        if raised_by_the_package(error):  # with its entry in docs/troubleshooting.md
            print(f"error: {as_flags(message)}{pointer(error)}", file=sys.stderr)
            return 2
        print(f"error: {type(error).__name__}: {message} (set HP_MLM_DEBUG=1 to see where)", file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
