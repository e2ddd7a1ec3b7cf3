"""A book's names followed at every held-out occurrence, and what it taught (``studies.names``)."""

from __future__ import annotations

import torch

from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.studies.names import (
    LEARNED,
    PerWord,
    first_learned,
    follow_names,
    hidden_words,
    name_gaps,
    score_names,
    taught,
)
from hp_mlm.tokens import tokenize_rows
from hp_mlm.training import Callback

TEXTS = [
    "Mira Ashdown crossed the lake and Mira waved to Hob.",
    "Hob rowed while Mira sang; Hobson laughed at Mira.",
    "The Mist Bell rang and Hob said Mira was late.",
]


def rows_of(texts, tokenizer):
    from datasets import Dataset

    return tokenize_rows(Dataset.from_dict({"text": texts}), tokenizer, 64, "text")


def test_every_whole_word_occurrence_is_found_and_hidden_whole_never_a_longer_word(smoke_tokenizer):
    rows = rows_of(TEXTS, smoke_tokenizer)
    followed = follow_names(rows, smoke_tokenizer, ["mira", "hob", "mist", "mr", "chapter"])
    assert followed.occurrences["mira"] == 5  # "Mira", "Mira." and "Mira;" alike
    assert followed.occurrences["hob"] == 3  # "Hobson" is another word
    assert "mist" not in followed.names  # one occurrence is too few to follow
    assert "mr" not in followed.names and "chapter" not in followed.names  # a title, a heading: never a name
    for item in followed.items:
        hidden = [i for i, label in enumerate(item["labels"]) if label != IGNORE_INDEX]
        assert all(item["input_ids"][i] == smoke_tokenizer.mask_token_id for i in hidden)
        assert item["input_ids"].count(smoke_tokenizer.mask_token_id) == len(hidden)  # only that occurrence
        word = smoke_tokenizer.decode([item["labels"][i] for i in hidden]).replace(" ", "")
        assert word in followed.names
        assert (
            item["input_ids"][0] == smoke_tokenizer.cls_token_id
            and item["input_ids"][-1] == smoke_tokenizer.sep_token_id
        )
        assert len(item["input_ids"]) == len(item["labels"]) == len(item["attention_mask"])


def test_a_name_of_several_pieces_is_followed_and_right_only_whole(smoke_tokenizer, smoke_model):
    name = "hobsonwick"
    assert len(smoke_tokenizer.tokenize(name)) > 1
    texts = [f"{name.title()} met Mira by the lake.", f"Then {name.title()} left.", f"Was it {name.title()}?"]
    followed = follow_names(rows_of(texts, smoke_tokenizer), smoke_tokenizer, [name])
    assert followed.occurrences == {name: 3}
    right = score_names(smoke_model, followed, smoke_tokenizer)
    # by hand: an occurrence is right only where the first guess at every hidden piece is that piece
    smoke_model.eval()
    by_hand = 0
    for item in followed.items:
        with torch.no_grad():
            logits = smoke_model(input_ids=torch.tensor([item["input_ids"]])).logits[0]
        hidden = [i for i, label in enumerate(item["labels"]) if label != IGNORE_INDEX]
        by_hand += all(int(logits[i].argmax()) == item["labels"][i] for i in hidden)
    assert right == {name: by_hand}


def test_per_word_counts_agree_with_the_top1_of_evaluate(smoke_tokenizer, smoke_model):
    rows = rows_of(TEXTS, smoke_tokenizer)
    followed = follow_names(rows, smoke_tokenizer, ["mira", "hob"])
    scored = evaluate(smoke_model, followed.items, smoke_tokenizer, 4, breakdowns=(followed.breakdown,))
    counts = scored["per_word"]
    assert sum(c["seen"] for c in counts.values()) == len(followed.items)
    one_piece = all(len(smoke_tokenizer.tokenize(n)) == 1 for n in followed.names)
    if one_piece:  # every hidden token is one whole name: the word hits are evaluate's own top-1 hits
        assert sum(c["right"] for c in counts.values()) == round(scored["top1"] * scored["n_positions"])


def test_hidden_words_reads_whole_words_back_from_frozen_labels(smoke_tokenizer):
    ids = smoke_tokenizer("Mira met hobsonwick at the lake")["input_ids"]
    pieces = smoke_tokenizer.tokenize("hobsonwick")
    at = ids.index(smoke_tokenizer.convert_tokens_to_ids(pieces[0]))
    labels = [IGNORE_INDEX] * len(ids)
    for i in [1, *range(at, at + len(pieces))]:  # "mira" and the whole of "hobsonwick" hidden
        labels[i] = ids[i]
    assert hidden_words([{"input_ids": ids, "labels": labels}], smoke_tokenizer) == {"mira": 1, "hobsonwick": 1}
    assert PerWord(["mira", "hobsonwick"], smoke_tokenizer).names == (
        "mira\tright",
        "mira\tseen",
        "hobsonwick\tright",
        "hobsonwick\tseen",
    )


def test_taught_lists_the_books_words_gained_largest_gain_first_and_leaves_common_words_out():
    before = {"colin": {"seen": 9, "right": 1}, "the": {"seen": 40, "right": 5}, "moor": {"seen": 4, "right": 0}}
    after = {
        "colin": {"seen": 9, "right": 7},
        "the": {"seen": 40, "right": 30},
        "moor": {"seen": 4, "right": 2},
        ".": {"seen": 30, "right": 20},
        "t": {"seen": 8, "right": 6},
        "don": {"seen": 8, "right": 6},
        "garden": {"seen": 5, "right": 0},
    }
    assert [t["word"] for t in taught(before, after)] == ["colin", "moor"]
    assert taught(before, after)[0] == {"word": "colin", "seen": 9, "before": 1, "after": 7}
    assert taught(after, before) == []


def test_a_name_is_learned_at_the_first_frame_right_at_a_third_of_its_occurrences():
    frames = [{"step": 0, "seconds": 0.0, "names": {"mary": 0}}, {"step": 10, "seconds": 4.0, "names": {"mary": 4}},
              {"step": 20, "seconds": 8.0, "names": {"mary": 5}}]  # fmt: skip
    assert LEARNED == 1 / 3
    assert first_learned(frames, {"mary": 15}) == [{"name": "mary", "seen": 15, "step": 20, "seconds": 8.0}]
    assert first_learned(frames, {"mary": 12})[0]["step"] == 10
    assert first_learned(frames, {"mary": 16})[0]["step"] is None


def test_name_gaps_hide_one_whole_occurrence_in_a_short_sentence():
    texts = ["Hobson came. Then Hob rowed home. Hob and Hob!", "A very long sentence " * 20 + "with Mira in it."]
    assert name_gaps(texts, ["hob", "mira"]) == [("Then [MASK] rowed home.", ("hob",))]


def test_the_watch_follows_names_in_every_frame_and_its_curves_draw_them(smoke_tokenizer, smoke_model, tmp_path):
    from hp_mlm.config import get_settings, resolve_auto
    from hp_mlm.course.watch import FramesTable, LearningCurves, WatchLearning, frame_line
    from hp_mlm.training import plan_training, train

    rows = rows_of(TEXTS * 4, smoke_tokenizer)
    settings = resolve_auto(get_settings("smoke", epochs=1, batch_size=4, progress=False), new_head=False)
    plan = plan_training(smoke_model, smoke_tokenizer, rows, settings)
    followed = follow_names(rows_of(TEXTS, smoke_tokenizer), smoke_tokenizer, ["mira", "hob"])
    lines = []
    watch = WatchLearning(plan, smoke_tokenizer, probes=[], every=1, log=lines.append, examples=(), names=followed)
    history = train(plan, [watch, Callback()])
    frames = history["watch"]["frames"]
    assert len(frames) == history["optimizer_steps"] + 1
    assert all(set(f["names"]) == {"mira", "hob"} for f in frames)
    assert history["watch"]["names"] == {"mira": 5, "hob": 3}
    assert [hit["name"] for hit in history["watch"]["names_learned"]] == ["mira", "hob"]
    assert "names mira " in lines[0] and "/5" in lines[0]
    assert frame_line(frames[-1], (), history["watch"]["names"]).endswith(f"hob {frames[-1]['names']['hob']}/3")
    assert "the book's names" in FramesTable(frames, (), history["watch"]["names"])._repr_html_()
    assert "names right: mira" in repr(LearningCurves([(1, 2.0)], frames, history["watch"]["names"]))
    assert LearningCurves([(1, 2.0)], frames, history["watch"]["names"])._repr_mimebundle_()["image/png"]
