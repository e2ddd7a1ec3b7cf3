"""AdamW's default (foreach) step against ``fused=True`` on this machine, inside a real training step.

MiniLM-L6 and bert-base size (``ceiling.build``), 16 rows x 128 tokens, bf16 autocast, the MLM head
at the 15% masked positions; the two optimisers alternate for 3 rounds of 3 steps (the first of each
round a warm-up), so both meet the same machine load. The evidence for ``training.build_optimizer``'s
``fused=True``.

    python benchmarks/fused_adamw.py

Writes benchmarks/results/fused_adamw.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ceiling import build  # noqa: E402

from hp_mlm.common import autocast, cpu_has_native_bf16, mlm_logits  # noqa: E402


def measure(model_name: str, rounds: int = 3, steps: int = 3) -> dict[bool, tuple[float, float]]:
    """``{fused: (median step seconds, median optimiser seconds)}``."""
    model = build(model_name)
    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (16, 128), generator=draw)
    mask, chosen = torch.ones_like(ids), torch.rand(ids.shape, generator=draw) < 0.15
    precision = "bf16" if cpu_has_native_bf16() else "fp32"
    optimizers = {fused: torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused) for fused in (False, True)}
    times: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    for _ in range(rounds):
        for fused, optimizer in optimizers.items():
            for i in range(steps):
                started = time.perf_counter()
                with autocast(precision, "cpu"):
                    logits = mlm_logits(model, ids, mask, chosen)
                torch.nn.functional.cross_entropy(logits.float(), ids[chosen]).backward()
                stepping = time.perf_counter()
                optimizer.step()
                optimizer.zero_grad()
                if i:
                    times[fused][0].append(time.perf_counter() - started)
                    times[fused][1].append(time.perf_counter() - stepping)
    return {fused: (statistics.median(a), statistics.median(b)) for fused, (a, b) in times.items()}


def main() -> None:
    lines = [
        f"`python benchmarks/fused_adamw.py`: 16 x 128 tokens, {'bf16' if cpu_has_native_bf16() else 'fp32'}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of 3 rounds x 2 timed steps",
        "",
        "| model | AdamW | whole step (s) | optimiser step (s) |",
        "| --- | --- | ---: | ---: |",
    ]
    for model_name in ("minilm-l6", "bert-base"):
        for fused, (step, optimiser) in measure(model_name).items():
            lines.append(
                f"| {model_name} | {'fused' if fused else 'default (foreach)'} | {step:.3f} | {optimiser:.3f} |"
            )
            print(lines[-1], flush=True)
    out = Path(__file__).resolve().parent / "results" / "fused_adamw.md"
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
