"""The downstream check: name types from frozen encoder features, a seeded probe and its baselines."""

from __future__ import annotations

import json
import re

import pytest
import torch

from hp_mlm.data import load_corpus
from hp_mlm.models import build_smoke_model
from hp_mlm.studies.downstream import compare_encoders, load_name_types, name_features, probe_accuracy

PASSAGES = [
    "Mira Ashdown crossed the Silver Lake at dawn.",
    "Old Grumble slept under the Silver Lake.",
    "Hob Tanner rowed the Otter to Kettle Cove.",
    "Mira found Grumble asleep again.",
]


def test_the_course_names_are_labelled_and_every_one_is_in_the_corpus():
    types = load_name_types()
    rows, _ = load_corpus("hp_mlm:course-corpus", "train", "text")
    text = "\n".join(rows["text"]).lower()
    assert len(types) >= 40 and len(set(types.values())) >= 4
    assert [n for n in types if not re.search(rf"\b{n}\b", text)] == []


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not JSON"),
        ('{"Mira": "person", "hob": "person"}', "lower-case"),
        ('{"mira": "person", "cove": "place"}', "fewer than 2"),
    ],
)
def test_a_broken_name_types_file_is_refused(tmp_path, content, message):
    path = tmp_path / "types.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_name_types(path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_name_types(tmp_path / "missing.json")


def test_a_names_feature_is_the_mean_of_its_pieces_hidden_states(smoke_tokenizer):
    model = build_smoke_model(smoke_tokenizer)
    features, kept = name_features(model, smoke_tokenizer, PASSAGES, ["grumble", "ashdown", "nobody"], per_name=2)
    assert kept == ["grumble", "ashdown"] and features.shape == (2, model.config.hidden_size)
    by_hand = []
    for text in (PASSAGES[1], PASSAGES[3]):  # the two passages that mention Grumble
        enc = smoke_tokenizer(text, return_tensors="pt", return_offsets_mapping=True)
        start = text.lower().index("grumble")
        pieces = [
            i
            for i, (a, b) in enumerate(enc.pop("offset_mapping")[0].tolist())
            if a >= start and b <= start + 7 and b > a
        ]
        with torch.no_grad():
            hidden = model.base_model(**enc).last_hidden_state[0]
        by_hand.append(hidden[pieces].mean(0))
    assert torch.allclose(features[0], torch.stack(by_hand).mean(0), atol=1e-5)


def test_the_probe_is_seeded_and_its_majority_baseline_is_the_commonest_training_class():
    gen = torch.Generator().manual_seed(0)
    labels = ["person"] * 14 + ["place"] * 6
    noise = torch.randn(20, 8, generator=gen)
    first, again = probe_accuracy(noise, labels, seeds=5), probe_accuracy(noise, labels, seeds=5)
    assert first == again and len(first["probe"]) == 5
    # stratified 30% test split of 14/6: 4 of the 6 test names are persons, the training majority
    assert first["majority"] == [4 / 6] * 5 and first["chance"] == 0.5
    sign = torch.tensor([1.0 if t == "person" else -1.0 for t in labels])
    separable = 0.1 * noise + sign[:, None]  # every feature tells the classes apart
    assert probe_accuracy(separable, labels, seeds=5)["probe"] == [1.0] * 5
    with pytest.raises(ValueError, match="at least 2 classes"):
        probe_accuracy(noise, ["person"] * 20)


def test_encoders_are_compared_on_the_same_names(smoke_tokenizer, tmp_path):
    types = {
        "mira": "person",
        "hob": "person",
        "tanner": "person",
        "grumble": "creature",
        "otter": "creature",
        "ashdown": "person",
        "cove": "place",
        "kettle": "place",
        "lake": "place",
        "silver": "thing",
        "dawn": "thing",
        "nobody": "thing",
    }
    models = {"a": build_smoke_model(smoke_tokenizer, seed=1), "b": build_smoke_model(smoke_tokenizer, seed=2)}
    path = tmp_path / "types.json"
    path.write_text(json.dumps(types))
    out = compare_encoders(models, smoke_tokenizer, PASSAGES * 3, load_name_types(path), seeds=3)
    assert out["a"]["n_names"] == out["b"]["n_names"] == len(types) - 1  # "nobody" is in no passage
    assert out["a"]["majority"] == out["b"]["majority"]  # the same splits
