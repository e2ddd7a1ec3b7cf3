"""``benchmarks/ceiling.py``'s table: a cell under every header, in rows of today's runs and of earlier ones, and each
share taken against the best ceiling of its own run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ceiling_module():
    spec = importlib.util.spec_from_file_location("ceiling", ROOT / "benchmarks" / "ceiling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(run: str, ceiling: float, achieved: float, **extra) -> dict:
    return {
        "model": "minilm-l6",
        "parameters_m": 22.7,
        "shape": "16 x 128",
        "precision": "bf16",
        "variant": "course",
        "step_median_s": 0.6,
        "page_faults_per_step": 19733,
        "kernel_s_per_step": 0.04,
        "gflop_per_step": 159.4,
        "achieved_gflops": achieved,
        "ceiling_gflops": ceiling,
        "peak_memory_gb": 1.6,
        "run": run,
        **extra,
    }


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_every_row_has_a_cell_under_every_header_and_its_own_runs_share():
    ceiling = ceiling_module()
    today = row("today", 800.0, 400.0, step_spread=0.05, ceiling_spread=0.02, loadavg=(0.7, 0.8, 0.9))
    earlier = row("earlier", 2000.0, 300.0)  # a run before the spreads and the load were kept
    lines = [line for line in ceiling.report({"run": "today"}, [today, earlier]).splitlines() if line.startswith("|")]
    header = cells(lines[0])
    table = [cells(line) for line in lines[2:]]
    assert [len(r) for r in table] == [len(header)] * 2
    new, old = (dict(zip(header, r)) for r in table)
    assert new["model"] == "minilm-l6 (22.7M)" and new["step spread"] == "5%" and new["ceiling spread"] == "2%"
    assert new["share of best"] == "50%" and new["load (1 min)"] == "0.7"
    assert old["share of best"] == "15%" and old["ceiling spread"] == "n/a" and old["load (1 min)"] == "n/a"
