"""Settings: what to train, on what, and how (step 0 of the pipeline).

Taught in ``notebooks/00_setup.ipynb``. One frozen dataclass holds a run's settings; it is
built from a *profile* (``full``, ``quick``, ``smoke``), then environment variables
``HP_MLM_<SETTING>``, then explicit overrides (the CLI's flags), in that order of precedence.
Nothing here reads a file, loads a model or touches the network.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

#: Names that stand for the project's own tiny model and corpus (never a Hub id: they hold a colon).
SMOKE_MODEL = "hp_mlm:smoke-bert"
SMOKE_DATASET = "hp_mlm:smoke-corpus"
#: Corpora shipped inside the package (written for this course), by name -> file in ``hp_mlm/data``.
PACKAGE_DATASETS = {SMOKE_DATASET: "smoke_corpus.txt", "hp_mlm:products": "products.txt"}
#: Probes shipped with those corpora.
PACKAGE_PROBES = {SMOKE_DATASET: "smoke_probes.jsonl", "hp_mlm:products": "products_probes.jsonl"}

PROFILE_ENV = "HP_MLM_PROFILE"
ENV_PREFIX = "HP_MLM_"
PROFILES = ("full", "quick", "smoke")
RECIPES = ("course", "seed")
SCHEDULES = ("linear", "constant")
MASKING_STRATEGIES = ("mask", "bert", "whole_word", "entity")


@dataclass(frozen=True)
class Settings:
    """The settings of one run. Defaults are the course's real job (the ``full`` profile).

    Fields (units in brackets):
        model: Hub id or local folder of a masked-LM (``bert-base-uncased``), or ``SMOKE_MODEL``.
        dataset: Hub dataset id, a local file/folder, or ``SMOKE_DATASET``.
        split: split with optional slice, e.g. ``train[:10%]``, ``train[-10%:]``, ``train[:200]``.
        text_column: the column that holds the text.
        max_length: tokens per row after truncation, ``[CLS]``/``[SEP]`` included.
        mlm_probability: fraction in (0, 1) of selectable tokens chosen for prediction.
        masking: ``"mask"`` (every chosen token becomes the mask token, the course's scheme),
            ``"bert"`` (80/10/10, Devlin et al. 2019, section 3.1), ``"whole_word"`` (all pieces
            of a word together) or ``"entity"`` (whole words, names from the corpus preferred).
        entity_min_count: a capitalised word must appear this often mid-sentence to count as an
            entity (see ``masking.find_entities``).
        batch_size: rows per optimiser step (before gradient accumulation).
        gradient_accumulation_steps: batches per optimiser step; the effective batch is
            ``batch_size * gradient_accumulation_steps``.
        epochs: passes over the training rows (at most; see ``early_stopping_patience``).
        early_stopping_patience: stop when the validation loss has not improved for this many
            epochs and keep the best epoch's weights (``0``: off).
        learning_rate: peak AdamW learning rate; ``None`` means "auto": 5e-5 when the model's
            MLM head was pretrained, 2e-4 when it was newly initialised (measured, see README).
        weight_decay: AdamW decoupled weight decay, not applied to biases and LayerNorm.
        warmup_fraction: fraction in [0, 1) of the optimiser steps spent warming up linearly.
        max_grad_norm: gradient clipping threshold (L2 norm); ``0`` turns clipping off.
        seed: seeds the split, the shuffling, the masks and the model's dropout.
        validation_fraction: fraction in [0, 1) of rows held out for validation.
        max_validation_rows: cap on held-out rows (``0``: no cap), to keep evaluation fast.
        eval_batch_size: rows per evaluation batch.
        output_dir: where the CLI writes the model, metrics, history and plots (one folder per
            profile by default, ``outputs/<profile>``, so runs of different profiles never collide).
        split_long_rows: cut a row longer than ``max_length`` into several rows instead of
            truncating it (no text is lost, more rows to train on).
        recipe: ``"course"`` (this course) or ``"seed"`` (the original tutorial, reproduced).
        schedule: ``"linear"`` (warmup then linear decay) or ``"constant"``.
        mask_once: draw each training row's masks once, before training (the original tutorial's
            static masks), instead of afresh for every batch.
        label_all_tokens: label every real token, not only the masked ones (the original
            tutorial's labels; most of the loss is then about copying visible tokens).
        group_by_length: batch rows of similar length together (shuffled within groups).
        masked_positions_only: run the MLM head's vocabulary projection only at masked positions
            during training (same loss, less compute).
        checkpoint_every: optimiser steps between checkpoints (``0``: only at epoch ends).
        progress: show ``tqdm`` progress bars.
        top_k: candidates per mask shown by fill-mask.
        profile: the profile these settings came from (for display).
    """

    model: str = "bert-base-uncased"
    dataset: str = "andjela-r/mlm-harry-potter"
    split: str = "train[:10%]"
    text_column: str = "text"
    max_length: int = 512
    split_long_rows: bool = False
    mlm_probability: float = 0.15
    masking: str = "mask"
    entity_min_count: int = 3
    batch_size: int = 16
    gradient_accumulation_steps: int = 1
    epochs: int = 3
    early_stopping_patience: int = 0
    learning_rate: float | None = None
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_grad_norm: float = 1.0
    seed: int = 42
    validation_fraction: float = 0.1
    max_validation_rows: int = 0
    eval_batch_size: int = 32
    output_dir: str = "outputs/full"
    recipe: str = "course"
    schedule: str = "linear"
    mask_once: bool = False
    label_all_tokens: bool = False
    group_by_length: bool = True
    masked_positions_only: bool = True
    checkpoint_every: int = 200
    progress: bool = True
    top_k: int = 5
    profile: str = "full"

    def __post_init__(self) -> None:
        validate(self)

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain JSON-serialisable dict."""
        return dataclasses.asdict(self)


#: What each profile changes relative to the ``full`` defaults.
PROFILE_OVERRIDES: dict[str, dict[str, Any]] = {
    # The course as published: bert-base-uncased on 10% of the Harry Potter rows.
    "full": {},
    # A CPU laptop in a workshop: fewer rows, shorter rows, one epoch.
    "quick": {
        "split": "train[:600]",
        "max_length": 128,
        "epochs": 1,
        "max_validation_rows": 100,
        "checkpoint_every": 0,
        "output_dir": "outputs/quick",
    },
    # CI: the project's own tiny BERT and corpus, seconds per run, no network.
    "smoke": {
        "model": SMOKE_MODEL,
        "dataset": SMOKE_DATASET,
        "split": "train",
        "max_length": 64,
        "epochs": 40,
        "batch_size": 16,
        "learning_rate": 3e-3,
        "warmup_fraction": 0.05,
        "validation_fraction": 0.15,
        "checkpoint_every": 0,
        "eval_batch_size": 64,
        "output_dir": "outputs/smoke",
    },
}


def validate(settings: Settings) -> None:
    """Check every setting's range.

    Raises:
        ValueError: naming the first setting out of range and the range it must be in.
    """
    s = settings
    if not 0.0 < s.mlm_probability < 1.0:
        raise ValueError(f"mlm_probability must be in (0, 1), got {s.mlm_probability}")
    if not 0.0 <= s.validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {s.validation_fraction}")
    if not 0.0 <= s.warmup_fraction < 1.0:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {s.warmup_fraction}")
    for name in ("batch_size", "eval_batch_size", "gradient_accumulation_steps", "epochs", "top_k"):
        if getattr(s, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(s, name)}")
    if s.entity_min_count < 1:
        raise ValueError(f"entity_min_count must be >= 1, got {s.entity_min_count}")
    if s.max_length < 8:
        raise ValueError(f"max_length must be >= 8 tokens, got {s.max_length}")
    if s.learning_rate is not None and not s.learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0 (or None for auto), got {s.learning_rate}")
    for name in ("weight_decay", "max_grad_norm", "max_validation_rows", "checkpoint_every", "early_stopping_patience"):
        if getattr(s, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(s, name)}")
    if s.recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {s.recipe!r}")
    if s.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {s.schedule!r}")
    if s.masking not in MASKING_STRATEGIES:
        raise ValueError(f"masking must be one of {MASKING_STRATEGIES}, got {s.masking!r}")
    if s.profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {s.profile!r}")
    if not s.text_column:
        raise ValueError("text_column must name a column, got an empty string")


def _parse(name: str, raw: str, kind: Any) -> Any:
    """Turn an environment string into the type of setting ``name``."""
    text = raw.strip()
    try:
        if kind in ("bool",):
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "float | None":
            return None if text.lower() in ("", "none", "auto") else float(text)
    except ValueError:
        raise ValueError(
            f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind} for setting {name!r}"
        ) from None
    return text


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read ``HP_MLM_<SETTING>`` variables (e.g. ``HP_MLM_MODEL``) into typed overrides.

    Raises:
        ValueError: if a variable's value cannot be read as the setting's type.
    """
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "profile":
            continue
        key = ENV_PREFIX + f.name.upper()
        if key in environ:
            out[f.name] = _parse(f.name, environ[key], f.type)
    return out


def active_profile(environ: Mapping[str, str] | None = None) -> str:
    """The profile named by ``HP_MLM_PROFILE`` (default ``full``).

    Raises:
        ValueError: if the variable names no known profile.
    """
    environ = os.environ if environ is None else environ
    name = environ.get(PROFILE_ENV, "full").strip().lower() or "full"
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} is not a profile; choose one of {PROFILES}")
    return name


def get_settings(
    profile: str | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build the run's settings: profile, then ``HP_MLM_<SETTING>`` variables, then ``overrides``.

    Args:
        profile: ``full``, ``quick`` or ``smoke``; ``None`` reads ``HP_MLM_PROFILE``.
        environ: the environment to read (default ``os.environ``).
        **overrides: explicit values (``None`` values are ignored), e.g. from CLI flags.

    Raises:
        ValueError: unknown profile or setting, or a value out of range.
    """
    environ = os.environ if environ is None else environ
    name = active_profile(environ) if profile is None else profile
    if name not in PROFILES:
        raise ValueError(f"profile {name!r} is not one of {PROFILES}")
    known = {f.name for f in fields(Settings)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    values: dict[str, Any] = dict(PROFILE_OVERRIDES[name])
    values.update(env_overrides(environ))
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["profile"] = name
    return Settings(**values)


def resolve_learning_rate(settings: Settings, head_newly_initialised: bool) -> float:
    """The learning rate to use: the explicit one, else the measured default for this model.

    Args:
        head_newly_initialised: True when the checkpoint had no MLM head weights.
    Returns:
        The peak learning rate. The ``seed`` recipe always uses the original tutorial's 1e-5.
    """
    if settings.recipe == "seed" and settings.learning_rate is None:
        return 1e-5
    if settings.learning_rate is not None:
        return settings.learning_rate
    return 2e-4 if head_newly_initialised else 5e-5
