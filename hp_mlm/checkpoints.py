"""Checkpoints and the saved model: nothing half-written, an interrupted run resumes where it stopped.

A checkpoint is ``accelerate``'s own state (``Accelerator.save_state``: the model as safetensors,
optimizer, scheduler and random states, loaded back with ``torch.load(weights_only=True)``) plus our
``state.json`` (epoch, batches done, history), written to a temporary folder and renamed; then
``checkpoints/latest.json`` points at it. Taught in ``notebooks/03_training.ipynb``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from .common import atomic_write_text
from .models import quiet_transformers

CHECKPOINTS = "checkpoints"
#: The finished model's folder inside a run's output folder.
MODEL_DIR = "model"
LATEST = "latest.json"
STATE = "state.json"


def save_checkpoint(accelerator, directory: str | Path, state: dict[str, Any]) -> Path:
    """Save everything needed to resume at ``state["global_step"]``; returns the checkpoint folder.

    Layout: ``checkpoints/step-NNNNNNN/`` (``model.safetensors``, ``optimizer.bin``,
    ``scheduler.bin``, ``random_states_0.pkl`` from ``accelerator.save_state``, and ``state.json``),
    written under a temporary name and renamed when complete. Older checkpoints are then removed.
    Only the main process writes.
    """
    root = Path(directory) / CHECKPOINTS
    final = root / f"step-{state['global_step']:07d}"
    if not accelerator.is_main_process:
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    quiet = logging.getLogger("accelerate.utils.other")  # "Removed shared tensor": the tied decoder, expected
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        accelerator.save_state(str(tmp), safe_serialization=True)
    finally:
        quiet.setLevel(level)
    (tmp / STATE).write_text(json.dumps(state), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / LATEST, json.dumps({"checkpoint": final.name, "global_step": state["global_step"]}))
    for old in root.glob("step-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The last complete checkpoint under ``directory``, or None."""
    pointer = Path(directory) / CHECKPOINTS / LATEST
    if not pointer.exists():
        return None
    path = pointer.parent / json.loads(pointer.read_text(encoding="utf-8"))["checkpoint"]
    return path if (path / STATE).exists() else None


def resume_state(accelerator, directory: str | Path, run_shape: dict[str, Any]) -> dict[str, Any] | None:
    """Load the latest checkpoint into the prepared objects; returns its ``state.json`` (None: no checkpoint).

    Raises:
        ValueError: the checkpoint was written with other values of the settings in ``run_shape``
            (they fix the batches and the schedule); checked before any weight is loaded.
    """
    path = latest_checkpoint(directory)
    if path is None:
        return None
    state = json.loads((path / STATE).read_text(encoding="utf-8"))
    saved = state.get("run", run_shape)
    differ = {k: (saved.get(k), v) for k, v in run_shape.items() if saved.get(k) != v}
    if differ:
        raise ValueError(
            "cannot resume: these settings differ from the interrupted run (was, now): "
            + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in differ.items())
            + "; rerun with the same settings, or use --overwrite to start again"
        )
    accelerator.load_state(str(path))
    return state


def save_model(model: nn.Module, tokenizer, directory: str | Path) -> Path:
    """Save model and tokenizer with ``save_pretrained`` (safetensors), atomically.

    Written to a temporary folder beside ``directory`` and renamed into place, so a crash never
    leaves half a model. ``transformers.pipeline("fill-mask", model=directory)`` loads the result.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_transformers():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    old = directory.with_name(f".{directory.name}.old")
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)
    return directory
