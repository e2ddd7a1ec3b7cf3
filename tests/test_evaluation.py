import pytest
import torch
from helpers import SENTENCES, tokenised

from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX, freeze_masks
from hp_mlm.studies.breakdowns import BREAKDOWNS, BY_KIND
from hp_mlm.studies.original import original_tutorial_accuracy
from hp_mlm.training import masked_lm_loss


def frozen(tokenizer, texts=SENTENCES, p=0.3, seed=0):
    return freeze_masks(tokenised(tokenizer, texts), tokenizer, p, seed)


def test_evaluation_scores_the_frozen_positions_only(smoke_tokenizer, smoke_model):
    rows = frozen(smoke_tokenizer)
    result = evaluate(smoke_model, rows, smoke_tokenizer, batch_size=4)
    expected = sum(sum(1 for label in r["labels"] if label != IGNORE_INDEX) for r in rows)
    assert result["n_positions"] == expected > 0 and result["n_rows"] == len(SENTENCES)
    for r in rows:
        ids = r["input_ids"]
        assert r["labels"][0] == IGNORE_INDEX and r["labels"][-1] == IGNORE_INDEX  # [CLS], [SEP]
        assert ids[0] == smoke_tokenizer.cls_token_id and ids[-1] == smoke_tokenizer.sep_token_id
    assert 0 <= result["top1"] <= result["top5"] <= 1
    assert abs(result["perplexity"] - torch.tensor(result["cross_entropy"]).exp().item()) < 1e-3 * result["perplexity"]


def test_evaluation_agrees_with_the_training_loss_on_the_same_masks(smoke_tokenizer, smoke_model):
    from hp_mlm.tokens import pad_batch

    rows = frozen(smoke_tokenizer)
    batch = pad_batch(rows, smoke_tokenizer)
    with torch.no_grad():
        loss = masked_lm_loss(smoke_model.eval(), batch["input_ids"], batch["attention_mask"], batch["labels"]).item()
    assert abs(evaluate(smoke_model, rows, smoke_tokenizer)["cross_entropy"] - loss) < 1e-4


def test_results_do_not_depend_on_the_evaluation_batch_size(smoke_tokenizer, smoke_model):
    rows = frozen(smoke_tokenizer, SENTENCES * 3)
    results = [evaluate(smoke_model, rows, smoke_tokenizer, batch_size=b) for b in (1, 5, 64)]
    for r in results[1:]:
        assert r["n_positions"] == results[0]["n_positions"]
        assert r["top1"] == results[0]["top1"] and r["top5"] == results[0]["top5"]
        assert abs(r["cross_entropy"] - results[0]["cross_entropy"]) < 1e-5


def test_breakdowns_add_their_entries_and_change_nothing_else(smoke_tokenizer, smoke_model):
    """Without breakdowns evaluate gives the plain scores; with them, the same scores plus ``kinds`` and
    ``words``, whose counts add up to the masked tokens, batch size or not."""
    rows = frozen(smoke_tokenizer, SENTENCES * 3)
    plain = evaluate(smoke_model, rows, smoke_tokenizer, batch_size=4)
    split = evaluate(smoke_model, rows, smoke_tokenizer, batch_size=7, breakdowns=BREAKDOWNS)
    assert set(plain) == {"top1", "top5", "cross_entropy", "perplexity", "n_positions", "n_rows", "seconds"}
    assert set(split) - set(plain) == {"kinds", "words"} and list(split)[-1] == "seconds"
    for key in ("top1", "top5", "n_positions", "n_rows"):
        assert split[key] == plain[key], key
    assert split["cross_entropy"] == pytest.approx(plain["cross_entropy"], abs=1e-5)
    kinds = split["kinds"]
    assert kinds["whole_word"]["n_positions"] + kinds["word_piece"]["n_positions"] == plain["n_positions"]
    assert evaluate(smoke_model, rows, smoke_tokenizer, breakdowns=(BY_KIND, BY_KIND))["kinds"] == kinds  # once
    with pytest.raises(ValueError, match="pass fp32, bf16 or fp16"):
        evaluate(smoke_model, rows, smoke_tokenizer, precision="auto")
    hits = sum(
        kinds[k]["top1"] * kinds[k]["n_positions"] for k in ("whole_word", "word_piece") if kinds[k]["n_positions"]
    )
    assert hits == pytest.approx(plain["top1"] * plain["n_positions"])


def test_before_and_after_score_identical_positions(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    before = freeze_masks(rows, smoke_tokenizer, 0.15, seed=42)
    with torch.no_grad():
        for p in smoke_model.parameters():
            p.add_(0.01)
    after = freeze_masks(rows, smoke_tokenizer, 0.15, seed=42)
    assert [r["labels"] for r in before] == [r["labels"] for r in after]


def test_evaluation_is_in_eval_mode_without_grad_and_restores_training_mode(smoke_tokenizer, smoke_model):
    seen = []
    smoke_model.bert.register_forward_hook(lambda m, i, o: seen.append((m.training, torch.is_grad_enabled())))
    smoke_model.train()
    evaluate(smoke_model, frozen(smoke_tokenizer), smoke_tokenizer)
    assert seen and all(mode == (False, False) for mode in seen)
    assert smoke_model.training


def test_original_tutorial_accuracy_scores_one_random_position_per_row_specials_included(smoke_tokenizer, smoke_model):
    texts = SENTENCES * 25
    a = original_tutorial_accuracy(smoke_model, smoke_tokenizer, texts, torch.Generator().manual_seed(0))
    again = original_tutorial_accuracy(smoke_model, smoke_tokenizer, texts, torch.Generator().manual_seed(0))
    assert a == {**again, "seconds": a["seconds"]}
    assert a["n_positions"] == a["n_rows"] == len(texts)
    # the model that always answers [CLS] scores exactly the rows whose drawn position was [CLS]
    with torch.no_grad():
        smoke_model.cls.predictions.bias.zero_()
        smoke_model.cls.predictions.bias[smoke_tokenizer.cls_token_id] = 1e4
    cls_only = original_tutorial_accuracy(smoke_model, smoke_tokenizer, texts, torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(0)
    lengths = [len(smoke_tokenizer(t)["input_ids"]) for t in texts]
    expected = sum(int(torch.randint(n, (1,), generator=generator)) == 0 for n in lengths)
    assert expected > 0 and cls_only["accuracy"] == expected / len(texts)


def test_batched_original_accuracy_scores_the_same_positions_as_one_row_at_a_time(smoke_tokenizer, smoke_model):
    texts = [s * (1 + i % 3) for i, s in enumerate(SENTENCES * 3)]  # rows of different lengths: padding in batches
    with torch.no_grad():
        smoke_model.cls.predictions.bias.normal_(0, 3, generator=torch.Generator().manual_seed(0))  # confident guesses
    one = original_tutorial_accuracy(
        smoke_model, smoke_tokenizer, texts, torch.Generator().manual_seed(5), batch_size=1
    )
    batched = original_tutorial_accuracy(
        smoke_model, smoke_tokenizer, texts, torch.Generator().manual_seed(5), batch_size=7
    )
    assert one["accuracy"] == batched["accuracy"] and one["n_rows"] == batched["n_rows"] == len(texts)
    assert original_tutorial_accuracy(smoke_model, smoke_tokenizer, [])["accuracy"] is None  # nothing scored


def test_a_perplexity_that_overflows_is_inf_with_a_warning_not_1e304():
    """A cross-entropy too large for exp() gives an infinite perplexity with a warning, not an OverflowError."""
    import math

    from hp_mlm.evaluation import perplexity

    assert perplexity(2.0) == pytest.approx(math.exp(2.0))
    with pytest.warns(UserWarning, match="perplexity overflows"):
        assert perplexity(1000.0) == math.inf


def test_a_word_is_right_only_when_every_hidden_piece_is(smoke_tokenizer):
    """BY_WORD's sums on a hand-made batch: "above" (a ##bo ##ve) with one piece wrong is one wrong word."""
    from hp_mlm.studies.breakdowns import BY_WORD

    def word_sums(batch, tokenizer, right):
        return BY_WORD.sums(batch, tokenizer, batch["labels"] != IGNORE_INDEX, right)

    ids = smoke_tokenizer("mira above the tower", return_tensors="pt")["input_ids"]
    pieces = smoke_tokenizer.convert_ids_to_tokens(ids[0])
    assert pieces[1:-1] == ["mira", "a", "##bo", "##ve", "the", "tower"]
    labels = torch.full_like(ids, IGNORE_INDEX)
    hidden = [1, 2, 3, 4, 6]  # mira, a ##bo ##ve, tower
    labels[0, hidden] = ids[0, hidden]
    masked = ids.clone()
    masked[0, hidden] = smoke_tokenizer.mask_token_id
    batch = {"input_ids": masked, "labels": labels}
    all_right = torch.ones(len(hidden), dtype=torch.bool)
    assert word_sums(batch, smoke_tokenizer, all_right) == {
        "one_piece_right": 2,
        "one_piece_words": 2,
        "multi_piece_right": 1,
        "multi_piece_words": 1,
    }
    one_piece_wrong = torch.tensor([True, True, False, True, True])  # ##bo wrong
    assert word_sums(batch, smoke_tokenizer, one_piece_wrong) == {
        "one_piece_right": 2,
        "one_piece_words": 2,
        "multi_piece_right": 0,
        "multi_piece_words": 1,
    }
    mira_wrong = torch.tensor([False, True, True, True, True])
    assert word_sums(batch, smoke_tokenizer, mira_wrong) == {
        "one_piece_right": 1,
        "one_piece_words": 2,
        "multi_piece_right": 1,
        "multi_piece_words": 1,
    }


def test_whole_word_frozen_masks_are_scored_by_word(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES * 3)
    frozen = freeze_masks(rows, smoke_tokenizer, 0.3, seed=4, strategy="whole_word")
    result = evaluate(smoke_model, frozen, smoke_tokenizer, breakdowns=BREAKDOWNS)
    words = result["words"]
    assert words["n_words"] == words["one_piece"]["n_words"] + words["multi_piece"]["n_words"]
    assert words["multi_piece"]["n_words"] > 0 and words["n_words"] < result["n_positions"]
    expected = sum(  # the multi-piece words hidden, counted from the rows themselves
        1
        for row in frozen
        for i, label in enumerate(row["labels"])
        if label != IGNORE_INDEX
        and not smoke_tokenizer.convert_ids_to_tokens(label).startswith("##")
        and i + 1 < len(row["labels"])
        and row["labels"][i + 1] != IGNORE_INDEX
        and smoke_tokenizer.convert_ids_to_tokens(row["labels"][i + 1]).startswith("##")
    )
    assert words["multi_piece"]["n_words"] == expected
