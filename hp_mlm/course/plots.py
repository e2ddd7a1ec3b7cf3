"""Plots: a picture for each step (matplotlib), no logic. Used by the notebooks and saved by the CLI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _axes(ax):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=(6, 3.5))
    return fig, ax


def plot_loss_curve(history: Mapping[str, Any], ax=None, smooth: int = 10):
    """Training loss per optimiser step (thin line), its running mean over ``smooth`` steps, and at each
    epoch's last step the epoch's training loss and held-out loss, both per masked token (like with like).

    Args:
        history: the dict returned by ``training.train`` (``history["steps"]``, ``history["epochs"]``).
    Returns:
        The matplotlib ``Figure``.
    """
    fig, ax = _axes(ax)
    steps = [s["step"] for s in history["steps"]]
    losses = [s["loss"] for s in history["steps"]]
    ax.plot(steps, losses, lw=0.8, alpha=0.4, label="loss per step")
    if len(losses) >= smooth > 1:
        running = [
            sum(losses[max(0, i - smooth + 1) : i + 1]) / len(losses[max(0, i - smooth + 1) : i + 1])
            for i in range(len(losses))
        ]
        ax.plot(steps, running, lw=2, label=f"running mean ({smooth} steps)")
    marks = {"validation": ("o", "black", "held-out loss"), "train_loss": ("x", "tab:red", "training loss")}
    for epoch in history.get("epochs", []):
        last = [s["step"] for s in history["steps"] if s["epoch"] == epoch["epoch"]]
        for key, (marker, color, _) in marks.items():
            value = epoch.get(key)
            value = value["cross_entropy"] if isinstance(value, Mapping) else value
            if last and value is not None:
                ax.scatter([last[-1]], [value], marker=marker, color=color, zorder=3)
    for key, (marker, color, name) in marks.items():
        if any(e.get(key) is not None for e in history.get("epochs", [])):
            ax.scatter([], [], marker=marker, color=color, label=f"{name} per masked token (epoch end)")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("Training loss")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_before_after(metrics: Mapping[str, Any], ax=None, keys: Sequence[str] = ("top1", "top5")):
    """Bars of validation top-1/top-5 masked-token accuracy before and after fine-tuning.

    Args:
        metrics: ``{"before": {...}, "after": {...}}`` as written to ``metrics.json``.
    Returns:
        The matplotlib ``Figure``.
    """
    fig, ax = _axes(ax)
    width = 0.38
    xs = range(len(keys))
    for offset, name in ((-width / 2, "before"), (width / 2, "after")):
        values = [100 * metrics[name][k] for k in keys]
        bars = ax.bar([x + offset for x in xs], values, width, label=name)
        ax.bar_label(bars, fmt="%.1f%%")
    ax.set_xticks(list(xs), [k.replace("top", "top-") for k in keys])
    ax.set_ylabel("held-out masked tokens right (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Before and after fine-tuning (same frozen masks)")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_token_lengths(lengths: Sequence[int], max_length: int | None = None, ax=None):
    """Histogram of tokens per row, with the ``max_length`` cut-off marked."""
    fig, ax = _axes(ax)
    ax.hist(list(lengths), bins=40)
    if max_length:
        ax.axvline(max_length, color="red", ls="--", label=f"max_length = {max_length}")
        ax.legend()
    ax.set_xlabel("tokens per row")
    ax.set_ylabel("rows")
    ax.set_title("Row lengths")
    fig.tight_layout()
    return fig


def plot_options(summary: Sequence[Mapping[str, Any]], ax=None):
    """Held-out top-1 per option: the mean over seeds as a bar, the range (min to max) as an error bar
    (``options.summarise`` output; options run once show no error bar)."""
    fig, ax = _axes(ax)
    if ax.figure.get_figwidth() < 8:
        fig.set_size_inches(9, 4)
    names = [s["option"] for s in summary]
    width = 0.4
    for offset, key, label in ((-width / 2, "top1", "all masked tokens"), (width / 2, "entity_top1", "entity tokens")):
        stats = [s[key] or {"mean": 0.0, "min": 0.0, "max": 0.0} for s in summary]
        means = [100 * st["mean"] for st in stats]
        spread = [[100 * (st["mean"] - st["min"]) for st in stats], [100 * (st["max"] - st["mean"]) for st in stats]]
        bars = ax.bar([i + offset for i in range(len(summary))], means, width, label=label, yerr=spread, capsize=3)
        ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=6)
    ax.set_xticks(range(len(summary)), names, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("held-out top-1 (%)")
    ax.set_title("What each option is worth: mean over seeds, bars show the range")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # beside the bars, never over a label
    fig.tight_layout()
    return fig


def plot_probe_splits(probe: Mapping[str, Mapping[str, Any]], ax=None):
    """A downstream probe's accuracy per split, one line per encoder (``downstream.compare_encoders``
    output), with the majority class and chance as dashed lines (accuracies in %)."""
    fig, ax = _axes(ax)
    first = next(iter(probe.values()))
    splits = range(1, len(first["probe"]) + 1)
    for name, result in probe.items():
        ax.plot(splits, [100 * a for a in result["probe"]], marker="o", label=name)
    ax.plot(splits, [100 * a for a in first["majority"]], ls="--", color="grey", label="majority class")
    ax.axhline(100 * first["chance"], ls=":", color="grey", label="chance")
    ax.set_xlabel("split (seed)")
    ax.set_ylabel("probe accuracy on held-out names (%)")
    ax.set_xticks(list(splits))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gap_context(sentence: str, mask: int, mask_token: str = "[MASK]", words: int = 2) -> str:
    """Mask ``mask`` (0-based) of ``sentence`` with ``words`` words either side: ``"the [MASK] Lake in"``."""
    parts = sentence.split(mask_token)
    before, after = parts[mask].split()[-words:], parts[mask + 1].split()[:words]
    return " ".join([*before, mask_token, *after]).rstrip(".,;:!?")


def live_view_rows(watch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per mask of the example sentences from a run's live view (``history["watch"]``, or ``metrics.json``'s
    ``watch``, with ``"examples"``: ``[{"text", "answers"}]``): ``{"gap"`` (the mask in its words), ``"answer"``,
    ``"before"`` (the first guess at the first frame), ``"step"`` (the first step the corpus's word came first;
    None: never), ``"after"`` (the first guess at the last frame, ``{"token", "score"}``)}``."""
    first, last = watch["frames"][0]["examples"], watch["frames"][-1]["examples"]
    rows = []
    for s, example in enumerate(watch["examples"]):
        for m, answer in enumerate(example["answers"]):
            hit = watch["first_right"][len(rows)]
            rows.append(
                {
                    "gap": gap_context(example["text"], m),
                    "answer": answer,
                    "before": first[s][m][0]["token"],
                    "step": hit["step"],
                    "after": last[s][m][0],
                }
            )
    return rows


def plot_live_view(watch: Mapping[str, Any]):
    """The story of a run in one table: for each mask of the example sentences, the first guess before
    training, the optimiser step at which the corpus's word first came first, and the first guess after
    (the README's picture, drawn from a run's saved frames by ``benchmarks/live_view.py``). ``watch``: as
    :func:`live_view_rows` takes it. Returns the matplotlib ``Figure``."""
    import matplotlib.pyplot as plt

    rows = live_view_rows(watch)
    cells = [
        [
            r["gap"],
            r["answer"],
            f"'{r['before']}'",
            f"step {r['step']}" if r["step"] is not None else "not yet",
            f"{r['after']['token']}  ({r['after']['score']:.2f})",
        ]
        for r in rows
    ]
    last = watch["frames"][-1]["step"]
    header = ["the gap", "the corpus's word", "before: first guess", "first guessed at", f"after {last} steps"]
    fig, ax = plt.subplots(figsize=(11, 0.42 * (len(rows) + 1) + 0.7))
    ax.axis("off")
    widths = [0.3, 0.17, 0.17, 0.15, 0.21]
    table = ax.table(
        cellText=cells, colLabels=header, colWidths=widths, bbox=[0, 0, 1, 1], cellLoc="left", colLoc="left"
    )
    table.auto_set_font_size(False)
    table.set_fontsize(11)
    for (row, col), cell in table.get_celld().items():
        cell.set_edgecolor("#dddddd")
        cell.PAD = 0.04
        if row == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#f3f3f3")
        elif col == 4 and rows[row - 1]["after"]["token"] == rows[row - 1]["answer"]:
            cell.set_text_props(weight="bold", color="#1a7f37")
    ax.set_title("The model learns the corpus's words while it trains (the live view of one run)", fontsize=12, pad=10)
    fig.tight_layout()
    return fig


def save_figure(fig, path: str | Path) -> Path:
    """Save ``fig`` as a PNG at ``path`` (folders created) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
