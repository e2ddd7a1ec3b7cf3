"""Notebook 04 on its own: the fine-tuned model it evaluates, found or trained as notebook 03 trains it.

A workshop group may start at notebook 04, or switch profile; a teacher may hand out a trained model.
:func:`fine_tuned_model` keeps that plumbing out of the lesson: the model a teacher handed out
(``HP_MLM_TRAINED_MODEL``), else notebook 03's (or the main job's) in the profile's output folder, else one
trained now exactly as notebook 03 trains it (watched, each epoch scored, checkpointed, so a kernel restart
resumes), after saying what it trains and how long that took where it was measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hp_mlm.callbacks import SaveCheckpoints, Validate, time_budget
from hp_mlm.checkpoints import MODEL_DIR, clear_checkpoints, finished_model, save_model
from hp_mlm.common import atomic_write_text
from hp_mlm.config import model_options
from hp_mlm.course.episodes import training_notice
from hp_mlm.course.watch import WatchLearning
from hp_mlm.evaluation import evaluate
from hp_mlm.models import load_model
from hp_mlm.ops.allocator import reuse_freed_memory
from hp_mlm.ops.handout import handed_out_model
from hp_mlm.prepare import Prepared
from hp_mlm.training import plan_training, train

HISTORY = "history.json"


def fine_tuned_model(prep: Prepared, log=print) -> tuple[Path, dict[str, Any]]:
    """The fine-tuned model of ``prep``'s profile and the history of the run that trained it.

    Args:
        prep: ``prepare.prepare(settings)``: its resolved settings, tokenizer, training rows and frozen
            held-out rows (the same split and masks as notebook 03's, from the same seed).
        log: where the training notice goes when a model must be trained here.
    Returns:
        ``(model_dir, history)``: the folder of the model (``transformers`` loads it), and the run's
        history as ``training.train`` returns it (``{}`` for a handed-out model, whose run is not here).
    """
    settings, tokenizer = prep.settings, prep.loaded.tokenizer
    handed_out = handed_out_model(settings)
    model_dir = handed_out or finished_model(settings.output_dir)
    recorded = Path(settings.output_dir) / HISTORY
    if model_dir is not None:
        kept = json.loads(recorded.read_text(encoding="utf-8")) if recorded.is_file() and not handed_out else {}
        return Path(model_dir), kept
    # built as prepare built its model: the dropout the course trains with, the kernel prepare chose
    fresh = load_model(settings.model, tokenizer, seed=settings.seed, **model_options(settings)).model
    # checkpoints in the output folder: a kernel restart here resumes, as in notebook 03
    plan = plan_training(fresh, tokenizer, prep.train_tokens, settings, output_dir=settings.output_dir, resume=True)
    log(training_notice(settings, plan.total_steps - plan.history["optimizer_steps"], plan.accelerator.device.type))
    validate = Validate(
        lambda m: evaluate(
            m, prep.frozen_validation, tokenizer, settings.eval_batch_size, settings.top_k, precision=settings.precision
        )
    )
    budget = time_budget(plan)  # as notebook 03: the profile's time budget, if it sets one
    with reuse_freed_memory(plan.accelerator.device.type == "cpu"):  # as 03: watched, each epoch scored, checkpointed
        history = train(plan, callbacks=[WatchLearning(plan, tokenizer), validate, budget, SaveCheckpoints(plan)])
    model_dir = save_model(fresh, tokenizer, Path(settings.output_dir) / MODEL_DIR)
    atomic_write_text(recorded, json.dumps(history))  # its frames, as notebook 03 keeps them
    if not budget.stopped_at:  # finished: the saved model replaces the checkpoints
        clear_checkpoints(settings.output_dir)
    return Path(model_dir), history
