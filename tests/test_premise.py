"""Notebook 00 opens with the active profile's own premise: its sentence, what the stock model says, and what
the fine-tuned model says after (the learner's own model where notebook 03 saved one, else the course's
committed run of that profile, said so); the README's picture is drawn from a run's saved frames."""

from __future__ import annotations

import torch

from hp_mlm.checkpoints import save_model
from hp_mlm.config import get_settings
from hp_mlm.course.plots import gap_context, live_view_rows, plot_live_view
from hp_mlm.course.premise import committed_frames, premise, premise_after
from hp_mlm.inference import fill_mask
from hp_mlm.models import load_model
from hp_mlm.ops.card import write_model_card


def test_the_books_profiles_ask_harry_and_the_others_their_own_corpus():
    for profile in ("full", "quick"):
        sentence, answers = premise(get_settings(profile, environ={}))
        assert "Harry [MASK]" in sentence and answers == ("potter",)
    sentence, answers = premise(get_settings("offline", environ={}))
    assert "Hob [MASK]" in sentence and answers == ("tanner",)
    sentence, _ = premise(get_settings("smoke", environ={}))
    assert "Harry" not in sentence


def test_the_committed_runs_are_of_each_profiles_own_premise_and_end_on_its_word():
    for profile in ("offline", "smoke"):
        run = committed_frames(profile)
        sentence, answers = premise(get_settings(profile, environ={}))
        assert run["examples"][0]["text"] == sentence
        assert run["frames"][0]["step"] == 0 and len(run["frames"]) >= 8
    offline = committed_frames("offline")
    assert offline["frames"][0]["examples"][0][0][0]["token"] != "tanner"  # before: not the corpus's word
    assert offline["frames"][-1]["examples"][0][0][0]["token"] == "tanner"  # after: it is
    assert committed_frames("full") is None


def test_after_comes_from_the_committed_run_until_the_learner_saves_a_model(tmp_path):
    settings = get_settings("smoke", environ={}, output_dir=str(tmp_path))
    sentence, _ = premise(settings)
    after = premise_after(settings, sentence)
    run = committed_frames("smoke")
    assert after["source"] == "the course's committed run"
    assert after["candidates"] == run["frames"][-1]["examples"][0][0][:3]
    loaded = load_model(settings.model, seed=settings.seed)
    with torch.no_grad():  # a model of the learner's own, unlike the committed one
        loaded.model.cls.predictions.bias.add_(torch.linspace(0, 5, loaded.model.cls.predictions.bias.numel()))
    save_model(loaded.model, loaded.tokenizer, tmp_path / "model")
    write_model_card(tmp_path / "model", settings)  # as notebook 03 saves it: the card says what it trained on
    mine = premise_after(settings, sentence)
    assert mine["source"] == "your model"
    expected = fill_mask(loaded.model, loaded.tokenizer, sentence, 3)[0][0]
    assert [c["token"] for c in mine["candidates"]] == [c["token"] for c in expected]


def test_your_own_corpus_opens_with_a_sentence_picked_from_its_held_out_rows(tmp_path):
    from importlib import resources

    from hp_mlm.prepare import prepare

    lines = (resources.files("hp_mlm") / "corpora" / "smoke_corpus.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "mine.txt").write_text("\n".join(lines[:200]), encoding="utf-8")  # ships no examples
    settings = get_settings("smoke", environ={}, dataset=str(tmp_path / "mine.txt"), output_dir=str(tmp_path / "o"))
    sentence, answers = premise(settings)
    held_out = " ".join(prepare(settings).validation_rows[settings.text_column])
    assert sentence.replace("[MASK]", answers[0]).lower() in held_out.lower()  # a held-out sentence, its word hidden
    assert premise_after(settings, sentence) is None  # no committed run of your text, no model of yours yet
    (tmp_path / "lower.txt").write_text("\n".join(lines[:200]).lower(), encoding="utf-8")  # no names to pick
    assert premise(get_settings("smoke", environ={}, dataset=str(tmp_path / "lower.txt"))) is None


def test_a_profile_without_a_committed_run_or_a_model_has_no_after(tmp_path):
    settings = get_settings("quick", environ={}, output_dir=str(tmp_path))
    assert premise_after(settings, premise(settings)[0]) is None


def watch_of_two_sentences() -> dict:
    def frame(step, first, second, third):
        guess = lambda token, score=0.5: [{"token": token, "score": score}]  # noqa: E731
        return {"step": step, "examples": [[guess(first)], [guess(second), guess(third, 0.9)]]}

    return {
        "examples": [
            {"text": "Every day, Hob [MASK] rowed.", "answers": ["tanner"]},
            {"text": "[MASK] met Poppy [MASK] at the lake.", "answers": ["mira", "crane"]},
        ],
        "frames": [
            frame(0, ".", "the", ","),
            frame(40, "tanner", "the", "crane"),
            frame(80, "tanner", "mira", "crane"),
        ],
        "first_right": [{"step": 40}, {"step": 80}, {"step": 40}],
    }


def test_the_live_view_rows_read_before_the_first_step_and_after_from_the_frames():
    rows = live_view_rows(watch_of_two_sentences())
    assert [r["gap"] for r in rows] == ["day, Hob [MASK] rowed", "[MASK] met Poppy", "met Poppy [MASK] at the"]
    assert [(r["before"], r["step"], r["after"]["token"]) for r in rows] == [
        (".", 40, "tanner"),
        ("the", 80, "mira"),
        (",", 40, "crane"),
    ]
    fig = plot_live_view(watch_of_two_sentences())
    cell = fig.axes[0].tables[0].get_celld()[(3, 4)].get_text()  # the last row's "after"
    assert cell.get_text() == "crane  (0.90)" and cell.get_weight() == "bold"  # the corpus's word, marked


def test_a_gap_keeps_two_words_either_side_without_the_full_stop():
    assert gap_context("The old ferry crossed the [MASK] Lake.", 0) == "crossed the [MASK] Lake"
