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
