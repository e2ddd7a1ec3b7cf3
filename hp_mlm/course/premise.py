"""The course's premise in the active profile: one sentence, what the stock model says, and what the
fine-tuned model says after (notebook 00, which opens with it).

The premise is the first of the run's example sentences (``course.examples.run_examples``): *Harry [MASK]* in
the ``full`` and ``quick`` profiles, the course corpus's *Hob [MASK]* offline, the smoke corpus's own
sentence in ``smoke``, and for a corpus of your own the first sentence the course picks from your held-out
rows. "After" comes from the model notebook 03 saved in the output folder (one per profile and data) when
there is one, called yours only when it was trained on this data, else from the last frame of the course's
committed run of that profile (``corpora/frames_<profile>.json``, the live view's frames of a real run), and
says which.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from hp_mlm.checkpoints import finished_model
from hp_mlm.course.examples import run_examples
from hp_mlm.course.runs import whose_model
from hp_mlm.course.shipped import examples
from hp_mlm.inference import fill_mask
from hp_mlm.models import load_model
from hp_mlm.prepare import prepare


def premise(settings) -> tuple[str, tuple[str, ...]] | None:
    """The run's premise sentence and the corpus's word at its mask(s). ``settings``: ``config.Settings``.
    A corpus that ships no examples (your own text) is prepared and its examples picked from its held-out
    rows, as the main job picks them; None when none could be picked."""
    shipped = examples(settings.dataset)
    if shipped:
        return shipped[0]
    picked = run_examples(prepare(settings), log=lambda _: None).examples
    return picked[0] if picked else None


def committed_frames(profile: str) -> dict[str, Any] | None:
    """The live view of the course's committed run in ``profile`` (``{"frames", "first_right", ...}`` as
    ``history["watch"]``, with the run's ``"examples"`` and ``"command"``), or None where none was committed."""
    path = resources.files("hp_mlm") / "corpora" / f"frames_{profile}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def premise_after(settings, sentence: str, top_k: int = 3) -> dict[str, Any] | None:
    """What the fine-tuned model says at the first mask of ``sentence`` (:func:`premise`'s): ``{"source", "candidates"}`` with the
    ``top_k`` candidates ``{"token", "score"}``. The source is the model saved in ``<output_dir>/model`` by
    notebook 03 or the main job when there is one: ``"your model"`` when its card says it was trained on these
    settings' data from their model, else whose run it is (``course.runs.whose_model``); else ``"the course's committed run"`` (its last frame,
    which keeps the top 3); None when neither exists (the ``full`` and ``quick`` profiles, or your own corpus,
    before a run)."""
    folder = finished_model(settings.output_dir)  # the model notebook 03 or the main job saved, if any
    if folder is not None:
        tuned = load_model(str(folder))
        candidates = fill_mask(tuned.model, tuned.tokenizer, sentence, top_k)[0][0]
        return {"source": whose_model(settings, folder), "candidates": candidates}
    run = committed_frames(settings.profile)
    if run is None or run["examples"][0]["text"] != sentence:
        return None
    return {"source": "the course's committed run", "candidates": run["frames"][-1]["examples"][0][0][:top_k]}
