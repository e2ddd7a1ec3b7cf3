"""Preparation: everything before training, piece by piece (load, split, tokenise, freeze masks).

The main job (``job.run_job``), the options study (``study``) and notebooks 03-05 start here:
:func:`prepare` does all of it in one call and times each phase; each piece is also a public
function of its step module, so a notebook can show one at a time.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from datasets import Dataset

from .common import resolve_precision, run_device
from .config import Settings, model_options, resolve_auto
from .data import CorpusReport, find_entities, load_corpus, train_validation_split
from .evaluation import evaluate
from .hub import is_local
from .masking import IGNORE_INDEX, freeze_masks
from .models import LoadedModel, load_model, model_max_positions
from .profiles import HEAD_KNOWS, own_text
from .tokens import check_max_length, epoch_padding_share, grouped, pack_rows, tokenize_rows, truncation, words_cut
from .training import optimizer_steps


@dataclass
class Prepared:
    """Everything the job needs before training.

    Attributes:
        settings: the run's settings, resolved for this model and machine (``config.resolve_auto``:
            ``learning_rate``, ``schedule`` and ``precision`` concrete); the one copy to use from here on.
        loaded: model, tokenizer and what the loader found.
        report: rows loaded and dropped.
        train_rows, validation_rows: raw text rows (a ``Dataset`` with one text column).
        train_tokens, validation_tokens: tokenised rows (``input_ids``, ``attention_mask``,
            ``special_tokens_mask``, ``length``).
        frozen_validation: validation rows with masks frozen by ``settings.seed``.
        entities: entity words found in the training rows (``data.find_entities``); their
            pieces are marked in the tokenised rows' ``entity_mask``.
        head: what the MLM head knows before training, which ``auto`` followed (:func:`head_check`).
        seconds: wall time of each phase: ``{"load", "tokenise"}`` (the head's check is in ``tokenise``).
        truncated: ``{"rows_cut", "tokens_dropped", "words_cut"}``: what truncation at ``max_length``
            dropped from the training and held-out rows (zeros with ``split_long_rows``; packed training
            rows lose nothing), and the rows that open inside a word longer than a row (``tokens.words_cut``:
            only split or packed rows can).
        batches: the training data as batched: ``{"rows"`` (training rows, or blocks when packed),
            ``"tokens"`` (real tokens, special tokens included), ``"padding_share"`` (fraction in [0, 1]
            of the first epoch's batch positions that are padding)``}``.
    """

    settings: Settings
    loaded: LoadedModel
    report: CorpusReport
    train_rows: Dataset
    validation_rows: Dataset
    train_tokens: Dataset
    validation_tokens: Dataset
    frozen_validation: list[dict[str, list[int]]]
    entities: list[str]
    head: dict = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    truncated: dict[str, int] = field(default_factory=lambda: {"rows_cut": 0, "tokens_dropped": 0, "words_cut": 0})
    batches: dict[str, float] = field(default_factory=dict)


def prepare(settings: Settings, model: str | None = None, inputs_checked: bool = False) -> Prepared:
    """Load the model and the corpus, hold out validation rows, tokenise, and freeze evaluation masks.

    Args:
        model: load this model (id or folder) instead of ``settings.model``, e.g. a fine-tuned one.
        inputs_checked: the caller has run :func:`check_inputs` already (the main job does, before
            it looks at its output folder), so it is not run twice.
    Raises:
        everything the loaders raise (see ``data.load_corpus``, ``models.load_model``), and
        ValueError when ``max_length`` exceeds the model's limit, nothing is held out, or the
        precision cannot run here (fp16 without a GPU: checked before any model is loaded).
    """
    started = time.perf_counter()
    if not inputs_checked:
        check_inputs(settings, model)
    resolve_precision(settings.precision)  # fails now, before any loading, if this machine cannot run it
    quiet = not settings.progress and not datasets.are_progress_bars_disabled()
    if quiet:  # progress off: no loading or tokenising bars either
        datasets.disable_progress_bars()
    try:
        return _prepare(settings, model, started)
    finally:
        if quiet:
            datasets.enable_progress_bars()


def check_inputs(settings: Settings, model: str | None = None, probes: str | Path | None = None) -> None:
    """Fail at once, before any other check or work, when a local path given for the model, the
    dataset or the probes does not exist (the first thing a user would fix).

    Raises:
        FileNotFoundError: names the path and the setting that gave it.
    """
    for setting, name in (("model", model or settings.model), ("dataset", settings.dataset), ("probes", probes)):
        if name and is_local(str(name)) and not Path(str(name)).expanduser().exists():
            raise MissingPath(setting, str(name))


class MissingPath(FileNotFoundError):
    """A local path given for ``setting`` (model, dataset or probes) does not exist; the command line's
    help pointer follows ``setting`` to its entry (a model that cannot be loaded, data that cannot be read)."""

    def __init__(self, setting: str, name: str) -> None:
        super().__init__(f"`{setting}` {name!r}: no such file or folder; check the path")
        self.setting = setting


def _prepare(settings: Settings, model: str | None, started: float) -> Prepared:
    # The data before the model: a wrong dataset, column or slice is the first thing to fix, and
    # max_length is checked against the model once both are known. Your own text is read whole.
    settings = settings.replace(split_long_rows=settings.split_long_rows or own_text(settings.dataset))
    rows, report = load_corpus(settings.dataset, settings.split, settings.text_column, settings.max_length)
    loaded = load_model(model or settings.model, seed=settings.seed, **model_options(settings))
    loaded.model.to(run_device())  # the "before" evaluation runs where training will (cuda, mps or cpu)
    check_max_length(settings.max_length, model_max_positions(loaded.model))
    train_rows, validation_rows = train_validation_split(
        rows, settings.validation_fraction, settings.seed, settings.max_validation_rows, settings.text_column
    )
    if len(validation_rows) == 0:
        raise ValueError("no held-out row to evaluate on: " + ("validation_fraction is 0; use e.g. 0.1" if not settings.validation_fraction
                         else "every held-out row repeats a training row; give your text more distinct rows"))  # fmt: skip
    loaded_at = time.perf_counter()
    tok = loaded.tokenizer
    entities = find_entities(train_rows[settings.text_column], settings.entity_min_count)

    def tokenised(part: Dataset) -> Dataset:
        return tokenize_rows(part, tok, settings.max_length, settings.text_column, settings.split_long_rows, entities)

    packed = settings.padding == "pack"
    train_tokens = packed_rows(train_rows, tok, settings, entities) if packed else tokenised(train_rows)
    validation_tokens = tokenised(validation_rows)  # never packed: every run is scored on the same rows
    parts = ((train_rows, train_tokens), (validation_rows, validation_tokens))[packed:]  # packing drops nothing
    frozen = freeze_masks(validation_tokens, tok, settings.mlm_probability, settings.seed)
    if not any(label != IGNORE_INDEX for row in frozen for label in row["labels"]):
        raise ValueError(
            f"the {len(frozen)} held-out rows have no masked token to score (rows too short, or "
            f"mlm_probability {settings.mlm_probability} too low): hold out more rows or raise it"
        )
    head = head_check(loaded.model, frozen, tok, settings)
    settings = resolve_auto(settings, head["new"], optimizer_steps(len(train_tokens), settings.replace(epochs=1)))
    settings = settings.replace(attention=loaded.model.config._attn_implementation)  # the kernel it was built with
    seconds = {"load": loaded_at - started, "tokenise": time.perf_counter() - loaded_at}
    return Prepared(
        settings=settings,
        loaded=loaded,
        report=report,
        train_rows=train_rows,
        validation_rows=validation_rows,
        train_tokens=train_tokens,
        validation_tokens=validation_tokens,
        frozen_validation=frozen,
        entities=entities,
        head=head,
        seconds=seconds,
        truncated=_truncated(settings, tok, parts, (train_tokens, validation_tokens)),
        batches=batches_of(train_tokens["length"], settings),
    )


def head_check(model, frozen: list[dict[str, list[int]]], tokenizer, settings: Settings) -> dict:
    """What the model's MLM head knows before training, which ``auto`` follows (``config.resolve_auto``), not its
    name: its top-1 on the ``frozen`` held-out masks (``evaluation.evaluate``, in the run's precision) beside the
    share of those masked tokens that always guessing the commonest one gets right.

    Returns:
        ``{"top1", "constant"`` (fractions in [0, 1]), ``"commonest"`` (that token), ``"seconds"`` (the
        evaluation's wall time: this machine's pace, for the run's length), ``"new"}``: True when top-1
        is under ``profiles.HEAD_KNOWS`` times the constant guess's share (a random head, or one that has
        learned little more than the commonest token): the run then gets a new head's settings.
    """
    labels = Counter(label for row in frozen for label in row["labels"] if label != IGNORE_INDEX)
    ((commonest, count),) = labels.most_common(1)
    precision = resolve_precision(settings.precision)
    scored = evaluate(model, frozen, tokenizer, settings.eval_batch_size, precision=precision)
    top1, constant, token = scored["top1"], count / labels.total(), tokenizer.convert_ids_to_tokens(commonest)
    new = top1 < HEAD_KNOWS * constant
    return {"top1": top1, "constant": constant, "commonest": token, "new": new, "seconds": scored["seconds"]}


def packed_rows(train_rows: Dataset, tokenizer, settings: Settings, entities: list[str]) -> Dataset:
    """``train_rows`` packed into blocks of ``settings.max_length`` (``tokens.pack_rows``), entities marked."""
    return pack_rows(train_rows, tokenizer, settings.max_length, settings.text_column, entities)


def batches_of(lengths: list[int], settings: Settings) -> dict[str, float]:
    """The training data as batched (:attr:`Prepared.batches`), from the rows' ``lengths`` in tokens."""
    longest = max(lengths) if settings.padding == "dataset" else None
    share = epoch_padding_share(
        lengths, settings.batch_size, settings.seed, grouped(settings.padding, settings.group_by_length), longest
    )
    return {"rows": len(lengths), "tokens": sum(lengths), "padding_share": share}


def _truncated(settings: Settings, tokenizer, parts, tokenised: tuple[Dataset, ...]) -> dict[str, int]:
    """What truncation dropped: only a row that came out exactly ``max_length`` long can have been
    cut (and none with ``split_long_rows``), so only those rows are tokenised again, in full
    (``tokens.truncation``); and ``words_cut``, the ``tokenised`` rows that open inside a word."""
    full = [
        text
        for rows, tokens in parts
        for text, length in zip(rows[settings.text_column], tokens["length"])
        if length == settings.max_length and not settings.split_long_rows
    ]
    split = settings.split_long_rows or settings.padding == "pack"  # rows cut anywhere but at their end
    cut = sum(words_cut(rows, tokenizer) for rows in tokenised) if split else 0
    return {**truncation(full, tokenizer, settings.max_length), "words_cut": cut}
