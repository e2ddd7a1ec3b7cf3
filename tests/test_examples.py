"""Each profile's example sentences ask about its own corpus: the word at each mask is the corpus's."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from hp_mlm.course.shipped import EXAMPLES, example_sentences, examples
from hp_mlm.profiles import BOOKS_DATASET, PACKAGE_DATASETS, PROFILE_OVERRIDES


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
    assert example_sentences(BOOKS_DATASET)[0] == "He was a young wizard, his name was Harry [MASK]."
    assert example_sentences("my_own_books.parquet") == ()  # never another corpus's sentences (course.examples picks)
    assert example_sentences("hp_mlm:course-corpus")[-1].count("[MASK]") == 2  # one example with two masks


# --- picked from the learner's held-out rows (course.examples) ---------------------------------------------------

SMOKE_LINES = (resources.files("hp_mlm") / "corpora" / "smoke_corpus.txt").read_text(encoding="utf-8").splitlines()
#: The smoke corpus (written for the course) cut in two, as a run splits rows: the first for training.
TRAIN, HELD_OUT = SMOKE_LINES[:300], SMOKE_LINES[300:]


def unmasked(sentence: str, answers) -> str:
    for answer in answers:
        sentence = sentence.replace("[MASK]", answer, 1)
    return sentence.lower()


def test_picked_examples_come_from_held_out_rows_only_and_the_same_seed_picks_the_same(smoke_model, smoke_tokenizer):
    """Each picked sentence, its word put back, is a sentence of a held-out row and of no training row; a held-out
    row that repeats a training row's sentence is never picked; the same seed picks the same list."""
    from hp_mlm.course.examples import PICKED, pick_examples

    held_out = [*HELD_OUT, *TRAIN[:40]]  # training sentences among the held-out rows must still not be picked
    picked = pick_examples(smoke_model, smoke_tokenizer, TRAIN, held_out, seed=3)
    assert picked.source == PICKED and 4 <= len(picked.examples) <= 5, picked.note
    trained, kept = "\n".join(TRAIN).lower(), "\n".join(HELD_OUT).lower()
    for sentence, answers in picked.examples:
        assert sentence.count("[MASK]") == len(answers) == 1
        assert unmasked(sentence, answers) in kept and unmasked(sentence, answers) not in trained, sentence
        assert len(smoke_tokenizer.tokenize(answers[0])) == 1  # one piece: the token view can show it first
    assert len({answers for _, answers in picked.examples}) == len(picked.examples)  # spread over different words
    assert pick_examples(smoke_model, smoke_tokenizer, TRAIN, held_out, seed=3) == picked
    assert any(  # the seed draws the sentences: another seed may take another sentence of the same word
        pick_examples(smoke_model, smoke_tokenizer, TRAIN, held_out, seed=s).examples != picked.examples
        for s in range(4, 10)
    )


def test_picking_skips_words_the_stock_model_already_puts_first(smoke_model, smoke_tokenizer, monkeypatch):
    import hp_mlm.course.examples as course_examples

    first = course_examples.pick_examples(smoke_model, smoke_tokenizer, TRAIN, HELD_OUT, seed=0)
    known = {answers[0] for _, answers in first.examples[:2]}  # a stock model that knows two of the words
    real = course_examples.fill_mask

    def knows_some(model, tokenizer, sentences, top_k=5, **kwargs):
        found = real(model, tokenizer, sentences, top_k=top_k, **kwargs)
        for sentence, masks in zip(sentences, found):
            for word in known:
                if any(unmasked(sentence, [word]) in row.lower() for row in HELD_OUT):
                    masks[0][0] = {**masks[0][0], "token": word}
        return found

    monkeypatch.setattr(course_examples, "fill_mask", knows_some)
    again = course_examples.pick_examples(smoke_model, smoke_tokenizer, TRAIN, HELD_OUT, seed=0)
    words = {answers[0] for _, answers in again.examples}
    assert again.examples and not words & known, (words, known)
    assert known <= set(again.known)  # said as skipped, for a report on how much of a corpus the model knew


def test_a_corpus_without_a_candidate_gets_no_examples_and_says_so(smoke_model, smoke_tokenizer):
    from hp_mlm.course.examples import pick_examples

    lower = [line.lower() for line in SMOKE_LINES]  # no capitalised names: nothing to pick
    picked = pick_examples(smoke_model, smoke_tokenizer, lower[:300], lower[300:], seed=0)
    assert picked.examples == () and picked.scored_whole == []
    assert "none picked" in picked.note and "goes on without examples" in picked.note


def test_an_examples_file_wins_over_the_shipped_and_the_picked(tmp_path, smoke_model, smoke_tokenizer):
    from types import SimpleNamespace

    from hp_mlm.config import get_settings
    from hp_mlm.course.examples import GIVEN, PICKED, SHIPPED, run_examples

    given = tmp_path / "mine.jsonl"
    given.write_text('{"text": "The ferry crossed the [MASK] Lake.", "answer": "Silver"}\n', encoding="utf-8")
    for dataset in ("hp_mlm:smoke-corpus", "my_notes.txt"):
        prepared = SimpleNamespace(
            settings=get_settings("smoke", environ={}, dataset=dataset),
            loaded=SimpleNamespace(model=smoke_model, tokenizer=smoke_tokenizer),
            train_rows={"text": TRAIN},
            validation_rows={"text": HELD_OUT},
        )
        chosen = run_examples(prepared, given, log=lambda _: None)
        assert chosen.source == GIVEN and chosen.examples == (("The ferry crossed the [MASK] Lake.", ("silver",)),)
        without = run_examples(prepared, None, log=lambda _: None)
        assert without.source == (SHIPPED if dataset == "hp_mlm:smoke-corpus" else PICKED)


def test_a_given_example_of_several_pieces_is_scored_whole_not_watched_as_one_token(tmp_path, smoke_tokenizer):
    """A learner's own invented name (``quillamor``: ``quill ##am ##or``) given in an examples file used to be
    watched as one token, so it could never come first, and the report said it was not learned though the
    model put the whole word first; it now goes with the picked ones of several pieces, scored whole."""
    from hp_mlm.course.examples import GIVEN, read_examples

    given = tmp_path / "mine.jsonl"
    lines = ['{"text": "Every autumn, Oswin [MASK] wound the clocks.", "answer": "Quillamor"}',
             '{"text": "Hob [MASK] rowed the [MASK] across.", "answer": ["tanner", "ferry"]}']  # fmt: skip
    given.write_text("\n".join(lines) + "\n", encoding="utf-8")
    chosen = read_examples(given, smoke_tokenizer)
    assert chosen.source == GIVEN
    assert chosen.examples == (("Hob [MASK] rowed the [MASK] across.", ("tanner", "ferry")),)
    assert chosen.scored_whole == [{"text": "Every autumn, Oswin [MASK] wound the clocks.", "answer": "quillamor"}]
    assert "quillamor: several word pieces, scored whole in the report" in chosen.note
    given.write_text('{"text": "[MASK] met [MASK].", "answer": ["tanner", "quillamor"]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape("'quillamor' is 3 word pieces (quill ##am ##or)")) as error:
        read_examples(given, smoke_tokenizer)
    assert (
        "\n" not in str(error.value) and "mine.jsonl:1" in str(error.value) and "a line of its own" in str(error.value)
    )


@pytest.mark.parametrize(
    "line, said",
    [
        ("not json", "must be a JSON object"),
        ('{"text": "no mask here", "answer": "x"}', "one answer per [MASK]"),
        ('{"text": "[MASK] and [MASK]", "answer": "x"}', "one answer per [MASK]"),
    ],
)
def test_a_broken_examples_file_gets_one_line_naming_the_line(tmp_path, line, said):
    from hp_mlm.course.examples import read_examples

    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(said)) as error:
        read_examples(path)
    assert "\n" not in str(error.value) and "bad.jsonl:1" in str(error.value)


def test_a_name_the_vocabulary_cannot_spell_is_never_picked(tiny_vocab_tokenizer):
    """A name that is the unknown token in the vocabulary can never be a guess, so its example could never turn."""
    from hp_mlm.course.examples import pick_examples
    from hp_mlm.models import build_smoke_model

    model = build_smoke_model(tiny_vocab_tokenizer)
    train = [f"On day {n}, Harry looked at the owl while Zorblat watched." for n in range(6)]
    held_out = [
        f"In the {w} light, {name} looked at the owl." for w in ("grey", "cold", "dim") for name in ("Harry", "Zorblat")
    ]
    picked = pick_examples(model, tiny_vocab_tokenizer, train, held_out, seed=0)
    assert all(tiny_vocab_tokenizer.unk_token not in answers for _, answers in picked.examples), picked.examples


# --- sentences whose context decides the word ----------------------------------------------------------------------


def test_a_sentence_is_never_cut_after_a_title_or_an_initial():
    """The splitter used to cut after every full stop, so a picked sentence could end at "Mrs." and hide the
    abbreviation's word (*His father and he had taken [MASK].*: the answer was *mrs*)."""
    from hp_mlm.course.examples import sentences_of

    text = "Mr. Tanner rowed home. Then Mrs. Ashdown met Dr. Nell and J. Cobbing at St. Mira's well! Was it late?"
    assert sentences_of(text) == [
        "Mr. Tanner rowed home.",
        "Then Mrs. Ashdown met Dr. Nell and J. Cobbing at St. Mira's well!",
        "Was it late?",
    ]


#: An invented village (the smoke corpus's people): *Tanner* always follows *Hob*, while *Mira*, the most frequent
#: name, comes after *said* no more often than the others do: "said [MASK]" is any of four people.
DECIDING_TRAIN = [
    *(f"On day {n}, said Mira to the old miller at the {w} mill by the water." for n in range(12) for w in ("grey",)),
    *(f"On day {n}, said {name} to the old miller at the mill." for n in range(5) for name in ("Nell", "Lila", "Hob")),
    *(f"In week {n}, Hob Tanner rowed the ferry across the lake to the mill." for n in range(6)),
    *(f"In month {n}, Lila Marrowby walked to the mill with Nell Cobbing." for n in range(6)),
]
DECIDING_HELD_OUT = [
    "At dawn the miller said Mira was late for the ferry again.",
    "Every autumn Hob Tanner painted the name of the old ferry again.",
    "After the storm Lila Marrowby counted the boats on the lake.",
]


def test_the_picker_prefers_a_names_other_half_to_a_gap_any_name_fills(smoke_model, smoke_tokenizer):
    """The old picker took the most frequent names' sentences, whatever decided the gap: *said [MASK]* (any
    of four people, or *she*). It now keeps a gap only where its neighbour decides the name in the training rows
    (*Hob [MASK]*: Tanner every time), records that neighbour, and says when fewer than three qualify."""
    from hp_mlm.course.examples import pick_examples

    picked = pick_examples(smoke_model, smoke_tokenizer, DECIDING_TRAIN, DECIDING_HELD_OUT, seed=0)
    words = [answers[0] for _, answers in picked.examples]
    assert "mira" not in words and "tanner" in words, picked.note
    by_word = {d["word"]: d for d in picked.decided_by}
    assert by_word["tanner"]["phrase"] == "hob [MASK]" and by_word["tanner"]["together"] == 6
    assert by_word["marrowby"]["phrase"] == "lila [MASK]"
    assert "fewer than three" not in picked.note and "tanner (hob [MASK]: 6 of 11)" in picked.note
    fewer = pick_examples(smoke_model, smoke_tokenizer, DECIDING_TRAIN, DECIDING_HELD_OUT[:2], seed=0)
    assert sorted(answers[0] for _, answers in fewer.examples) == ["hob", "tanner"]  # each half decides the other
    assert "only 2" in fewer.note and "fewer than three" in fewer.note


def test_the_picker_refuses_a_gap_where_the_stock_model_guesses_a_pronoun(smoke_model, smoke_tokenizer, monkeypatch):
    """Where the stock model's first guesses hold a pronoun (*she* fits the gap), or a small word first, the
    sentence does not decide the word, whatever the neighbour says: that gap is not picked."""
    import hp_mlm.course.examples as course_examples

    real = course_examples.fill_mask

    def fits(guess):
        def fill_mask(model, tokenizer, sentences, top_k=5, **kwargs):
            found = real(model, tokenizer, sentences, top_k=top_k, **kwargs)
            for sentence, masks in zip(sentences, found):
                if sentence.startswith("Every autumn Hob [MASK]"):
                    masks[0][-1] = {**masks[0][-1], "token": guess}  # among the guesses, not the first
            return found

        return fill_mask

    monkeypatch.setattr(course_examples, "fill_mask", fits("she"))
    picked = course_examples.pick_examples(smoke_model, smoke_tokenizer, DECIDING_TRAIN, DECIDING_HELD_OUT, seed=0)
    assert "tanner" not in [answers[0] for _, answers in picked.examples], picked.note
    monkeypatch.setattr(course_examples, "fill_mask", fits("lake"))  # a word that does not fit any gap: kept
    picked = course_examples.pick_examples(smoke_model, smoke_tokenizer, DECIDING_TRAIN, DECIDING_HELD_OUT, seed=0)
    assert "tanner" in [answers[0] for _, answers in picked.examples], picked.note
