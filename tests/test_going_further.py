"""The original tutorial's improvement ideas as options: masking strategies, per-kind metrics,
early stopping, sharing the model, and the options comparison."""

import json

import pytest
import torch
from datasets import Dataset
from helpers import SENTENCES, fit, tokenised

from hp_mlm.checkpoints import latest_checkpoint
from hp_mlm.config import get_settings
from hp_mlm.data import find_entities
from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX, MaskingCollator, freeze_masks, mask_tokens, selectable_positions
from hp_mlm.studies.breakdowns import BY_KIND
from hp_mlm.tokens import continuation_table, pad_batch, tokenize_rows, word_start_index

PIECEY = ["Éloise quoted the thornbacks unquestionably.", "Mira Ashdown overheard quotations at Fogmoor."]


def batch_of(tokenizer, texts):
    return pad_batch(tokenised(tokenizer, texts), tokenizer)


def test_whole_word_masking_never_labels_a_lone_piece(smoke_tokenizer):
    batch = batch_of(smoke_tokenizer, PIECEY * 20)
    ids = batch["input_ids"]
    cont = continuation_table(smoke_tokenizer)[ids]
    assert cont.any(), "the fixture must contain ## pieces"
    ok = selectable_positions(ids, smoke_tokenizer, batch["special_tokens_mask"], batch["attention_mask"])
    starts = word_start_index(ids, smoke_tokenizer)
    for seed in range(20):
        _, labels = mask_tokens(ids, ok, smoke_tokenizer, 0.3, torch.Generator().manual_seed(seed), "whole_word")
        chosen = labels != IGNORE_INDEX
        # every piece is chosen exactly when its word's first piece is
        assert torch.equal(chosen, chosen.gather(1, starts) & ok)
        assert torch.equal(labels[chosen], ids[chosen])  # each piece labelled with its own id


def test_whole_word_masks_all_pieces_of_a_named_word(smoke_tokenizer):
    enc = smoke_tokenizer("Mira walked into quotations castle.")
    pieces = smoke_tokenizer.tokenize("quotations")
    assert len(pieces) >= 2
    ids = torch.tensor([enc["input_ids"]])
    ok = selectable_positions(ids, smoke_tokenizer)
    starts = word_start_index(ids, smoke_tokenizer)
    word_start = enc["input_ids"].index(smoke_tokenizer.convert_tokens_to_ids(pieces[0]))
    in_word = starts[0] == word_start
    assert in_word.sum().item() == len(pieces)
    for seed in range(50):
        _, labels = mask_tokens(ids, ok, smoke_tokenizer, 0.5, torch.Generator().manual_seed(seed), "whole_word")
        chosen = labels[0] != IGNORE_INDEX
        assert chosen[in_word].all() or not chosen[in_word].any()


def test_entities_are_found_from_the_corpus_itself():
    texts = [
        "Then Mira met Oren by the lake.",
        "The lake was cold, and Mira waved.",
        "Later Mira and Oren ran.",
        "The owl saw Mira. But Oren slept.",
        "When Oren laughed, Mira smiled.",
    ]
    found = find_entities(texts, min_count=2)
    assert found[:2] == ["mira", "oren"]
    assert "the" not in found and "but" not in found and "when" not in found


def test_entity_masking_prefers_entities_at_the_same_overall_rate(smoke_tokenizer):
    entities = find_entities(SENTENCES * 3, min_count=2)
    assert {"ashdown", "quillon", "blackthistle"} <= set(entities) and "the" not in entities
    rows = tokenize_rows(Dataset.from_dict({"text": SENTENCES * 30}), smoke_tokenizer, 64, entities=entities)
    batch = pad_batch(list(rows), smoke_tokenizer)
    ids, entity = batch["input_ids"], batch["entity_mask"].bool()
    ok = selectable_positions(ids, smoke_tokenizer, batch["special_tokens_mask"], batch["attention_mask"])
    rates = {}
    for strategy in ("whole_word", "entity"):
        _, labels = mask_tokens(
            ids, ok, smoke_tokenizer, 0.15, torch.Generator().manual_seed(0), strategy, batch["entity_mask"]
        )
        chosen = labels != IGNORE_INDEX
        rates[strategy] = (
            chosen[entity & ok].float().mean().item(),
            chosen[~entity & ok].float().mean().item(),
            chosen[ok].float().mean().item(),
        )
    ent, other, overall = rates["entity"]
    assert ent > 2.5 * other
    assert ent > 1.5 * rates["whole_word"][0]
    assert abs(overall - 0.15) < 0.03


def test_collator_passes_entities_and_evaluation_reports_per_kind(smoke_tokenizer, smoke_model):
    entities = find_entities(SENTENCES * 3, min_count=2)
    rows = list(tokenize_rows(Dataset.from_dict({"text": SENTENCES * 4}), smoke_tokenizer, 64, entities=entities))
    batch = MaskingCollator(smoke_tokenizer, 0.3, seed=0, strategy="entity")(rows)
    assert (batch["labels"] != IGNORE_INDEX).any()
    result = evaluate(
        smoke_model, freeze_masks(rows, smoke_tokenizer, 0.3, seed=1), smoke_tokenizer, breakdowns=(BY_KIND,)
    )
    kinds = result["kinds"]
    assert set(kinds) == {"entity", "other_word", "whole_word", "word_piece"}
    assert kinds["entity"]["n_positions"] + kinds["other_word"]["n_positions"] == result["n_positions"]
    assert kinds["whole_word"]["n_positions"] + kinds["word_piece"]["n_positions"] == result["n_positions"]


def test_early_stopping_stops_and_keeps_the_best_epoch(smoke_tokenizer, smoke_model):
    from hp_mlm.callbacks import Validate

    rows = tokenised(smoke_tokenizer, SENTENCES)
    losses = iter([3.0, 2.0, 2.5, 2.6, 1.0, 0.5])
    snapshots = {}

    def fake_validation(model):
        epoch = len(snapshots) + 1
        snapshots[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
        return {"cross_entropy": next(losses)}

    settings = get_settings("smoke", environ={}, epochs=6, batch_size=4, progress=False, schedule="linear")
    history = fit(
        smoke_model,
        smoke_tokenizer,
        rows,
        settings.replace(learning_rate=1e-3),
        callbacks=[Validate(fake_validation, 2)],
    )
    assert history["early_stopping"] == {"best_epoch": 2, "best_cross_entropy": 2.0, "stopped_after_epoch": 4}
    assert len(history["epochs"]) == 4
    state = smoke_model.state_dict()
    assert all(torch.equal(state[k], snapshots[2][k]) for k in state)


def test_push_to_hub_makes_the_expected_calls_without_network(tmp_path, monkeypatch):
    import huggingface_hub

    from hp_mlm.ops import push

    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, exist_ok=False):
            calls.append(("create_repo", repo_id, exist_ok))
            return f"https://hub.example/{repo_id}"

        def upload_folder(self, folder_path, repo_id, commit_message):
            calls.append(("upload_folder", folder_path, repo_id))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake_token")
    (tmp_path / "model").mkdir()
    url = push.upload_model(tmp_path / "model", "someone/hp-mlm-bert")
    assert url == "https://hub.example/someone/hp-mlm-bert"
    assert calls == [
        ("init", "hf_fake_token"),
        ("create_repo", "someone/hp-mlm-bert", True),
        ("upload_folder", str(tmp_path / "model"), "someone/hp-mlm-bert"),
    ]
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(ValueError, match="hf auth login"):
        push.hub_token("someone/hp-mlm-bert")
    with pytest.raises(ValueError, match="repository id"):
        push.hub_token("no-slash")


def test_compare_options_scores_every_option_on_the_same_masks(tmp_path):
    from hp_mlm.ops.cli import main

    code = main(
        [
            "compare",
            "--profile",
            "smoke",
            "--epochs",
            "2",
            "--output-dir",
            str(tmp_path),
            "--only",
            "course",
            "entity masking",
            "--seeds",
            "2",
            "--no-progress",
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "comparison.json").read_text())
    names = [(r["option"], r["seed"]) for r in result["rows"]]
    assert names == [
        ("before fine-tuning", None),
        ("course", 42),
        ("course", 43),
        ("entity masking", 42),
        ("entity masking", 43),
    ]
    assert all(r["entity_top1"] is not None for r in result["rows"])
    # the smoke vocabulary has word pieces, so held-out words of several pieces are scored by word
    assert all(0 <= r["multi_piece_words_top1"] <= 1 for r in result["rows"])
    assert result["rows"][1]["top1"] > result["rows"][0]["top1"]
    assert result["rows"][1]["top1"] != result["rows"][2]["top1"]  # the seeds differ
    course = result["summary"][1]
    tops = [r["top1"] for r in result["rows"][1:3]]
    assert course["n"] == 2 and course["top1"] == {"mean": sum(tops) / 2, "min": min(tops), "max": max(tops)}
    assert "[" in (tmp_path / "comparison.md").read_text()  # the spread is shown
    assert (tmp_path / "comparison.png").stat().st_size > 1000


def test_product_descriptions_run_through_the_same_pipeline_with_one_change_of_path(tmp_path):
    from hp_mlm.ops.job import run_job
    from hp_mlm.studies.probes import default_probes, load_probes

    settings = get_settings(
        "smoke", environ={}, dataset="hp_mlm:products", epochs=2, output_dir=str(tmp_path), progress=False
    )
    metrics = run_job(settings, probes=default_probes(settings), log=lambda _: None)
    assert metrics["data"]["n_loaded"] == 240 and metrics["data"]["n_dropped"] == 0
    assert metrics["after"]["cross_entropy"] < metrics["before"]["cross_entropy"]
    shipped = {p["text"] for p in load_probes(default_probes(settings))}  # the corpus's 10, and any picked
    assert len(shipped) == 10 and shipped <= {r["text"] for r in metrics["probes"]["after"]["rows"]}


def test_a_time_budget_stops_the_main_job_early_evaluates_saves_and_resumes(tmp_path):
    from hp_mlm.ops.job import run_job

    settings = get_settings(
        "smoke",
        environ={},
        epochs=200,
        progress=False,
        checkpoint_every=0,
        output_dir=str(tmp_path / "boxed"),
        time_budget_minutes=0.02,
    )  # 1.2 s of training clock
    logged = []
    metrics = run_job(settings, log=logged.append)
    history = json.loads((tmp_path / "boxed" / "history.json").read_text())
    steps = history["optimizer_steps"]
    assert any(line.startswith("time budget: training stops after 0.02 min") for line in logged)
    assert any(line.startswith(f"time budget reached: stopped at optimiser step {steps} of ") for line in logged)
    assert any("rerun the same command with --resume to continue" in line for line in logged)
    assert len(history["epochs"]) < 200 and history["steps"][-1]["seconds"] >= 1.2
    assert metrics["after"] == history["epochs"][-1]["validation"]  # the stopped epoch was validated
    assert (tmp_path / "boxed" / "model" / "model.safetensors").is_file()
    assert latest_checkpoint(tmp_path / "boxed") is not None  # kept for --resume
    logged.clear()
    run_job(settings, resume=True, log=logged.append)  # a second budget of 1.2 s, this run's clock
    resumed = json.loads((tmp_path / "boxed" / "history.json").read_text())
    assert any(line.startswith(f"resuming at optimiser step {steps} ") for line in logged)
    assert any(line.startswith("time budget starts again: 0.02 min of training from here") for line in logged)
    assert resumed["steps"][: len(history["steps"])] == history["steps"]
    assert resumed["optimizer_steps"] > steps + 1  # not stopped at once by the first run's clock


def test_a_resumed_main_job_says_where_it_resumes(tmp_path, monkeypatch):
    import hp_mlm.training as training
    from hp_mlm.ops.job import run_job

    settings = get_settings("smoke", environ={}, epochs=2, progress=False, output_dir=str(tmp_path / "run"))
    real = training.train_epoch

    def stop_in_epoch_2(plan, epoch, callbacks):
        if epoch == 1:
            raise KeyboardInterrupt  # as Ctrl-C after epoch 1's checkpoint
        return real(plan, epoch, callbacks)

    monkeypatch.setattr(training, "train_epoch", stop_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        run_job(settings, log=lambda _: None)
    monkeypatch.undo()
    logged = []
    metrics = run_job(settings, resume=True, log=logged.append)
    steps = metrics["run"] and json.loads((tmp_path / "run" / "history.json").read_text())["optimizer_steps"]
    note = next(line for line in logged if line.startswith("resuming at optimiser step"))
    assert note == f"resuming at optimiser step {steps // 2} (epoch 2, after 0 of its batches)"
    clock = [line for line in logged if line.startswith("clock: ")]  # this session's pace, over every epoch
    assert clock[0].startswith("clock: 3 steps took ") and f"for its {steps} steps" in clock[0]


def test_a_time_budget_stop_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, smoke_tokenizer):
    """Stopped by the budget after its first step (mid-epoch), checkpointed, resumed: the same
    weights, steps and losses as one run of the same settings."""
    from hp_mlm.callbacks import TimeBudget
    from hp_mlm.models import build_smoke_model

    rows = tokenised(smoke_tokenizer, SENTENCES * 2)
    settings = get_settings("smoke", environ={}, epochs=2, batch_size=4, progress=False, checkpoint_every=0)
    whole_model = build_smoke_model(smoke_tokenizer)
    whole = fit(whole_model, smoke_tokenizer, rows, settings)
    model = build_smoke_model(smoke_tokenizer)
    budget = TimeBudget(0.0)  # the first step is past it
    first = fit(model, smoke_tokenizer, rows, settings, [budget], output_dir=tmp_path)
    assert budget.stopped_at["step"] == 1 == first["optimizer_steps"] and first["epochs"][-1]["batches_done"] == 1
    resumed = fit(model, smoke_tokenizer, rows, settings, output_dir=tmp_path, resume=True)
    assert resumed["optimizer_steps"] == whole["optimizer_steps"] > 2
    assert [s["loss"] for s in resumed["steps"]] == [s["loss"] for s in whole["steps"]]
    for (name, a), b in zip(model.state_dict().items(), whole_model.state_dict().values()):
        assert torch.equal(a, b), name
