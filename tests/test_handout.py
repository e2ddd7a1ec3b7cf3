"""A trained model for a room: ``python -m hp_mlm handout`` packs it once; one setting hands it to each laptop."""

from __future__ import annotations

import json
import os
import zipfile

import pytest
import torch

from hp_mlm.checkpoints import save_model
from hp_mlm.config import get_settings
from hp_mlm.models import build_smoke_model, load_model
from hp_mlm.ops import cli
from hp_mlm.ops.handout import HANDOUT_FILE, handed_out_model, make_handout


@pytest.fixture()
def teacher(tmp_path, smoke_model, smoke_tokenizer):
    """A teacher's run: the smoke profile's settings, with a saved model in its output folder."""
    settings = get_settings("smoke", environ={}, output_dir=str(tmp_path / "teacher"))
    save_model(smoke_model, smoke_tokenizer, tmp_path / "teacher" / "model")
    return settings


def logits(folder, tokenizer) -> torch.Tensor:
    batch = tokenizer(["hob tanner rowed the [MASK] across the lake ."], return_tensors="pt")
    with torch.no_grad():
        return load_model(str(folder)).model.eval()(**batch).logits


def test_a_handout_is_one_zip_of_the_model_and_its_settings_written_atomically(teacher):
    archive = make_handout(teacher)
    assert archive.name == "handout-smoke.zip" and archive.parent.name == "teacher"
    names = zipfile.ZipFile(archive).namelist()
    assert HANDOUT_FILE in names and "model/model.safetensors" in names and "model/config.json" in names
    facts = json.loads(zipfile.ZipFile(archive).read(HANDOUT_FILE))
    assert facts["profile"] == "smoke" and facts["dataset"] == teacher.dataset and facts["seed"] == teacher.seed
    assert not list(archive.parent.glob("*.tmp"))
    assert archive.stat().st_mode & 0o044 == 0o044 or os.umask(os.umask(0)) & 0o044, "readable by the room"


def test_a_learner_with_one_setting_gets_the_teachers_model_without_training(tmp_path, teacher, smoke_tokenizer):
    archive = make_handout(teacher, tmp_path / "room.zip")
    learner = get_settings("smoke", environ={"HP_MLM_TRAINED_MODEL": str(archive)}, output_dir=str(tmp_path / "me"))
    folder = handed_out_model(learner)
    assert folder == tmp_path / "me" / "handout" / "model"
    assert torch.equal(logits(folder, smoke_tokenizer), logits(tmp_path / "teacher" / "model", smoke_tokenizer))
    weights = folder / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert handed_out_model(learner) == folder and weights.stat().st_mtime_ns == written  # reused, not unpacked again
    retrained = get_settings("smoke", environ={}, output_dir=str(tmp_path / "teacher2"))
    save_model(build_smoke_model(smoke_tokenizer, seed=1), smoke_tokenizer, tmp_path / "teacher2" / "model")
    make_handout(retrained, archive)  # the teacher hands out a new model under the same name
    again = handed_out_model(learner)
    assert torch.equal(logits(again, smoke_tokenizer), logits(tmp_path / "teacher2" / "model", smoke_tokenizer))


def test_an_unpacked_handout_folder_works_and_is_copied_not_written_to(tmp_path, teacher):
    archive = make_handout(teacher)
    shared = tmp_path / "shared"
    zipfile.ZipFile(archive).extractall(shared)
    before = sorted(p.name for p in (shared / "model").iterdir())
    learner = get_settings("smoke", environ={}, trained_model=str(shared), output_dir=str(tmp_path / "me"))
    folder = handed_out_model(learner)
    (folder / "README.md").write_text("a learner's own card")
    assert (
        folder.parent == tmp_path / "me" / "handout" and sorted(p.name for p in (shared / "model").iterdir()) == before
    )


def test_a_handout_of_other_settings_is_refused_naming_the_profile_to_set(tmp_path, teacher):
    archive = make_handout(teacher)
    learner = get_settings("smoke", environ={}, trained_model=str(archive), seed=7, output_dir=str(tmp_path / "me"))
    with pytest.raises(
        ValueError,
        match=r"trained in the smoke profile with seed 42 \(yours: 7\).*HP_MLM_PROFILE=smoke, or --profile smoke",
    ):
        handed_out_model(learner)
    assert handed_out_model(learner.replace(trained_model="")) is None


def test_a_zip_that_is_not_a_handout_or_escapes_its_folder_is_refused(tmp_path):
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("notes.txt", "not a model")
    settings = get_settings("smoke", environ={}, output_dir=str(tmp_path / "me"))
    with pytest.raises(FileNotFoundError, match="without handout.json"):
        handed_out_model(settings.replace(trained_model=str(plain)))
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr(
            HANDOUT_FILE,
            json.dumps(
                {k: getattr(settings, k) for k in ("model", "dataset", "split")}
                | {
                    "text_column": "text",
                    "seed": 42,
                    "validation_fraction": 0.15,
                    "max_validation_rows": 0,
                    "profile": "smoke",
                }
            ),
        )
        z.writestr("model/../../escaped.txt", "outside")
    with pytest.raises(ValueError, match="points outside its folder"):
        handed_out_model(settings.replace(trained_model=str(evil)))
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "me" / "escaped.txt").exists()
    with pytest.raises(FileNotFoundError, match="'.*nothing_here.zip': no such file or folder"):
        handed_out_model(settings.replace(trained_model=str(tmp_path / "nothing_here.zip")))
    (tmp_path / "a_folder").mkdir()
    with pytest.raises(FileNotFoundError, match="neither a .zip nor a folder"):
        handed_out_model(settings.replace(trained_model=str(tmp_path / "a_folder")))


def test_the_command_line_makes_a_handout_and_predict_uses_it(tmp_path, teacher, capsys, monkeypatch):
    assert cli.main(["handout", "--profile", "smoke", "--output-dir", teacher.output_dir]) == 0
    archive = tmp_path / "teacher" / "handout-smoke.zip"
    assert f"wrote {archive}" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # a laptop's own output folder, with no model in it
    status = cli.main(
        ["predict", "Hob Tanner rowed the [MASK].", "--profile", "smoke", "--trained-model", str(archive)]
    )
    shown = capsys.readouterr()
    assert status == 0 and "mask 1:" in shown.out
    assert f"using the model handed out in {archive}" in shown.err


def test_a_handout_of_the_class_book_is_accepted_where_the_same_text_sits_at_another_path(tmp_path, smoke_tokenizer):
    """The teacher's book and each laptop's copy are the same data: matched by their bytes, not their path; a
    different text at the learner's path is still refused."""
    text = "Mira rowed the ferry across the lake.\n\nHob rang the bell at dawn.\n"
    (tmp_path / "teacher_book.txt").write_text(text)
    teacher = get_settings(
        "smoke", environ={}, dataset=str(tmp_path / "teacher_book.txt"), output_dir=str(tmp_path / "t")
    )
    save_model(build_smoke_model(smoke_tokenizer), smoke_tokenizer, tmp_path / "t" / "model")
    archive = make_handout(teacher)
    (tmp_path / "laptop").mkdir()
    (tmp_path / "laptop" / "class_book.txt").write_text(text)
    learner = get_settings(
        "smoke",
        environ={},
        dataset=str(tmp_path / "laptop" / "class_book.txt"),
        trained_model=str(archive),
        output_dir=str(tmp_path / "me"),
    )
    assert handed_out_model(learner) == tmp_path / "me" / "handout" / "model"
    (tmp_path / "laptop" / "class_book.txt").write_text(text + "\nA paragraph of another book.\n")
    with pytest.raises(ValueError, match="dataset"):
        handed_out_model(learner.replace(output_dir=str(tmp_path / "me2")))
