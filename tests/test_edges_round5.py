"""Edges a tester found in round 5 (half-precision checkpoints, uneven batches over processes, a push that
cannot reach the Hub, the widget's saved form, model cards with missing values, version refusals, rows
with no real token, positions, rows that open inside a word): each test feeds the case's input and
asserts its outcome."""

import json
import math

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
        assert "stored in float16; its weights were loaded and kept in float32" in card
    said = run_cli("predict", "A [MASK] rowed the ferry.", "--model", str(folder))
    assert said.returncode == 0 and "stored in float16; its weights were loaded in float32" in said.stderr


# Uneven batches over processes ---------------------------------------------------------------


def test_the_batch_plan_gives_every_process_as_many_batches_with_every_row_once():
    from hp_mlm.tokens import plan_batches

    lengths = [5 + i % 7 for i in range(100)]
    for processes, batch_size, grouped in ((2, 8, True), (2, 8, False), (3, 8, True), (4, 16, True), (2, 3, True)):
        batches = plan_batches(lengths, batch_size, torch.Generator().manual_seed(0), grouped, processes)
        assert len(batches) % processes == 0, (processes, batch_size)  # accelerate pads nothing
        assert sorted(row for batch in batches for row in batch) == list(range(100))  # every row once
        assert len(batches) // processes == math.ceil(math.ceil(100 / batch_size) / processes)  # the same steps
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


# A push that cannot reach the Hub ------------------------------------------------------------


def test_a_push_to_a_hub_that_does_not_answer_is_refused_before_training(tmp_path):
    out = tmp_path / "run"
    env = {"HF_TOKEN": "hf_fake_token", "HTTPS_PROXY": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    done = run_cli("train", "--profile", "smoke", "--output-dir", str(out), "--push-to-hub", "someone/x", env=env)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert "--push-to-hub someone/x: the Hugging Face Hub cannot be reached" in err[0] and "troubleshooting" in err[0]
    assert not (out / "model").exists()  # refused before any training


def test_an_upload_that_fails_keeps_the_whole_run_and_ends_in_one_line(tmp_path, monkeypatch, capsys):
    import httpx
    import huggingface_hub

    import hp_mlm.ops.job
    from hp_mlm.ops import cli

    class DeadApi:
        def __init__(self, token=None):
            self.token = token

        def create_repo(self, repo_id, exist_ok=False):
            raise httpx.ConnectError("[Errno 111] Connection refused")

    monkeypatch.setattr(hp_mlm.ops.job, "check_push", lambda repo_id: None)  # the Hub answered before training
    monkeypatch.setattr(huggingface_hub, "HfApi", DeadApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake_token")
    out = tmp_path / "run"
    argv = ["train", "--profile", "smoke", "--epochs", "1", "--output-dir", str(out), "--push-to-hub", "someone/x"]
    assert cli.main([*argv, "--watch-every", "0"]) == 2
    said = capsys.readouterr()
    assert "held-out (frozen masks)" in said.out and "saved to" in said.out  # the report first, then the error
    err = [line for line in said.err.splitlines() if line.startswith("error:")]  # not datasets' bars
    assert (
        len(err) == 1
        and "the upload failed (ConnectError" in err[0]
        and f"hf upload someone/x {out / 'model'}" in err[0]
    )
    for made in ("metrics.json", "history.json", "loss_curve.png", "before_after.png", "model/README.md"):
        assert (out / made).is_file(), made
    assert "pushed_to" not in json.loads((out / "metrics.json").read_text())


# The widget's saved form ---------------------------------------------------------------------


def test_tidy_keeps_a_widgets_static_copy_and_drops_a_progress_bar():
    import sys
    from pathlib import Path

    import nbformat

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))
    from tidy import WIDGET_VIEW, tidy

    view = {"version_major": 2, "version_minor": 0, "model_id": "abc"}
    widget = {WIDGET_VIEW: view, "text/html": "<table><tr><td>tanner</td></tr></table>", "text/plain": "tanner"}
    bar = {WIDGET_VIEW: view, "text/plain": "  0%|          | 0/40"}
    cell = nbformat.v4.new_code_cell("show_before_after(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data) for data in (widget, bar)]
    nb = tidy(nbformat.v4.new_notebook(cells=[cell]))
    (kept,) = nb.cells[0].outputs
    assert set(kept["data"]) == {"text/html", "text/plain"} and "tanner" in kept["data"]["text/html"]


# Model cards with missing values --------------------------------------------------------------


def test_a_card_with_missing_or_infinite_scores_writes_valid_metadata_and_says_so(
    tmp_path, smoke_model, smoke_tokenizer
):
    import math

    from huggingface_hub import ModelCard

    from hp_mlm.checkpoints import save_model
    from hp_mlm.config import get_settings
    from hp_mlm.ops.card import write_model_card

    folder = save_model(smoke_model, smoke_tokenizer, tmp_path / "model")
    settings = get_settings("full", environ={})  # bert-base-uncased on the books: licences known and not
    before = {"top1": 0.1, "top5": None, "perplexity": 812.5, "n_positions": 40, "n_rows": 8}
    after = {"top1": None, "top5": 0.5, "perplexity": math.inf, "cross_entropy": math.nan, "n_positions": None}
    card = write_model_card(folder, settings, before=before, after=after)  # raised TypeError on round(None)
    assert "| `epochs` | auto |" in card.read_text()  # a setting left to the model reads auto, not None
    text = card.read_text()
    data = ModelCard.load(card).data.to_dict()  # default settings: a metadata error would raise

    def nulls(value):
        if isinstance(value, dict):
            return [k for k, v in value.items() if v is None] + [n for v in value.values() for n in nulls(v)]
        if isinstance(value, list):
            return [n for v in value for n in nulls(v)]
        return ["nan/inf"] if isinstance(value, float) and not math.isfinite(value) else []

    assert nulls(data) == [] and ".inf" not in text and ".nan" not in text and "null" not in text
    assert (
        data["license"] == "mit" and data["pipeline_tag"] == "fill-mask" and data["base_model"] == "bert-base-uncased"
    )
    (result,) = data["model-index"][0]["results"]  # only the finite "after" score: top-5
    assert [m["type"] for m in result["metrics"]] == ["accuracy"] and result["metrics"][0]["value"] == 0.5
    assert "| perplexity | 812.50 | not computed |" in text and "| top-1 accuracy | 10.0% | not computed |" in text
    assert "The base model `bert-base-uncased`: apache-2.0" in text and "not known here" in text


# A version refusal reaches the command line as one line ---------------------------------------


def test_an_old_transformers_is_refused_at_the_command_line_in_one_line_with_its_help(tmp_path):
    """Colab's 2026.01 runtime has transformers 4.57.6: the guard in ``hp_mlm/__init__.py`` raised before the
    command line's handler, a 9-line traceback. A stand-in for that install: its metadata first on the path."""
    info = tmp_path / "old" / "transformers-4.57.6.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.57.6\n")
    for command in (("train", "--profile", "smoke"), ("predict", "A [MASK] rowed.")):
        done = run_cli(*command, env={"PYTHONPATH": str(tmp_path / "old")})
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(err) == 1, done.stderr
        assert err[0].startswith("error: hp_mlm needs transformers>=5,<6, but transformers 4.57.6 is installed")
        assert "troubleshooting.md#a-package-is-missing-or-the-wrong-version" in err[0]


def test_a_row_that_opens_inside_a_word_reads_its_leading_pieces_as_their_own_word(smoke_tokenizer):
    """Rows a user cut by hand (ids sliced mid-word, with or without [CLS]): the leading ``##`` piece is
    drawn as a word of its own, never with [CLS], which is never a target."""
    from hp_mlm.masking import mask_tokens, selectable_positions

    rows = (["[CLS]", "##s", "the", "thornback", "##s", "[SEP]"], ["##s", "the", "thornback", "##s", "at"])
    for tokens in rows:
        ids = torch.tensor([smoke_tokenizer.convert_tokens_to_ids(tokens)])
        selectable = selectable_positions(ids, smoke_tokenizer)
        lead = tokens.index("##s")
        chosen = []
        for seed in range(60):
            _, labels = mask_tokens(
                ids, selectable, smoke_tokenizer, 0.3, torch.Generator().manual_seed(seed), "whole_word"
            )
            assert all(labels[0, i] == -100 for i, t in enumerate(tokens) if t in ("[CLS]", "[SEP]"))
            assert bool(labels[0, -2] != -100) == bool(labels[0, -3] != -100)  # thornback ##s: one word
            chosen.append(bool(labels[0, lead] != -100))
        assert 0 < sum(chosen) < len(chosen)  # its own draw: neither always (as [CLS]'s word) nor never
