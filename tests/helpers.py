"""Helpers shared by the tests (a small corpus written for them, tokenising to plain rows, the command line)."""

import os
import subprocess
import sys

#: A small corpus written for these tests (original sentences).
SENTENCES = [
    "Mira Ashdown crossed the Silver Lake at dawn.",
    "Professor Quillon taught potions below the Great Hall.",
    "The Lantern Tower glowed above the misty island.",
    "Oren Blackthistle lost his silverleaf quill again.",
    "Nell Cobbing found a mistfox in the Glass Greenhouse.",
    "Hob Tanner rowed the ferry across the Silver Lake.",
    "Jasper Hollin read about thornbacks in the Hollow Library.",
    "Headmistress Winterbourne rang the Mist Bell at midnight.",
]


def tokenised(tokenizer, texts, max_length=64):
    """Tokenised rows as plain dicts (input_ids, attention_mask, special_tokens_mask)."""
    enc = tokenizer(
        list(texts),
        truncation=True,
        max_length=max_length,
        return_special_tokens_mask=True,
        return_token_type_ids=False,
    )
    return [{k: enc[k][i] for k in ("input_ids", "attention_mask", "special_tokens_mask")} for i in range(len(texts))]


def run_cli(*args, env=None, timeout=300):
    """``python -m hp_mlm ARGS`` in a subprocess, progress bars off; returns the CompletedProcess."""
    full_env = {**os.environ, "HP_MLM_PROGRESS": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hp_mlm", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def fit(model, tokenizer, rows, settings, callbacks=(), **plan):
    """Notebook 03's two halves: ``plan_training`` (with ``settings``' ``auto`` values settled for a
    new head, as ``prepare`` would for the smoke BERT), then ``train`` as the main job runs it
    (``job.run_training``, checkpoints last). Returns the history."""
    from hp_mlm.callbacks import SaveCheckpoints
    from hp_mlm.config import resolve_auto
    from hp_mlm.ops.job import run_training
    from hp_mlm.training import plan_training

    resolved = resolve_auto(settings, new_head=True)
    planned = plan_training(model, tokenizer, rows, resolved, **plan)
    return run_training(planned, [*callbacks, SaveCheckpoints(planned)])


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation other than ``-`` and ``_``
    dropped, each space a ``-`` (``## `max_length` above the model's limit`` -> ``max_length-above-the-models-limit``)."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def markdown_anchors(text: str) -> set[str]:
    """The anchors of every heading (``#`` to ``######``) in a Markdown text, outside code blocks."""
    import re

    anchors, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            anchors.add(github_anchor(match.group(1)))
    return anchors
