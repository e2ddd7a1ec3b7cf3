"""The watch (course.watch): frames while training runs, which change nothing in the run."""

import json

import torch
from helpers import SENTENCES, run_cli, tokenised

from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.course.watch import (
    FramesTable,
    LearningCurves,
    WatchLearning,
    frame_line,
    key_frames,
    mask_label,
    watch_every,
)
from hp_mlm.models import build_smoke_model
from hp_mlm.ops.job import run_training
from hp_mlm.training import plan_training

PROBES = [
    {"text": "Hob Tanner rowed the ferry across the [MASK] Lake.", "answer": "silver"},
    {"text": "Mira [MASK] crossed the Silver Lake at dawn.", "answer": "ashdown", "candidates": ["ashdown", "tanner"]},
    {"text": "Jasper read about [MASK] in the library.", "answer": "thornbacks"},  # several pieces in any vocabulary
]


def _settings(**changes):
    base = dict(epochs=3, batch_size=2, progress=False, checkpoint_every=0, learning_rate=1e-3, schedule="linear")
    return resolve_auto(get_settings("smoke", environ={}, **{**base, **changes}), new_head=True)


def _train(tokenizer, watch: bool, lines: list | None = None):
    model = build_smoke_model(tokenizer)
    plan = plan_training(model, tokenizer, tokenised(tokenizer, SENTENCES * 2), _settings())
    callbacks = [WatchLearning(plan, tokenizer, PROBES, every=3, log=lines.append)] if watch else []
    history = run_training(plan, callbacks)
    return model, history, callbacks


def test_the_final_weights_with_the_watch_equal_those_without_it_bitwise(smoke_tokenizer):
    lines = []
    watched, history, (watch,) = _train(smoke_tokenizer, True, lines)
    plain, plain_history, _ = _train(smoke_tokenizer, False)
    a, b = watched.state_dict(), plain.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # bitwise, every tensor
    assert [s["loss"] for s in history["steps"]] == [s["loss"] for s in plain_history["steps"]]
    frames = history["watch"]["frames"]
    total = history["optimizer_steps"]  # 16 rows in batches of 2, 3 epochs: 24
    assert total == 24 and [f["step"] for f in frames] == list(range(0, total + 1, 3))  # step 0, then every 3
    assert len(lines) == len(frames) and lines[0].startswith("step 0 (0.0 min)")
    assert watch.seconds > 0 and history["watch"]["seconds"] == watch.seconds
    assert not watched.training  # train() leaves the model in eval mode, as without the watch


def test_a_frame_scores_the_examples_top_3_and_counts_only_one_token_probes(smoke_tokenizer):
    model = build_smoke_model(smoke_tokenizer)
    plan = plan_training(model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), _settings())
    model.train()
    watch = WatchLearning(plan, smoke_tokenizer, PROBES, every=5, log=lambda _: None)
    assert model.training  # scoring restored the mode
    (frame,) = plan.history["watch"]["frames"]
    one_token = [p for p in PROBES if len(smoke_tokenizer.tokenize(p["answer"])) == 1]
    assert 0 < len(one_token) < len(PROBES)
    assert frame["step"] == 0 and frame["probes"] == len(one_token)  # a name of several pieces is left out
    n_masks = [text.count("[MASK]") for text, _ in watch.examples]
    assert [len(sentence) for sentence in frame["examples"]] == n_masks
    assert all(len(mask) == 3 for sentence in frame["examples"] for mask in sentence)
    first = plan.history["watch"]["first_right"]
    assert len(first) == sum(n_masks) and all(set(f) == {"mask", "answer", "step", "seconds"} for f in first)


def test_first_right_is_the_first_frame_whose_first_guess_is_the_corpus_word(smoke_tokenizer):
    model = build_smoke_model(smoke_tokenizer)
    plan = plan_training(model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), _settings())
    watch = WatchLearning(plan, smoke_tokenizer, [], every=0, log=lambda _: None)  # off: no frame at step 0
    assert plan.history["watch"]["frames"] == []
    text, (answer,) = watch.examples[0]
    others = [[[{"token": "x", "score": 0.1}]] * len(words) for _, words in watch.examples]
    for step, top in ((0, "wrong"), (40, answer), (80, "wrong"), (120, answer)):
        frame = {"step": step, "seconds": step / 2, "examples": [[[{"token": top, "score": 0.5}]], *others[1:]]}
        watch.record["frames"].append({**frame, "probes_right": 0, "probes": 0})
    first = watch.first_right()[0]
    assert first == {"mask": mask_label(text, 0), "answer": answer, "step": 40, "seconds": 20.0}
    assert watch.first_right()[1]["step"] is None  # never first
    watch.record["first_right"] = watch.first_right()
    assert [f["step"] for f in key_frames(watch.record)] == [0, 40, 120]  # the first, where it turned, the last


def test_mask_labels_name_the_word_beside_each_mask():
    assert mask_label("Every autumn, Hob [MASK] painted the ferry.", 0) == "Hob [MASK]"
    assert mask_label("[MASK] Ashdown and Poppy [MASK] rowed.", 0) == "[MASK] Ashdown"
    assert mask_label("[MASK] Ashdown and Poppy [MASK] rowed.", 1) == "Poppy [MASK]"


def test_a_run_shows_8_to_16_frames_while_it_trains():
    for total in (8, 9, 16, 37, 100, 480, 4321):
        every = watch_every(total)
        assert 8 <= total // every + (total % every > 0) <= 16, total
    assert watch_every(3) == 1


def test_the_notebook_view_is_a_table_with_html_and_text_and_a_png_with_text():
    examples = (("Hob [MASK] rowed <home>.", ("tanner",)),)
    frames = [
        {"step": 0, "seconds": 0.0, "examples": [[[{"token": "<b>", "score": 0.2}]]], "probes_right": 0, "probes": 4},
        {
            "step": 40,
            "seconds": 30.0,
            "examples": [[[{"token": "tanner", "score": 0.41}]]],
            "probes_right": 3,
            "probes": 4,
        },
    ]
    table = FramesTable(frames, examples)
    html = table._repr_html_()
    assert html.count("<tr>") == 3 and "<b>tanner 0.41</b>" in html and "&lt;b&gt;" in html  # tokens escaped
    assert "*tanner 0.41*" in repr(table) and "3/4" in repr(table)
    bundle = LearningCurves([(1, 7.0), (2, 6.5)], frames)._repr_mimebundle_()
    assert set(bundle) == {"image/png", "text/plain"} and "3 of 4 one-token probes right" in bundle["text/plain"]
    assert (
        frame_line(frames[1], examples) == "step 40 (0.5 min)  Hob [MASK] -> tanner 0.41  masks 1/1 first  probes 3/4"
    )


def test_the_main_job_prints_the_frames_and_records_them(tmp_path):
    out = tmp_path / "run"
    done = run_cli("train", "--profile", "smoke", "--epochs", "4", "--output-dir", str(out), "--watch-every", "5")
    assert done.returncode == 0, done.stderr
    frames = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    metrics = json.loads((out / "metrics.json").read_text())
    steps = [f["step"] for f in metrics["watch"]["frames"]]
    assert len(frames) == len(steps) and steps[:2] == [0, 5]
    assert "when the corpus's word first came first (a frame every 5 optimiser steps):" in done.stdout
    assert metrics["seconds"]["watch"] > 0 and "watch" in done.stdout.splitlines()[-3]
    history = json.loads((out / "history.json").read_text())
    assert history["watch"]["frames"] == metrics["watch"]["frames"]
    assert "learned first" in (out / "model" / "README.md").read_text()
    off = run_cli(
        "train", "--profile", "smoke", "--epochs", "1", "--output-dir", str(tmp_path / "off"), "--watch-every", "0"
    )
    assert off.returncode == 0 and not [line for line in off.stdout.splitlines() if line.startswith("step ")]
    bad = run_cli("train", "--profile", "smoke", "--watch-every", "-3")
    assert bad.returncode == 2 and "--watch-every must be 0 (no watch) or a number of optimiser steps" in bad.stderr


class _Clock:
    """A fake ``time`` for the watch: the wall clock moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now


def _watched_run(tokenizer, monkeypatch, step_seconds: float, steps: int, every: int = 40, plot_seconds: float = 0):
    """Drive a notebook's watch (display handles faked) through ``steps`` steps of ``step_seconds`` each, on
    the wall clock and the training clock alike, a plot of the curves taking ``plot_seconds``; returns the
    watch, what was drawn ``[(time, kind)]`` and how many times the model was scored."""
    import hp_mlm.course.watch as watch_module

    clock, drawn, scored = _Clock(), [], []

    class Handle:
        def update(self, item):
            drawn.append((clock.now, type(item).__name__))
            clock.now += plot_seconds if isinstance(item, LearningCurves) else 0

    def display(item, display_id=False):
        Handle().update(item)
        return Handle()

    fill_mask = watch_module.fill_mask
    monkeypatch.setattr(watch_module, "time", clock)
    monkeypatch.setattr(watch_module, "in_kernel", lambda: True)
    monkeypatch.setattr("IPython.display.display", display)
    monkeypatch.setattr(watch_module, "fill_mask", lambda *a, **k: scored.append(1) or fill_mask(*a, **k))
    model = build_smoke_model(tokenizer)
    plan = plan_training(model, tokenizer, tokenised(tokenizer, SENTENCES * 2), _settings(epochs=200))
    watch = WatchLearning(plan, tokenizer, PROBES, every=every)
    for n in range(1, steps + 1):
        clock.now += step_seconds
        watch.on_step(model, {"step": n, "loss": 5.0, "seconds": n * step_seconds})
    return watch, drawn, len(scored)


def test_on_a_slow_machine_the_view_moves_every_15_s_and_a_frame_comes_every_2_minutes(smoke_tokenizer, monkeypatch):
    # 9 s a step, a frame due every 40 steps by count (6 min): the curves and the line move anyway, scoring nothing
    watch, drawn, scored = _watched_run(smoke_tokenizer, monkeypatch, step_seconds=9.0, steps=100)
    lines = [t for t, kind in drawn if kind == "RunLine"]
    assert lines[0] == 1000.0 and lines[-1] == 1000.0 + 900  # from the first frame to the last step
    assert max(b - a for a, b in zip(lines, lines[1:])) <= 15
    frames = [f["seconds"] for f in watch.record["frames"]]
    assert len(frames) > 100 // 40 + 1 and max(b - a for a, b in zip(frames, frames[1:])) <= 120
    assert scored == len(frames)  # a redraw between frames runs no model
    assert [kind for _, kind in drawn[:3]] == ["RunLine", "FramesTable", "LearningCurves"]  # the line on top


def test_on_a_fast_machine_frames_come_every_watch_every_steps_and_redraws_are_rare(smoke_tokenizer, monkeypatch):
    watch, drawn, scored = _watched_run(smoke_tokenizer, monkeypatch, step_seconds=0.2, steps=120, every=40)
    assert [f["step"] for f in watch.record["frames"]] == [0, 40, 80, 120] and scored == 4
    between = [t for t, kind in drawn if kind == "RunLine"]
    assert len(between) <= 4 + 120 * 0.2 / 15 + 1  # a line per frame, and one per 15 s of wall clock


def test_the_run_line_says_how_long_the_whole_run_takes_at_this_pace_and_what_to_do_if_too_long():
    from hp_mlm.course.watch import RunLine

    losses = [(n, 6.0 if n <= 48 else 5.0) for n in range(1, 59)]
    line = RunLine({"step": 58, "seconds": 580.0}, 480, float("inf"), losses)
    assert repr(line) == (
        "step 58 of 480 · loss 5.000 · 10.0 s a step · the whole run: about 80.0 min of training for its 480 "
        "steps, 70.3 min left · too long? HP_MLM_TIME_BUDGET, or the handout (docs/teaching.md)"
    )
    slower = RunLine({"step": 100, "seconds": 1500.0}, 480, float("inf"), losses)  # the pace it has now
    assert "15.0 s a step · the whole run: about 120.0 min of training for its 480 steps, 95.0 min left" in repr(slower)
    budgeted = RunLine({"step": 58, "seconds": 580.0}, 480, 600.0, losses)  # a 10 min budget: 20 s left
    assert repr(budgeted).endswith("70.3 min left; the time budget stops it in 20 s, near step 61")
    resumed = RunLine({"step": 300, "seconds": 1000.0}, 480, float("inf"), losses, since={"step": 250, "seconds": 900})
    assert "2.0 s a step · the whole run: about 16.0 min of training for its 480 steps, 6.0 min left" in repr(resumed)
    assert repr(RunLine({"step": 0, "seconds": 0.0}, 480, float("inf"), [])) == "step 0 of 480: training starts"


def test_the_live_views_top_line_gives_the_whole_run_at_the_fake_clocks_pace(smoke_tokenizer, monkeypatch):
    watch, drawn, _ = _watched_run(smoke_tokenizer, monkeypatch, step_seconds=9.0, steps=30)
    line = repr(watch.moving()[1])
    whole = f"the whole run: about {watch.total * 9 / 60:.1f} min of training for its {watch.total} steps"
    assert line.startswith(f"step 30 of {watch.total} · loss 5.000 · 9.0 s a step · {whole}")
    assert "too long? HP_MLM_TIME_BUDGET" in line


def test_the_jobs_clock_says_the_whole_run_after_the_first_steps_then_follows_the_pace():
    """The tester's busy laptop: 7 s a step over 480 steps. The first line comes after 3 steps with what to do;
    then a line every 48 steps, each at the pace so far; with a time budget, where it stops instead."""
    from types import SimpleNamespace

    from hp_mlm.course.watch import RunClock

    def plan(minutes=0.0, steps=()):
        history = {"steps": list(steps), "epochs": [{"seconds": s["seconds"]} for s in steps[-1:]]}
        return SimpleNamespace(history=history, total_steps=480, settings=SimpleNamespace(time_budget_minutes=minutes))

    logged = []
    clock = RunClock(plan(), logged.append)
    for n in range(1, 101):  # 7 s a step, then 3 s from step 49
        clock.on_step(None, {"step": n, "seconds": 7.0 * min(n, 48) + 3.0 * max(0, n - 48)})
    assert logged[0] == (
        "clock: 3 steps took 21 s; the whole run: about 56.0 min of training for its 480 steps, 55.6 min left. "
        "Too long? set a time budget in minutes (`--time-budget 10` on the command line, HP_MLM_TIME_BUDGET=10 for "
        "a notebook, then run again from the top): training stops there, saves, evaluates, and a later run resumes "
        "it; or use a model trained once on a fast machine (the handout: docs/teaching.md)"
    )
    assert (
        logged[1] == "clock: step 48 of 480; the whole run: about 56.0 min of training for its 480 steps, 50.4 min left"
    )
    assert (
        logged[2] == "clock: step 96 of 480; the whole run: about 40.0 min of training for its 480 steps, 32.0 min left"
    )
    assert len(logged) == 3
    boxed = []
    budgeted = RunClock(plan(minutes=10.0), boxed.append)
    for n in range(1, 4):
        budgeted.on_step(None, {"step": n, "seconds": 7.0 * n})
    assert boxed == [
        "clock: 3 steps took 21 s; the whole run: about 56.0 min of training for its 480 steps, 55.6 min left; "
        "the time budget stops it in 9.7 min, near step 86"
    ]
    resumed, again = RunClock(plan(steps=[{"step": 200, "seconds": 400.0}]), [].append), []
    resumed.log = again.append
    for n in range(201, 204):  # this session's pace, 1 s a step, not the first session's 2 s
        resumed.on_step(None, {"step": n, "seconds": 400.0 + (n - 200)})
    assert again[0].startswith("clock: 3 steps took 3 s; the whole run: about 8.0 min of training for its 480 steps")


def test_where_a_plot_is_slow_the_line_still_moves_every_15_s_and_the_curve_keeps_to_1_percent(
    smoke_tokenizer, monkeypatch
):
    watch, drawn, _ = _watched_run(smoke_tokenizer, monkeypatch, step_seconds=9.0, steps=100, plot_seconds=1.0)
    lines = [t for t, kind in drawn if kind == "RunLine"]
    assert max(b - a for a, b in zip(lines, lines[1:])) <= 15
    curves, frames = sum(kind == "LearningCurves" for _, kind in drawn), len(watch.record["frames"])
    wall = drawn[-1][0] - drawn[0][0]
    assert curves - frames <= wall / 100 + 1  # between frames, a curve per 100 s of a 1 s plot
