"""Edges learners hit (a batch with nothing masked, bad requests at the command line, one-line errors, and the order of checks):
each test feeds the case's input and asserts its outcome."""

import ast
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import SENTENCES, fit, run_cli, tokenised

import hp_mlm
from hp_mlm.checkpoints import latest_checkpoint, save_model
from hp_mlm.config import get_settings
from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX, MaskingCollator, freeze_masks
from hp_mlm.models import build_smoke_model, build_smoke_tokenizer
from hp_mlm.ops import cli
from hp_mlm.studies.original import original_tutorial_accuracy

PACKAGE = Path(hp_mlm.__file__).parent


@pytest.fixture(scope="module")
def saved_smoke(tmp_path_factory):
    """An (untrained) smoke BERT saved as a model folder."""
    folder = tmp_path_factory.mktemp("smoke") / "model"
    tok = build_smoke_tokenizer()
    save_model(build_smoke_model(tok), tok, folder)
    return folder


# A batch with nothing masked -------------------------------------------------------------------


def one_row_batches(**changes):
    """Smoke settings for one row per batch, in order, at a fixed rate and linear schedule."""
    fixed = dict(batch_size=1, progress=False, checkpoint_every=0, learning_rate=1e-3, schedule="linear")
    return get_settings("smoke", environ={}, group_by_length=False, **fixed, **changes)


def test_a_batch_with_nothing_masked_takes_no_step_and_logs_no_zero_loss(smoke_tokenizer, smoke_model):
    hi = tokenised(smoke_tokenizer, ["Hi."])
    collator = MaskingCollator(smoke_tokenizer, 0.15, seed=1)
    assert not (collator(hi)["labels"] != IGNORE_INDEX).any()  # the case's input: nothing masked
    history = fit(smoke_model, smoke_tokenizer, hi, one_row_batches(epochs=1, seed=1))
    assert history["batches_without_masks"] == 1
    assert history["optimizer_steps"] == 0 and history["steps"] == []
    assert history["epochs"][0]["train_loss"] is None  # not 0.0


def test_skipped_batches_are_counted_and_the_mean_loss_is_not_pulled_down(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, ["Hi."] * 6 + SENTENCES)
    history = fit(smoke_model, smoke_tokenizer, rows, one_row_batches(epochs=2))
    skipped = history["batches_without_masks"]
    assert skipped > 0
    assert history["optimizer_steps"] == 2 * len(rows) - skipped == len(history["steps"])
    assert all(s["loss"] > 0 for s in history["steps"])
    for epoch in history["epochs"]:
        losses = [s["loss"] for s in history["steps"] if s["epoch"] == epoch["epoch"]]
        # per masked token over the epoch's steps: a batch without masks adds no 0.0 to pull it down
        assert min(losses) <= epoch["train_loss"] <= max(losses) and epoch["masked_tokens"] > 0


def test_accuracy_over_nothing_is_nothing_scored_not_zero(smoke_tokenizer, smoke_model):
    frozen = freeze_masks(tokenised(smoke_tokenizer, ["Hi."]), smoke_tokenizer, 0.15, seed=1, at_least_one=False)
    assert all(label == IGNORE_INDEX for label in frozen[0]["labels"])
    result = evaluate(smoke_model, frozen, smoke_tokenizer)
    assert result["n_positions"] == 0
    assert result["top1"] is None and result["top5"] is None and result["perplexity"] is None
    assert original_tutorial_accuracy(smoke_model, smoke_tokenizer, [])["accuracy"] is None


# Bad requests at the command line --------------------------------------------------------------


def test_predict_targets_equal_the_pipelines_targets(saved_smoke):
    from transformers import pipeline

    sentence = "Mira [MASK] crossed the lake."
    result = run_cli("predict", sentence, "--model", str(saved_smoke), "--targets", "lake,mira,lake", "--json")
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)[0][0]
    pipe = pipeline("fill-mask", model=str(saved_smoke), device="cpu")
    theirs = pipe(sentence, targets=["lake", "mira"])
    assert [c["token"] for c in ours] == [t["token_str"] for t in theirs]
    assert [c["score"] for c in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-5)
    text = run_cli("predict", sentence, "--model", str(saved_smoke), "--targets", "lake,mira")
    assert text.returncode == 0 and "lake" in text.stdout and "mira" in text.stdout


def test_every_target_is_answered_and_small_probabilities_stay_readable(saved_smoke):
    words = ["lake", "mira", "the", "a", "of", "and"]  # more than the default top-k of 5
    result = run_cli(
        "predict", "Mira [MASK] crossed the lake.", "--model", str(saved_smoke), "--targets", ",".join(words), "--json"
    )
    answers = json.loads(result.stdout)[0][0]
    assert sorted(a["token"] for a in answers) == sorted(words)
    text = run_cli(
        "predict", "Mira [MASK] crossed the lake.", "--model", str(saved_smoke), "--targets", ",".join(words)
    )
    shown = text.stdout.splitlines()[1]
    assert all(word in shown for word in words) and " 0.000" not in shown  # tiny scores as 1.2e-04, not 0.000


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--targets", ""], "target"),
        (["--targets", "lake,🙂"], "[UNK]"),  # a word the vocabulary cannot spell (one of several pieces is scored)
    ],
)
def test_bad_predict_requests_get_one_line(saved_smoke, capsys, args, needle):
    code = cli.main(["predict", "Mira [MASK] crossed the lake.", "--model", str(saved_smoke), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and needle in err[0]


# Every error the package raises reaches the command line as one line ---------------------


def package_exception_types() -> set[str]:
    """Names of the exception classes that hp_mlm's own code raises or builds (``raise X(...)``,
    ``return X(...)`` for error builders)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.exc if isinstance(node, ast.Raise) else node.value if isinstance(node, ast.Return) else None
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and (value.func.id.endswith(("Error", "Exception", "Diverged", "OutOfMemory")))
            ):
                names.add(value.func.id)
    return names


def test_the_scan_finds_the_package_errors():
    found = package_exception_types()
    assert {
        "ValueError",
        "FileNotFoundError",
        "FileExistsError",
        "OutOfMemory",
        "TrainingDiverged",
        "HubUnavailableError",
        "ImportError",
    } <= found


@pytest.mark.parametrize("name", sorted(package_exception_types()))
def test_each_package_error_is_one_line_and_exit_2(name, monkeypatch, capsys):
    import builtins

    from hp_mlm import common, hub, training
    from hp_mlm.ops import push
    from hp_mlm.ops.troubleshooting import BY_TYPE

    kinds = {
        **vars(builtins),
        "OutOfMemory": common.OutOfMemory,
        "TrainingDiverged": training.TrainingDiverged,
        "HubUnavailableError": hub.HubUnavailableError,
        "PushError": push.PushError,
    }
    # A function whose code lives in the package's folder raises it, as the package's own code would.
    source = f"def run_job(*args, **kwargs):\n    raise {name}('the message\\nover two lines')\n"
    code = compile(source, str(PACKAGE / "job.py"), "exec")
    namespace = {name: kinds[name]}
    exec(code, namespace)
    monkeypatch.setattr("hp_mlm.ops.job.run_job", namespace["run_job"])
    status = cli.main(["train", "--profile", "smoke"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: the message over two lines")
    # an error of a kind with its own troubleshooting entry points at it wherever it is raised
    assert (
        err.endswith("#" + BY_TYPE[name] + ")\n") if name in BY_TYPE else err == "error: the message over two lines\n"
    )


def test_real_errors_from_inside_a_run_are_one_line(tmp_path, monkeypatch, capsys):
    from hp_mlm.training import MaskedLMObjective

    def out_of_memory(self, *args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def diverged(self, *args):
        return torch.tensor(float("nan"), requires_grad=True)

    for fault, needle in ((out_of_memory, "--batch-size"), (diverged, "--lr")):
        monkeypatch.setattr(MaskedLMObjective, "forward", fault)
        status = cli.main(
            [
                "train",
                "--profile",
                "smoke",
                "--epochs",
                "1",
                "--no-progress",
                "--output-dir",
                str(tmp_path / fault.__name__),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(err) == 1 and needle in err[0] and "Traceback" not in err[0]
    monkeypatch.undo()
    damaged = tmp_path / "damaged"
    (damaged / "checkpoints").mkdir(parents=True)
    (damaged / "checkpoints" / "latest.json").write_text("{not json")
    status = cli.main(["train", "--profile", "smoke", "--output-dir", str(damaged), "--resume", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "cannot be read" in err[0] and "--overwrite" in err[0]


def test_a_library_error_is_one_line_exit_1_and_debug_shows_the_traceback(monkeypatch, capsys):
    def broken(*args, **kwargs):
        return {}["missing"]  # raised by Python, not by the package

    monkeypatch.setattr("hp_mlm.ops.job.run_job", broken)
    assert cli.main(["train", "--profile", "smoke"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KeyError" in err and "HP_MLM_DEBUG=1" in err
    monkeypatch.setenv("HP_MLM_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main(["train", "--profile", "smoke"])


def test_a_bad_choice_is_one_line_not_the_whole_usage():
    result = run_cli("train", "--schedule", "weird")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "weird" in lines[0] and "--help" in lines[0] and "usage" not in lines[0]


# Bad settings and the order of checks--------------------------------------------------------------


@pytest.fixture()
def own_book(tmp_path):
    import pandas as pd

    path = tmp_path / "my_book.parquet"
    lines = [line for line in (PACKAGE / "corpora" / "smoke_corpus.txt").read_text().splitlines() if line.strip()]
    pd.DataFrame({"text": lines[:200]}).to_parquet(path)
    return path


def test_own_data_cut_by_the_split_says_so_and_names_the_setting(tmp_path, own_book):
    from hp_mlm.ops.job import run_job

    logged = []
    settings = get_settings(
        "smoke",
        environ={},
        dataset=str(own_book),
        split="train[:10%]",
        epochs=1,
        output_dir=str(tmp_path / "out"),
        progress=False,
    )
    metrics = run_job(settings, log=logged.append)
    line = next(text for text in logged if text.startswith("using"))
    assert "10% of the rows (20 of 200" in line and "set `split` to train" in line
    assert metrics["data"]["n_available"] == 200 and metrics["data"]["n_loaded"] == 20
    logged.clear()
    run_job(settings.replace(split="train", output_dir=str(tmp_path / "all")), log=logged.append)
    assert not any(text.startswith("using") for text in logged)


def test_the_column_is_checked_before_the_slice(tmp_path):
    import pandas as pd

    from hp_mlm.data import load_corpus

    path = tmp_path / "three.parquet"
    pd.DataFrame({"sentence": ["One row.", "Two rows.", "Three rows."]}).to_parquet(path)
    with pytest.raises(ValueError, match="text column 'text' not found.*'sentence'"):
        load_corpus(str(path), "train[:10%]", "text")  # 10% of 3 rows is nothing, but the column comes first


def test_a_missing_dataset_is_reported_before_the_existing_output_folder(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    status = cli.main(["train", "--profile", "smoke", "--output-dir", str(tmp_path), "--dataset", "./no/such.parquet"])
    err = capsys.readouterr().err
    assert status == 2 and "--dataset './no/such.parquet'" in err and "--overwrite" not in err


def test_evaluate_without_the_profile_names_the_data_problem_first(saved_smoke, tmp_path):
    result = run_cli(
        "evaluate",
        "--model",
        str(saved_smoke),
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "HP_MLM_PROFILE": ""},
    )
    assert result.returncode == 2
    assert "andjela-r/mlm-harry-potter" in result.stderr and "max_length" not in result.stderr


# predict/evaluate without --model, and --help ---------------------------------------------------


def test_predict_and_evaluate_use_the_profiles_trained_model_and_say_which(tmp_path, saved_smoke):
    import shutil

    env = {"HP_MLM_PROFILE": "smoke", "HP_MLM_OUTPUT_DIR": str(tmp_path)}
    base = run_cli("predict", "Mira [MASK] crossed the lake.", "--json", env=env)
    assert base.returncode == 0 and "untrained base model" in base.stderr
    shutil.copytree(saved_smoke, tmp_path / "model")
    with torch.no_grad():  # make the "fine-tuned" model differ from the base one
        from transformers import AutoModelForMaskedLM

        model = AutoModelForMaskedLM.from_pretrained(tmp_path / "model")
        model.cls.predictions.bias.add_(torch.linspace(0, 5, model.config.vocab_size))
        model.save_pretrained(tmp_path / "model")
    used = run_cli("predict", "Mira [MASK] crossed the lake.", "--json", env=env)
    chosen = run_cli("predict", "Mira [MASK] crossed the lake.", "--json", "--model", str(tmp_path / "model"))
    assert "fine-tuned model in" in used.stderr and str(tmp_path / "model") in used.stderr
    assert json.loads(used.stdout) == json.loads(chosen.stdout) != json.loads(base.stdout)
    evaluated = run_cli("evaluate", env=env)
    assert evaluated.returncode == 0 and "fine-tuned model in" in evaluated.stderr
    assert math.isfinite(json.loads(evaluated.stdout)["cross_entropy"])


def test_predict_finds_the_model_of_the_text_you_trained_on(tmp_path, saved_smoke, monkeypatch, capsys):
    """A run on your text is saved in ``outputs/<profile>-<data>``: ``predict --dataset`` (the file given to
    train) uses that model; without it, predict says the base model is used and how to name your run."""
    import shutil

    from hp_mlm.ops import cli

    for name in ("HP_MLM_DATASET", "HP_MLM_OUTPUT_DIR", "HP_MLM_PROFILE", "HP_MLM_TRAINED_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no repository above: outputs/ is here, as in Colab's /content
    shutil.copytree(saved_smoke, tmp_path / "outputs" / "smoke-My-Book" / "model")
    sentence = ["predict", "Mira [MASK] crossed the lake.", "--profile", "smoke", "--json"]
    assert cli.main([*sentence, "--dataset", "/content/My Book.txt"]) == 0
    assert "fine-tuned model in outputs/smoke-My-Book/model" in capsys.readouterr().err
    assert cli.main(sentence) == 0
    assert "untrained base model" in (err := capsys.readouterr().err) and "--dataset you trained on" in err


@pytest.mark.parametrize("command", ["train", "compare", "evaluate", "predict"])
def test_help_gives_every_flag_a_real_text_its_default_and_choices(command):
    parser = cli.build_parser()
    sub = next(a for a in parser._subparsers._group_actions if hasattr(a, "choices")).choices[command]
    for action in sub._actions:
        if not action.option_strings or action.dest in ("help",):
            continue
        assert action.help and not action.help.startswith("setting "), action.dest
        if action.dest in ("schedule", "masking", "precision", "recipe", "padding"):
            assert action.choices
    if command in ("train", "compare"):
        flags = {a.dest: a for a in sub._actions}
        active = get_settings()  # the profile HP_MLM_PROFILE names, as the help shows it
        assert f"(default in the {active.profile} profile: {active.batch_size})" in flags["batch_size"].help
        assert tuple(flags["schedule"].choices) == ("auto", "linear", "constant")


# Found by trying the course as a new user: each bad input gets one line that names the real problem


def one_line(capsys, argv):
    status = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error:"), (status, err)
    return err[0]


def test_a_local_file_has_only_a_train_split(tmp_path, own_book, capsys):
    for split in ("validation", "tran[:10]"):
        line = one_line(
            capsys,
            [
                "train",
                "--profile",
                "smoke",
                "--dataset",
                str(own_book),
                "--split",
                split,
                "--output-dir",
                str(tmp_path / "o"),
                "--no-progress",
            ],
        )
        assert "one split is 'train'" in line


def test_an_empty_or_unreadable_file_is_named(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    line = one_line(
        capsys, ["train", "--profile", "smoke", "--dataset", str(empty), "--output-dir", str(tmp_path / "o")]
    )
    assert "is empty" in line
    assert not (tmp_path / "o").exists()  # nothing was written, so no folder holding only its lock is left
    broken = tmp_path / "broken.json"
    broken.write_text("{this is not json")
    line = one_line(
        capsys,
        ["train", "--profile", "smoke", "--dataset", str(broken), "--output-dir", str(tmp_path / "p"), "--no-progress"],
    )
    assert "Cannot read" in line and "broken.json" in line


def test_resume_from_a_pointer_to_a_missing_checkpoint_is_refused(tmp_path, capsys):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest.json").write_text('{"checkpoint": "step-9999999", "global_step": 9999999}')
    line = one_line(capsys, ["train", "--profile", "smoke", "--output-dir", str(tmp_path), "--resume", "--no-progress"])
    assert "step-9999999 is missing" in line and "--overwrite" in line


def test_a_folder_that_holds_no_model_is_named_and_the_model_inside_it_pointed_to(tmp_path, saved_smoke, capsys):
    import shutil

    shutil.copytree(saved_smoke, tmp_path / "run" / "model")
    line = one_line(capsys, ["predict", "Mira [MASK] crossed the lake.", "--model", str(tmp_path / "run")])
    assert "holds no model" in line and str(tmp_path / "run" / "model") in line


def test_names_that_look_like_hub_ids_or_package_corpora_get_the_right_message(tmp_path):
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "HP_MLM_PROFILE": "smoke"}
    result = run_cli("predict", "Mira [MASK] crossed the lake.", "--model", "outputs/nonexist", env=env, timeout=120)
    assert result.returncode == 2 and "No local folder 'outputs/nonexist' exists either" in result.stderr
    result = run_cli("train", "--dataset", "hp_mlm:nope", "--output-dir", str(tmp_path / "o"), env=env, timeout=120)
    assert result.returncode == 2 and "hp_mlm:smoke-corpus" in result.stderr and "Hub" not in result.stderr


def test_a_bad_probes_file_is_found_before_any_loading(tmp_path, capsys, monkeypatch):
    import hp_mlm.prepare

    def must_not_load(*args, **kwargs):
        raise AssertionError("the data was loaded before the probes were checked")

    monkeypatch.setattr(hp_mlm.prepare, "load_corpus", must_not_load)
    cases = {
        "no_mask.jsonl": (
            '{"text": "Mira crossed the lake.", "answer": "mira"}\n',
            "no_mask.jsonl:1: the text has no [MASK]",
        ),
        "empty.jsonl": ("\n", "holds no probe"),
        "broken.jsonl": ('{"text": "[MASK] crossed.", "answer": "mira"}\n{oops\n', "broken.jsonl:2 is not valid JSON"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        line = one_line(
            capsys,
            ["train", "--profile", "smoke", "--probes", str(tmp_path / name), "--output-dir", str(tmp_path / "o")],
        )
        assert needle in line


@pytest.mark.parametrize(
    "args, flag",
    [(["--lr", "-1"], "--lr (HP_MLM_LEARNING_RATE)"), (["--batch-size", "0"], "--batch-size (HP_MLM_BATCH_SIZE)")],
)
def test_range_errors_name_the_flag_and_the_variable(tmp_path, capsys, args, flag):
    assert flag in one_line(capsys, ["train", "--profile", "smoke", "--output-dir", str(tmp_path), *args])


def test_a_tokenizer_larger_than_the_model_is_refused_at_load_naming_both_sizes(tmp_path):
    """A tokenizer larger than the model: names added to the tokenizer, the model saved without resizing."""
    from hp_mlm.models import load_model

    tok = build_smoke_tokenizer()
    model = build_smoke_model(tok)
    rows = model.get_input_embeddings().num_embeddings
    tok.add_tokens(["hermione", "dumbledore", "hogwarts"])
    save_model(model, tok, tmp_path / "grown")
    with pytest.raises(
        ValueError, match=rf"tokenizer has {rows + 3:,} tokens but the model only {rows:,}.*resize_token_embeddings"
    ):
        load_model(str(tmp_path / "grown"))
    model.resize_token_embeddings(len(tok))  # resized: accepted, and the decoder stays tied
    save_model(model, tok, tmp_path / "resized")
    loaded = load_model(str(tmp_path / "resized")).model
    assert loaded.get_input_embeddings().num_embeddings == rows + 3
    assert loaded.cls.predictions.decoder.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()


def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint_and_says_how_much_space(
    tmp_path, monkeypatch, capsys
):
    """A full disk: the second checkpoint fails half-written with ENOSPC."""
    import errno

    from accelerate import Accelerator

    real, calls = Accelerator.save_state, []

    def save_state(self, output_dir, **kwargs):
        calls.append(output_dir)
        if len(calls) < 2:
            return real(self, output_dir, **kwargs)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "model.safetensors").write_bytes(b"half a file")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    out = tmp_path / "full"
    status = cli.main(
        [
            "train",
            "--profile",
            "smoke",
            "--epochs",
            "2",
            "--checkpoint-every",
            "3",
            "--no-progress",
            "--output-dir",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert "could not write a checkpoint" in err[0] and " MB" in err[0] and "--checkpoint-every" in err[0]
    assert "No space left on device" in err[0] and "--resume" in err[0]
    assert not list((out / "checkpoints").glob(".tmp-*"))
    assert latest_checkpoint(out).name == "step-0000003"
    assert (latest_checkpoint(out) / "state.json").is_file()


def test_out_of_memory_in_any_phase_is_one_line_naming_it_and_keeps_the_checkpoint(tmp_path, monkeypatch, capsys):
    """Out of memory in any phase: memory runs out at the optimiser step, in an evaluation, or in fill_mask."""
    import transformers

    from hp_mlm import evaluation
    from hp_mlm.checkpoints import latest_checkpoint
    from hp_mlm.ops import job

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    real_evaluate, calls = evaluation.evaluate, []

    def oom_at_the_second_epochs_validation(*args, **kwargs):  # before, after epoch 1, after epoch 2
        calls.append(1)
        if len(calls) <= 2:
            return real_evaluate(*args, **kwargs)
        with monkeypatch.context() as inside:  # the forward pass inside evaluate runs out
            inside.setattr(evaluation, "mlm_logits", oom)
            return real_evaluate(*args, **kwargs)

    faults = {
        "optimiser step": (torch.optim.AdamW, "step", oom, "--batch-size"),
        "held-out evaluation": (job, "evaluate", oom_at_the_second_epochs_validation, "--eval-batch-size"),
        "fill_mask": (transformers.BertForMaskedLM, "forward", oom, "--max-length"),
    }
    for phase, (owner, name, fault, flag) in faults.items():
        out = tmp_path / name
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, fault)
            argv = ["train", "--profile", "smoke", "--epochs", "2", "--no-progress", "--output-dir", str(out)]
            status = cli.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(err) == 1, (phase, err)
        assert err[0].startswith("error: out of memory in ") and phase in err[0] and flag in err[0], err
        assert "Traceback" not in err[0] and "CUDA out of memory" in err[0]
        if phase == "held-out evaluation":  # epoch 1 was saved before epoch 2 ran out: it loads and resumes
            assert latest_checkpoint(out) is not None
            assert cli.main(argv + ["--resume"]) == 0
            assert "resuming at optimiser step" in capsys.readouterr().out


def test_rows_given_as_1_by_n_tensors_are_read_as_the_lists_they_hold(smoke_tokenizer):
    """Rows as (1, n) tensors: `tokenizer(text, return_tensors="pt")` per sentence gives (1, n) tensors."""
    from helpers import SENTENCES, fit, tokenised

    from hp_mlm.config import get_settings
    from hp_mlm.masking import MaskingCollator, freeze_masks
    from hp_mlm.models import build_smoke_model
    from hp_mlm.tokens import pad_batch

    keys = ("input_ids", "attention_mask", "special_tokens_mask")
    as_tensors = [
        {k: v for k, v in smoke_tokenizer(t, return_tensors="pt", return_special_tokens_mask=True).items() if k in keys}
        for t in SENTENCES
    ]
    assert as_tensors[0]["input_ids"].shape[0] == 1
    lists = tokenised(smoke_tokenizer, SENTENCES)
    for a, b in zip(pad_batch(as_tensors, smoke_tokenizer).values(), pad_batch(lists, smoke_tokenizer).values()):
        assert torch.equal(a, b)
    assert freeze_masks(as_tensors, smoke_tokenizer, seed=3) == freeze_masks(lists, smoke_tokenizer, seed=3)
    collate = MaskingCollator(smoke_tokenizer, seed=3)
    assert torch.equal(collate(as_tensors)["labels"], collate(lists)["labels"])
    settings = get_settings("smoke", environ={}, progress=False, epochs=1, batch_size=4)
    histories = [
        fit(build_smoke_model(smoke_tokenizer), smoke_tokenizer, rows, settings) for rows in (as_tensors, lists)
    ]
    assert [s["loss"] for s in histories[0]["steps"]] == [s["loss"] for s in histories[1]["steps"]]
    batch_as_one_row = [dict(smoke_tokenizer(SENTENCES[:2], padding=True, return_tensors="pt"))]
    with pytest.raises(ValueError, match=r"shape \(2, \d+\); each row holds one sequence, shape \(n,\) or \(1, n\)"):
        pad_batch(batch_as_one_row, smoke_tokenizer)


def test_every_held_out_row_gets_a_hidden_token_and_rows_that_had_one_keep_their_draw():
    """Every held-out row is scored: `prepare` on the smoke profile, 20 seeds: no held-out row without a label."""
    from hp_mlm.config import get_settings
    from hp_mlm.masking import IGNORE_INDEX, freeze_masks
    from hp_mlm.prepare import prepare

    without, drawn_one = 0, 0
    for seed in range(20):
        prep = prepare(get_settings("smoke", environ={}, seed=seed, progress=False))
        without += sum(all(x == IGNORE_INDEX for x in r["labels"]) for r in prep.frozen_validation)
        plain = freeze_masks(prep.validation_tokens, prep.loaded.tokenizer, seed=seed, at_least_one=False)
        for given, drawn in zip(prep.frozen_validation, plain):
            if any(x != IGNORE_INDEX for x in drawn["labels"]):
                assert given == drawn  # the draw is kept where it hid something
            else:
                drawn_one += 1
                hidden = [i for i, x in enumerate(given["labels"]) if x != IGNORE_INDEX]
                assert len(hidden) == 1 and given["input_ids"][hidden[0]] == prep.loaded.tokenizer.mask_token_id
                assert given["labels"][hidden[0]] not in prep.loaded.tokenizer.all_special_ids
    assert without == 0 and drawn_one > 0  # the plain draw leaves some rows empty; none stays empty
