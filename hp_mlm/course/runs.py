"""Whose run: what a saved model was trained on (notebook 00), and whether notebook 03 continues a run or starts one.

A run belongs to its data and its model. The main job and notebook 03 write, with every model they save, a
model card (``ops.card``) that records the dataset, its split and the base model; every checkpoint records
them too, with a fingerprint of the training rows (``checkpoints.resume_key``), and a resume of other data or
another model is refused. These functions say it in words for the notebooks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hp_mlm.hub import is_local
from hp_mlm.ops.card import CARD
from hp_mlm.profiles import HEAD_AUTO, own_text
from hp_mlm.training import optimizer_steps

#: What a card's settings must share with the notebook's for its model to be "your model".
SAME_RUN = ("dataset", "split", "model")


def trained_on(folder: str | Path) -> dict[str, Any]:
    """``{"dataset", "split", "model"}`` as the model card in ``folder`` records them (``ops.card``'s metadata),
    with ``"weights"`` (the model, ``@`` its Hub commit where it came from the Hub) and ``"training_rows"`` (their
    fingerprint, ``checkpoints.resume_key``) where the card recorded them, else None; ``{}`` without a card."""
    from huggingface_hub import ModelCard

    card = Path(folder) / CARD
    if not card.is_file():
        return {}
    recorded = ModelCard.load(card).data.to_dict().get("hp_mlm", {})
    ran = recorded.get("trained_on", {})
    settings = {k: recorded.get("settings", {}).get(k) for k in SAME_RUN}
    return settings | {"weights": ran.get("model"), "training_rows": ran.get("training_rows")}


def same_data(recorded: str | None, dataset: str) -> bool:
    """Whether two names of a dataset are the same: equal, or local paths to the same file or folder."""
    if recorded == dataset:
        return True
    local = recorded is not None and is_local(recorded) and is_local(dataset)
    return local and Path(recorded).expanduser().resolve() == Path(dataset).expanduser().resolve()


def whose_model(settings, folder: str | Path) -> str:
    """``"your model"`` when the model saved in ``folder`` was trained on ``settings``' data (dataset and split)
    from its model, as its card records (:func:`trained_on`); else whose run it is, in words, e.g. ``"the model
    in outputs/offline/model, trained on hp_mlm:course-corpus [train] from hp_mlm:minilm-l6, not on this data"``.
    ``settings``: ``config.Settings``."""
    ran = trained_on(folder)
    if not ran:
        return f"the model in {folder}, whose card (what it was trained on) is missing"
    if same_data(ran["dataset"], settings.dataset) and (ran["split"], ran["model"]) == (settings.split, settings.model):
        return "your model"
    return f"the model in {folder}, trained on {ran['dataset']} [{ran['split']}] from {ran['model']}, not on this data"


def run_start(plan) -> str:
    """What notebook 03's run does, in words, before it trains: ``"continues the run in <folder>, at epoch E of N
    (after B of its batches)"`` for a plan that resumed a checkpoint (``training.plan_training``: only one of
    the same settings, model and training rows), else ``"starts a new run in <folder>"``. ``plan``:
    ``training.TrainingPlan``."""
    where = "" if plan.output_dir is None else f" in {plan.output_dir}"
    if not plan.history["optimizer_steps"]:
        return f"starts a new run{where}"
    batches = f" (after {plan.batches_done} of its batches)" if plan.batches_done else ""
    return f"continues the run{where}, at epoch {plan.start_epoch + 1} of {plan.settings.epochs}{batches}"


#: A training step costs about this many times the forward pass over the same tokens in the evaluation before
#: training (``prepare.head_check``'s wall time): measured 1.4-2.0 for the offline MiniLM on 2 cores in bf16
#: (benchmarks/results/book_names.md); the larger, so that the estimate errs long.
STEP_PER_FORWARD = 2.0


def run_length(prep, sized: bool = True) -> str:
    """The run's length before it trains, in a room's terms: its optimiser steps, the passes over the text and the
    steps each, and the minutes of training at this machine's pace, estimated from the evaluation before training
    (:data:`STEP_PER_FORWARD`); for a learner's text (sized to the room: ``profiles.ROOM_STEPS``) also what more
    passes would cost. ``prep``: ``prepare.Prepared``; ``sized``: the epochs were left on auto (a learner who set
    them is not told it again). E.g. ``"483 optimiser steps: 7 passes over the text (69
    steps each), about 4.0 min of training at this machine's pace"``."""
    s = prep.settings
    each = optimizer_steps(len(prep.train_tokens), s.replace(epochs=1))
    tokens = sum(len(row["input_ids"]) for row in prep.frozen_validation)
    per_token = STEP_PER_FORWARD * prep.head["seconds"] / tokens
    step = per_token * s.batch_size * s.gradient_accumulation_steps * prep.batches["tokens"] / prep.batches["rows"]
    text = (
        f"{each * s.epochs} optimiser steps: {s.epochs} pass{'es' * (s.epochs != 1)} over the text ({each} steps "
        f"each), about {step * each * s.epochs / 60:.1f} min of training at this machine's pace"
    )
    most = HEAD_AUTO["new" if prep.head["new"] else "pretrained"]["epochs"]
    if sized and own_text(s.dataset) and s.epochs < most:
        more = step * each * most / 60
        text += f"; sized for a room: {most} passes (HP_MLM_EPOCHS={most}) would take about {more:.1f} min"
    return text
