import re

import pytest
import torch
from transformers import BertTokenizerFast, pipeline

from hp_mlm.inference import fill_mask, fill_words
from hp_mlm.models import build_smoke_model
from hp_mlm.studies.probes import load_probes, normalise_answer, score_probes


def test_matches_the_fill_mask_pipeline_including_two_masks(smoke_tokenizer, smoke_model):
    pipe = pipeline("fill-mask", model=smoke_model, tokenizer=smoke_tokenizer, device="cpu")
    sentences = ["Mira [MASK] crossed the Silver Lake.", "[MASK] ashdown and nell [MASK] went to the tower."]
    ours = fill_mask(smoke_model, smoke_tokenizer, sentences, top_k=3)
    for sentence, result in zip(sentences, ours):
        theirs = pipe(sentence, top_k=3)
        theirs = [theirs] if isinstance(theirs[0], dict) else theirs
        assert len(result) == len(theirs) == sentence.count("[MASK]")
        for mine, ref in zip(result, theirs):
            assert [c["token_id"] for c in mine] == [r["token"] for r in ref]
            assert [c["token"] for c in mine] == [r["token_str"] for r in ref]
            assert all(abs(c["score"] - r["score"]) < 1e-5 for c, r in zip(mine, ref))


def test_targets_match_the_fill_mask_pipeline_with_a_duplicate_and_two_masks(smoke_tokenizer, smoke_model):
    pipe = pipeline("fill-mask", model=smoke_model, tokenizer=smoke_tokenizer, device="cpu")
    targets = ["tower", "Mira", "ashdown", "tower"]  # "Mira" is read as "mira"; "tower" twice counts once
    sentences = ["Mira [MASK] crossed the Silver Lake.", "[MASK] ashdown and nell [MASK] went to the tower."]
    for top_k in (5, 2):  # the pipeline returns min(top_k, distinct targets) answers
        ours = fill_mask(smoke_model, smoke_tokenizer, sentences, top_k=top_k, targets=targets)
        for sentence, result in zip(sentences, ours):
            theirs = pipe(sentence, targets=targets, top_k=top_k)
            theirs = [theirs] if isinstance(theirs[0], dict) else theirs
            assert len(result) == len(theirs) == sentence.count("[MASK]")
            for mine, ref in zip(result, theirs):
                assert len(mine) == min(top_k, 3)
                assert [c["token_id"] for c in mine] == [r["token"] for r in ref]
                assert [c["token"] for c in mine] == [r["token_str"] for r in ref]
                assert all(abs(c["score"] - r["score"]) < 1e-5 for c, r in zip(mine, ref))


def test_target_scores_are_probabilities_over_the_whole_vocabulary(smoke_tokenizer, smoke_model):
    sentence = "Mira [MASK] crossed the Silver Lake."
    words = len(smoke_tokenizer) - len(smoke_tokenizer.all_special_ids)  # every token a list may hold
    everything = fill_mask(smoke_model, smoke_tokenizer, sentence, top_k=words)[0][0]
    full = {c["token"]: c["score"] for c in everything}
    ours = fill_mask(smoke_model, smoke_tokenizer, sentence, targets=["tower", "mira", "ashdown"])[0][0]
    assert sorted(c["token"] for c in ours) == ["ashdown", "mira", "tower"]
    assert all(abs(c["score"] - full[c["token"]]) < 1e-6 for c in ours)
    assert [c["score"] for c in ours] == sorted((c["score"] for c in ours), reverse=True)
    assert sum(c["score"] for c in ours) < 1


@pytest.mark.parametrize(
    "targets, match",
    [
        ([], "targets is empty"),
        (["🙂"], r"target '🙂': word '🙂' becomes the pieces \['\[UNK\]'\]"),
        (["  "], r"target '  ': word '  ' becomes no token"),
    ],
)
def test_bad_targets_are_refused_with_the_reason(smoke_tokenizer, smoke_model, targets, match):
    with pytest.raises(ValueError, match=match):
        fill_mask(smoke_model, smoke_tokenizer, "Mira [MASK] smiled.", targets=targets)


def test_a_target_of_several_pieces_is_scored_whole_never_by_its_first_piece(smoke_tokenizer, smoke_model):
    """A multi-piece target is scored whole: "above" is a ##bo ##ve here; the pipeline would score the pronoun-like first piece "a"."""
    from hp_mlm.scoring import score_words

    sentence = "Mira [MASK] crossed the Silver Lake."
    one_piece_only = fill_mask(smoke_model, smoke_tokenizer, sentence, targets=["tower", "mira"])[0][0]
    mixed = fill_mask(smoke_model, smoke_tokenizer, sentence, targets=["tower", "above", "mira", "a"])[0][0]
    by_token = {c["token"]: c for c in mixed}
    assert set(by_token) == {"tower", "above", "mira", "a"}
    for c in one_piece_only:  # one-piece targets keep exactly their numbers
        assert by_token[c["token"]]["score"] == c["score"]
    whole = score_words(smoke_model, smoke_tokenizer, sentence, ["above"])[0]
    assert by_token["above"]["pieces"] == ["a", "##bo", "##ve"] and by_token["above"]["token_id"] is None
    assert by_token["above"]["score"] == pytest.approx(whole["score"], rel=1e-6)
    assert by_token["above"]["score"] != pytest.approx(by_token["a"]["score"])
    assert [c["score"] for c in mixed] == sorted((c["score"] for c in mixed), reverse=True)


def test_whole_word_prediction_answers_every_mask(smoke_tokenizer, smoke_model):
    from hp_mlm.scoring import predict_words

    sentence = "Mira [MASK] crossed the [MASK] Lake."
    answers = fill_words(smoke_model, smoke_tokenizer, sentence, top_k=3, max_pieces=3)[0]
    assert len(answers) == 2 and all(len(a) == 3 for a in answers)
    second = predict_words(smoke_model, smoke_tokenizer, sentence, top_k=3, max_pieces=3, mask_index=1)
    assert [a["pieces"] for a in answers[1]] == [w["pieces"] for w in second]
    assert all(not a["pieces"][0].startswith("##") for mask in answers for a in mask)


#: A small WordPiece vocabulary with two reserved slots, as bert-base-uncased's [unused0]..[unused993].
SLOTTED = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[unused0]",
    "[unused1]",
    "mira",
    "smiled",
    "at",
    "owl",
    "##s",
    ".",
]


def not_words(tokenizer) -> set[int]:
    """The tokenizer's special ids and its vocabulary's reserved ``[unusedN]`` slots."""
    slots = {i for t, i in tokenizer.get_vocab().items() if re.fullmatch(r"\[unused\d+\]", t)}
    return set(tokenizer.all_special_ids) | slots


def favouring(model, ids):
    """``model`` with its output layer set to rank ``ids`` first at every position."""
    with torch.no_grad():
        model.cls.predictions.decoder.bias[sorted(ids)] += 50.0
    return model


@pytest.mark.parametrize("slotted", [False, True], ids=["smoke vocabulary", "with unused slots"])
def test_top_k_lists_hold_words_never_special_tokens_or_unused_slots(slotted, smoke_tokenizer, recwarn):
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(SLOTTED)}) if slotted else smoke_tokenizer
    model = favouring(build_smoke_model(tok), not_words(tok))  # the specials and slots come first in the logits
    top_k = 5
    for sentence in fill_mask(model, tok, ["mira [MASK] at the owl.", "[MASK] smiled [MASK]"], top_k=top_k):
        for answers in sentence:
            assert len(answers) == top_k and not {a["token_id"] for a in answers} & not_words(tok)
    assert not recwarn.list  # nothing was cut


def test_a_top_k_above_the_ordinary_tokens_is_cut_to_them_and_said_once(smoke_model, smoke_tokenizer):
    ordinary = set(range(len(smoke_tokenizer))) - not_words(smoke_tokenizer)
    with pytest.warns(UserWarning) as said:
        result = fill_mask(smoke_model, smoke_tokenizer, ["Mira [MASK] smiled.", "[MASK] met [MASK]."], top_k=10**6)
    assert [str(w.message) for w in said] == [
        f"top_k 1000000 is more than the {len(ordinary):,} ordinary tokens of this vocabulary (special tokens and "
        f"[unusedN] slots are never listed): listing {len(ordinary):,}"
    ]
    for answers in (a for sentence in result for a in sentence):
        assert {a["token_id"] for a in answers} == ordinary
        assert abs(sum(a["score"] for a in answers) - 1) < 0.05  # nearly all of the probability: words


def test_each_mask_gets_its_own_sorted_list(smoke_tokenizer, smoke_model):
    ((first, second),) = fill_mask(smoke_model, smoke_tokenizer, ["[MASK] potter and ron [MASK] went back."], top_k=3)
    for group in (first, second):
        scores = [c["score"] for c in group]
        assert len(group) == 3 and scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
        assert all(
            c["token"] not in ("[CLS]", "[SEP]", "[PAD]") or c["token_id"] in (smoke_tokenizer.all_special_ids)
            for c in group
        )
    ((one,),) = fill_mask(smoke_model, smoke_tokenizer, "Mira [MASK] smiled.", top_k=3)
    assert len(one) == 3


@pytest.mark.parametrize(
    "bad, match",
    [
        ("Mira walked home.", r"no mask token.*\[MASK\]"),
        ("   ", r"no mask token.*\[MASK\]"),
        ("Mira {mask} home.", r"\[MASK\]"),
    ],
)
def test_unanswerable_input_shows_the_mask_token(smoke_tokenizer, smoke_model, bad, match):
    with pytest.raises(ValueError, match=match):
        fill_mask(smoke_model, smoke_tokenizer, [bad])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m, t: fill_mask(m, t, None), "no sentences given"),
        (lambda m, t: fill_mask(m, t, ["Mira [MASK].", torch.tensor([1, 2])]), "sentence 1 is a Tensor; pass each"),
        (lambda m, t: fill_mask(m, t, "Mira [MASK].", max_length=0), r"max_length=0 .*pass >= 3"),
        (lambda m, t: fill_words(m, t, "Mira [MASK].", max_length=-5), r"max_length=-5 .*pass >= 3"),
        (lambda m, t: fill_mask(m, t, "Mira [MASK].", targets=[None]), "is a NoneType; write each word as a string"),
        (lambda m, t: fill_words(m, t, "[MASK] went home.", max_length=5), "lower max_pieces or raise max_length"),
    ],
)
def test_input_of_the_wrong_kind_is_refused_in_one_line_that_says_what_to_pass(
    smoke_tokenizer, smoke_model, call, match
):
    with pytest.raises(ValueError, match=match):
        call(smoke_model, smoke_tokenizer)


def test_nothing_at_all_is_refused(smoke_tokenizer, smoke_model):
    with pytest.raises(ValueError, match=r"no sentences.*\[MASK\]"):
        fill_mask(smoke_model, smoke_tokenizer, [])


def test_other_mask_spelling_is_read_as_the_tokenizers(smoke_tokenizer, smoke_model):
    a = fill_mask(smoke_model, smoke_tokenizer, ["Mira <mask> smiled."])
    b = fill_mask(smoke_model, smoke_tokenizer, ["Mira [MASK] smiled."])
    assert a == b


def test_long_sentences_mask_inside_the_window_works_outside_is_refused(smoke_tokenizer, smoke_model):
    result = fill_mask(smoke_model, smoke_tokenizer, ["[MASK] " + "the " * 600], top_k=2)
    assert len(result[0]) == 1
    with pytest.raises(ValueError, match="128-token limit"):
        fill_mask(smoke_model, smoke_tokenizer, ["the " * 600 + "[MASK]."])


def test_predictions_are_deterministic_after_training_mode_and_mode_is_restored(smoke_tokenizer, smoke_model):
    smoke_model.train()
    a = fill_mask(smoke_model, smoke_tokenizer, ["Harry [MASK] was a wizard."])
    b = fill_mask(smoke_model, smoke_tokenizer, ["Harry [MASK] was a wizard."])
    assert a == b and smoke_model.training


def test_non_ascii_text_goes_through_and_answers_are_normalised(smoke_tokenizer, smoke_model):
    result = fill_mask(smoke_model, smoke_tokenizer, ["Éloise said “hello” — then [MASK] 🙂 left."])
    assert len(result[0]) == 1
    assert normalise_answer("Éloise", smoke_tokenizer) == "eloise"


def test_word_pieces_are_flagged(smoke_tokenizer, smoke_model):
    with torch.no_grad():
        smoke_model.cls.predictions.bias.zero_()
        piece = next(i for t, i in smoke_tokenizer.get_vocab().items() if t.startswith("##"))
        smoke_model.cls.predictions.bias[piece] = 100.0
    top = fill_mask(smoke_model, smoke_tokenizer, ["Mira [MASK]."], top_k=1)[0][0][0]
    assert top["token_id"] == piece and top["is_subword"]


def test_probes_are_scored_against_normalised_answers(tmp_path, smoke_tokenizer, smoke_model):
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "Mira [MASK] smiled.", "answer": "Ashdown"}\n\n', encoding="utf-8")
    probes = load_probes(path)
    with torch.no_grad():
        smoke_model.cls.predictions.bias[smoke_tokenizer.convert_tokens_to_ids("ashdown")] = 100.0
    result = score_probes(smoke_model, smoke_tokenizer, probes)
    assert result["hits_top1"] == 1 and result["rows"][0]["answer"] == "ashdown"
    (tmp_path / "bad.jsonl").write_text('{"text": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_probes(tmp_path / "bad.jsonl")


# Position limits from the model: a tokenizer without a length (1e30), RoBERTa's padding offset -----------


def unset_length_tokenizer():
    """The smoke vocabulary as a tokenizer saved without ``model_max_length`` (it then reports 1e30)."""
    from transformers import BertTokenizerFast

    from hp_mlm.models import smoke_vocab_path

    tokens = [t for t in smoke_vocab_path().read_text(encoding="utf-8").split("\n") if t]
    return BertTokenizerFast(vocab={token: i for i, token in enumerate(tokens)}, do_lower_case=True)


def roberta_style(folder):
    """A tiny RoBERTa (514 positions, padding index 1, so 512 usable) and a byte-level BPE tokenizer
    that knows "word", saved without ``model_max_length``; returns the loaded model and tokenizer."""
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    from hp_mlm.checkpoints import save_model
    from hp_mlm.models import load_model

    pieces = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "w", "o", "r", "d", "Ġ", "Ġw", "Ġwo", "Ġwor", "Ġword"]
    tok = RobertaTokenizerFast(
        vocab={p: i for i, p in enumerate(pieces)}, merges=[("Ġ", "w"), ("Ġw", "o"), ("Ġwo", "r"), ("Ġwor", "d")]
    )
    config = RobertaConfig(
        vocab_size=len(pieces),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=514,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    save_model(RobertaForMaskedLM(config), tok, folder / "model")
    loaded = load_model(str(folder / "model"))
    return loaded.model, loaded.tokenizer


@pytest.fixture(scope="module")
def unset_length_folder(tmp_path_factory):
    """The smoke BERT (128 positions) saved with a tokenizer that has no ``model_max_length``."""
    from hp_mlm.checkpoints import save_model
    from hp_mlm.models import build_smoke_model

    tok = unset_length_tokenizer()
    folder = save_model(build_smoke_model(tok), tok, tmp_path_factory.mktemp("unset") / "model")
    from hp_mlm.models import load_tokenizer

    assert load_tokenizer(str(folder)).model_max_length > 10**29  # the sentinel, as a reader would load it
    return folder


def sentence_with_mask_at(word: int, words: int = 200) -> str:
    return " ".join("[MASK]" if i == word else "the" for i in range(words))


def test_a_tokenizer_without_a_length_truncates_at_the_models_positions_and_names_them(unset_length_folder, capsys):
    """A tokenizer saved without a length says 1e30; the smoke BERT has 128 positions. A mask at word 5
    of 200 is answered from the first 128 tokens; one at word 180 is refused in one line naming the
    128-token limit, and 1e30 is never shown."""
    from hp_mlm.ops import cli

    assert cli.main(["predict", sentence_with_mask_at(4), "--model", str(unset_length_folder)]) == 0
    shown = capsys.readouterr()
    assert "mask 1:" in shown.out and "Error" not in shown.err
    assert cli.main(["predict", sentence_with_mask_at(179), "--model", str(unset_length_folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "128-token limit" in err[0], err
    assert "1e30" not in err[0] and "1000000000000000019884624838656" not in err[0] and "e+30" not in err[0]


def test_evaluate_refuses_a_max_length_above_the_models_positions_in_one_line(unset_length_folder, capsys):
    from hp_mlm.ops import cli

    argv = ["evaluate", "--model", str(unset_length_folder), "--max-length", "200"]
    assert cli.main([*argv, "--dataset", "hp_mlm:smoke-corpus", "--split", "train"]) == 2
    # datasets' own bar while it builds its cache, the first time this process reads the corpus, is not an error line
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "examples/s]" not in line]
    assert len(err) == 1 and "--max-length 200 is above the model's limit of 128 positions" in err[0], err
    assert "set --max-length to 128 or less" in err[0]


def test_a_roberta_style_model_truncates_at_512_of_its_514_positions(tmp_path, capsys):
    """RoBERTa counts positions from the padding index + 1, so 2 of its 514 rows are never a token's:
    fill_mask on a 604-token sentence runs on 512 tokens (514 raised an index error), and a
    max_length of 513 or 514 is refused for that model, by fill_mask as by the command line, 512 accepted."""
    from hp_mlm.models import model_max_positions
    from hp_mlm.ops import cli
    from hp_mlm.scoring import length_limit
    from hp_mlm.tokens import check_max_length

    model, tok = roberta_style(tmp_path)
    assert tok.model_max_length > 10**29 and model.config.max_position_embeddings == 514
    assert model_max_positions(model) == length_limit(model, tok) == length_limit(model, tok, 512) == 512
    for too_long in (513, 514, 600):  # refused as the command line refuses it (fill_mask took them silently)
        with pytest.raises(ValueError, match=f"`max_length` {too_long} is above the model's limit of 512 positions"):
            fill_mask(model, tok, "a <mask> word", max_length=too_long)
    text = "<mask> " + "word " * 600
    assert len(tok(text)["input_ids"]) == 604
    (answers,) = fill_mask(model, tok, text, top_k=3)
    assert len(answers) == 1 and len(answers[0]) == 3
    check_max_length(512, model_max_positions(model))
    for too_long in ("513", "514"):
        argv = ["evaluate", "--model", str(tmp_path / "model"), "--max-length", too_long, "--split", "train"]
        assert cli.main([*argv, "--dataset", "hp_mlm:smoke-corpus"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--max-length {too_long} is above the model's limit of 512 positions" in err[0]


def test_bert_keeps_every_position_and_a_model_without_a_limit_has_none(smoke_tokenizer, smoke_model):
    from hp_mlm.models import model_max_positions
    from hp_mlm.scoring import length_limit

    assert model_max_positions(smoke_model) == 128 == smoke_model.config.max_position_embeddings
    assert model_max_positions(torch.nn.Linear(2, 2)) is None
    assert length_limit(smoke_model, smoke_tokenizer, 64) == 64
