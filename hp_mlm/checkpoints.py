"""Checkpoints and the saved model: nothing half-written, an interrupted run resumes where it stopped.

A checkpoint is ``accelerate``'s own state (``Accelerator.save_state``: the model as safetensors,
optimizer, scheduler and random states, loaded back with ``torch.load(weights_only=True)``) plus our
``state.json`` (epoch, batches done, history), written to a temporary folder and renamed; then
``checkpoints/latest.json`` points at it. One run at a time writes an output folder
(:func:`hold_output_dir`). Taught in ``notebooks/03_training.ipynb``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no advisory file locks; one run per folder is then not checked
    fcntl = None

from safetensors.torch import load_file, save_file
from torch import nn

from .common import atomic_write_text, error_summary, quiet_transformers

CHECKPOINTS = "checkpoints"
#: The finished model's folder inside a run's output folder.
MODEL_DIR = "model"
LATEST = "latest.json"
STATE = "state.json"
#: The ending of a file of tensors a callback keeps in a checkpoint (``<name>.kept.safetensors``).
KEPT = ".kept.safetensors"
#: The lock file of a run's output folder, and the folders this process holds (path -> open file).
LOCK = ".run.lock"
_HELD: dict[str, Any] = {}


#: Settings that fix the batches and the schedule: a run resumes only if they are unchanged.
RESUME_MUST_MATCH = (
    "seed",
    "batch_size",
    "gradient_accumulation_steps",
    "epochs",
    "max_length",
    "recipe",
    "group_by_length",
    "mlm_probability",
    "masking",
    "mask_once",
    "label_all_tokens",
    "schedule",
    "padding",
    "warmup_fraction",
)


def resume_key(settings, processes: int, rows: Sequence[dict[str, Any]], model: nn.Module) -> dict[str, Any]:
    """What a checkpoint must share with the run that resumes it, and what a saved model was trained on:
    ``RESUME_MUST_MATCH``, the peak learning rate (resolved) and the number of processes (they fix the batches
    and the schedule), the ``model`` (its name, ``@`` the Hub commit of its weights where they came from the
    Hub) and the ``training_rows``: ``"<n> rows (<the first 12 hex digits of the SHA-256 of their input_ids>)"``,
    the same for the same rows in any process or machine, another for another text, split or ``max_length``.
    """
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)  # None: a local folder, the package's
    ids = hashlib.sha256(repr([list(row["input_ids"]) for row in rows]).encode()).hexdigest()[:12]
    key = {k: getattr(settings, k) for k in RESUME_MUST_MATCH} | {"learning_rate": settings.learning_rate}
    name = settings.model + (f"@{commit}" if commit else "")
    return key | {"processes": processes, "model": name, "training_rows": f"{len(rows)} rows ({ids})"}


def save_checkpoint(accelerator, directory: str | Path, state: dict[str, Any], kept: dict | None = None) -> Path:
    """Save everything needed to resume at ``state["global_step"]``; returns the checkpoint folder.

    Layout: ``checkpoints/step-NNNNNNN/`` (``model.safetensors``, ``optimizer.bin``,
    ``scheduler.bin``, ``random_states_0.pkl`` from ``accelerator.save_state``, ``state.json``, and
    ``<name>.kept.safetensors`` for each of ``kept``: name -> tensors a callback keeps, e.g.
    ``callbacks.Validate``'s best epoch's weights; :func:`resume_state` gives them back),
    written under a temporary name and renamed when complete. Older checkpoints are then removed.
    Every process calls it (each saves its own random state, ``random_states_<i>.pkl``); the main
    process writes everything else.

    Raises:
        OSError: the checkpoint could not be written (a full disk): the temporary folder is removed,
            the previous checkpoint and ``latest.json`` are left as they were, and the message names
            the folder and about how much space a checkpoint takes.
    """
    root = Path(directory) / CHECKPOINTS
    final = root / f"step-{state['global_step']:07d}"
    tmp = root / f".tmp-{final.name}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    quiet = logging.getLogger("accelerate.utils.other")  # "Removed shared tensor": the tied decoder, expected
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        accelerator.save_state(str(tmp), safe_serialization=True)
        accelerator.wait_for_everyone()
        if not accelerator.is_main_process:
            return final
        (tmp / STATE).write_text(json.dumps(state), encoding="utf-8")
        for name, tensors in (kept or {}).items():
            save_file(tensors, str(tmp / f"{name}{KEPT}"))
    except OSError as error:  # a full disk: the half-written folder goes, the last checkpoint stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise checkpoint_write_error(root, accelerator, error) from error
    finally:
        quiet.setLevel(level)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / LATEST, json.dumps({"checkpoint": final.name, "global_step": state["global_step"]}))
    for old in root.glob("step-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def hold_output_dir(directory: str | Path) -> None:
    """Claim ``directory`` for this process's run, so that no other run writes its checkpoints meanwhile.

    A lock on ``directory/.run.lock`` (``fcntl.flock``), which the operating system drops when the
    process ends: a crashed or killed run never leaves the folder held. A process that holds it
    already keeps it (a notebook's training cell run again in the same kernel). Not checked where
    files cannot be locked (Windows, some network drives), nor across machines.

    Raises:
        RuntimeError: another live process holds the folder (names it, and what to do).
    """
    path = Path(directory) / LOCK
    if fcntl is None or str(path.resolve()) in _HELD:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # kept open while the run lasts: closing it unlocks
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        if not isinstance(error, BlockingIOError):
            return  # a file system without locks
        raise RuntimeError(
            f"another run ({holder}) is training into {str(directory)!r}: let it finish or stop it (a notebook: "
            "restart its kernel), or set `output_dir` (HP_MLM_OUTPUT_DIR) to another folder"
        ) from None
    handle.truncate(0)
    handle.write(f"process {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    _HELD[str(path.resolve())] = handle


def release_output_dir(directory: str | Path) -> None:
    """Let other runs use ``directory`` (closing the lock file unlocks it); nothing if this process does not hold it."""
    handle = _HELD.pop(str((Path(directory) / LOCK).resolve()), None)
    if handle is not None:
        handle.close()


def checkpoint_write_error(root: Path, accelerator, error: OSError) -> OSError:
    """The error for a checkpoint that could not be written, with the space one needs: the weights
    and AdamW's two moments, about 3 x the parameters' bytes."""
    weights = sum(p.numel() * p.element_size() for m in accelerator._models for p in m.parameters())
    return OSError(
        f"could not write a checkpoint in {str(root)!r} ({error_summary(error)}); one needs about "
        f"{3 * weights / 1e6:,.0f} MB: free that much space, or set checkpoint_every to 0 (checkpoints at epoch "
        "ends only); the previous checkpoint is intact, so `resume` continues from it"
    )


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The last complete checkpoint under ``directory``, or None when there is none.

    Raises:
        ValueError: ``checkpoints/latest.json`` cannot be read, or names a checkpoint that is gone
            (says how to start again).
    """
    pointer = Path(directory) / CHECKPOINTS / LATEST
    if not pointer.exists():
        return None
    try:
        path = pointer.parent / json.loads(pointer.read_text(encoding="utf-8"))["checkpoint"]
    except (ValueError, KeyError, TypeError, OSError) as error:
        raise unreadable_checkpoint(pointer, error) from error
    if not (path / STATE).exists():  # the pointer is written last, so its checkpoint was removed since
        raise unreadable_checkpoint(pointer, FileNotFoundError(f"{path.name} is missing"))
    return path


def unreadable_checkpoint(path: Path, error: Exception) -> ValueError:
    """The error for a checkpoint file that cannot be read (quoting ``error``'s first line)."""
    return ValueError(
        f"the checkpoint {str(path)!r} cannot be read ({error_summary(error)}); start the training again (`overwrite`)"
    )


def resume_state(accelerator, directory: str | Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """Load the latest checkpoint into the prepared objects; returns its ``state.json`` (None: no checkpoint),
    with ``"kept"``: the tensors callbacks kept in it (``{name: {tensor name: tensor}}``, on the CPU).

    Raises:
        ValueError: the checkpoint was written with other values of the settings in ``key``
            (:func:`resume_key`: they fix the batches and the schedule), from another model or from other
            training rows; checked before any weight is loaded, and the checkpoint is left as it is.
    """
    path = latest_checkpoint(directory)
    if path is None:
        return None
    try:
        state = json.loads((path / STATE).read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise unreadable_checkpoint(path / STATE, error) from error
    saved = state.get("run", key)
    differ = {k: (saved.get(k), v) for k, v in key.items() if saved.get(k) != v}
    if differ:  # the checkpoint is left as it is: rerunning with its data, model and settings resumes it
        raise ValueError(
            "cannot resume: this run's settings, model or data differ from the interrupted run's (was, now): "
            + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in differ.items())
            + "; rerun with the same ones, or start again (`overwrite`) or in another `output_dir`"
        )
    try:
        accelerator.load_state(str(path))
    except Exception as error:  # noqa: BLE001 - a damaged file, whatever the library's error type
        raise unreadable_checkpoint(path, error) from error
    return state | {"kept": {f.name.removesuffix(KEPT): load_file(str(f)) for f in path.glob(f"*{KEPT}")}}


def finished_model(output_dir: str | Path) -> Path | None:
    """``output_dir/model`` when it holds a saved model (config and safetensors weights), else None."""
    folder = Path(output_dir) / MODEL_DIR
    return folder if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() else None


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


def clear_checkpoints(directory: str | Path) -> None:
    """Remove ``directory/checkpoints`` once a finished model is saved beside it (a later run then
    starts afresh instead of resuming a finished one); nothing happens when there is none."""
    shutil.rmtree(Path(directory) / CHECKPOINTS, ignore_errors=True)
