"""Several processes share the work: run with 2 CPU processes over gloo, as `accelerate launch` or
`torchrun` would start them, and compare with one process."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = r"""
import json, sys, time
import torch
from hp_mlm.checkpoints import save_model
from hp_mlm.common import process_state
from hp_mlm.config import get_settings
from hp_mlm.data import load_corpus
from hp_mlm.studies.breakdowns import BREAKDOWNS
from hp_mlm.evaluation import evaluate
from hp_mlm.masking import MaskingCollator, freeze_masks
from hp_mlm.models import build_smoke_model, build_smoke_tokenizer
from hp_mlm.tokens import tokenize_rows
import hp_mlm.callbacks as c
import hp_mlm.training as t

out, epochs, resume, slow = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
settings = get_settings("smoke", environ={}, epochs=epochs, batch_size=8, checkpoint_every=2, progress=False,
                        split="train[:100]", schedule="linear", precision="fp32", learning_rate=2e-3)
tok = build_smoke_tokenizer()
model = build_smoke_model(tok)
rows, _ = load_corpus(settings.dataset, settings.split)
tokens = list(tokenize_rows(rows, tok, settings.max_length))
state = process_state()
seen = []  # the rows this process trained on, by their token ids
collate = MaskingCollator.__call__
def recording(self, features):
    seen.extend(tuple(f["input_ids"]) for f in features)
    return collate(self, features)
MaskingCollator.__call__ = recording
if slow:  # report each checkpoint, so the test can kill the run just after one
    real = c.save_checkpoint
    def save_and_report(*a, **k):
        path = real(*a, **k)
        if state.is_main_process:
            print("CHECKPOINT", path.name, flush=True)
        time.sleep(0.5)
        return path
    c.save_checkpoint = save_and_report
plan = t.plan_training(model, tok, tokens, settings, output_dir=out, resume=resume)
history = t.train(plan, [c.SaveCheckpoints(plan)])
frozen = freeze_masks(tokens[:60], tok, 0.15, seed=7)
result = evaluate(model, frozen, tok, batch_size=8, breakdowns=BREAKDOWNS)  # each process scores every other batch
if state.is_main_process:
    save_model(model, tok, out + "/model")
json.dump({"history": history, "seen": seen, "evaluation": result, "all_rows": [r["input_ids"] for r in tokens],
           "processes": state.num_processes},
          open(f"{out}/process-{state.process_index}.json", "w"))
state.wait_for_everyone()
print("DONE", flush=True)
"""


def launch(
    tmp_path: Path, out: Path, processes: int, epochs: int, resume: bool = False, slow: bool = False, wait: bool = True
):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out.mkdir(parents=True, exist_ok=True)
    args = [str(out), str(epochs), "1" if resume else "0", "1" if slow else "0"]
    if processes == 1:
        cmd = [sys.executable, str(script), *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={processes}",
            str(script),
            *args,
        ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if wait:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return [json.loads((out / f"process-{i}.json").read_text()) for i in range(processes)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True
    )


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dp")
    return launch(tmp, tmp / "one", 1, epochs=1), launch(tmp, tmp / "two", 2, epochs=1), tmp


def test_two_processes_split_each_epoch_and_see_every_row(one_and_two):
    (single,), (p0, p1), _ = one_and_two
    batches = math.ceil(len(single["all_rows"]) / 8)
    assert p0["processes"] == p1["processes"] == 2 and single["processes"] == 1
    assert single["history"]["optimizer_steps"] == batches
    assert p0["history"]["optimizer_steps"] == p1["history"]["optimizer_steps"] == math.ceil(batches / 2)
    assert p0["history"]["processes"] == 2
    every_row = {tuple(r) for r in single["all_rows"]}
    assert set(map(tuple, p0["seen"])) | set(map(tuple, p1["seen"])) == every_row
    assert set(map(tuple, p0["seen"])) != set(map(tuple, p1["seen"]))  # different batches, not the same work twice
    # every row trained once an epoch, as in one process: no batch copied to even the processes' shares
    assert sorted(map(tuple, p0["seen"] + p1["seen"])) == sorted(map(tuple, single["seen"]))


def test_two_process_metrics_equal_one_process_on_the_same_weights(one_and_two):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from hp_mlm.evaluation import evaluate
    from hp_mlm.masking import freeze_masks
    from hp_mlm.studies.breakdowns import BREAKDOWNS

    _, (p0, p1), tmp = one_and_two
    assert p0["evaluation"] == {**p1["evaluation"], "seconds": p0["evaluation"]["seconds"]}  # both processes agree
    model = AutoModelForMaskedLM.from_pretrained(tmp / "two" / "model")
    tok = AutoTokenizer.from_pretrained(tmp / "two" / "model")
    rows = [
        {
            "input_ids": r,
            "attention_mask": [1] * len(r),
            "special_tokens_mask": tok.get_special_tokens_mask(r, already_has_special_tokens=True),
        }
        for r in p0["all_rows"][:60]
    ]
    alone = evaluate(model, freeze_masks(rows, tok, 0.15, seed=7), tok, batch_size=8, breakdowns=BREAKDOWNS)
    shared = p0["evaluation"]
    for key in ("top1", "top5", "n_positions", "n_rows", "kinds", "words"):
        assert shared[key] == alone[key], key
    assert shared["cross_entropy"] == pytest.approx(alone["cross_entropy"], rel=1e-9)
    assert not torch.isnan(torch.tensor(shared["cross_entropy"]))


def test_one_copy_of_the_outputs(one_and_two):
    _, _, tmp = one_and_two
    assert (tmp / "two" / "model" / "model.safetensors").exists()
    assert not list((tmp / "two").glob(".*tmp*"))
    assert len(list((tmp / "two" / "checkpoints").glob("step-*"))) == 1


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first found first."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [c for child in children for c in (child, *descendants(child))]


def kill_tree(pid: int) -> None:
    """SIGKILL a launcher and all its workers: torchrun starts each worker in a session of its own, so
    killing the launcher's process group alone leaves the workers running (they would finish the run)."""
    for victim in [*descendants(pid), pid]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_killed_two_process_run_resumes_to_the_same_weights(tmp_path):
    reference = launch(tmp_path, tmp_path / "reference", 2, epochs=2)
    killed = tmp_path / "killed"
    proc = launch(tmp_path, killed, 2, epochs=2, slow=True, wait=False)
    seen = []
    for line in proc.stdout:
        if line.startswith("CHECKPOINT"):
            seen.append(line.split()[1])
            if len(seen) == 2:  # mid-epoch: steps 2 and 4 of 7 per epoch
                kill_tree(proc.pid)
                break
    proc.wait(timeout=60)
    assert proc.returncode != 0 and not (killed / "model").exists()
    state = json.loads((killed / "checkpoints" / seen[-1] / "state.json").read_text())
    assert state["epoch"] == 0 and state["batches_done"] == 4 and state["run"]["processes"] == 2
    assert {p.name for p in (killed / "checkpoints" / seen[-1]).glob("random_states_*")} == {
        "random_states_0.pkl",
        "random_states_1.pkl",
    }
    resumed = launch(tmp_path, killed, 2, epochs=2, resume=True)
    assert resumed[0]["history"]["optimizer_steps"] == reference[0]["history"]["optimizer_steps"]
    a = load_file(tmp_path / "reference" / "model" / "model.safetensors")
    b = load_file(killed / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


TWO_ROWS = """
import sys, torch
import hp_mlm.callbacks as c
import hp_mlm.training as t
from hp_mlm.common import process_state
from hp_mlm.config import get_settings
from hp_mlm.models import build_smoke_model, build_smoke_tokenizer
from safetensors.torch import save_file
out, batch_size = sys.argv[1], int(sys.argv[2])
t.build_optimizer = lambda model, lr, weight_decay=0.0, fused=True: torch.optim.SGD(model.parameters(), lr=lr)
settings = get_settings("smoke", environ={}, batch_size=batch_size, epochs=1, mask_once=True, schedule="constant",
                        warmup_fraction=0.0, max_grad_norm=0.0, group_by_length=False, precision="fp32",
                        learning_rate=1.0, mlm_probability=0.4, checkpoint_every=0, progress=False)
tok = build_smoke_tokenizer()
model = build_smoke_model(tok, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
enc = tok(["Hob rowed.", "Mira Ashdown crossed the Silver Lake at dawn and rowed the ferry to the Lantern Tower."],
          return_special_tokens_mask=True, return_token_type_ids=False)
rows = [{k: enc[k][i] for k in ("input_ids", "attention_mask", "special_tokens_mask")} for i in range(2)]
start = {k: v.clone() for k, v in model.state_dict().items()}
history = t.train(t.plan_training(model, tok, rows, settings))
if process_state().is_main_process:
    save_file({k: (v - start[k]).contiguous() for k, v in model.state_dict().items()}, out)
    print("LOSS", history["steps"][0]["loss"], history["optimizer_steps"], flush=True)
process_state().wait_for_everyone()  # no process leaves while another still talks to it
if torch.distributed.is_initialized():  # and none leaves gloo's threads running at exit (std::terminate)
    torch.distributed.destroy_process_group()
"""


def test_two_processes_of_one_row_make_the_update_of_one_batch_of_two(tmp_path):
    """Accumulation across processes: the masked tokens are counted over both processes before dividing, and DDP's
    averaging is undone, so the update is one process's batch of 2, to float rounding."""
    script = tmp_path / "two_rows.py"
    script.write_text(TWO_ROWS)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    runs = {
        "one": [sys.executable, str(script), str(tmp_path / "one.safetensors"), "2"],
        "two": [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            str(tmp_path / "two.safetensors"),
            "1",
        ],
    }
    logged = {}
    for name, cmd in runs.items():
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        line = next(x for x in done.stdout.splitlines() if x.startswith("LOSS"))
        logged[name] = (float(line.split()[1]), int(line.split()[2]))
    one, two = load_file(tmp_path / "one.safetensors"), load_file(tmp_path / "two.safetensors")
    a = torch.cat([one[k].flatten() for k in sorted(one)])
    b = torch.cat([two[k].flatten() for k in sorted(two)])
    assert (a - b).norm() / a.norm() < 1e-5
    assert logged["one"][1] == logged["two"][1] == 1
    assert logged["one"][0] == pytest.approx(logged["two"][0], rel=1e-6)  # the window's loss, not one process's
