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
