"""The attention levers of the course's training step, interleaved: attention dropout on or off, SDPA or eager.

Three variants train **the same model in the same process, step by step in turns** (the order reversed
every other round, so none always goes first), and each round gives one ratio per variant against the course;
the spread of the rounds' ratios is the figure's error bar. ``ceiling.py`` times each variant in its own
process one after the other, and on a shared host the machine's speed drifts between rows by more than
the differences measured, so its rows say where the time goes and this says which variant is faster:

- ``attention dropout on``: the model's 0.1 dropout on attention weights (PyTorch's CPU SDPA then takes its
  unfused path, which builds every head's attention matrix and dropout mask); the course before levers.md;
- ``course``: attention dropout off, ``attn_implementation="sdpa"``: PyTorch's fused (flash) CPU kernel; the
  course's step in fp32 and past 128 tokens (in bf16 too before ``attention="auto"``);
- ``eager``: attention dropout off, ``attn_implementation="eager"``: matmul, softmax, matmul. Without dropout
  it computes the same function as SDPA (``tests/test_levers.py`` checks the logits and gradients agree);
  the course's step on a CPU in bf16 at 128 tokens or fewer since ``attention="auto"``.

The switches are read at every forward (``config._attn_implementation`` and the attention modules'
``dropout.p`` in transformers 5), so one set of weights serves all three; the weights move on as they train.
For MiniLM-L6 (the offline stand-in) and bert-base size (random ``BertConfig()``), at 16 x 128 (the quick
and offline profiles) and MiniLM at 16 x 512 (the full profile's length), in bf16 autocast where the CPU
has it and in fp32:

    python benchmarks/attention_kernel.py               # about 15 minutes on 2 cores
    python benchmarks/attention_kernel.py --rounds 3 --configs minilm-l6:128:bf16

Writes benchmarks/results/attention_kernel.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ceiling import RESULTS, build, train_step  # noqa: E402

CONFIGS = (
    "minilm-l6:128:bf16",
    "minilm-l6:128:fp32",
    "bert-base:128:bf16",
    "bert-base:128:fp32",
    "minilm-l6:512:bf16",
)
#: variant -> (attention dropout on, attn_implementation); ratios are against "course".
VARIANTS = {"attention dropout on": (True, "sdpa"), "course": (False, "sdpa"), "eager": (False, "eager")}


def interleaved(
    model_name: str, length: int, precision: str, rounds: int, batch: int = 16, padded: float = 0.0
) -> dict:
    """Seconds per training step of each variant, taken in turns on one model, and each round's ratio of
    a variant's seconds to the course's (below 1: faster than the course). ``padded``: the share of the
    positions of every other row that are padding (attention mask 0, never masked for the loss), as in a
    batch of rows of different lengths; 0: every position is real."""
    import torch

    from hp_mlm.training import build_optimizer

    model = build(model_name, attention_dropout=True, attention="sdpa")
    attention_dropouts = [m for name, m in model.named_modules() if name.endswith("attention.self.dropout")]
    assert attention_dropouts, "no attention dropout modules found"
    p = model.config.attention_probs_dropout_prob
    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, length), generator=draw)
    mask, chosen = torch.ones_like(ids), torch.rand(ids.shape, generator=draw) < 0.15
    if padded:
        mask[::2, length - int(padded * length) :] = 0
        chosen &= mask.bool()
    optimizer = build_optimizer(model, 1e-5)

    def step(variant: str) -> float:
        dropout_on, kernel = VARIANTS[variant]
        model.config._attn_implementation = kernel  # read by every attention layer at each forward
        for module in attention_dropouts:
            module.p = p if dropout_on else 0.0
        started = time.perf_counter()
        train_step(model, optimizer, ids, mask, chosen, precision)
        return time.perf_counter() - started

    names = list(VARIANTS)
    for variant in names:  # warm-up: allocations, AdamW's state, each path's first call
        step(variant)
    seconds: dict[str, list[float]] = {v: [] for v in names}
    ratios: dict[str, list[float]] = {v: [] for v in names if v != "course"}
    for i in range(rounds):
        order = names if i % 2 == 0 else names[::-1]
        taken = dict.fromkeys(names, 0.0)
        for variant in order + order[::-1]:
            s = step(variant)
            seconds[variant].append(s)
            taken[variant] += s
        for variant in ratios:
            ratios[variant].append(taken[variant] / taken["course"])
    return {
        "model": model_name,
        "shape": f"{batch} x {length}",
        "precision": precision,
        "rounds": rounds,
        "padded": padded,
        "step_median_s": {v: round(statistics.median(x), 3) for v, x in seconds.items()},
        "over_course": {
            v: {"median": round(statistics.median(r), 3), "min": round(min(r), 3), "max": round(max(r), 3),
                "rounds": [round(x, 3) for x in r]}
            for v, r in ratios.items()
        },
    }  # fmt: skip


def report(machine: dict, rows: list[dict]) -> str:
    def ratio(r: dict, variant: str) -> str:
        x = r["over_course"][variant]
        read = "faster" if x["max"] < 1 else "slower" if x["min"] > 1 else "the rounds disagree"
        return f"{x['median']:.2f} [{x['min']:.2f}, {x['max']:.2f}], {read}"

    lines = [
        "The attention levers in the course's training step, the same model and process, in turns (seconds per",
        "step, median; each variant's time over the course's, median [min, max] over the rounds: below 1 is",
        f"faster than the course). Command: `{machine.get('command', 'python benchmarks/attention_kernel.py')}`.",
        "",
        f"Machine: {machine}.",
        "",
        "| model | batch x tokens | precision | course (s) | attention dropout on (s) | on / course | eager (s) | "
        "eager / course |",
        "| --- | --- | --- | ---: | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        t = r["step_median_s"]
        lines.append(
            f"| {r['model']} | {r['shape']} | {r['precision']} | {t['course']} | {t['attention dropout on']} | "
            f"{ratio(r, 'attention dropout on')} | {t['eager']} | {ratio(r, 'eager')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="model:length:precision")
    parser.add_argument("--padded", type=float, default=0.0, help="share of every other row that is padding")
    parser.add_argument("--name", default="attention_kernel", help="results file name (without .json/.md)")
    args = parser.parse_args()
    from hp_mlm.common import cpu_has_native_bf16

    rows, started = [], time.perf_counter()
    for config in args.configs:
        model_name, length, precision = config.split(":")
        if precision == "bf16" and not cpu_has_native_bf16():
            print(f"{config}: skipped, this CPU has no bf16 instructions")
            continue
        rows.append(interleaved(model_name, int(length), precision, args.rounds, padded=args.padded))
        print(json.dumps(rows[-1]), flush=True)
    print(save("attention_kernel.py", args.name, rows, started, report))


def save(script: str, name: str, rows: list[dict], started: float, report) -> str:
    """Write ``rows`` with the machine's facts to results/<name>.json and ``report(machine, rows)`` to
    results/<name>.md (the interleaved benchmarks: this one and ``dropout_step.py``); return the text."""
    import torch

    from hp_mlm.common import atomic_write_text, cpu_has_native_bf16

    machine = {
        "cpu": platform.machine(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "native_bf16": cpu_has_native_bf16(),
        "torch": torch.__version__,
        "loadavg_end": list(os.getloadavg()),
        "seconds": round(time.perf_counter() - started, 1),
        "command": " ".join([f"python benchmarks/{script}", *sys.argv[1:]]),
    }
    atomic_write_text(RESULTS / f"{name}.json", json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")
    text = report(machine, rows)
    atomic_write_text(RESULTS / f"{name}.md", text)
    return text


if __name__ == "__main__":
    main()
