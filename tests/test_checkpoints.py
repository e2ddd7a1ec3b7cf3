"""One run per output folder: a second live process is refused in one line, a killed run leaves the
folder free, and a notebook that plans again in the same kernel keeps it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SENTENCES, fit, tokenised

from hp_mlm.checkpoints import LOCK, hold_output_dir, release_output_dir
from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.training import plan_training

ROOT = Path(__file__).resolve().parents[1]
#: Holds the folder given as its argument, says so, then waits to be killed.
HOLDER = "import sys, time\nfrom hp_mlm.checkpoints import hold_output_dir\nhold_output_dir(sys.argv[1])\nprint('HELD', flush=True)\ntime.sleep(300)"
#: Holds the folder given as its argument and ends: exit status 0 when it was free.
TAKER = "import sys\nfrom hp_mlm.checkpoints import hold_output_dir\nhold_output_dir(sys.argv[1])"


def settings():
    base = dict(epochs=1, batch_size=4, progress=False, checkpoint_every=0, learning_rate=1e-3, schedule="linear")
    return resolve_auto(get_settings("smoke", environ={}, **base), new_head=True)


def python(code: str, *args: str, **kwargs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True, **kwargs)


@pytest.fixture()
def folder(tmp_path):
    yield tmp_path / "out"
    release_output_dir(tmp_path / "out")  # this test process's hold, if it took one


@pytest.fixture()
def holder(folder):
    """Another process holding ``folder`` (its ``Popen``); killed at the end if still alive."""
    process = python(HOLDER, str(folder), stdout=subprocess.PIPE)
    assert process.stdout.readline().strip() == "HELD"
    yield process
    process.kill()
    process.wait(timeout=30)


def test_a_second_run_into_a_held_folder_is_refused_in_one_line(holder, folder, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    with pytest.raises(RuntimeError) as refused:
        plan_training(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder)
    message = str(refused.value)
    assert "\n" not in message and f"process {holder.pid} on " in message
    assert f"training into {str(folder)!r}" in message and "set `output_dir` (HP_MLM_OUTPUT_DIR)" in message
    assert not (folder / "checkpoints").exists()  # refused before reading or writing anything


def test_a_killed_run_leaves_the_folder_free(holder, folder, smoke_tokenizer, smoke_model):
    with pytest.raises(RuntimeError):
        hold_output_dir(folder)
    os.kill(holder.pid, signal.SIGKILL)  # no chance to clean up: the lock file stays behind
    holder.wait(timeout=30)
    assert (folder / LOCK).exists()
    rows = tokenised(smoke_tokenizer, SENTENCES)
    plan = plan_training(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder)
    assert plan.output_dir == folder
    assert (folder / LOCK).read_text(encoding="utf-8").startswith(f"process {os.getpid()} on ")


def test_a_notebook_plans_again_into_its_folder_and_the_end_of_training_frees_it(folder, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    plan_training(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder)  # a first run of the cell
    assert python(TAKER, str(folder), stderr=subprocess.DEVNULL).wait(timeout=60) != 0  # held by this process
    history = fit(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder)  # the cell again, trained
    assert history["optimizer_steps"] > 0
    assert python(TAKER, str(folder)).wait(timeout=60) == 0  # free once the run has ended


def test_the_command_line_refuses_a_held_folder_before_loading_anything(holder, folder, capsys):
    from hp_mlm.ops import cli
    from hp_mlm.ops.troubleshooting import PAGE

    status = cli.main(["train", "--profile", "smoke", "--output-dir", str(folder), "--resume"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and line.startswith(f"error: another run (process {holder.pid} on ")
    assert line.endswith(f"(help: {PAGE}#another-run-is-training-into-the-output-folder)")
    assert sorted(p.name for p in folder.iterdir()) == [LOCK]  # nothing loaded, nothing written


def test_a_run_refused_in_a_live_process_leaves_the_folder_free(folder):
    """A notebook kernel (this process) asks for a run into a folder that holds a model, without
    `overwrite`: refused, and a run in a terminal (another process) is not told that one is training."""
    from hp_mlm.ops.job import run_job

    (folder / "model").mkdir(parents=True)  # a finished run: --resume has nothing to continue, so not offered
    with pytest.raises(FileExistsError, match="holds a finished run.*train it further.*another `output_dir`"):
        run_job(get_settings("smoke", environ={}, output_dir=str(folder)), log=lambda _: None)
    (folder / "checkpoints").mkdir()  # a run with a checkpoint: resume it, or overwrite it
    with pytest.raises(FileExistsError, match="already holds a model or checkpoints.*`resume` to continue"):
        run_job(get_settings("smoke", environ={}, output_dir=str(folder)), log=lambda _: None)
    taker = python(TAKER, str(folder), stderr=subprocess.PIPE)
    assert taker.wait(timeout=60) == 0, taker.stderr.read()


def test_a_plan_refused_by_its_checkpoint_leaves_the_folder_free(folder, smoke_tokenizer, smoke_model):
    rows = tokenised(smoke_tokenizer, SENTENCES)
    fit(smoke_model, smoke_tokenizer, rows, settings(), output_dir=folder)  # leaves a checkpoint
    with pytest.raises(ValueError, match="cannot resume"):
        plan_training(smoke_model, smoke_tokenizer, rows, settings().replace(seed=7), output_dir=folder, resume=True)
    taker = python(TAKER, str(folder), stderr=subprocess.PIPE)
    assert taker.wait(timeout=60) == 0, taker.stderr.read()


def test_a_compiled_model_is_checkpointed_under_its_plain_names_and_resumes_either_way(
    folder, smoke_tokenizer, smoke_model
):
    """``torch.compile`` wraps a model (its own keys start ``_orig_mod.``); the checkpoint names the
    model's parameters, so a new session resumes it with or without the compile."""
    import torch
    from safetensors import safe_open

    from hp_mlm.checkpoints import latest_checkpoint, save_model
    from hp_mlm.models import build_smoke_model, load_model

    rows = tokenised(smoke_tokenizer, SENTENCES)
    compiled = torch.compile(smoke_model, backend="eager")  # the wrapper, without a compiler's minutes
    fit(compiled, smoke_tokenizer, rows, settings(), output_dir=folder)
    trained = {k: v.clone() for k, v in smoke_model.state_dict().items()}
    with safe_open(str(latest_checkpoint(folder) / "model.safetensors"), "pt") as saved:
        names = list(saved.keys())
    assert names and not [n for n in names if "_orig_mod" in n]
    for wrap in (lambda m: m, lambda m: torch.compile(m, backend="eager")):  # a new session, with or without
        fresh = build_smoke_model(smoke_tokenizer, seed=1)
        plan_training(wrap(fresh), smoke_tokenizer, rows, settings(), output_dir=folder, resume=True)
        assert all(torch.equal(fresh.state_dict()[k], v) for k, v in trained.items())
        release_output_dir(folder)
    reloaded = load_model(str(save_model(compiled, smoke_tokenizer, folder / "model"))).model
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in trained.items())


def test_a_checkpoint_written_with_compiled_names_resumes_with_its_weights(
    folder, smoke_tokenizer, smoke_model, monkeypatch
):
    """Before compiled models were held unwrapped, a checkpoint named their parameters ``model._orig_mod.``...:
    such a checkpoint (made here as that code made it) resumes with its trained weights, with or without
    the compile, instead of being refused as unreadable."""
    import torch
    from safetensors import safe_open
    from torch import nn

    from hp_mlm import training
    from hp_mlm.checkpoints import latest_checkpoint
    from hp_mlm.models import build_smoke_model

    def held_wrapped(self, model, masked_positions_only=True):  # the objective before the fix
        nn.Module.__init__(self)
        self.model, self.masked_positions_only = model, masked_positions_only

    rows = tokenised(smoke_tokenizer, SENTENCES)
    with monkeypatch.context() as old:
        old.setattr(training.MaskedLMObjective, "__init__", held_wrapped)
        fit(torch.compile(smoke_model, backend="eager"), smoke_tokenizer, rows, settings(), output_dir=folder)
    release_output_dir(folder)
    trained = {k: v.clone() for k, v in smoke_model.state_dict().items()}
    with safe_open(str(latest_checkpoint(folder) / "model.safetensors"), "pt") as saved:
        assert all(n.startswith("model._orig_mod.") for n in saved.keys())  # the old names
    for wrap in (lambda m: m, lambda m: torch.compile(m, backend="eager")):
        fresh = build_smoke_model(smoke_tokenizer, seed=1)
        plan = plan_training(wrap(fresh), smoke_tokenizer, rows, settings(), output_dir=folder, resume=True)
        assert plan.history["optimizer_steps"] > 0  # resumed, not started again
        assert all(torch.equal(fresh.state_dict()[k], v) for k, v in trained.items())
        release_output_dir(folder)
