import pytest
import torch
from helpers import SENTENCES, tokenised
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

from hp_mlm.masking import (
    IGNORE_INDEX,
    MaskingCollator,
    freeze_masks,
    mask_tokens,
    selectable_positions,
    with_position,
)
from hp_mlm.tokens import pad_batch, replacement_ids


def padded(tokenizer, texts):
    return pad_batch(tokenised(tokenizer, texts), tokenizer)


def test_never_selects_special_or_padding_and_labels_only_chosen_positions(smoke_tokenizer):
    batch = padded(smoke_tokenizer, ["Mira smiled.", SENTENCES[6]])
    ids = batch["input_ids"]
    ok = selectable_positions(ids, smoke_tokenizer, batch["special_tokens_mask"], batch["attention_mask"])
    masked, labels = mask_tokens(ids, ok, smoke_tokenizer, 1.0, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    assert torch.equal(chosen, ok)  # p=1: every real token, nothing else
    specials = torch.isin(ids, torch.tensor(smoke_tokenizer.all_special_ids))
    assert not chosen[specials].any()
    assert torch.equal(masked[specials], ids[specials])
    assert (labels[chosen] == ids[chosen]).all() and (masked[chosen] == smoke_tokenizer.mask_token_id).all()
    assert chosen[1].sum().item() == len(tokenised(smoke_tokenizer, [SENTENCES[6]])[0]["input_ids"]) - 2
    short = len(tokenised(smoke_tokenizer, ["Mira smiled."])[0]["input_ids"]) - 2
    assert chosen[0].sum().item() == short < ids.shape[1] - 2  # row 0 ends in padding, never chosen
    assert not (labels == -1).any()


def test_rate_is_015_over_50k_positions_and_seeded(smoke_tokenizer):
    ids = torch.randint(5, len(smoke_tokenizer), (200, 300))
    ok = torch.ones_like(ids, dtype=torch.bool)
    _, labels = mask_tokens(ids, ok, smoke_tokenizer, 0.15, torch.Generator().manual_seed(3))
    rate = (labels != IGNORE_INDEX).float().mean().item()
    assert abs(rate - 0.15) < 0.01
    _, again = mask_tokens(ids, ok, smoke_tokenizer, 0.15, torch.Generator().manual_seed(3))
    assert torch.equal(labels, again)


def test_collator_draws_different_masks_for_every_batch_and_the_same_for_the_same_place(smoke_tokenizer):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    collator = MaskingCollator(smoke_tokenizer, 0.5, seed=1)
    first = collator(with_position(rows, epoch=0, batch_index=0))["labels"]
    for epoch, batch_index in ((0, 1), (1, 0)):
        assert not torch.equal(collator(with_position(rows, epoch, batch_index))["labels"], first)
    # a pure function of the place: calling it again, or another collator, draws the same masks
    assert torch.equal(collator(with_position(rows, 0, 0))["labels"], first)
    assert torch.equal(MaskingCollator(smoke_tokenizer, 0.5, seed=1)(rows)["labels"], first)  # no place: batch 0
    # under accelerate launch, process 0 draws what a single process draws, the others differ
    assert torch.equal(MaskingCollator(smoke_tokenizer, 0.5, seed=1, process_index=0)(rows)["labels"], first)
    assert not torch.equal(MaskingCollator(smoke_tokenizer, 0.5, seed=1, process_index=1)(rows)["labels"], first)


def test_mask_id_comes_from_the_tokenizer_not_103(tiny_vocab_tokenizer):
    tok = tiny_vocab_tokenizer
    batch = padded(tok, ["harry looked at the owl ."])
    ok = selectable_positions(batch["input_ids"], tok, batch["special_tokens_mask"], batch["attention_mask"])
    masked, labels = mask_tokens(batch["input_ids"], ok, tok, 1.0, torch.Generator().manual_seed(0))
    assert tok.mask_token_id == 4
    assert masked.tolist() == [[2, 4, 4, 4, 4, 4, 4, 3]]
    bert_masked, _ = mask_tokens(batch["input_ids"], ok, tok, 1.0, torch.Generator().manual_seed(0), strategy="bert")
    assert (bert_masked < len(tok)).all()
    torch.nn.Embedding(len(tok), 4)(bert_masked)  # no index error


def test_matches_data_collator_semantics(smoke_tokenizer):
    """Same selectable positions and label convention as DataCollatorForLanguageModeling, same rate."""
    rows = tokenised(smoke_tokenizer, SENTENCES * 40)
    features = [{"input_ids": r["input_ids"]} for r in rows]
    theirs = DataCollatorForLanguageModeling(
        smoke_tokenizer, mlm_probability=0.15, mask_replace_prob=1.0, random_replace_prob=0.0, seed=0
    )(features)
    ours = MaskingCollator(smoke_tokenizer, 0.15, seed=0)(rows)
    assert torch.equal(theirs["input_ids"] != smoke_tokenizer.mask_token_id, theirs["labels"] == IGNORE_INDEX)
    assert torch.equal(ours["input_ids"] != smoke_tokenizer.mask_token_id, ours["labels"] == IGNORE_INDEX)
    everything = DataCollatorForLanguageModeling(
        smoke_tokenizer, mlm_probability=1.0, mask_replace_prob=1.0, random_replace_prob=0.0, seed=0
    )(features)
    batch = pad_batch(rows, smoke_tokenizer)
    ok = selectable_positions(
        batch["input_ids"], smoke_tokenizer, batch["special_tokens_mask"], batch["attention_mask"]
    )
    assert torch.equal(everything["labels"] != IGNORE_INDEX, ok)
    rate_theirs = (theirs["labels"] != IGNORE_INDEX).sum() / ok.sum()
    rate_ours = (ours["labels"] != IGNORE_INDEX).sum() / ok.sum()
    assert abs(rate_theirs - rate_ours) < 0.03
    chosen = ours["labels"] != IGNORE_INDEX
    assert torch.equal(ours["labels"][chosen], batch["input_ids"][chosen])


def test_bert_80_10_10_proportions(smoke_tokenizer):
    ids = torch.randint(5, len(smoke_tokenizer), (400, 250))
    masked, labels = mask_tokens(
        ids,
        torch.ones_like(ids, dtype=torch.bool),
        smoke_tokenizer,
        0.15,
        torch.Generator().manual_seed(0),
        strategy="bert",
    )
    chosen = labels != IGNORE_INDEX
    n = chosen.sum().item()
    as_mask = (masked[chosen] == smoke_tokenizer.mask_token_id).sum().item() / n
    unchanged = (masked[chosen] == ids[chosen]).sum().item() / n
    assert abs(as_mask - 0.8) < 0.02
    assert abs(unchanged - 0.1) < 0.02  # a random token equal to the original counts here too (1/912)
    assert abs(1 - as_mask - unchanged - 0.1) < 0.02
    assert torch.equal(masked[~chosen], ids[~chosen])


WORDS = ["harry", "looked", "at", "the", "owl", ".", "potter", "wand"]


def reserved_slot_tokenizer():
    """A BERT vocabulary with ``[unusedN]`` slots scattered among the ordinary words, as in bert-base-uncased."""
    tokens = [
        "[PAD]",
        "[unused0]",
        "[unused1]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "[unused2]",
        *WORDS[:3],
        "[unused3]",
        *WORDS[3:],
        "[unused4]",
    ]
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)


def test_random_replacements_are_ordinary_tokens_never_special_or_reserved():
    tok = reserved_slot_tokenizer()
    ordinary = set(tok.convert_tokens_to_ids(WORDS))
    rows = tokenised(tok, ["harry looked at the owl ."] * 200)
    collator = MaskingCollator(tok, 1.0, seed=0, strategy="bert")
    original = pad_batch(rows, tok)["input_ids"]
    replaced, chosen = [], 0
    for _ in range(20):
        batch = collator(rows)
        picked = batch["labels"] != IGNORE_INDEX
        chosen += picked.sum().item()
        swapped = picked & (batch["input_ids"] != tok.mask_token_id) & (batch["input_ids"] != original)
        replaced += batch["input_ids"][swapped].tolist()
    assert set(replaced) == ordinary  # all eight words, none of [unused0..4], [CLS], [SEP], [PAD], [UNK], [MASK]
    # 10% become a random word; 1 in 8 of those happens to be the original word and looks unchanged
    assert abs(len(replaced) / chosen - 0.1 * (1 - 1 / len(ordinary))) < 0.01
    # DataCollatorForLanguageModeling draws from the whole vocabulary, reserved slots included (what we avoid)
    theirs = DataCollatorForLanguageModeling(
        tok, mlm_probability=1.0, mask_replace_prob=0.0, random_replace_prob=1.0, seed=0
    )([{"input_ids": r["input_ids"]} for r in rows])
    assert not set(theirs["input_ids"][theirs["labels"] != IGNORE_INDEX].tolist()) <= ordinary


def test_replacement_ids_are_computed_once_and_follow_added_tokens():
    tok = reserved_slot_tokenizer()
    first = replacement_ids(tok)
    assert sorted(first.tolist()) == sorted(tok.convert_tokens_to_ids(WORDS)) and first.dtype == torch.long
    assert replacement_ids(tok) is first  # cached: nothing recomputed per batch
    tok.add_tokens(["hedwig"])
    assert tok.convert_tokens_to_ids("hedwig") in replacement_ids(tok).tolist()


def test_a_vocabulary_of_only_special_tokens_cannot_draw_replacements():
    tok = BertTokenizerFast(
        vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"])}
    )
    assert len(replacement_ids(tok)) == 0
    ids = torch.tensor([[2, 1, 5, 3]])
    with pytest.raises(ValueError, match="strategy='mask'"):
        mask_tokens(ids, ids > 3, tok, 1.0, torch.Generator().manual_seed(0), "bert")


def test_frozen_masks_do_not_depend_on_which_rows_are_present(smoke_tokenizer):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    a = freeze_masks(rows, smoke_tokenizer, 0.3, seed=5)
    b = freeze_masks(rows, smoke_tokenizer, 0.3, seed=5)
    assert a == b
    assert a[:3] == freeze_masks(rows[:3], smoke_tokenizer, 0.3, seed=5)
    assert a != freeze_masks(rows, smoke_tokenizer, 0.3, seed=6)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(min_value=0, max_value=916), min_size=0, max_size=30), min_size=1, max_size=6),
    probability=st.floats(min_value=0.01, max_value=0.99),
    seed=st.integers(min_value=0, max_value=2**31),
    strategy=st.sampled_from(["mask", "bert"]),
)
def test_property_masks_never_touch_special_or_padding(smoke_tokenizer, rows, probability, seed, strategy):
    tok = smoke_tokenizer
    features = [
        {
            "input_ids": [tok.cls_token_id, *r, tok.sep_token_id],
            "attention_mask": [1] * (len(r) + 2),
            "special_tokens_mask": [1, *[0] * len(r), 1],
        }
        for r in rows
    ]
    batch = pad_batch(features, tok)
    ids = batch["input_ids"]
    ok = selectable_positions(ids, tok, batch["special_tokens_mask"], batch["attention_mask"])
    masked, labels = mask_tokens(ids, ok, tok, probability, torch.Generator().manual_seed(seed), strategy)
    assert masked.shape == labels.shape == ids.shape == batch["attention_mask"].shape
    chosen = labels != IGNORE_INDEX
    special = torch.isin(ids, torch.tensor(tok.all_special_ids)) | (batch["attention_mask"] == 0)
    assert not (chosen & special).any()
    assert torch.equal(masked[special], ids[special])
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen])


def test_mlm_probability_out_of_range_is_refused(smoke_tokenizer):
    ids = torch.tensor([[2, 10, 3]])
    with pytest.raises(ValueError, match="mlm_probability"):
        mask_tokens(ids, ids > 3, smoke_tokenizer, 0.0)


def test_non_ascii_text_is_tokenised_and_masked_without_error(smoke_tokenizer):
    texts = ["Éloise said “café” — naïve 🙂 façade.", "Mira’s wand—bright, ‘curly’ quotes…"]
    rows = tokenised(smoke_tokenizer, texts)
    batch = MaskingCollator(smoke_tokenizer, 0.5, seed=0)(rows)
    assert batch["input_ids"].shape == batch["labels"].shape and (batch["labels"] != IGNORE_INDEX).any()
    assert (batch["input_ids"] < len(smoke_tokenizer)).all()


@pytest.mark.parametrize("strategy", ["whole_word", "entity"])
def test_whole_words_without_word_pieces_are_refused_not_token_masking(tiny_vocab_tokenizer, strategy):
    """Whole-word masking needs word pieces: a vocabulary with no '##' pieces cannot say where words end."""
    tok = tiny_vocab_tokenizer
    ids = torch.tensor([tok("harry looked at the owl.")["input_ids"]])
    selectable = selectable_positions(ids, tok)
    with pytest.raises(ValueError, match=r"`masking` '\w+' finds words by WordPiece's '##' pieces.*BertTokenizer"):
        mask_tokens(ids, selectable, tok, 0.5, torch.Generator().manual_seed(0), strategy)
    mask_tokens(ids, selectable, tok, 0.5, torch.Generator().manual_seed(0), "mask")  # token masking still works


@pytest.mark.parametrize("layout", ["[CLS] first", "no [CLS]", "padding on the left"])
@pytest.mark.parametrize("strategy", ["whole_word", "entity"])
def test_a_hand_built_row_that_opens_inside_a_word_masks_its_leading_pieces_as_a_word(
    smoke_tokenizer, layout, strategy
):
    """A row whose first real token is a ``##`` piece, passed straight to ``mask_tokens``: its leading
    pieces are masked exactly as a word written in their place would be (the same draws, the same
    targets), never with ``[CLS]``'s draw; ``[CLS]`` is never a target."""
    tok = smoke_tokenizer
    before = {"[CLS] first": [tok.cls_token_id], "no [CLS]": [], "padding on the left": [tok.pad_token_id] * 2}
    before["padding on the left"] += [tok.cls_token_id]
    lead = len(before[layout])

    def row(first: str) -> torch.Tensor:
        body = tok.convert_tokens_to_ids([first, "##ast", "the", "wand", "l", "##ast"])
        return torch.tensor([[*before[layout], *body, tok.sep_token_id]])

    inside, word = row("##oke"), row("wand")  # the same row, but opening with a word's first piece
    entity = torch.zeros_like(inside)
    entity[0, lead : lead + 2] = 1  # the leading word is a name: drawn ENTITY_BOOST times as often
    selectable = selectable_positions(inside, tok)
    assert torch.equal(selectable, selectable_positions(word, tok))
    for seed in range(200):
        hits = [
            mask_tokens(ids, selectable, tok, 0.3, torch.Generator().manual_seed(seed), strategy, entity)[1][0]
            != IGNORE_INDEX
            for ids in (inside, word)
        ]
        assert torch.equal(hits[0], hits[1]), seed
        assert not hits[0][~selectable[0]].any()  # [CLS], [SEP] and padding never
