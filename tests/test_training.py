import json
import math
import os
import signal
import subprocess
import sys

import pytest
import torch
from helpers import SENTENCES, fit, tokenised
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer

from hp_mlm.checkpoints import latest_checkpoint, save_model
from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.masking import MaskingCollator
from hp_mlm.training import TrainingDiverged, build_optimizer, masked_lm_loss


def smoke_settings(**changes):
    base = dict(epochs=1, batch_size=4, progress=False, checkpoint_every=0, learning_rate=1e-3, schedule="linear")
    base.update(changes)
    return resolve_auto(get_settings("smoke", environ={}, **base), new_head=True)


def test_masked_position_head_gives_the_same_loss_as_the_full_head(smoke_tokenizer, smoke_model):
    batch = MaskingCollator(smoke_tokenizer, 0.3, seed=0)(tokenised(smoke_tokenizer, SENTENCES))
    with torch.no_grad():
        fast = masked_lm_loss(smoke_model, batch["input_ids"], batch["attention_mask"], batch["labels"], True)
        full = masked_lm_loss(smoke_model, batch["input_ids"], batch["attention_mask"], batch["labels"], False)
        library = smoke_model(**batch).loss
    assert abs(fast.item() - full.item()) < 1e-5 and abs(fast.item() - library.item()) < 1e-5


def test_a_batch_without_masked_positions_gives_zero_loss_not_nan(smoke_tokenizer, smoke_model):
    batch = MaskingCollator(smoke_tokenizer, 0.3, seed=0)(tokenised(smoke_tokenizer, SENTENCES[:2]))
    loss = masked_lm_loss(
        smoke_model, batch["input_ids"], batch["attention_mask"], torch.full_like(batch["labels"], -100)
    )
    assert loss.item() == 0.0 and loss.requires_grad


def test_optimizer_is_torch_adamw_without_decay_on_bias_and_layernorm(smoke_model):
    optimizer = build_optimizer(smoke_model, 1e-4, weight_decay=0.01)
    assert type(optimizer) is torch.optim.AdamW
    decay, no_decay = optimizer.param_groups
    names = {id(p): n for n, p in smoke_model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in no_decay["params"])
    assert not any(names[id(p)].endswith("bias") for p in decay["params"])


def test_one_training_step_on_two_rows_gives_a_finite_loss(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, ["Harry looked at the owl.", "Ron ate a sandwich."])
    history = fit(
        smoke_model, smoke_tokenizer, rows, smoke_settings(batch_size=2, mlm_probability=0.5, learning_rate=5e-5)
    )
    assert len(history["steps"]) == 1 and math.isfinite(history["steps"][0]["loss"])
    assert not smoke_model.training


def test_training_lowers_the_loss_and_checkpoints_atomically(tmp_path, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES * 4)
    history = fit(
        smoke_model,
        smoke_tokenizer,
        rows,
        smoke_settings(epochs=6, checkpoint_every=5, learning_rate=3e-3),
        output_dir=tmp_path,
    )
    first, last = history["epochs"][0]["train_loss"], history["epochs"][-1]["train_loss"]
    assert last < first
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.name == f"step-{history['optimizer_steps']:07d}"
    names = sorted(p.name for p in ckpt.iterdir())
    assert {"model.safetensors", "optimizer.bin", "scheduler.bin", "state.json"} <= set(names)
    assert any(n.startswith("random_states") for n in names)  # accelerate's save_state layout
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    for name in ("optimizer.bin", "scheduler.bin"):
        torch.load(ckpt / name, weights_only=True)


def test_nan_loss_stops_training_naming_the_step_and_keeps_the_checkpoint(tmp_path, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES * 4)
    fit(smoke_model, smoke_tokenizer, rows, smoke_settings(epochs=1), output_dir=tmp_path)
    good = latest_checkpoint(tmp_path)
    before = load_file(good / "model.safetensors")
    with torch.no_grad():
        smoke_model.bert.embeddings.word_embeddings.weight[5:] = float("nan")
    with pytest.raises(TrainingDiverged, match=r"step 1 .*lower learning_rate"):
        fit(smoke_model, smoke_tokenizer, rows, smoke_settings(epochs=1), output_dir=tmp_path)
    assert latest_checkpoint(tmp_path) == good
    after = load_file(good / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_save_then_reload_gives_identical_logits_and_tied_decoder(tmp_path, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES[:2])
    fit(smoke_model, smoke_tokenizer, rows, smoke_settings(batch_size=2))
    save_model(smoke_model, smoke_tokenizer, tmp_path / "model")
    assert (tmp_path / "model" / "model.safetensors").exists()
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path / "model", output_loading_info=True)
    tok = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert not [k for k in info["missing_keys"] if k.startswith("cls.predictions")]
    assert torch.equal(model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight)
    enc = tok(["Mira [MASK] was a student."], return_tensors="pt")
    with torch.no_grad():
        a = smoke_model(**enc).logits
        b = model.eval()(**enc).logits
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.equal(a.topk(5).indices, b.topk(5).indices)


RESUME_SCRIPT = """
import sys, torch
from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.data import load_corpus
from hp_mlm.models import build_smoke_model, build_smoke_tokenizer
from hp_mlm.tokens import tokenize_rows
from hp_mlm.checkpoints import save_model
from hp_mlm.training import plan_training
from hp_mlm.training import train
out, resume, slow = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
settings = get_settings("smoke", environ={}, epochs=2, batch_size=8, checkpoint_every=3, progress=False,
                        split="train[:96]", schedule="linear", learning_rate=2e-3)
settings = resolve_auto(settings, new_head=True)
tok = build_smoke_tokenizer()
model = build_smoke_model(tok)
rows, _ = load_corpus(settings.dataset, settings.split)
tokens = list(tokenize_rows(rows, tok, settings.max_length))
if slow:
    import hp_mlm.callbacks as c  # report each checkpoint, so the test can kill the run just after one
    real = c.save_checkpoint
    def save_and_report(*a, **k):
        path = real(*a, **k)
        print("CHECKPOINT", path.name, flush=True)
        import time; time.sleep(0.5)
        return path
    c.save_checkpoint = save_and_report
from hp_mlm.callbacks import SaveCheckpoints
plan = plan_training(model, tok, tokens, settings, output_dir=out, resume=resume)
history = train(plan, [SaveCheckpoints(plan)])
save_model(model, tok, out + "/model")
import json; open(out + "/history.json", "w").write(json.dumps(history))
print("DONE", flush=True)
"""


def run_script(*args, wait=True):
    cmd = [sys.executable, "-c", RESUME_SCRIPT, *args]
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def test_killed_mid_epoch_then_resumed_ends_with_the_same_weights(tmp_path):
    reference = tmp_path / "reference"
    run_script(str(reference), "0", "0")
    killed = tmp_path / "killed"
    proc = run_script(str(killed), "0", "1", wait=False)
    seen = []
    for line in proc.stdout:
        if line.startswith("CHECKPOINT"):
            seen.append(line.split()[1])
            if len(seen) == 2:  # the second mid-epoch checkpoint of epoch 1 (steps 3, 6, ...)
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    state = json.loads((latest_checkpoint(killed) / "state.json").read_text())
    assert state["epoch"] == 0 and state["batches_done"] == 6  # mid-epoch
    assert not (killed / "model").exists()
    resumed = run_script(str(killed), "1", "0")
    assert "DONE" in resumed.stdout
    a = load_file(reference / "model" / "model.safetensors")
    b = load_file(killed / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


def test_gradient_accumulation_counts_optimizer_steps_not_batches(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)  # 8 rows, batches of 2 -> 4 batches
    history = fit(smoke_model, smoke_tokenizer, rows, smoke_settings(batch_size=2, gradient_accumulation_steps=2))
    assert history["optimizer_steps"] == 2 and len(history["steps"]) == 2


def test_ablations_static_masks_and_labels_everywhere_train(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    for change in (
        {"mask_once": True},
        {"label_all_tokens": True},
        {"mask_once": True, "label_all_tokens": True},
        {"schedule": "constant"},
        {"masking": "bert"},
    ):
        history = fit(smoke_model, smoke_tokenizer, rows, smoke_settings(**change))
        assert all(math.isfinite(s["loss"]) for s in history["steps"]), change


def test_resume_with_different_settings_is_refused(tmp_path, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    fit(smoke_model, smoke_tokenizer, rows, smoke_settings(epochs=1), output_dir=tmp_path)
    with pytest.raises(ValueError, match=r"batch_size 4 -> 2"):
        fit(
            smoke_model, smoke_tokenizer, rows, smoke_settings(epochs=1, batch_size=2), output_dir=tmp_path, resume=True
        )


def test_callbacks_stop_on_a_time_budget_and_see_every_step(smoke_tokenizer, smoke_model):
    from hp_mlm.callbacks import TimeBudget
    from hp_mlm.training import Callback

    class Every2(Callback):
        def __init__(self):
            self.seen = []

        def on_step(self, model, step):
            if step["step"] % 2 == 0:
                self.seen.append((step["step"], model.training))
            return False

    rows = tokenised(smoke_tokenizer, SENTENCES * 8)  # 64 rows, batches of 4: 16 steps per epoch
    every = Every2()
    history = fit(smoke_model, smoke_tokenizer, rows, smoke_settings(epochs=50), callbacks=[every, TimeBudget(0.5)])
    n = history["optimizer_steps"]
    assert 0 < n < 50 * 16 and history["steps"][-1]["seconds"] >= 0.5
    assert [step for step, _ in every.seen] == list(range(2, n + 1, 2))
    assert all(training for _, training in every.seen)  # called mid-training, in train mode


def test_an_epoch_stopped_then_resumed_is_one_row_of_the_epoch_table(tmp_path, smoke_tokenizer):
    """A callback (a time budget) stops epoch 1 at step 3 of 4; notebook 03 run again resumes it. Its
    history has one record per epoch, 1 then 2 (not epoch 1 twice), and the resumed epoch 1 counts
    the masked tokens of both parts: those of an uninterrupted epoch 1, whose masks are the same."""
    from hp_mlm.models import build_smoke_model
    from hp_mlm.training import Callback

    class StopAtStep3(Callback):
        def on_step(self, model, step):
            return step["step"] == 3

    rows = tokenised(smoke_tokenizer, SENTENCES * 2)  # 16 rows, batches of 4: 4 steps per epoch
    settings = smoke_settings(epochs=2, batch_size=4)
    whole = fit(build_smoke_model(smoke_tokenizer), smoke_tokenizer, rows, settings)
    stopped = fit(
        build_smoke_model(smoke_tokenizer),
        smoke_tokenizer,
        rows,
        settings,
        callbacks=[StopAtStep3()],
        output_dir=tmp_path,
        resume=True,
    )
    assert [e["epoch"] for e in stopped["epochs"]] == [1] and stopped["epochs"][0]["batches_done"] == 3
    resumed = fit(build_smoke_model(smoke_tokenizer), smoke_tokenizer, rows, settings, output_dir=tmp_path, resume=True)
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2]
    assert "batches_done" not in resumed["epochs"][0]
    assert [e["masked_tokens"] for e in resumed["epochs"]] == [e["masked_tokens"] for e in whole["epochs"]]
    assert resumed["epochs"][0]["seconds"] >= stopped["epochs"][0]["seconds"]


def test_the_schedule_is_an_argument(smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    seen = []

    def halving(optimizer, total_steps):
        seen.append(total_steps)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)

    history = fit(smoke_model, smoke_tokenizer, rows, smoke_settings(epochs=2, batch_size=2), make_scheduler=halving)
    assert seen == [8]
    assert [s["lr"] for s in history["steps"]] == pytest.approx([1e-3 * 0.5**k for k in range(8)])  # each its own


def test_auto_follows_what_the_head_knows_not_where_it_came_from(tmp_path, smoke_tokenizer, smoke_model, monkeypatch):
    """The smoke BERT's random head, and a plain saved copy of it (whose head transformers no longer creates),
    both get a new head's settings: their held-out top-1 before training is no better than always guessing the
    commonest masked token. A head that beats that guess by far (its measure faked here) gets a pretrained
    head's settings, whatever folder it comes from."""
    from hp_mlm import prepare as preparing
    from hp_mlm.ops.job import auto_note
    from hp_mlm.prepare import prepare
    from hp_mlm.profiles import HEAD_AUTO

    def chosen(prep):
        return prep.settings.learning_rate, prep.settings.schedule, prep.settings.epochs

    new, pretrained = (tuple(HEAD_AUTO[k][n] for n in ("learning_rate", "schedule", "epochs")) for k in HEAD_AUTO)
    smoke = get_settings("smoke", environ={}, progress=False).replace(learning_rate=None, epochs=None)
    random_head = prepare(smoke)
    assert random_head.loaded.head_newly_initialised and random_head.head["new"]
    assert random_head.head["top1"] < random_head.head["constant"]
    assert chosen(random_head) == new
    save_model(smoke_model, smoke_tokenizer, tmp_path / "model")  # a checkpoint with its (random) MLM head
    copy = prepare(smoke.replace(model=str(tmp_path / "model")))
    assert not copy.loaded.head_newly_initialised
    assert chosen(copy) == new and copy.head["new"]
    monkeypatch.setattr(
        preparing, "evaluate", lambda *args, **kwargs: {"top1": 0.6, "seconds": 0.1}
    )  # a head that knows
    knows = prepare(smoke.replace(model=str(tmp_path / "model")))
    assert not knows.head["new"] and knows.head["top1"] >= 2 * knows.head["constant"]
    assert chosen(knows) == pretrained
    note = auto_note(smoke, knows)
    assert "pretrained head" in note and "60.0%" in note and f"{knows.head['constant']:.1%}" in note


def test_masks_are_the_same_with_dataloader_workers_and_after_a_skip(smoke_tokenizer):
    from torch.utils.data import DataLoader

    from hp_mlm.training import epoch_loader, training_data

    rows = tokenised(smoke_tokenizer, SENTENCES * 3)
    settings = smoke_settings(batch_size=4)
    data, collator = training_data(rows, smoke_tokenizer, settings)
    loader = epoch_loader(data, collator, [len(r["input_ids"]) for r in rows], settings, epoch=1)
    one = [batch["labels"] for batch in loader]
    workers = DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=collator, num_workers=2)
    assert all(torch.equal(a, b["labels"]) for a, b in zip(one, workers, strict=True))
    # a loader started at its third batch (a resumed run) draws what the full one drew there
    later = DataLoader(loader.dataset, batch_sampler=loader.batch_sampler[2:], collate_fn=collator)
    assert all(torch.equal(a, b["labels"]) for a, b in zip(one[2:], later, strict=True))


def no_dropout_model(tokenizer):
    from hp_mlm.models import build_smoke_model

    return build_smoke_model(tokenizer, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def sgd(model, learning_rate, weight_decay=0.0, fused=True):  # build_optimizer's signature
    return torch.optim.SGD(model.parameters(), lr=learning_rate, weight_decay=weight_decay)


def test_accumulation_weighs_every_masked_token_the_same_as_one_large_batch(monkeypatch, smoke_tokenizer):
    """Gradient accumulation weighs tokens, not batches: batch 2 and batch 1 x accumulation 2 on the same two rows make the same update (SGD at
    rate 1, so the change is minus the gradient) and log the same, token-weighted, loss."""
    import hp_mlm.training as training

    monkeypatch.setattr(training, "build_optimizer", sgd)
    rows = tokenised(smoke_tokenizer, ["Hob rowed.", " ".join(SENTENCES[:4])])
    assert len(rows[1]["input_ids"]) > 3 * len(rows[0]["input_ids"])
    base = dict(
        mask_once=True,
        schedule="constant",
        warmup_fraction=0.0,
        max_grad_norm=0.0,
        group_by_length=False,
        precision="fp32",
        learning_rate=1.0,
        mlm_probability=0.4,
    )
    start = no_dropout_model(smoke_tokenizer).state_dict()
    changes, losses = [], []
    for batch_size, accumulation in ((2, 1), (1, 2)):
        model = no_dropout_model(smoke_tokenizer)
        model.load_state_dict(start)
        settings = smoke_settings(batch_size=batch_size, gradient_accumulation_steps=accumulation, **base)
        history = fit(model, smoke_tokenizer, rows, settings)
        assert history["optimizer_steps"] == 1
        changes.append(torch.cat([(p - start[k]).flatten() for k, p in model.state_dict().items()]))
        losses.append(history["steps"][0]["loss"])
    gap = (changes[0] - changes[1]).norm() / changes[0].norm()
    assert gap < 1e-5, f"the accumulated update differs from the large batch's by {gap:.2e} (relative)"
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_a_window_ending_in_a_batch_without_masks_still_steps_at_the_end_of_the_epoch(monkeypatch, smoke_tokenizer):
    """A short last window still steps: rows 0-2 masked, row 3 ("Hi.") not; batch 1, accumulation 2, 2 epochs: windows 0+1 and 2
    in each epoch, so 4 steps, as many as the schedule has, ending at rate 0."""
    import hp_mlm.training as training
    from hp_mlm.common import derive_seed
    from hp_mlm.masking import freeze_masks

    rows = tokenised(smoke_tokenizer, SENTENCES[:3] + ["Hi."])

    def masked(seed):
        frozen = freeze_masks(rows, smoke_tokenizer, 0.15, derive_seed(seed, "static-masks"), at_least_one=False)
        return [any(label != -100 for label in row["labels"]) for row in frozen]

    seed = next(s for s in range(200) if masked(s) == [True, True, True, False])
    monkeypatch.setattr(training, "plan_batches", lambda *args, **kwargs: [[0], [1], [2], [3]])
    settings = smoke_settings(
        batch_size=1,
        gradient_accumulation_steps=2,
        epochs=2,
        mask_once=True,
        seed=seed,
        schedule="linear",
        warmup_fraction=0.0,
    )
    history = fit(no_dropout_model(smoke_tokenizer), smoke_tokenizer, rows, settings)
    assert history["optimizer_steps"] == 4 == training.optimizer_steps(len(rows), settings)
    assert [s["epoch"] for s in history["steps"]] == [1, 1, 2, 2]
    assert history["steps"][-1]["lr"] == pytest.approx(1e-3 / 5)  # the decay reaches 0 one step after the last
    assert history["batches_without_masks"] == 2


def test_a_step_skipped_by_loss_scaling_is_counted_apart_and_the_schedule_waits(monkeypatch, smoke_tokenizer):
    """A step skipped by fp16 loss scaling, simulated on a CPU: the first window's update is skipped (as fp16's GradScaler does on
    inf gradients); it is not an optimiser step, and the schedule does not move for it."""
    from accelerate.optimizer import AcceleratedOptimizer

    real_step, calls = AcceleratedOptimizer.step, []

    def step(self, *args, **kwargs):
        calls.append(1)
        self.skipped_for_test = len(calls) == 1
        return None if self.skipped_for_test else real_step(self, *args, **kwargs)

    monkeypatch.setattr(AcceleratedOptimizer, "step", step)
    monkeypatch.setattr(AcceleratedOptimizer, "step_was_skipped", property(lambda self: self.skipped_for_test))
    rows = tokenised(smoke_tokenizer, SENTENCES)  # 8 rows, batches of 4: 2 windows per epoch
    history = fit(
        no_dropout_model(smoke_tokenizer), smoke_tokenizer, rows, smoke_settings(epochs=2, warmup_fraction=0.0)
    )
    assert len(calls) == 4 and history["skipped_steps"] == 1
    assert history["optimizer_steps"] == len(history["steps"]) == 3
    planned = [1e-3 * (1 - k / 5) for k in range(1, 4)]  # 4 steps counted from 1, one of them not taken
    assert [s["lr"] for s in history["steps"]] == pytest.approx(planned)


def test_a_plan_runs_once(smoke_tokenizer, smoke_model):
    """Running the loop cell again must not go on, silently, past the schedule's end."""
    from hp_mlm.training import plan_training, train

    plan = plan_training(smoke_model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), smoke_settings())
    train(plan)
    with pytest.raises(ValueError, match="trained already; make a new one with plan_training"):
        train(plan)
    assert plan.history["optimizer_steps"] == 2


def test_the_epochs_training_loss_is_per_masked_token_not_a_mean_of_step_losses(monkeypatch, smoke_tokenizer):
    """Rows with few and with many masked tokens, one per step: the epoch's train_loss weighs each step by
    its masked tokens (the rule of a window's loss and of the held-out loss), and says how many."""
    from hp_mlm import training

    steps, real = [], training.training_step

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        steps.append(result)
        return result

    monkeypatch.setattr(training, "training_step", spy)
    rows = tokenised(smoke_tokenizer, ["Hob rowed.", " ".join(SENTENCES[:4])])
    settings = smoke_settings(batch_size=1, mask_once=True, mlm_probability=0.4, group_by_length=False)
    history = fit(no_dropout_model(smoke_tokenizer), smoke_tokenizer, rows, settings)
    (epoch,) = history["epochs"]
    taken = [s for s in steps if s is not None]
    assert len(taken) == 2 and taken[0][1] != taken[1][1]  # two steps with different masked counts
    weighted = sum(loss * n for loss, n in taken) / sum(n for _, n in taken)
    assert epoch["masked_tokens"] == sum(n for _, n in taken)
    assert epoch["train_loss"] == pytest.approx(weighted, rel=1e-12)
    assert epoch["train_loss"] != pytest.approx(sum(loss for loss, _ in taken) / 2, rel=1e-3)
    assert [s["loss"] for s in history["steps"]] == [loss for loss, _ in taken]


def test_fp16_loss_scaling_skips_an_inf_step_in_the_open(monkeypatch, smoke_tokenizer):
    """fp16 with a GradScaler (on the CPU here, as on a T4): an inf gradient at the second step is a
    skipped step: the weights do not move, the schedule waits, it is counted apart. fp16 gets the
    unfused AdamW, whose skip accelerate sees (a fused kernel would skip inside itself, unseen)."""
    from accelerate import Accelerator

    from hp_mlm import training
    from hp_mlm.ops.job import run_training
    from hp_mlm.training import plan_training

    def fp16_accelerator(settings, real=training.new_accelerator):
        accelerator = real(settings.replace(precision="fp32"))
        accelerator.state._mixed_precision = "fp16"  # as on a GPU: autocast to fp16 and a loss scaler
        accelerator.native_amp = True
        accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        return accelerator

    monkeypatch.setattr(training, "new_accelerator", fp16_accelerator)
    model = no_dropout_model(smoke_tokenizer)
    settings = smoke_settings(epochs=1, batch_size=2, warmup_fraction=0.0, group_by_length=False)
    settings = settings.replace(precision="fp16")  # as resolved on a T4 (this CPU refuses fp16 when asked)
    plan = plan_training(model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), settings)
    assert isinstance(plan.accelerator, Accelerator) and plan.accelerator.scaler is not None
    assert not plan.optimizer.optimizer.defaults.get("fused")  # fp16: the unfused AdamW
    backward, snapshots, real = [], [], training.training_step
    weight = model.get_input_embeddings().weight
    weight.register_hook(lambda grad: grad * math.inf if len(backward) == 2 else grad)
    monkeypatch.setattr(
        plan.accelerator, "backward", lambda loss, b=plan.accelerator.backward: backward.append(1) or b(loss)
    )

    def step(*args, **kwargs):
        before = {k: v.clone() for k, v in model.state_dict().items()}
        result = real(*args, **kwargs)
        snapshots.append((before, result))
        return result

    monkeypatch.setattr(training, "training_step", step)
    history = run_training(plan, [])
    assert [r is None for _, r in snapshots] == [False, True, False, False]  # 8 rows, batch 2: the 2nd skipped
    skipped_before = snapshots[1][0]
    after_skip = snapshots[2][0]
    assert all(torch.equal(skipped_before[k], after_skip[k]) for k in skipped_before)  # no weight moved
    assert history["skipped_steps"] == 1 and history["optimizer_steps"] == len(history["steps"]) == 3
    planned = [1e-3 * (1 - k / 5) for k in range(1, 4)]  # 4 steps counted from 1, one of them not taken
    assert [s["lr"] for s in history["steps"]] == pytest.approx(planned)


# --- the schedule counted from 1: no step at rate 0, and each step logs the rate it used ---------------------


def rates_used(monkeypatch):
    """Patch accelerate's optimiser so that each optimiser step records the rate it runs at, read from the
    optimiser itself (not from the schedule or the log)."""
    from accelerate.optimizer import AcceleratedOptimizer

    real, used = AcceleratedOptimizer.step, []

    def step(self, *args, **kwargs):
        used.append(self.param_groups[0]["lr"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(AcceleratedOptimizer, "step", step)
    return used


def transformers_rates(kind, total, warmup, peak):
    """transformers' own schedule over ``total + 1`` steps, at steps 1 to ``total`` (its step 0 is rate 0)."""
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    dummy = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    if kind == "linear":
        schedule = get_linear_schedule_with_warmup(dummy, warmup, total + 1)
    else:
        schedule = get_constant_schedule_with_warmup(dummy, warmup)
    return [peak * schedule.lr_lambdas[0](k) for k in range(1, total + 1)]


@pytest.mark.parametrize(
    "kind, warmup_fraction, warmup_steps",
    [("linear", 0.05, 1), ("linear", 0.25, 5), ("constant", 0.125, 3), ("constant", 0.0, 0)],
)
def test_no_step_runs_at_rate_0_and_each_step_logs_the_rate_it_used(
    monkeypatch, smoke_tokenizer, kind, warmup_fraction, warmup_steps
):
    """20 steps (a warmup of 0.125 * 20 = 2.5 steps is 3, not round's 2): the rate read from the optimiser at
    every step is transformers' schedule of the same shape counted from 1, never 0, and is the rate logged."""
    used = rates_used(monkeypatch)
    rows = tokenised(smoke_tokenizer, SENTENCES * 5)  # 40 rows, batches of 4: 10 steps an epoch
    settings = smoke_settings(epochs=2, schedule=kind, warmup_fraction=warmup_fraction)
    model = no_dropout_model(smoke_tokenizer)
    first = {k: v.clone() for k, v in model.state_dict().items()}
    history = fit(model, smoke_tokenizer, rows, settings)
    assert len(used) == history["optimizer_steps"] == 20
    assert all(rate > 0 for rate in used)
    assert [s["lr"] for s in history["steps"]] == used
    assert used == pytest.approx(transformers_rates(kind, 20, warmup_steps, 1e-3), rel=1e-9)
    if warmup_steps:
        assert used[0] == pytest.approx(1e-3 / warmup_steps) and used[warmup_steps - 1] == pytest.approx(1e-3)
    assert not all(torch.equal(first[k], v) for k, v in model.state_dict().items())


def test_an_interrupted_run_resumed_uses_the_uninterrupted_runs_rate_at_every_step(
    monkeypatch, tmp_path, smoke_tokenizer
):
    from hp_mlm.callbacks import TimeBudget

    used = rates_used(monkeypatch)
    rows = tokenised(smoke_tokenizer, SENTENCES * 5)
    settings = smoke_settings(epochs=2, warmup_fraction=0.25)
    fit(no_dropout_model(smoke_tokenizer), smoke_tokenizer, rows, settings, output_dir=tmp_path / "whole")
    whole, used[:] = list(used), []
    budget = TimeBudget(0.0)  # stops at the first step
    fit(no_dropout_model(smoke_tokenizer), smoke_tokenizer, rows, settings, [budget], output_dir=tmp_path / "cut")
    history = fit(
        no_dropout_model(smoke_tokenizer), smoke_tokenizer, rows, settings, output_dir=tmp_path / "cut", resume=True
    )
    assert used == whole and [s["lr"] for s in history["steps"]] == whole
