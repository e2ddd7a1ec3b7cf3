"""Whole words at a mask: PLL-word-l2r scores (by hand, against minicons) and the whole-word beam search."""

import itertools
import math

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

from hp_mlm.inference import fill_mask
from hp_mlm.scoring import l2r_inputs, log_probs_at, predict_words, score_words, word_pieces
from hp_mlm.studies.probes import original_pll

TEXT = "Mira [MASK] crossed the Silver Lake at dawn."


def _log_prob(model, tokenizer, ids, position, wanted):
    """One forward pass built by hand: log p(wanted | ids) at ``position``."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long)).logits
    return logits[0, position].float().log_softmax(-1)[wanted].item()


def test_a_one_piece_word_scores_its_fill_mask_probability(smoke_model, smoke_tokenizer):
    ours = score_words(smoke_model, smoke_tokenizer, TEXT, ["ashdown", "the"])
    theirs = fill_mask(smoke_model, smoke_tokenizer, TEXT, top_k=2, targets=["ashdown", "the"])[0][0]
    by_word = {c["token"]: c["score"] for c in theirs}
    for item in ours:
        assert item["n_pieces"] == 1
        assert item["log_prob"] == pytest.approx(math.log(by_word[item["word"]]), abs=1e-5)


def test_a_word_of_three_pieces_is_the_sum_of_three_hand_built_passes(smoke_model, smoke_tokenizer):
    smoke_model.eval()
    word = "above"  # a ##bo ##ve in the smoke vocabulary
    pieces = smoke_tokenizer.tokenize(word)
    assert len(pieces) == 3
    (result,) = score_words(smoke_model, smoke_tokenizer, TEXT, [word])
    ids = smoke_tokenizer(TEXT)["input_ids"]
    at = ids.index(smoke_tokenizer.mask_token_id)
    piece_ids = smoke_tokenizer.convert_tokens_to_ids(pieces)
    mask = smoke_tokenizer.mask_token_id
    by_hand = []
    for i in range(3):  # piece i: pieces before it filled, pieces i.. masked
        row = ids[:at] + piece_ids[:i] + [mask] * (3 - i) + ids[at + 1 :]
        by_hand.append(_log_prob(smoke_model, smoke_tokenizer, row, at + i, piece_ids[i]))
    assert result["pieces"] == pieces
    assert result["piece_log_probs"] == pytest.approx(by_hand, abs=1e-5)
    assert result["log_prob"] == pytest.approx(sum(by_hand), abs=1e-5)
    full = ids[:at] + piece_ids + ids[at + 1 :]
    original = [
        _log_prob(smoke_model, smoke_tokenizer, full[: at + i] + [mask] + full[at + i + 1 :], at + i, piece_ids[i])
        for i in range(3)
    ]
    assert original_pll(smoke_model, smoke_tokenizer, TEXT, word) == pytest.approx(sum(original), abs=1e-5)


def test_scores_equal_minicons_within_word_l2r(smoke_model, smoke_tokenizer):
    """minicons' MaskedLMScorer with PLL_metric="within_word_l2r" (Kauf & Ivanova's own implementation)."""
    from minicons import scorer  # a test-only dependency (requirements.txt)

    smoke_model.eval()
    tokenizer = build_like(smoke_tokenizer)
    # minicons 0.3.39 calls batch_encode_plus, which transformers 5 removed; calling the tokenizer is the same
    tokenizer.batch_encode_plus = tokenizer.__call__
    theirs = scorer.MaskedLMScorer(smoke_model, device="cpu", tokenizer=tokenizer)
    words = ["above", "among", "again", "mira", "lake"]
    ours = score_words(smoke_model, smoke_tokenizer, TEXT, words)
    assert {len(o["pieces"]) for o in ours} == {1, 3, 4}
    for item in ours:
        (expected,) = theirs.conditional_score(
            ["Mira"],
            [item["word"]],
            suffix=["crossed the Silver Lake at dawn."],
            PLL_metric="within_word_l2r",
            reduction=lambda x: x.sum(0).item(),
        )
        assert item["log_prob"] == pytest.approx(expected, abs=1e-4), item["word"]


def build_like(tokenizer):
    """A separate copy of the smoke tokenizer (the session fixture is not patched)."""
    return BertTokenizerFast(vocab=tokenizer.get_vocab(), do_lower_case=True)


def test_bad_words_and_texts_are_refused_clearly(smoke_model, smoke_tokenizer):
    with pytest.raises(ValueError, match="no token"):
        score_words(smoke_model, smoke_tokenizer, TEXT, ["  "])
    with pytest.raises(ValueError, match="non-empty list"):
        score_words(smoke_model, smoke_tokenizer, TEXT, "mira")
    with pytest.raises(ValueError, match="no mask token"):
        score_words(smoke_model, smoke_tokenizer, "No gap here.", ["mira"])
    with pytest.raises(ValueError, match="mask_index=1"):
        score_words(smoke_model, smoke_tokenizer, TEXT, ["mira"], mask_index=1)
    with pytest.raises(ValueError, match="over max_length=8"):
        score_words(smoke_model, smoke_tokenizer, TEXT, ["among"], max_length=8)
    with pytest.raises(ValueError, match="over the model's"):
        original_pll(smoke_model, smoke_tokenizer, "word " * 130 + "[MASK].", "above")
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        predict_words(smoke_model, smoke_tokenizer, TEXT, top_k=0)
    assert word_pieces("##s", smoke_tokenizer) == ["##s"]  # a vocabulary entry as written


@pytest.fixture()
def pieces_model():
    """A random 1-layer BERT over a 16-token vocabulary with word pieces, for exhaustive search."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "owl", "saw", "her", "gran", ".", "##mi", "##one"]
    tokens += ["##an", "##s", "##t"]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokens), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    return BertForMaskedLM(config).eval(), tokenizer


def test_a_beam_as_wide_as_every_hypothesis_equals_exhaustive_search(pieces_model):
    model, tokenizer = pieces_model
    text = "the owl saw [MASK] ."
    ids = tokenizer(text)["input_ids"]
    at = ids.index(tokenizer.mask_token_id)
    vocab = tokenizer.get_vocab()
    starts = [vocab[t] for t in ("the", "owl", "saw", "her", "gran")]  # not ".": punctuation is no word
    continues = [vocab[t] for t in ("##mi", "##one", "##an", "##s", "##t")]
    every = []
    for n in (1, 2, 3):
        for first in starts:
            for rest in itertools.product(continues, repeat=n - 1):
                piece_ids = [first, *rest]
                rows = l2r_inputs(ids, at, piece_ids, tokenizer.mask_token_id)
                lp = log_probs_at(model, tokenizer, rows, [at + i for i in range(n)])
                every.append((sum(lp[i, p].item() for i, p in enumerate(piece_ids)), piece_ids))
    every.sort(key=lambda x: -x[0])
    wide = len(starts) * len(continues)  # every partial word of up to 2 pieces stays in the beam
    found = predict_words(model, tokenizer, text, top_k=10, max_pieces=3, beam_size=wide)
    expected = []
    for lp, piece_ids in every:  # the same words, each kept once (as predict_words does)
        word = tokenizer.decode(piece_ids).strip()
        if word not in [w for w, _ in expected]:
            expected.append((word, lp))
    assert [w["word"] for w in found] == [w for w, _ in expected[:10]]
    assert [w["log_prob"] for w in found] == pytest.approx([lp for _, lp in expected[:10]], abs=1e-5)
    assert all(not w["pieces"][0].startswith("##") for w in found)
    assert all(p.startswith("##") for w in found for p in w["pieces"][1:])


def test_whole_word_prediction_scores_what_score_words_gives(smoke_model, smoke_tokenizer):
    found = predict_words(smoke_model, smoke_tokenizer, TEXT, top_k=5, max_pieces=3, beam_size=4)
    assert len(found) == 5
    assert [w["log_prob"] for w in found] == sorted((w["log_prob"] for w in found), reverse=True)
    again = score_words(
        smoke_model, smoke_tokenizer, TEXT, ["".join(p.removeprefix("##") for p in w["pieces"]) for w in found]
    )
    for word, scored in zip(found, again):
        if scored["pieces"] == word["pieces"]:  # the same pieces (not a one-token spelling of them)
            assert scored["log_prob"] == pytest.approx(word["log_prob"], abs=1e-5)
