"""Notebook 03 after its kernel dies mid-training (a Colab runtime recycled, a laptop asleep): run
again from the top, its plan finds the checkpoint in the profile's output folder and resumes there."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from hp_mlm.checkpoints import latest_checkpoint

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_training.ipynb"


def code_cells(nb, until: str) -> list[tuple[int, dict]]:
    """The code cells up to and including the first whose source contains ``until``."""
    cells = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cells.append((index, cell))
            if until in cell.source:
                return cells
    raise AssertionError(f"no cell with {until!r}")


def kill_at_first_checkpoint(client: NotebookClient, folder: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and latest_checkpoint(folder.parent) is None:  # complete, latest.json written
        time.sleep(0.05)
    os.kill(client.km.provisioner.pid, signal.SIGKILL)  # as a recycled runtime: no chance to save anything


def test_a_killed_notebook_03_kernel_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    for name, value in {
        "HP_MLM_PROFILE": "smoke",
        "HP_MLM_OUTPUT_DIR": str(out),
        "HP_MLM_EPOCHS": "400",  # far longer than the test waits
        "HP_MLM_CHECKPOINT_EVERY": "2",
        "HP_MLM_PROGRESS": "0",
        "TQDM_DISABLE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    with client.setup_kernel():
        *before, (train_index, train_cell) = code_cells(nb, "history = train(plan")
        for index, cell in before:
            client.execute_cell(cell, index)
        killer = threading.Thread(target=kill_at_first_checkpoint, args=(client, out / "checkpoints"))
        killer.start()
        with pytest.raises(DeadKernelError):
            client.execute_cell(train_cell, train_index)
        killer.join()
    assert any((out / "checkpoints").glob("step-*")), "a checkpoint was written before the kernel died"

    again = nbformat.read(NOTEBOOK, as_version=4)  # a new kernel runs the notebook from the top
    client = NotebookClient(
        again, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    with client.setup_kernel():
        for index, cell in code_cells(again, "plan = plan_training("):
            client.execute_cell(cell, index)
    said = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    epoch, batch = map(int, re.search(r"starts at epoch (\d+), batch (\d+)", said).groups())
    assert (epoch, batch) > (0, 0), said  # not from the beginning: from the checkpoint
