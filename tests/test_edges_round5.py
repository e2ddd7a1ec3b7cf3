"""Edges a tester found in round 5 (half-precision checkpoints, uneven batches over processes, a push that
cannot reach the Hub, the widget's saved form, model cards with missing values, version refusals, rows
with no real token, positions, rows that open inside a word): each test feeds the case's input and
asserts its outcome."""

import json

import torch
from helpers import run_cli
from safetensors.torch import load_file

from hp_mlm.models import build_smoke_model, build_smoke_tokenizer, load_model

# A half-precision checkpoint -------------------------------------------------------------------


def half_checkpoint(folder):
    """The smoke BERT cast to float16 and saved as a model folder (its config then says float16)."""
    tok = build_smoke_tokenizer()
    build_smoke_model(tok).half().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_half_precision_checkpoint_loads_in_float32(tmp_path):
    folder = half_checkpoint(tmp_path / "half")
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float16"
    assert {p.dtype for p in load_model(str(folder)).model.parameters()} == {torch.float32}


def test_a_half_precision_checkpoint_trains_in_float32_and_the_run_says_it_was_upcast(tmp_path):
    folder = half_checkpoint(tmp_path / "half")
    start = load_file(folder / "model.safetensors")
    for precision in ("fp32", "auto"):  # fp32 stopped on a NaN loss, the CPU's bf16 on "mixed dtype"
        out = tmp_path / precision
        args = ("--model", str(folder), "--epochs", "1", "--precision", precision, "--watch-every", "0")
        done = run_cli("train", "--profile", "smoke", *args, "--output-dir", str(out))
        assert done.returncode == 0, done.stderr
        assert "is stored in float16; its weights were loaded in float32" in done.stdout
        run = json.loads((out / "metrics.json").read_text())["run"]
        assert run["checkpoint_dtype"] == "float16" and run["weights_dtype"] == "float32"
        trained = load_file(out / "model" / "model.safetensors")
        assert {t.dtype for t in trained.values()} == {torch.float32}
        norms = [k for k in trained if k.endswith("LayerNorm.weight")]
        assert norms and all(not torch.equal(trained[k].half(), start[k]) for k in norms)  # every LayerNorm moved
        card = (out / "model" / "README.md").read_text()
        assert "stored in float16; its weights were loaded and trained in float32" in card
    said = run_cli("predict", "A [MASK] rowed the ferry.", "--model", str(folder))
    assert (
        said.returncode == 0
        and "stored in float16; its weights were loaded in float32 and run in float32" in said.stderr
    )


# Uneven batches over processes ---------------------------------------------------------------


def test_the_batch_plan_gives_every_process_as_many_batches_with_every_row_once():
    from hp_mlm.tokens import plan_batches

    lengths = [5 + i % 7 for i in range(100)]
    for processes, batch_size, grouped in ((2, 8, True), (2, 8, False), (3, 8, True), (4, 16, True), (2, 3, True)):
        batches = plan_batches(lengths, batch_size, torch.Generator().manual_seed(0), grouped, processes)
        assert len(batches) % processes == 0, (processes, batch_size)  # accelerate pads nothing
        assert sorted(row for batch in batches for row in batch) == list(range(100))  # every row once
        assert len(batches) // processes == -(-(-(-100 // batch_size)) // processes)  # the same optimiser steps
    one = plan_batches(lengths, 8, torch.Generator().manual_seed(0), True)
    assert one == plan_batches(lengths, 8, torch.Generator().manual_seed(0), True, 1)  # one process: as before
    assert sorted(map(len, one)) == [4] + [8] * 12


# Rows with no real token, positions, the tokenizer's clean-up warning --------------------------


def test_a_row_with_no_real_token_is_not_scored_and_not_counted(smoke_tokenizer, smoke_model):
    from helpers import SENTENCES, tokenised

    from hp_mlm.evaluation import evaluate
    from hp_mlm.masking import freeze_masks

    rows = freeze_masks(tokenised(smoke_tokenizer, SENTENCES), smoke_tokenizer, 0.3, seed=3)
    blank = {**rows[0], "attention_mask": [0] * len(rows[0]["attention_mask"])}  # padding alone, labels left on
    with_blank = evaluate(smoke_model, [*rows, blank], smoke_tokenizer, batch_size=4)
    plain = evaluate(smoke_model, rows, smoke_tokenizer, batch_size=4)
    assert with_blank["n_positions"] == plain["n_positions"] and with_blank["n_rows"] == plain["n_rows"] == len(rows)
    assert abs(with_blank["cross_entropy"] - plain["cross_entropy"]) < 1e-5


def test_fill_mask_lets_no_clean_up_warning_through_for_a_bpe_tokenizer(tmp_path, capsys, caplog):
    from test_inference import roberta_style

    from hp_mlm.inference import fill_mask

    model, tok = roberta_style(tmp_path)
    tok.clean_up_tokenization_spaces = True  # as a tokenizer whose config sets it
    caplog.clear()
    (answers,) = fill_mask(model, tok, "a <mask> word", top_k=3)
    said = capsys.readouterr().err + caplog.text
    assert len(answers[0]) == 3 and "clean_up_tokenization_spaces" not in said
