"""Where each deliberate error of the package is explained: an entry of ``docs/troubleshooting.md``.

The command line ends every ``error:`` line it prints for an error the package raised with a
pointer to its entry (:func:`pointer`). An error is matched by its type (:data:`BY_TYPE`), else by
the function that raised it (:data:`ENTRIES`, ``module.function``); a test keeps the table, the
page and the package's ``raise`` statements in step.
"""

from __future__ import annotations

import os

#: The page, as a reader outside the repository opens it.
PAGE = "https://github.com/hp-mlm/hp-mlm/blob/main/docs/troubleshooting.md"

#: Entry anchor -> the functions (``module.function``) whose ``raise`` it explains.
ENTRIES: dict[str, tuple[str, ...]] = {
    "a-package-is-missing-or-the-wrong-version": ("ops.versions.check_versions", "ops.versions.guard_at_import"),
    "the-hub-cannot-be-reached": ("hub.require_hub",),
    "push-to-hub-needs-a-repository-id-a-token-and-the-hub": (
        "ops.push.hub_token",
        "ops.push.check_push",
        "ops.push.upload_model",
    ),
    "the-split-selects-no-rows-or-is-malformed": ("data.parse_split", "data._bound", "data.slice_indices"),
    "the-data-cannot-be-read": (
        "data._local_files",
        "data._load_split",
        "data.text_encoding",
        "data.check_text_column",
        "data.load_corpus",
        "prepare.check_inputs",
    ),
    "a-handed-out-trained-model": (
        "ops.handout.make_handout",
        "ops.handout.handed_out_model",
        "ops.handout.check_facts",
        "ops.handout._extract",
    ),
    "no-held-out-or-no-training-rows": ("data.train_validation_split", "prepare._prepare", "training.plan_training"),
    "the-model-cannot-be-loaded": (
        "models._check_source",
        "models.offline_model_path",
        "models.load_model",
        "models._load_tokenizer",
        "models.load_stock_head",
    ),
    "the-tokenizer-is-larger-than-the-model": ("models.check_vocabulary",),
    "max_length-above-the-models-limit": ("tokens.check_max_length",),
    "a-row-is-not-one-sequence": ("tokens.token_list",),
    "a-setting-is-out-of-range-or-unknown": (
        "config.validate",
        "config._parse",
        "config.active_profile",
        "config.get_settings",
        "studies.options.compare_options",
        "ops.cli._cmd_compare",
        "ops.cli._cmd_train",
    ),
    "this-precision-cannot-run-here": ("common.resolve_precision", "common.autocast"),
    "masking-cannot-run-with-this-tokenizer": (
        "masking.mask_tokens",
        "tokens.require_word_pieces",
    ),
    "the-output-folder-already-holds-a-model": ("ops.job.check_output_dir", "ops.job.check_before_loading"),
    "a-checkpoint-cannot-be-resumed": ("checkpoints.resume_state", "checkpoints.latest_checkpoint"),
    "another-run-is-training-into-the-output-folder": ("checkpoints.hold_output_dir",),
    "the-disk-is-full": ("checkpoints.save_checkpoint",),
    "out-of-memory": ("common.out_of_memory_in",),
    "the-loss-became-nan-or-infinite": ("training.check_finite",),
    "fill-mask-and-targets": (
        "inference.target_words",
        "scoring.word_pieces",
        "scoring.mask_place",
        "scoring.length_limit",
        "scoring.score_words",
        "studies.probes.original_pll",
        "scoring.predict_words",
        "inference._checked_sentences",
        "ops.cli._cmd_predict",
    ),
    "the-probes-file-or-the-examples-file": (
        "studies.probes.load_probes",
        "studies.probes._candidates",
        "studies.probes.read_candidates",
        "course.examples.read_examples",
    ),
    "a-plan-cannot-be-trained": ("training.build_scheduler", "training.start", "training.check_resolved"),
    "spacy-is-not-installed": ("studies.entities.find_entities_spacy",),
    "packing-the-librarys-way-and-the-downstream-probe": (
        "tokens.pack_rows",
        "studies.library.library_collator",
        "studies.library.trainer_arguments",
        "studies.library.side_by_side",
        "studies.downstream.load_name_types",
        "studies.downstream.probe_accuracy",
    ),
    "the-model-card-or-the-website-cannot-be-made": ("ops.card.write_model_card", "ops.site.build"),
    "exercises-and-quizzes": (
        "course.checking.call",
        "course.checking.require",
        "course.checking.run",
        "course.episodes.load_quiz",
        "course.episodes.answer_quiz",
    ),
}
#: Error types explained by one entry wherever they are raised.
BY_TYPE = {
    "HubUnavailableError": "the-hub-cannot-be-reached",
    "PushError": "push-to-hub-needs-a-repository-id-a-token-and-the-hub",
    "OutOfMemory": "out-of-memory",
    "TrainingDiverged": "the-loss-became-nan-or-infinite",
}
#: A missing local path (``prepare.MissingPath``), by the setting that gave it.
BY_SETTING = {
    "model": "the-model-cannot-be-loaded",
    "dataset": "the-data-cannot-be-read",
    "probes": "the-probes-file-or-the-examples-file",
}
_BY_FUNCTION = {function: anchor for anchor, functions in ENTRIES.items() for function in functions}


def raised_in(error: BaseException) -> str | None:
    """``module.function`` (``ops.job.check_output_dir`` in a subpackage) of the ``raise`` that threw ``error`` when it is hp_mlm's own code (an
    error raised on purpose), else None (a library, Python itself, or no traceback)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    code = tb.tb_frame.f_code
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hp_mlm/
    path = os.path.abspath(code.co_filename)
    if not path.startswith(package + os.sep):
        return None
    module = os.path.splitext(os.path.relpath(path, package))[0].replace(os.sep, ".")
    return f"{module}.{code.co_name}"


def entry_for(error: BaseException) -> str | None:
    """The anchor of the entry that explains ``error``, or None (not an error the package raises)."""
    by_setting = BY_SETTING.get(getattr(error, "setting", None) or "")
    return by_setting or BY_TYPE.get(type(error).__name__) or _BY_FUNCTION.get(raised_in(error) or "")


def pointer(error: BaseException) -> str:
    """``" (help: <page>#<entry>)"`` for an error with an entry, else ``""``."""
    anchor = entry_for(error)
    return f" (help: {PAGE}#{anchor})" if anchor else ""
