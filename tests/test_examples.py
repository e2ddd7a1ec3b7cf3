"""Each profile's example sentences ask about its own corpus: the word at each mask is the corpus's."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from hp_mlm.inference import EXAMPLE_SENTENCES, example_sentences, examples
from hp_mlm.profiles import BOOKS_DATASET, EXAMPLES, PACKAGE_DATASETS, PROFILE_OVERRIDES


@pytest.mark.parametrize("dataset", [d for d in EXAMPLES if d in PACKAGE_DATASETS])
def test_a_package_corpus_examples_ask_for_words_its_text_puts_there(dataset):
    text = (resources.files("hp_mlm") / "corpora" / PACKAGE_DATASETS[dataset]).read_text(encoding="utf-8").lower()
    for sentence, answers in EXAMPLES[dataset]:
        assert sentence.count("[MASK]") == len(answers), sentence
        for answer in answers:
            assert re.search(rf"\b{answer}\b", text), f"{answer!r} is not in {dataset}'s text"
        names = re.findall(r"\b[A-Z][a-z]+ [A-Z][a-z]+\b", sentence.replace("[MASK]", "X"))
        assert all(name.lower() in text for name in names if "X" not in name), (sentence, names)


def test_every_profile_has_examples_of_its_own_data_and_the_books_are_the_premise():
    for profile, changes in PROFILE_OVERRIDES.items():
        dataset = changes.get("dataset", BOOKS_DATASET)
        assert examples(dataset) == EXAMPLES[dataset], profile
    assert EXAMPLE_SENTENCES[0] == "He was a young wizard, his name was Harry [MASK]."
    assert example_sentences("my_own_books.parquet") == EXAMPLE_SENTENCES  # a dataset without examples: the books'
    assert example_sentences("hp_mlm:course-corpus")[-1].count("[MASK]") == 2  # one example with two masks
