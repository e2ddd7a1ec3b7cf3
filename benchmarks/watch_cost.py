"""What the watch (``course.watch``) costs at bert-base size: one frame beside one training step, and
a notebook's redraw between frames (the curves and the line a slow machine gets every 15 s).

At ``bert-base-uncased``'s shapes (``BertConfig()``, random weights: the same work as the real model), on
this machine's CPU: a frame as ``WatchLearning.frame`` scores it (the books' four example sentences,
top-3 at each mask, in eval mode under ``torch.inference_mode``; ``--probes N`` one-token probes of
the same length beside them, 0 for the full profile, whose data ships none) against a training step
of the course (16 rows of ``--max-length`` tokens, bf16 autocast where the CPU has it, the MLM head at
the 15% masked positions, AdamW), alternated for ``--rounds`` rounds so that both meet the same load.
Then the share of a run: (12 + 1) frames against the run's steps, and a projection for a Colab T4
from the floating-point work of each (a frame is a forward pass over a few short sentences, a step a
forward and backward pass over 16 x max_length tokens).

    python benchmarks/watch_cost.py                 # writes benchmarks/results/watch_cost.md
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from hp_mlm.common import atomic_write_text, autocast, cpu_has_native_bf16
from hp_mlm.course.shipped import example_sentences
from hp_mlm.course.watch import (
    CURVE_SPACING,
    FRAME_SECONDS,
    FRAMES,
    REDRAW_SECONDS,
    SHOWN,
    LearningCurves,
    RunLine,
)
from hp_mlm.inference import fill_mask
from hp_mlm.models import load_tokenizer
from hp_mlm.profiles import BOOKS_DATASET

RESULTS = Path(__file__).resolve().parent / "results" / "watch_cost.md"
#: The books' example sentences, as a frame of the full profile's run shows them.
BOOK_SENTENCES = example_sentences(BOOKS_DATASET)
#: A projection, not a measurement (no GPU here): seconds of a bert-base training step of 16 rows on a T4
#: in fp16, from its 65 TFLOPS at about 30% use (6 x 110M parameters x tokens; at 512 tokens 1.3 times that for attention).
T4_STEP_SECONDS = {"128": 0.07, "512": 0.36}


def frame_seconds(model, tokenizer, probes: int) -> float:
    sentences = list(BOOK_SENTENCES) + ["The owl flew over the [MASK] castle at night."] * probes
    started = time.perf_counter()
    with torch.inference_mode():
        fill_mask(model, tokenizer, sentences, top_k=SHOWN)
    return time.perf_counter() - started


def redraw_seconds(steps: int) -> float:
    """A notebook's redraw between frames: the curves of ``steps`` losses rendered to a PNG, and the line."""
    losses = [(n, 7.0 - n / steps) for n in range(1, steps + 1)]
    frames = [{"step": n, "probes_right": 0, "probes": 0} for n in range(0, steps + 1, max(1, steps // FRAMES))]
    started = time.perf_counter()
    LearningCurves(losses, frames)._repr_mimebundle_()
    repr(RunLine({"step": steps, "seconds": steps * 6.0}, steps, float("inf"), losses))
    return time.perf_counter() - started


def step_seconds(model, optimizer, ids, chosen, precision: str) -> float:
    started = time.perf_counter()
    model.train()
    with autocast(precision, "cpu"):
        hidden = model.bert(input_ids=ids, attention_mask=torch.ones_like(ids))[0]
        logits = model.cls(hidden[chosen])
    torch.nn.functional.cross_entropy(logits.float(), ids[chosen]).backward()
    optimizer.step()
    optimizer.zero_grad()
    return time.perf_counter() - started


def main() -> None:
    from transformers import BertConfig, BertForMaskedLM

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--probes", type=int, default=0)
    parser.add_argument("--steps", type=int, default=114, help="steps of the run (quick profile: 600 rows, 3 epochs)")
    args = parser.parse_args()
    tokenizer = load_tokenizer("hp_mlm:minilm-l6")  # bert-base-uncased's vocabulary, offline
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    draw = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (16, args.max_length), generator=draw)
    chosen = torch.rand(ids.shape, generator=draw) < 0.15
    precision = "bf16" if cpu_has_native_bf16() else "fp32"
    frames, steps = [], []
    step_seconds(model, optimizer, ids, chosen, precision)  # warm-up: AdamW's state, the allocator
    frame_seconds(model, tokenizer, args.probes)
    for _ in range(args.rounds):
        frames.append(frame_seconds(model, tokenizer, args.probes))
        steps.append(step_seconds(model, optimizer, ids, chosen, precision))
    frame, step = statistics.median(frames), statistics.median(steps)
    redraw_seconds(args.steps)  # warm-up: matplotlib's fonts
    redraw = statistics.median(redraw_seconds(args.steps) for _ in range(args.rounds))
    share = (FRAMES + 1) * frame / (args.steps * step)
    t4_step = T4_STEP_SECONDS.get(str(args.max_length))
    cpu = platform.processor() or platform.machine()
    lines = [
        "# The watch's cost at bert-base size",
        "",
        f"`python benchmarks/watch_cost.py --max-length {args.max_length} --probes {args.probes}` on {cpu}, "
        f"{torch.get_num_threads()} threads, CPU bf16 {'native' if precision == 'bf16' else 'not native: fp32'}, "
        f"torch {torch.__version__}; `BertConfig()` with random weights; {args.rounds} rounds, median [min, max].",
        "",
        "| | seconds |",
        "| --- | ---: |",
        f"| a frame ({len(BOOK_SENTENCES)} example sentences + {args.probes} probes, top-{SHOWN}) | "
        f"{frame:.3f} [{min(frames):.3f}, {max(frames):.3f}] |",
        f"| a training step (16 x {args.max_length}, {precision}) | {step:.2f} [{min(steps):.2f}, {max(steps):.2f}] |",
        f"| a notebook's redraw of the loss curve between frames ({args.steps} steps, a PNG) | {redraw:.3f} |",
        "",
        f"A run of {args.steps} steps with {FRAMES + 1} frames: the frames cost {share:.2%} of its training clock here.",
        f"On a slow machine the watch adds at most a frame per {FRAME_SECONDS} s of training "
        f"({frame / FRAME_SECONDS:.2%} here), and between frames a line of text every {REDRAW_SECONDS} s and the "
        f"curve every {max(REDRAW_SECONDS, CURVE_SPACING * redraw):.0f} s of wall clock "
        f"({redraw / max(REDRAW_SECONDS, CURVE_SPACING * redraw):.2%}); where frames come more often than that "
        "(a fast machine), none of these adds anything.",
    ]
    if t4_step:
        gpu_frame = frame * (step and t4_step / step) * 3  # a frame's small batches use a GPU worse than a step: x3
        lines.append(
            f"On a T4, projected: a step at about {t4_step} s (fp16, 65 TFLOPS at about 30% use), a frame at most "
            f"{gpu_frame * 1000:.0f} ms (the CPU ratio of frame to step, times 3 for a small batch's poorer use of "
            f"the GPU): {(FRAMES + 1) * gpu_frame / (args.steps * t4_step):.2%} of the training clock."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    atomic_write_text(RESULTS, text)


if __name__ == "__main__":
    main()
