"""A run belongs to its data and its model: the output folder names the data, a checkpoint records the rows and
the model it trains and a resume of other ones is refused in one line (the checkpoint kept), a finished run is
trained further from its model in a new folder, and notebooks 00 and 03 say whose run they show or continue."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SENTENCES, fit, tokenised

from hp_mlm.checkpoints import CHECKPOINTS, release_output_dir, save_model
from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.course.premise import premise_after
from hp_mlm.course.runs import run_start
from hp_mlm.ops.card import write_model_card
from hp_mlm.training import Callback, plan_training


def settings(**changes):
    base = dict(epochs=1, batch_size=4, progress=False, checkpoint_every=0, learning_rate=1e-3, schedule="linear")
    return resolve_auto(get_settings("smoke", environ={}, **base), new_head=True).replace(**changes)


@pytest.fixture()
def folder(tmp_path):
    yield tmp_path / "out"
    release_output_dir(tmp_path / "out")  # this test process's hold, if a plan took one


def checkpoint_files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted((folder / CHECKPOINTS).rglob("*")) if p.is_file()}


def test_the_default_output_folder_names_the_data_when_it_is_not_the_profiles_own():
    def folder(**given):
        return Path(get_settings("smoke", **given).output_dir).as_posix()

    assert folder(environ={}).endswith("outputs/smoke")
    assert folder(environ={}, dataset="hp_mlm:smoke-corpus").endswith("outputs/smoke")  # its own, named
    assert folder(environ={}, dataset="/content/My Book.txt").endswith("outputs/smoke-My-Book")
    assert folder(environ={"HP_MLM_DATASET": "/books/oz.txt"}).endswith("outputs/smoke-oz")  # notebook 00's MY_TEXT
    assert folder(environ={}, dataset="hp_mlm:products").endswith("outputs/smoke-products")
    assert Path(get_settings("quick", environ={}, dataset="someone/novels").output_dir).name == "quick-novels"
    assert folder(environ={}, dataset="/books/oz.txt", output_dir="mine") == "mine"  # a folder given is kept


def test_the_settings_say_that_your_own_text_trains_whole():
    """The settings a notebook prints say what ``prepare`` does: a learner's text has its long rows cut into
    more rows; the books and the package's corpora keep their documented truncation."""
    assert get_settings("quick", environ={"HP_MLM_DATASET": "/books/oz.txt"}).split_long_rows
    assert not get_settings("quick", environ={}).split_long_rows
    assert not get_settings("smoke", environ={}, dataset="hp_mlm:products").split_long_rows


def test_a_changed_text_is_refused_on_resume_in_one_line_and_the_checkpoint_is_kept(
    folder, smoke_tokenizer, smoke_model
):
    fit(smoke_model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), settings(), output_dir=folder)
    kept = checkpoint_files(folder)
    for text in (SENTENCES[:5], [*SENTENCES[:-1], "Poppy Crane drew the map of the island."]):
        with pytest.raises(ValueError) as refused:
            rows = tokenised(smoke_tokenizer, text)
            plan_training(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder, resume=True)
        line = str(refused.value)
        assert "\n" not in line and line.startswith("cannot resume") and "training_rows '8 rows (" in line
        assert f"-> '{len(text)} rows (" in line and "seed" not in line and "model" not in line.split("(was, now)")[1]
        assert checkpoint_files(folder) == kept  # nothing read into the model, nothing removed
    again = plan_training(
        smoke_model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), settings(), output_dir=folder, resume=True
    )
    assert again.start_epoch == 1 and again.history["optimizer_steps"] > 0  # the same rows resume


def test_another_model_is_refused_on_resume(folder, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    fit(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder)
    kept = checkpoint_files(folder)
    other = settings(model=str(folder.parent / "another_model"))
    with pytest.raises(ValueError) as refused:
        plan_training(smoke_model, smoke_tokenizer, rows, other, output_dir=folder, resume=True)
    line = str(refused.value)
    assert f"model 'hp_mlm:smoke-bert' -> {other.model!r}" in line and "training_rows" not in line
    assert checkpoint_files(folder) == kept


def test_more_epochs_from_a_finished_run_are_told_to_start_from_its_model_in_a_new_folder(folder, capsys):
    from hp_mlm.ops import cli

    (folder / "model").mkdir(parents=True)  # a finished run: its model, its checkpoints cleared
    status = cli.main(["train", "--profile", "smoke", "--output-dir", str(folder), "--resume", "--epochs", "6"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and "train it further" in line
    assert f"--model {folder / 'model'} --output-dir {folder}-more" in line and "pass --overwrite" not in line
    assert sorted(p.name for p in folder.iterdir()) == [".run.lock", "model"]  # nothing loaded, nothing written


def test_notebook_00_calls_a_model_yours_only_when_it_was_trained_on_this_data(tmp_path, smoke_tokenizer):
    from hp_mlm.models import load_model

    course = get_settings("smoke", environ={}, output_dir=str(tmp_path))
    loaded = load_model(course.model)
    save_model(loaded.model, loaded.tokenizer, tmp_path / "model")
    write_model_card(tmp_path / "model", course)  # the course corpus's run, as notebook 03 saves it
    sentence = "Hob Tanner rowed the ferry across the [MASK] Lake."
    assert premise_after(course, sentence)["source"] == "your model"
    text = tmp_path / "my_book.txt"
    mine = get_settings("smoke", environ={}, dataset=str(text), output_dir=str(tmp_path))  # the same folder, by hand
    source = premise_after(mine, sentence)["source"]
    assert source != "your model" and "your" not in source
    assert "trained on hp_mlm:smoke-corpus [train] from hp_mlm:smoke-bert, not on this data" in source
    (tmp_path / "model" / "README.md").unlink()
    assert "card" in premise_after(course, sentence)["source"]  # no record: not called yours either


class StopAfterFirstEpoch(Callback):
    def on_epoch_end(self, model, record) -> bool:  # noqa: ARG002 - a hook's signature
        return True


def test_notebook_03_says_whether_it_continues_a_run_or_starts_one(folder, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    two = settings(epochs=2)
    fresh = plan_training(smoke_model, smoke_tokenizer, rows, two, output_dir=folder, resume=True)
    assert run_start(fresh) == f"starts a new run in {folder}"
    fit(smoke_model, smoke_tokenizer, rows, two, callbacks=[StopAfterFirstEpoch()], output_dir=folder)
    resumed = plan_training(smoke_model, smoke_tokenizer, rows, two, output_dir=folder, resume=True)
    assert run_start(resumed) == f"continues the run in {folder}, at epoch 2 of 2"
    from_zero = plan_training(smoke_model, smoke_tokenizer, rows, two, output_dir=folder, resume=False)  # FRESH
    assert run_start(from_zero) == f"starts a new run in {folder}" and from_zero.start_epoch == 0
