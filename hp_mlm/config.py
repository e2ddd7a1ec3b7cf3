"""Settings: what to train, on what, and how (step 0 of the pipeline).

Taught in ``notebooks/00_setup.ipynb``. One frozen dataclass holds a run's settings, built from a *profile*
(``profiles.PROFILES``), then ``HP_MLM_<SETTING>`` variables, then explicit overrides (the CLI's flags), in that
order of precedence. Nothing here reads a file, loads a model or touches the network.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .common import PRECISIONS, device_kind, resolve_precision
from .profiles import (
    ATTENTIONS,
    AUTO_SETTINGS,
    BOOKS_DATASET,
    HEAD_AUTO,
    MASKING_STRATEGIES,
    ORIGINAL_RECIPE,
    PADDINGS,
    PROFILE_OVERRIDES,
    PROFILES,
    RECIPES,
    ROOM_STEPS,
    SCHEDULES,
    own_text,
)

PROFILE_ENV = "HP_MLM_PROFILE"
ENV_PREFIX = "HP_MLM_"
#: Variables whose name is shorter than ``HP_MLM_<SETTING>`` (the flag's name).
ENV_NAMES = {"time_budget_minutes": "HP_MLM_TIME_BUDGET"}


def env_name(setting: str) -> str:
    """The environment variable of ``setting``: ``HP_MLM_<SETTING>``, or its short name (:data:`ENV_NAMES`)."""
    return ENV_NAMES.get(setting, ENV_PREFIX + setting.upper())


@dataclass(frozen=True)
class Settings:
    """The settings of one run. Defaults are the course's real job (the ``full`` profile).

    Fields (units in brackets):
        model: Hub id or local folder of a masked-LM (``bert-base-uncased``), or ``SMOKE_MODEL``.
        dataset: Hub dataset id, a local file/folder, or ``SMOKE_DATASET``.
        split: split with optional slice, e.g. ``train[:10%]``, ``train[-10%:]``, ``train[:200]``; a profile's slice is
            for the course's data: your own text is read whole (``train``) unless you set one, which counts its rows.
        text_column: the column that holds the text.
        max_length: tokens per row after truncation, ``[CLS]``/``[SEP]`` included.
        mlm_probability: fraction in (0, 1) of selectable tokens chosen for prediction.
        masking: ``"mask"`` (every chosen token becomes the mask token, the course's scheme),
            ``"bert"`` (80/10/10, Devlin et al. 2019, section 3.1), ``"whole_word"`` (all pieces
            of a word together) or ``"entity"`` (whole words, names from the corpus preferred).
        entity_min_count: a capitalised word must appear this often mid-sentence to count as an
            entity (see ``data.find_entities``).
        batch_size: rows per optimiser step (before gradient accumulation).
        gradient_accumulation_steps: batches per optimiser step; the effective batch is
            ``batch_size * gradient_accumulation_steps``.
        epochs: passes over the training rows (at most: see ``early_stopping_patience`` and
            ``time_budget_minutes``); ``None`` means "auto": what the model's MLM head knows
            (:func:`resolve_auto`: 3 for a head that knows, 12 for one no better than a constant guess).
        early_stopping_patience: stop when the validation loss has not improved for this many
            epochs and keep the best epoch's weights (``0``: off).
        time_budget_minutes: stop at the first optimiser step past this many minutes of training clock,
            checkpoint, evaluate and save; ``resume`` continues (``0``: no limit; ``HP_MLM_TIME_BUDGET``).
        learning_rate: peak AdamW learning rate; ``None`` means "auto": what the model's MLM head
            knows (:func:`resolve_auto`: 5e-5 for a head that knows, 5e-4 for one no better than a constant guess).
        precision: ``auto`` (bf16 on GPUs and CPUs that do it natively, fp16 on older GPUs,
            else fp32), ``fp32``, ``bf16`` or ``fp16`` (GPU only); training and evaluation alike.
        weight_decay: AdamW decoupled weight decay, not applied to biases and LayerNorm.
        warmup_fraction: fraction in [0, 1) of the optimiser steps spent warming up linearly.
        max_grad_norm: gradient clipping threshold (L2 norm); ``0`` turns clipping off.
        seed: seeds the split, the shuffling, the masks and the model's dropout.
        validation_fraction: fraction in [0, 1) of rows held out for validation.
        max_validation_rows: cap on held-out rows (``0``: no cap), to keep evaluation fast.
        eval_batch_size: rows per evaluation batch.
        output_dir: where the CLI and the notebooks write the model, metrics, history, plots and checkpoints: by
            default ``outputs/<profile>`` for the profile's own data, ``outputs/<profile>-<data>`` for other data
            (:func:`data_name`: a learner's ``my_book.txt`` trains into ``outputs/quick-my_book``), so runs of
            different profiles or data never mix.
        split_long_rows: cut a row longer than ``max_length`` into several rows, not truncate it.
        recipe: ``"course"`` (this course) or ``"original"`` (the original tutorial, reproduced:
            sets ``ORIGINAL_RECIPE``; ``"seed"`` is an alias).
        schedule: ``"linear"`` (warmup, then linear decay to 0), ``"constant"`` (warmup, then
            flat) or ``"auto"`` (:func:`resolve_auto`; linear for a head that knows).
        padding: ``"batch"`` (each batch to its longest row), ``"pack"`` (rows joined, cut into blocks at
            word starts: ``tokens.pack_rows``) or ``"dataset"`` (every row to the longest: the original's).
        mask_once: draw each training row's masks once, before training (the original tutorial's
            static masks), instead of afresh for every batch.
        label_all_tokens: label every real token, not only the masked ones (the original
            tutorial's labels; most of the loss is then about copying visible tokens).
        group_by_length: batch rows of similar length together (shuffled within groups).
        masked_positions_only: the head's vocabulary projection only at masked positions (same loss).
        attention_dropout: keep the model's dropout on attention weights while training (BERT's
            ``attention_probs_dropout_prob``, 0.1). Off in the course: PyTorch's CPU attention then keeps its
            fused kernel instead of building every head's attention matrix and dropout mask: a bert-base step
            at 16 x 512 in bf16 13.9 s and 7.6 GB against 21.0 s and 21.2 GB, a MiniLM one at 16 x 128 0.91 s
            against 1.05 s; at rows of about 50 tokens in bf16 the fused kernel is the slower one (MiniLM
            0.43 s against 0.40 s; ``attention`` picks eager there, faster than both). Held-out top-1 stays
            within the seeds' spread (benchmarks/results/levers.md); the original recipe keeps it on.
        hidden_dropout: keep the model's dropout on hidden states while training (BERT's ``hidden_dropout_prob``,
            0.1: after the embeddings, each attention output and each feed-forward block). Off in the course:
            without those 13 masks a MiniLM step on the offline corpus's batches took 0.89 of the step with them
            in bf16 and 0.94 in fp32 (benchmarks/results/dropout_step.md), and over 3 seeds held-out top-1 was
            44.2% without it against 42.4% with it offline, 35.2% against 35.2% on the Oz books
            (benchmarks/results/levers.md); the original recipe keeps it on.
        attention: the attention kernel, transformers' ``attn_implementation``: ``"sdpa"`` (PyTorch's
            ``scaled_dot_product_attention``, fused where it can be), ``"eager"`` (BERT's own matrix
            products and softmax: the same function, tests/test_levers.py) or ``"auto"``
            (:func:`resolve_attention`: eager on a CPU in bf16 with ``max_length`` <= 128, else transformers'
            choice, sdpa for BERT). ``prepare`` sets it to the kernel the model was built with.
        checkpoint_every: optimiser steps between checkpoints (``0``: only at epoch ends).
        progress: show ``tqdm`` progress bars.
        top_k: candidates per mask shown by fill-mask.
        trained_model: a fine-tuned model handed out to a room (a .zip or folder made by ``python -m hp_mlm
            handout``, ``ops.handout``): notebook 04 and ``predict``/``evaluate`` use it instead of their own.
        profile: the profile these settings came from (for display).
    """

    model: str = "bert-base-uncased"
    dataset: str = BOOKS_DATASET
    split: str = "train[:10%]"
    text_column: str = "text"
    max_length: int = 512
    split_long_rows: bool = False
    mlm_probability: float = 0.15
    masking: str = "mask"
    entity_min_count: int = 3
    batch_size: int = 16
    gradient_accumulation_steps: int = 1
    epochs: int | None = None
    early_stopping_patience: int = 0
    time_budget_minutes: float = 0.0
    learning_rate: float | None = None
    precision: str = "auto"
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_grad_norm: float = 1.0
    seed: int = 42
    validation_fraction: float = 0.1
    max_validation_rows: int = 0
    eval_batch_size: int = 32
    output_dir: str = "outputs/full"
    recipe: str = "course"
    schedule: str = "auto"
    padding: str = "batch"
    mask_once: bool = False
    label_all_tokens: bool = False
    group_by_length: bool = True
    masked_positions_only: bool = True
    attention_dropout: bool = False
    hidden_dropout: bool = False
    attention: str = "auto"
    checkpoint_every: int = 200
    progress: bool = True
    top_k: int = 5
    trained_model: str = ""
    profile: str = "full"

    def __post_init__(self) -> None:
        if self.recipe == "seed":
            object.__setattr__(self, "recipe", "original")
        validate(self)

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied (and validated).

        Changing ``recipe`` to ``original`` also applies ``ORIGINAL_RECIPE`` (except the keys
        in ``changes``), as :func:`get_settings` does.
        """
        if changes.get("recipe") in ("original", "seed"):
            changes = {**ORIGINAL_RECIPE, **changes}
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain JSON-serialisable dict."""
        return dataclasses.asdict(self)


def validate(settings: Settings) -> None:
    """Check every setting's range; raises ValueError naming the first one out of range, its range and variable."""
    for name, rule, ok in _ranges(settings):
        if not ok:
            raise ValueError(f"`{name}` ({env_name(name)}) must be {rule}, got {getattr(settings, name)!r}")


#: Settings that must be >= 1, and settings that must be >= 0.
AT_LEAST_ONE = ("batch_size", "eval_batch_size", "gradient_accumulation_steps", "top_k", "entity_min_count")
NOT_NEGATIVE = ("weight_decay", "max_grad_norm", "max_validation_rows", "checkpoint_every")
NOT_NEGATIVE += ("early_stopping_patience", "time_budget_minutes")


def _ranges(s: Settings) -> list[tuple[str, str, bool]]:
    """``(setting, the range it must be in, whether it is)`` for every checked setting, in order."""
    choices = {"recipe": RECIPES, "schedule": SCHEDULES, "padding": PADDINGS, "precision": PRECISIONS}
    choices |= {"masking": MASKING_STRATEGIES, "profile": PROFILES, "attention": ATTENTIONS}
    rules = [
        ("mlm_probability", "in (0, 1)", 0.0 < s.mlm_probability < 1.0),
        ("validation_fraction", "in [0, 1)", 0.0 <= s.validation_fraction < 1.0),
        ("warmup_fraction", "in [0, 1)", 0.0 <= s.warmup_fraction < 1.0),
    ]
    rules += [(name, ">= 1", getattr(s, name) >= 1) for name in AT_LEAST_ONE]
    rules.append(("max_length", ">= 8 tokens", s.max_length >= 8))
    rules.append(("learning_rate", "> 0 (or unset, for auto)", s.learning_rate is None or s.learning_rate > 0))
    rules.append(("epochs", ">= 1 (or unset, for auto)", s.epochs is None or s.epochs >= 1))
    rules += [(name, ">= 0", getattr(s, name) >= 0) for name in NOT_NEGATIVE]
    rules += [(name, f"one of {allowed}", getattr(s, name) in allowed) for name, allowed in choices.items()]
    return rules + [("text_column", "a column's name", bool(s.text_column))]


_BOOLEANS = dict.fromkeys(("1", "true", "yes", "on"), True) | dict.fromkeys(("0", "false", "no", "off"), False)
#: How each kind of setting is read from a variable, and what the error calls it.
_READERS: dict[str, tuple[Any, str]] = {
    "bool": (lambda t: _BOOLEANS[t.lower()], "yes/no"),
    "int": (int, "whole number"),
    "float": (float, "number"),
    "float | None": (lambda t: None if t.lower() in ("", "none", "auto") else float(t), "number (or auto)"),
    "int | None": (lambda t: None if t.lower() in ("", "none", "auto") else int(t), "whole number (or auto)"),
}


def _parse(name: str, raw: str, kind: Any) -> Any:
    """Turn an environment string into the type of setting ``name`` (a str setting stays text)."""
    read, called = _READERS.get(kind, (str, "text"))
    try:
        return read(raw.strip())
    except (KeyError, ValueError):
        raise ValueError(f"{env_name(name)}={raw!r} is not a valid {called} for setting {name!r}") from None


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read ``HP_MLM_<SETTING>`` variables (e.g. ``HP_MLM_MODEL``) into typed overrides.

    Raises:
        ValueError: if a variable's value cannot be read as the setting's type.
    """
    environ = os.environ if environ is None else environ
    kinds = {f.name: f.type for f in fields(Settings) if f.name != "profile"}  # the profile has its own variable
    return {n: _parse(n, environ[env_name(n)], kind) for n, kind in kinds.items() if env_name(n) in environ}


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


def get_settings(profile: str | None = None, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build the run's settings: profile, then ``HP_MLM_<SETTING>`` variables, then ``overrides``.

    Args:
        profile: one of ``profiles.PROFILES`` (``full``, ``quick``, ``offline``, ``smoke``); ``None`` reads ``HP_MLM_PROFILE``.
        environ: the environment to read (default ``os.environ``).
        **overrides: explicit values (``None`` values are ignored), e.g. from CLI flags.

    Raises:
        ValueError: unknown profile or setting, or a value out of range.
    """
    environ = os.environ if environ is None else environ
    name = active_profile(environ) if profile is None else profile  # Settings checks that it is one
    known = {f.name for f in fields(Settings)}
    if unknown := set(overrides) - known:
        raise ValueError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    chosen = {**env_overrides(environ), **{k: v for k, v in overrides.items() if v is not None}}
    values: dict[str, Any] = dict(PROFILE_OVERRIDES.get(name, {}))
    if chosen.get("recipe", values.get("recipe")) in ("original", "seed"):
        values.update(ORIGINAL_RECIPE)  # above the profile, below variables and flags
    values.update(chosen)
    if "output_dir" not in chosen:  # a folder per profile and data (:func:`data_name`), for the CLI and notebooks alike
        data, own = values.get("dataset", Settings.dataset), PROFILE_OVERRIDES.get(name, {}).get("dataset")
        suffix = "" if data == (own or Settings.dataset) else f"-{data_name(data)}"
        values["output_dir"] = course_path(values.get("output_dir", Settings.output_dir) + suffix)
    if own_text(values.get("dataset", Settings.dataset)):  # your text trains whole, in every profile
        values |= {"split_long_rows": values.get("split_long_rows", True), "split": chosen.get("split", "train")}
    values["profile"] = name
    return Settings(**values)


def data_name(dataset: str) -> str:
    """A dataset's name in a folder's name: a file's stem (``/content/My Book.txt`` -> ``My-Book``: spaces become
    ``-``), a Hub id's or a folder's last part, a package corpus's name (``hp_mlm:products`` -> ``products``)."""
    return "-".join(Path(dataset.replace(":", "/").rstrip("/\\")).stem.split()) or "data"


def course_path(relative: str, cwd: str | None = None) -> str:
    """``relative`` (e.g. ``outputs/offline``) under the course's root, as a path relative to ``cwd``.

    The root is the nearest folder at or above ``cwd`` holding ``hp_mlm/`` and ``notebooks/``, else ``cwd``
    (an installed package, Colab's ``/content``). So ``python -m hp_mlm`` in the repository and a notebook
    in ``notebooks/`` share ``outputs/<profile>`` (the notebook sees ``../outputs/<profile>``).
    """
    here = Path(cwd or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "hp_mlm" / "__init__.py").is_file() and (folder / "notebooks").is_dir():
            return os.path.relpath(folder / relative, here)
    return relative


def resolve_auto(settings: Settings, new_head: bool, steps_per_epoch: int = 0) -> Settings:
    """Settings with ``learning_rate``, ``schedule``, ``epochs`` and ``precision`` made concrete for this model
    and machine: the one place where ``auto`` is settled (``prepare.prepare`` calls it once).

    Unset (``None`` / ``"auto"``) rates, schedules and epochs follow what the model's MLM head knows, whatever
    the profile or the model's name (``profiles.HEAD_AUTO``): ``new_head`` (``prepare.head_check``: its held-out
    top-1 is no better than always guessing the commonest token) gets a higher, held rate and more epochs than
    a head that knows; a learner's own text (``profiles.own_text``) trains as many whole passes (of
    ``steps_per_epoch`` optimiser steps) as fit ``profiles.ROOM_STEPS``, at least one and at most those epochs: a
    whole book in a room's time, its schedule planned for the steps it runs. ``precision="auto"`` becomes the device's (``common.resolve_precision``). ``attention`` is
    settled by :func:`resolve_attention` before the model is built (``prepare``). Explicit values are kept.

    Raises:
        ValueError: the precision cannot run here (fp16 without a GPU).
    """
    defaults = HEAD_AUTO["new" if new_head else "pretrained"]
    unset = {name: defaults[name] for name in AUTO_SETTINGS if getattr(settings, name) in (None, "auto")}
    if "epochs" in unset and own_text(settings.dataset) and steps_per_epoch:  # sized to the room
        unset["epochs"] = max(1, min(unset["epochs"], round(ROOM_STEPS / steps_per_epoch)))
    return dataclasses.replace(settings, **unset, precision=resolve_precision(settings.precision))


def resolve_attention(settings: Settings, device_type: str | None = None) -> str | None:
    """The ``attn_implementation`` to build the model with: ``settings.attention``, with ``auto`` settled.

    ``auto`` is ``eager`` on a CPU that trains in bf16 with rows of at most 128 tokens, else None:
    transformers' own choice (``sdpa`` where the model has it, as BERT does; else ``eager``).
    ``prepare`` loads the model with it and reports the kernel the model was built with.
    Measured on 2 cores of an AMD EPYC with bf16 (benchmarks/results/attention_kernel*.md), a MiniLM-L6
    step took 0.79-0.84 of SDPA's time at 16 x 50 to 16 x 128 tokens, but 1.17 at 16 x 512 and 1.07 in
    fp32; bert-base in bf16 at 16 x 128 0.95. On 2 cores of an Intel Xeon with AMX the rule holds too: at
    16 x 512 in bf16 eager took 1.05 of SDPA's time for MiniLM-L6 and 0.97 for bert-base
    (``attention_kernel_512_amx.md``). On a GPU SDPA's fused kernels are the fast ones.

    Args:
        device_type: ``"cuda"``, ``"mps"`` or ``"cpu"``; default ``common.device_kind()``.
    """
    if settings.attention != "auto":
        return settings.attention
    bf16_cpu = (device_type or device_kind()) == "cpu" and resolve_precision(settings.precision, "cpu") == "bf16"
    return "eager" if bf16_cpu and settings.max_length <= 128 else None


def model_options(settings: Settings) -> dict[str, Any]:
    """The settings that shape a model when it is built, as ``models.load_model``'s keywords: the dropout
    kept while training, and the attention kernel (:func:`resolve_attention`; BERT fixes it at build)."""
    dropout = dict(attention_dropout=settings.attention_dropout, hidden_dropout=settings.hidden_dropout)
    return dict(dropout, attention=resolve_attention(settings))
