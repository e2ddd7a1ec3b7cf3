"""What the plots draw, read back from the figures (nbval compares no image: a figure's bytes differ between machines)."""

import matplotlib
from helpers import committed, committed_notebook

matplotlib.use("Agg")

from hp_mlm.course.plots import plot_before_after, plot_loss_curve, plot_options, plot_token_lengths  # noqa: E402

NOTEBOOKS = committed("notebooks/**/*.ipynb")  # the repository's, not a learner's JupyterLab copies


def two_epoch_history():
    steps = [{"step": i + 1, "epoch": 1 + i // 3, "loss": 5.0 - 0.3 * i} for i in range(6)]
    epochs = [
        {"epoch": 1, "validation": {"cross_entropy": 4.2}},
        {"epoch": 2, "validation": {"cross_entropy": 3.7}},
    ]
    return {"steps": steps, "epochs": epochs}


def test_the_loss_curve_draws_the_step_losses_and_each_validation_at_its_epochs_last_step():
    history = two_epoch_history()
    ax = plot_loss_curve(history, smooth=2).axes[0]
    per_step, running = ax.lines[0], ax.lines[1]
    assert list(per_step.get_xdata()) == [1, 2, 3, 4, 5, 6]
    assert list(per_step.get_ydata()) == [s["loss"] for s in history["steps"]]
    losses = [s["loss"] for s in history["steps"]]
    assert list(running.get_ydata()) == [losses[0]] + [(a + b) / 2 for a, b in zip(losses, losses[1:])]
    points = [tuple(c.get_offsets()[0]) for c in ax.collections if len(c.get_offsets())]
    assert points == [(3.0, 4.2), (6.0, 3.7)]  # the last step of epoch 1 and of epoch 2
    two_steps = {"steps": history["steps"][:2], "epochs": []}
    ax = plot_loss_curve(two_steps).axes[0]  # fewer steps than `smooth`: only the per-step line
    assert len(ax.lines) == 1 and list(ax.lines[0].get_ydata()) == [5.0, 4.7]


def test_the_epochs_training_loss_is_drawn_beside_its_held_out_loss():
    history = two_epoch_history()
    history["epochs"][0]["train_loss"], history["epochs"][1]["train_loss"] = 4.5, 4.0
    ax = plot_loss_curve(history, smooth=2).axes[0]
    points = [tuple(c.get_offsets()[0]) for c in ax.collections if len(c.get_offsets())]
    assert points == [(3.0, 4.2), (3.0, 4.5), (6.0, 3.7), (6.0, 4.0)]
    labels = ax.get_legend_handles_labels()[1]
    assert (
        "training loss per masked token (epoch end)" in labels
        and "held-out loss per masked token (epoch end)" in labels
    )


def test_before_after_bars_are_the_metrics_in_percent():
    metrics = {"before": {"top1": 0.073, "top5": 0.2}, "after": {"top1": 0.215, "top5": 0.41}}
    ax = plot_before_after(metrics).axes[0]
    heights = [round(p.get_height(), 6) for p in ax.patches]
    assert heights == [7.3, 20.0, 21.5, 41.0]
    assert [t.get_text() for t in ax.texts] == ["7.3%", "20.0%", "21.5%", "41.0%"]


def test_token_length_histogram_counts_every_row_and_marks_max_length():
    lengths = [3, 5, 5, 9, 12, 12, 12, 40]
    ax = plot_token_lengths(lengths, max_length=32).axes[0]
    assert sum(p.get_height() for p in ax.patches) == len(lengths)
    assert list(ax.lines[0].get_xdata()) == [32, 32]


def test_option_bars_are_the_mean_and_their_error_bars_the_range():
    summary = [
        {
            "option": "a",
            "top1": {"mean": 0.2, "min": 0.1, "max": 0.25},
            "entity_top1": {"mean": 0.5, "min": 0.5, "max": 0.5},
        },
        {"option": "b", "top1": {"mean": 0.3, "min": 0.3, "max": 0.3}, "entity_top1": None},
    ]
    ax = plot_options(summary).axes[0]
    assert [round(p.get_height(), 6) for p in ax.patches] == [20.0, 30.0, 50.0, 0.0]
    errorbars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    lower_upper = errorbars[0].lines[2][0].get_segments()[0][:, 1]
    assert [round(v, 6) for v in lower_upper] == [10.0, 25.0]  # option a's top-1: min to max


def test_probe_lines_are_each_encoders_accuracy_per_split_beside_the_baselines():
    import matplotlib.pyplot as plt

    from hp_mlm.course.plots import plot_probe_splits

    probe = {
        "base": {"probe": [0.5, 0.6], "majority": [0.4, 0.4], "chance": 0.25},
        "fine-tuned": {"probe": [0.7, 0.9], "majority": [0.4, 0.4], "chance": 0.25},
    }
    ax = plot_probe_splits(probe).axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["base"] == [50.0, 60.0] and lines["fine-tuned"] == [70.0, 90.0]
    assert lines["majority class"] == [40.0, 40.0] and set(lines["chance"]) == {25.0}
    plt.close("all")


def test_no_checked_notebook_cell_compares_a_figure_and_no_widget_is_saved():
    """nbval compares a figure only by its text (``<Figure size ...>``), which changes between
    matplotlib-inline versions; widget views saved without their state break GitHub's renderer."""
    assert len(NOTEBOOKS) >= 6
    for path in NOTEBOOKS:
        notebook = committed_notebook(path)
        assert "widgets" not in notebook.get("metadata", {}), path.name
        for cell in notebook["cells"]:
            outputs = cell.get("outputs", [])
            assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), path.name
            if "".join(cell["source"]).startswith("# NBVAL_CHECK_OUTPUT"):
                texts = "".join(
                    "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outputs
                )
                assert not any("image/png" in o.get("data", {}) for o in outputs), path.name
                assert "<Figure" not in texts, path.name
