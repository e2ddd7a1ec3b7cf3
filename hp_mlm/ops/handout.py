"""A trained model for a room: a teacher fine-tunes once and hands the model to every laptop.

Where training cannot finish in a workshop (a slow laptop, no GPU, no Hub), notebook 04 and its
exercises still need a fine-tuned model. The teacher makes one, once, on a machine fast enough::

    python -m hp_mlm train --profile offline      # or quick / full: the profile the room will use
    python -m hp_mlm handout --profile offline    # -> outputs/offline/handout-offline.zip

and each learner points one setting at the file (or at its unpacked folder)::

    HP_MLM_TRAINED_MODEL=handout-offline.zip      # or, in a notebook: %env HP_MLM_TRAINED_MODEL=...

Notebook 04 and ``predict``/``evaluate`` then use it instead of a model of their own; notebook 03
still trains, for the lesson. The archive holds the saved model (safetensors, tokenizer, model card)
and ``handout.json``, the settings that decide which rows were trained on. A learner's settings must
agree on those, or the held-out rows notebook 04 scores could include rows the model trained on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from hp_mlm.checkpoints import MODEL_DIR, finished_model
from hp_mlm.config import Settings, env_name
from hp_mlm.hub import is_local

#: The facts a handout records: the settings that decide the base model and which rows were held out.
FACTS = ("profile", "model", "dataset", "split", "text_column", "seed", "validation_fraction", "max_validation_rows")
HANDOUT_FILE = "handout.json"
#: Where a learner's copy goes, inside their output folder (their own card is written there, not in the source).
HANDOUT_DIR = "handout"


def facts(settings: Settings) -> dict[str, Any]:
    """The settings a handout must share with the room's: ``{name: value}`` for each of ``FACTS``, and the
    ``data_sha256`` of a local dataset (:func:`data_stamp`): the same text is the same data wherever it sits."""
    return {name: getattr(settings, name) for name in FACTS} | {"data_sha256": data_stamp(settings.dataset)}


def data_stamp(dataset: str) -> str | None:
    """The first 16 hex digits of the SHA-256 of a local dataset's bytes (a file, or a folder's files in name
    order); None for a Hub id, a corpus of the package, or a path that is not there."""
    path = Path(dataset).expanduser()
    if not is_local(dataset) or not path.exists():
        return None
    digest = hashlib.sha256()
    for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def make_handout(settings: Settings, archive: str | Path | None = None) -> Path:
    """Pack the fine-tuned model in ``settings.output_dir``/model and its ``handout.json`` into a .zip,
    written atomically (a temporary file renamed into place). Default path:
    ``<output_dir>/handout-<profile>.zip``. Returns the path.

    Raises:
        FileNotFoundError: no finished model in the output folder (train first).
    """
    model_dir = finished_model(settings.output_dir)
    if model_dir is None:
        train = ["python", "-m", "hp_mlm", "train", "--profile", settings.profile, "--output-dir", settings.output_dir]
        raise FileNotFoundError(
            f"no fine-tuned model in {settings.output_dir}/{MODEL_DIR}: run `{shlex.join(train)}` first (the handout "
            "packs the model it saves)"
        )
    archive = Path(archive or Path(settings.output_dir) / f"handout-{settings.profile}.zip")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=archive.parent, suffix=".tmp", delete=False) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as packed:
            for path in sorted(model_dir.iterdir()):
                if path.is_file():
                    packed.write(path, f"{MODEL_DIR}/{path.name}")
            packed.writestr(HANDOUT_FILE, json.dumps(facts(settings), indent=2))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp.name, 0o666 & ~umask)  # readable by the room, as any file written here (a temporary file is private)
    Path(tmp.name).replace(archive)
    return archive


def handed_out_model(settings: Settings) -> Path | None:
    """The model folder ``settings.trained_model`` hands out (a .zip from :func:`make_handout`, or its
    unpacked folder), copied into ``<output_dir>/handout/`` and checked against ``settings``; None when
    the setting is empty. A second call with the same handout reuses the copy.

    Raises:
        FileNotFoundError: the path does not exist, or is neither such an archive nor such a folder.
        ValueError: the handout was trained with other settings (it names them and the profile to set).
    """
    if not settings.trained_model:
        return None
    source, where = Path(settings.trained_model).expanduser(), f"trained_model ({env_name('trained_model')})"
    copy = Path(settings.output_dir) / HANDOUT_DIR
    if not source.exists():
        raise FileNotFoundError(
            f"{where} {str(source)!r}: no such file or folder; check the path, or unset it to train your own"
        )
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as packed:
            names = packed.namelist()
            if HANDOUT_FILE not in names or not any(n.startswith(f"{MODEL_DIR}/") for n in names):
                raise FileNotFoundError(
                    f"{where} {str(source)!r} is a .zip without {HANDOUT_FILE} and {MODEL_DIR}/: "
                    "make it with `python -m hp_mlm handout`"
                )
            check_facts(json.loads(packed.read(HANDOUT_FILE)), settings, source)
            came_from = stamp(source)
            if not _same_copy(copy, came_from):
                _replace_folder(copy, lambda into: _extract(packed, into), came_from)
    elif (source / HANDOUT_FILE).is_file() and finished_model(source) is not None:
        check_facts(json.loads((source / HANDOUT_FILE).read_text(encoding="utf-8")), settings, source)
        came_from = stamp(source / MODEL_DIR / "model.safetensors")
        if source.resolve() != copy.resolve() and not _same_copy(copy, came_from):
            _replace_folder(copy, lambda into: shutil.copytree(source, into, dirs_exist_ok=True), came_from)
    else:
        raise FileNotFoundError(
            f"{where} {str(source)!r} is neither a .zip nor a folder made by `python -m hp_mlm handout` "
            f"(a folder holding {HANDOUT_FILE} and {MODEL_DIR}/): check the path, or unset it to train your own"
        )
    return copy / MODEL_DIR


def check_facts(recorded: dict[str, Any], settings: Settings, source: Path) -> None:
    """Raise ValueError, in one line, when the handout's settings differ from ``settings`` on any of ``FACTS``; a
    local dataset at another path with the same bytes (``data_sha256``) is the same data (the class's book, copied)."""
    same_text = recorded.get("data_sha256") is not None and recorded["data_sha256"] == data_stamp(settings.dataset)
    differ = [n for n in FACTS if n != "profile" and recorded.get(n) != getattr(settings, n)]
    differ = [n for n in differ if not (n == "dataset" and same_text)]
    if differ:
        said = ", ".join(f"{n} {recorded.get(n)!r} (yours: {getattr(settings, n)!r})" for n in differ)
        profile = recorded.get("profile")
        raise ValueError(
            f"the handout {str(source)!r} was trained in the {profile} profile with {said}: use that profile "
            f"(HP_MLM_PROFILE={profile}, or --profile {profile}) and the same settings, or ask for a handout made with yours"
        )


STAMP_FILE = ".copied_from.json"


def stamp(path: Path) -> dict[str, Any]:
    """What identifies the handout a copy came from: its path, size and modification time (a new handout
    at the same path, or a retrained model in the same folder, is copied again)."""
    found = path.stat()
    return {"path": str(path.resolve()), "size": found.st_size, "mtime_ns": found.st_mtime_ns}


def _same_copy(copy: Path, source_stamp: dict[str, Any]) -> bool:
    """Whether ``copy`` already holds the model of the handout with this stamp."""
    mine = copy / STAMP_FILE
    same = mine.is_file() and json.loads(mine.read_text(encoding="utf-8")) == source_stamp
    return same and finished_model(copy) is not None


def _extract(packed: zipfile.ZipFile, into: Path) -> None:
    """Extract the handout's model and facts only, refusing any member that would land outside ``into``."""
    for name in packed.namelist():
        target = (into / name).resolve()
        if not target.is_relative_to(into.resolve()):
            raise ValueError(
                f"the handout holds {name!r}, which points outside its folder: make it again with "
                "`python -m hp_mlm handout`"
            )
        if name == HANDOUT_FILE or (name.startswith(f"{MODEL_DIR}/") and not name.endswith("/")):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(packed.read(name))


def _replace_folder(folder: Path, fill, source_stamp: dict[str, Any]) -> None:
    """Fill a temporary folder beside ``folder`` with ``fill(path)`` and the source's stamp, then swap it in
    (no half copy is ever used)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    fill(tmp)
    (tmp / STAMP_FILE).write_text(json.dumps(source_stamp), encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
