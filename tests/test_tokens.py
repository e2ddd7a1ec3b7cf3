import json

import pytest
import torch
from datasets import Dataset
from helpers import SENTENCES, tokenised

from hp_mlm.tokens import check_max_length, pad_batch, padding_share, plan_batches, tokenize_rows


def test_rows_are_truncated_at_max_length_never_an_index_error(smoke_tokenizer, smoke_model):
    rows = Dataset.from_dict({"text": ["the " * 600, "Mira smiled."]})
    tokens = tokenize_rows(rows, smoke_tokenizer, max_length=64)
    ids = tokens[0]["input_ids"]
    assert len(ids) == 64 and tokens[0]["length"] == 64
    assert ids[0] == smoke_tokenizer.cls_token_id and ids[-1] == smoke_tokenizer.sep_token_id
    batch = pad_batch([tokens[0]], smoke_tokenizer)
    with torch.no_grad():
        smoke_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


def test_long_rows_can_be_split_instead_of_truncated(smoke_tokenizer):
    rows = Dataset.from_dict({"text": ["the lake " * 100]})
    tokens = tokenize_rows(rows, smoke_tokenizer, max_length=64, split_long_rows=True)
    assert len(tokens) >= 3 and all(n <= 64 for n in tokens["length"])


def test_batches_are_padded_to_their_own_longest_row_not_max_length(smoke_tokenizer):
    rows = tokenised(smoke_tokenizer, ["Mira smiled.", "Nell Cobbing found a mistfox."], max_length=512)
    batch = pad_batch(rows, smoke_tokenizer)
    longest = max(len(r["input_ids"]) for r in rows)
    assert batch["input_ids"].shape == (2, longest) and longest < 20
    assert batch["attention_mask"].sum().item() == sum(len(r["input_ids"]) for r in rows)
    assert (batch["input_ids"][batch["attention_mask"] == 0] == smoke_tokenizer.pad_token_id).all()


def test_max_length_above_the_model_limit_names_the_limit():
    with pytest.raises(ValueError, match="limit of 512"):
        check_max_length(1024, 512)
    check_max_length(512, 512)


@pytest.mark.parametrize("group", [True, False])
def test_every_row_appears_exactly_once_per_epoch(group):
    lengths = [(i * 37) % 113 + 5 for i in range(203)]
    batches = plan_batches(lengths, 16, torch.Generator().manual_seed(1), group_by_length=group)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(203))
    assert all(len(b) <= 16 for b in batches)


def test_length_grouping_reduces_padding_and_is_seeded():
    lengths = [(i * 37) % 300 + 10 for i in range(800)]
    grouped = plan_batches(lengths, 16, torch.Generator().manual_seed(1), group_by_length=True)
    shuffled = plan_batches(lengths, 16, torch.Generator().manual_seed(1), group_by_length=False)
    assert padding_share(grouped, lengths) < padding_share(shuffled, lengths) / 3
    assert grouped == plan_batches(lengths, 16, torch.Generator().manual_seed(1), group_by_length=True)
    assert padding_share(shuffled, lengths, pad_to_length=max(lengths)) > padding_share(shuffled, lengths)


def test_tokenised_rows_carry_the_special_tokens_mask(smoke_tokenizer):
    tokens = tokenize_rows(Dataset.from_dict({"text": SENTENCES[:2]}), smoke_tokenizer, max_length=32)
    row = tokens[0]
    specials = [i for i, s in enumerate(row["special_tokens_mask"]) if s]
    assert specials == [0, len(row["input_ids"]) - 1]


def test_long_rows_are_split_at_word_starts_and_keep_every_token(smoke_tokenizer):
    """Rows cut at word starts: no row starts with a '##' piece; the 11 real tokens all appear once."""
    from datasets import Dataset

    from hp_mlm.tokens import tokenize_rows

    text = "the wand was old and it broke at last"
    rows = tokenize_rows(Dataset.from_dict({"text": [text]}), smoke_tokenizer, max_length=9, split_long_rows=True)
    pieces = [smoke_tokenizer.convert_ids_to_tokens(r) for r in rows["input_ids"]]
    assert all(len(p) <= 9 and p[0] == smoke_tokenizer.cls_token and p[-1] == smoke_tokenizer.sep_token for p in pieces)
    assert not any(p[1].startswith("##") for p in pieces)
    content = [t for p in pieces for t in p[1:-1]]
    assert content == smoke_tokenizer.tokenize(text)
    assert rows["special_tokens_mask"][0] == [1] + [0] * (len(pieces[0]) - 2) + [1]


def test_truncation_is_counted_and_the_main_job_says_what_it_dropped(tmp_path, monkeypatch):
    """Truncation is counted: ten short rows and one of 602 ids, max_length 128: 1 row cut, 474 tokens dropped.
    (A shipped corpus is truncated; your own text is split whole: read here as a shipped one.)"""
    monkeypatch.setattr("hp_mlm.prepare.own_text", lambda dataset: False)
    from hp_mlm.config import get_settings
    from hp_mlm.models import build_smoke_tokenizer
    from hp_mlm.ops.job import run_job
    from hp_mlm.tokens import truncation

    tok = build_smoke_tokenizer()
    long_row = "the " * 600
    assert len(tok(long_row)["input_ids"]) == 602
    assert truncation(["a short row.", long_row], tok, 128) == {"rows_cut": 1, "tokens_dropped": 474}
    assert truncation([], tok, 128) == {"rows_cut": 0, "tokens_dropped": 0}
    data = tmp_path / "rows.jsonl"  # a table: a row a line (a .txt would join the short paragraphs into rows)
    texts = [f"Mira rowed the ferry across the lake, day {i}." for i in range(10)] + [long_row]
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    settings = get_settings(
        "smoke",
        environ={},
        dataset=str(data),
        max_length=128,
        epochs=1,
        progress=False,
        validation_fraction=0.3,
        output_dir=str(tmp_path / "out"),
        split_long_rows=False,  # as a shipped corpus's settings say
    )
    logged = []
    metrics = run_job(settings, log=logged.append)
    assert metrics["data"]["rows_cut"] == 1 and metrics["data"]["tokens_dropped"] == 474
    note = next(line for line in logged if line.startswith("note:") and " lost " in line)
    assert "1 row(s) longer than max_length 128 lost 474 tokens" in note and "split_long_rows" in note


# A word longer than a row ------------------------------------------------------------------------


def test_a_word_longer_than_a_row_is_its_own_word_and_never_masked_as_the_cls_token(smoke_tokenizer):
    """ "the wand broke at last" in rows of 3 tokens holds one piece a row, so "broke" (br ##oke) and
    "last" (l ##ast) must be cut inside: two rows open with a ## piece, and both are counted. Whole-word
    masking reads that piece as a word of its own: at probability 1.0 it is masked and [CLS] never is, in
    50 draws; at 0.5 it is chosen by its own draw, not by the draw at [CLS]."""
    from hp_mlm.masking import IGNORE_INDEX, mask_tokens, selectable_positions
    from hp_mlm.tokens import word_start_index, words_cut

    tok = smoke_tokenizer
    rows = tokenize_rows(
        Dataset.from_dict({"text": ["the wand broke at last"]}), tok, max_length=3, split_long_rows=True
    )
    pieces = [tok.convert_ids_to_tokens(ids)[1:-1] for ids in rows["input_ids"]]
    assert pieces == [["the"], ["wand"], ["br"], ["##oke"], ["at"], ["l"], ["##ast"]]
    assert words_cut(rows, tok) == 2
    ids = torch.tensor([rows[3]["input_ids"]])  # [CLS] ##oke [SEP]
    assert word_start_index(ids, tok).tolist() == [[0, 1, 2]]
    selectable = selectable_positions(ids, tok, torch.tensor([rows[3]["special_tokens_mask"]]))
    for seed in range(50):
        masked, labels = mask_tokens(ids, selectable, tok, 1.0, torch.Generator().manual_seed(seed), "whole_word")
        assert masked[0].tolist() == [tok.cls_token_id, tok.mask_token_id, tok.sep_token_id]
        assert labels[0].tolist() == [IGNORE_INDEX, ids[0, 1].item(), IGNORE_INDEX]
    own = cls = 0
    for seed in range(50):
        _, labels = mask_tokens(ids, selectable, tok, 0.5, torch.Generator().manual_seed(seed), "whole_word")
        draw = torch.bernoulli(torch.full(ids.shape, 0.5), generator=torch.Generator().manual_seed(seed)).bool()
        chosen = bool(labels[0, 1] != IGNORE_INDEX)
        own, cls = own + (chosen == bool(draw[0, 1])), cls + (chosen == bool(draw[0, 0]))
    assert own == 50 and cls < 50


def test_rows_opening_inside_a_word_are_counted_beside_truncation_and_logged(tmp_path, monkeypatch):
    """Ten rows "the xyzzyplughfrobnicate sang (the ...)", rows of 8 tokens split at word starts: the made-up word
    has 17 pieces, so each text opens 2 rows inside it (20 in all); nothing is truncated. (Unsplit: as a
    shipped corpus, which is truncated; your own text is always split.)"""
    monkeypatch.setattr("hp_mlm.prepare.own_text", lambda dataset: False)
    from hp_mlm.config import get_settings
    from hp_mlm.ops.job import log_data
    from hp_mlm.prepare import prepare

    rows = [f"the xyzzyplughfrobnicate sang{' the' * i}" for i in range(10)]  # distinct: some are held out
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"text": row}) + "\n" for row in rows), encoding="utf-8")
    settings = get_settings(
        "smoke", environ={}, dataset=str(tmp_path / "rows.jsonl"), max_length=8, split_long_rows=True, progress=False
    )
    prep = prepare(settings)
    assert prep.truncated == {"rows_cut": 0, "tokens_dropped": 0, "words_cut": 20}
    logged = []
    log_data(prep, logged.append)
    note = next(line for line in logged if "open inside a word" in line)
    assert note.startswith("note: 20 row(s) open inside a word of more than max_length - 2 = 6 pieces")
    unsplit = prepare(settings.replace(split_long_rows=False))
    assert unsplit.truncated["words_cut"] == 0 and unsplit.truncated["rows_cut"] == 10


def test_rows_the_course_cuts_itself_raise_no_too_long_warning():
    """Splitting, packing and counting what truncation drops tokenise whole rows, then cut them: the tokenizer's
    "longer than the specified maximum sequence length ... indexing errors" warning (logged once per tokenizer,
    red in a notebook) would tell a learner of an error that cannot happen there."""
    import logging

    from hp_mlm.models import build_smoke_tokenizer
    from hp_mlm.tokens import pack_rows, truncation

    long_row = " ".join(["the ferry crossed the silver lake at dawn ."] * 40)
    rows = Dataset.from_dict({"text": [long_row, "Mira smiled."]})
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)

    def warned(step) -> bool:
        tokenizer = build_smoke_tokenizer()  # a fresh one: the warning comes once per tokenizer
        tokenizer.model_max_length = 64
        records.clear()
        step(tokenizer)
        return any("longer than the specified maximum sequence length" in r.getMessage() for r in records)

    try:
        assert warned(lambda tok: tok(long_row))  # the warning, and this test's way of seeing it
        assert not warned(lambda tok: truncation([long_row], tok, 32))
        assert not warned(lambda tok: tokenize_rows(rows, tok, 32, split_long_rows=True))
        assert not warned(lambda tok: pack_rows(rows, tok, 32, "text"))
        assert not warned(lambda tok: tokenize_rows(rows, tok, 32))  # truncated by the tokenizer: never warned
    finally:
        logging.getLogger("transformers").removeHandler(handler)
