"""Packing (``padding="pack"``): rows joined and cut into blocks at word starts, every token once."""

from __future__ import annotations

import pytest
from datasets import Dataset
from helpers import SENTENCES

from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.masking import IGNORE_INDEX
from hp_mlm.prepare import prepare
from hp_mlm.tokens import epoch_padding_share, pack_rows, tokenize_rows
from hp_mlm.training import plan_training

#: Long words the smoke vocabulary splits into several pieces, so that cuts have to move.
LONG = "Winterbourne and Blackthistle unwrapped the thornbacks' silverleaf mistfoxes beneath Brackwater."
ROWS = [*SENTENCES, LONG, *SENTENCES[::-1], LONG * 2]


def rows(texts=ROWS):
    return Dataset.from_dict({"text": list(texts)})


def inner(block):
    return block[1:-1]


@pytest.mark.parametrize("max_length", [8, 13, 24])
def test_packed_blocks_have_no_padding_and_never_start_inside_a_word(smoke_tokenizer, max_length):
    packed = pack_rows(rows(), smoke_tokenizer, max_length)
    tok = smoke_tokenizer
    cut_back = 0
    for i, block in enumerate(packed["input_ids"]):
        assert len(block) <= max_length and packed["length"][i] == len(block)
        assert block[0] == tok.cls_token_id and block[-1] == tok.sep_token_id
        assert tok.pad_token_id not in block and set(packed["attention_mask"][i]) == {1}
        assert packed["special_tokens_mask"][i] == [1] + [0] * (len(block) - 2) + [1]
        assert not tok.convert_ids_to_tokens(block[1]).startswith("##"), tok.convert_ids_to_tokens(block)
        cut_back += i < len(packed) - 1 and len(block) < max_length
    assert cut_back, "no cut had to move back to a word start: the test corpus is too easy"


def test_every_training_token_is_in_exactly_one_block_in_row_order(smoke_tokenizer):
    packed = pack_rows(rows(), smoke_tokenizer, 16)
    stream = [t for block in packed["input_ids"] for t in inner(block)]
    expected = [t for ids in smoke_tokenizer(ROWS, add_special_tokens=False)["input_ids"] for t in ids]
    assert stream == expected
    # the blocks cross rows: fewer blocks than rows once a block holds more than one short row
    assert len(pack_rows(rows(SENTENCES), smoke_tokenizer, 64)) < len(SENTENCES)


def test_a_row_boundary_is_a_word_boundary(smoke_tokenizer):
    # "lake" ends one row and "the" starts the next: a cut may fall between them
    texts = ["the silver lake", "the lantern tower"]
    packed = pack_rows(
        rows(texts), smoke_tokenizer, 2 + len(smoke_tokenizer("the silver lake", add_special_tokens=False)["input_ids"])
    )
    assert smoke_tokenizer.decode(inner(packed["input_ids"][0])) == "the silver lake"


def test_entity_marks_follow_their_pieces_into_blocks(smoke_tokenizer):
    entities = {"winterbourne", "blackthistle", "brackwater"}
    packed = pack_rows(rows(), smoke_tokenizer, 16, entities=entities)
    plain = tokenize_rows(rows(), smoke_tokenizer, 512, entities=entities)
    marked = [t for ids, m in zip(packed["input_ids"], packed["entity_mask"]) for t, x in zip(ids, m) if x]
    expected = [t for ids, m in zip(plain["input_ids"], plain["entity_mask"]) for t, x in zip(ids, m) if x]
    assert marked == expected and marked


def test_packing_refuses_what_it_cannot_pack(smoke_tokenizer):
    with pytest.raises(ValueError, match="at least 3"):
        pack_rows(rows(), smoke_tokenizer, 2)
    with pytest.raises(ValueError, match="no token to pack"):
        pack_rows(rows(["", " "]), smoke_tokenizer, 16)


def test_a_packed_epoch_uses_every_token_once_and_never_masks_special_tokens(smoke_model, smoke_tokenizer):
    packed = pack_rows(rows(ROWS * 3), smoke_tokenizer, 24)
    settings = resolve_auto(
        get_settings("smoke", environ={}, padding="pack", batch_size=4, epochs=1, mlm_probability=0.4, progress=False),
        new_head=True,
    )
    plan = plan_training(smoke_model, smoke_tokenizer, packed, settings)
    loader, _ = plan.epoch_batches(0)
    tok, seen, masked = smoke_tokenizer, [], 0
    specials = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    for batch in loader:
        for ids, attention, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
            chosen = labels != IGNORE_INDEX
            seen.append(ids.where(~chosen, labels)[attention.bool()].tolist())  # the masked tokens put back
            masked += int(chosen.sum())
            assert not set(labels[chosen].tolist()) & specials
    assert sorted(seen) == sorted(packed["input_ids"])  # each block once, whole
    assert masked > 0


def test_packing_keeps_the_same_frozen_held_out_rows_and_reports_no_padding():
    base = get_settings("smoke", environ={}, progress=False)
    plain, packed = prepare(base), prepare(base.replace(padding="pack"))
    assert packed.frozen_validation == plain.frozen_validation
    assert list(packed.validation_tokens["input_ids"]) == list(plain.validation_tokens["input_ids"])
    assert packed.batches["rows"] < plain.batches["rows"]
    # every token kept: the packed blocks hold the rows' tokens less their per-row [CLS]/[SEP]
    n_rows = len(plain.train_rows)
    assert packed.batches["tokens"] - 2 * packed.batches["rows"] == plain.batches["tokens"] - 2 * n_rows
    assert packed.batches["padding_share"] < 0.02 < plain.batches["padding_share"]
    lengths = packed.train_tokens["length"]
    assert packed.batches["padding_share"] == epoch_padding_share(lengths, base.batch_size, base.seed, True)


def test_the_options_study_packs_the_rows_of_a_packed_option(monkeypatch):
    import hp_mlm.studies.options as study

    seen, real = [], study.plan_training

    def spy(model, tokenizer, rows, run, **plan):
        seen.append((run.padding, len(rows)))
        return real(model, tokenizer, rows, run, **plan)

    monkeypatch.setattr(study, "plan_training", spy)
    base = get_settings("smoke", environ={}, epochs=1, progress=False)
    study.compare_options(base, {"course": {}, "packed": {"padding": "pack"}}, seeds=1, log=lambda _: None)
    (plain, n_rows), (packed, n_blocks) = seen
    assert (plain, packed) == ("batch", "pack") and n_blocks < n_rows
    seen.clear()  # a packed study's option back to one row per example gets the rows unpacked
    study.compare_options(base.replace(padding="pack"), {"rows": {"padding": "batch"}}, seeds=1, log=lambda _: None)
    assert seen == [("batch", n_rows)]
