"""Watch it learn: the example sentences and the probes scored every few optimiser steps while training runs.

Taught in ``notebooks/03_training.ipynb``, whose real run shows it; the main job (``python -m hp_mlm
train``) prints it, a line per frame. :class:`WatchLearning` is a ``training.Callback``: every
``every`` optimiser steps it asks the model for its top-3 tokens at each mask of the profile's example
sentences (``course.shipped.examples``) and counts the probes with a one-token answer that it gets right
(``studies.probes``: the answer its first guess; a name of several pieces needs a whole-word beam per
probe, about 20 times the cost of the rest of a frame, so the watch leaves those to the report), then
redraws one display in place: a table *step -> guesses*, a row per frame so that the history stays on
screen, the loss curve so far beside the probe count, and a line with the step and the time left. On a
slow machine a frame also comes when the next step would pass ``FRAME_SECONDS`` of training since the
last one, and between frames the notebook's line (and its curves, where their plot is cheap enough) is
redrawn, scoring nothing, whenever the next step would pass ``REDRAW_SECONDS`` of wall clock since the
last redraw: the screen moves. In Jupyter and Colab it updates through ``IPython.display`` display
handles (no widget front end), so a saved notebook keeps the last frame; elsewhere it writes one line
per frame.

It does not change the run: scoring runs in eval mode under ``torch.inference_mode``, draws no random
numbers, and the loop keeps callbacks off its training clock; its own cost is ``seconds``. The frames go
into the run's history (``history["watch"]``, so a checkpoint keeps them), with the first step at which
each example's corpus word came first.
"""

from __future__ import annotations

import base64
import html
import io
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.callbacks import EARLY_STOPPING, TIME_BUDGET, time_budget
from hp_mlm.course.shipped import examples as shipped_examples
from hp_mlm.inference import fill_mask
from hp_mlm.studies.names import LEARNED, Followed, first_learned, score_names
from hp_mlm.studies.probes import default_probes, load_probes, normalise_answer, score_probes
from hp_mlm.training import Callback, TrainingPlan

#: Frames a run shows while it trains (besides the one before the first step): about 12, so 8 to 16.
FRAMES = 12
#: Tokens shown at each mask in a frame.
SHOWN = 3
#: Wall-clock seconds at most between two redraws of a notebook's view: the loss curve so far, the step and
#: the time left, without scoring the model (a slow machine's steps would leave it still for minutes).
REDRAW_SECONDS = 15
#: A redraw renders the loss curve (a PNG) only where that keeps it under 1/this of the wall clock: on a
#: machine where a plot takes 0.5 s, every 50 s (the line, text, is redrawn every time).
CURVE_SPACING = 100
#: Seconds of training at most between two frames: a frame is due every ``every`` steps, or sooner when the
#: next step would pass this (a slow machine); a fast one never meets it, and the cost it adds is at most
#: one frame per this many seconds.
FRAME_SECONDS = 120


def watch_every(total_steps: int, frames: int = FRAMES) -> int:
    """Optimiser steps between two frames so that a run of ``total_steps`` shows about ``frames`` of them
    (``ceil(total_steps / frames)``, at least 1: a run of 8 to 16 steps shows every step)."""
    return max(1, math.ceil(total_steps / frames))


def mask_label(sentence: str, mask: int, mask_token: str = "[MASK]") -> str:
    """A short name for mask ``mask`` (0-based) of ``sentence``: the word before it, or the word after it
    for a mask that opens the sentence (``"Hob [MASK]"``, ``"[MASK] Ashdown"``)."""
    parts = sentence.split(mask_token)
    before, after = parts[mask].split(), parts[mask + 1].split()
    if before:
        return f"{before[-1]} {mask_token}"
    return f"{mask_token} {after[0].strip('.,;:!?')}" if after else mask_token


class WatchLearning(Callback):
    """Score the examples and the probes every ``every`` optimiser steps, and show each frame.

    Args:
        plan: the run's ``training.TrainingPlan``; its model is scored (in place, mode restored) and its
            history keeps the frames (``history["watch"]``: ``{"every", "frames", "first_right",
            "seconds"}``, and ``"source"``, where ``examples`` came from, when they say it). A fresh run is
            scored once now, as step 0; a resumed one shows its frames so far (or is scored now, at the step it
            resumes from, when its checkpoint kept none).
        tokenizer: the model's tokenizer.
        probes: probes as ``studies.probes.load_probes`` gives them, of which those with a one-token
            answer are counted; None: those shipped with the profile's corpus (none for other data).
        every: optimiser steps between frames (or fewer: at most ``FRAME_SECONDS`` of training between
            two); None: :func:`watch_every` of the run's steps; 0: off.
        log: where a frame's line goes (``print``, the job's log); None: a notebook's display updated in
            place when an IPython kernel runs this, else ``print``.
        examples: the run's example sentences (``course.examples.run_examples``); None: those shipped with the
            profile's corpus (``course.shipped.examples``). A resumed run watches the examples its history kept
            (``history["watch"]["examples"]``), whatever is passed: its frames and first steps stay one story.
        names: the book's names followed at every held-out occurrence (``studies.names.follow_names``); None:
            none. With no example, no one-token probe and no name there is nothing to watch: no frame is scored.
    Each frame is ``{"step", "seconds"`` (training clock), ``"examples"`` (``[sentence][mask]``: the top-3
    ``{"token", "score"}``), ``"probes_right"``, ``"probes"`` (top-1 hits of how many one-token probes), ``"names"}``
    (``{name: held-out occurrences where it was the first guess}``, of ``history["watch"]["names"]``; ``{}``
    without names); ``history["watch"]["names_learned"]`` says when each name was first right at a third of them.
    """

    def __init__(
        self,
        plan: TrainingPlan,
        tokenizer: PreTrainedTokenizerBase,
        probes: Sequence[dict[str, Any]] | None = None,
        every: int | None = None,
        log: Callable[[str], None] | None = None,
        examples: Any = None,
        names: Followed | None = None,
    ) -> None:
        if probes is None:
            shipped = default_probes(plan.settings)
            probes = load_probes(shipped) if shipped else []
        one_token = [p for p in probes if len(tokenizer.tokenize(normalise_answer(p["answer"], tokenizer))) == 1]
        self.tokenizer = tokenizer
        self.probes = [{"text": p["text"], "answer": p["answer"]} for p in one_token]  # no candidates to rank
        shown = getattr(examples, "examples", examples)  # course.examples.Examples, or the pairs themselves
        self.examples = tuple(shipped_examples(plan.settings.dataset) if shown is None else shown)
        if kept := plan.history.get("watch", {}).get("examples"):  # a resumed run watches the examples it began with
            self.examples = tuple((text, tuple(answers)) for text, answers in kept)
        self.every = watch_every(plan.total_steps) if every is None else every
        self.names, self.settings = names if names and names.items else None, plan.settings
        self.every = self.every if self.examples or self.probes or self.names else 0
        self.log, self.handles = log, None
        self.total, self.budget = plan.total_steps, time_budget(plan).seconds  # for the time left
        self.drawn = self.stepped = time.monotonic()  # wall clock of the last redraw, and of the last step
        self.curve = {"at": self.drawn, "seconds": 0.0}  # when the curves were last drawn, and what that took
        if log is None and not in_kernel():
            self.log = print
        self.losses = [(s["step"], s["loss"]) for s in plan.history["steps"]]  # a resumed run's so far
        last = plan.history["steps"][-1] if plan.history["steps"] else {"step": 0, "seconds": 0.0}
        self.last = {"step": last["step"], "seconds": last["seconds"]}  # the last step: optimiser step, training clock
        self.since = dict(self.last)  # where this session started: its pace is its own
        self.record = plan.history.setdefault("watch", {"every": self.every, "frames": [], "seconds": 0.0})
        self.record["planned"] = {"steps": plan.total_steps, "epochs": plan.settings.epochs}  # see run_ending
        self.record["examples"] = [[text, list(answers)] for text, answers in self.examples]
        if source := getattr(examples, "source", None):  # where the examples came from: the card says it
            self.record["source"] = source
        self.record.setdefault("first_right", self.first_right())
        if self.names:  # the names followed and their held-out occurrences (a resumed run keeps its own)
            self.record.setdefault("names", self.names.occurrences)
            self.record["names_learned"] = first_learned(self.record["frames"], self.record["names"])
        if self.every and not self.record["frames"]:  # step 0, or where a run resumed without its frames
            self.frame(plan.model, last["step"], last["seconds"])
        elif self.record["frames"] and self.log is None:
            self.show()

    @property
    def seconds(self) -> float:
        """Seconds spent scoring and drawing frames, and redrawing between them (off the training clock)."""
        return self.record["seconds"]

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> bool:
        now = time.monotonic()
        wall, took = now - self.stepped, step["seconds"] - self.last["seconds"]  # this step: wall clock, training clock
        self.losses.append((step["step"], step["loss"]))
        self.last = {"step": step["step"], "seconds": step["seconds"]}
        if self.every:
            since = step["seconds"] - self.record["frames"][-1]["seconds"]
            if step["step"] % self.every == 0 or since + took > FRAME_SECONDS:  # the next step would pass it
                self.frame(model, step["step"], step["seconds"])
            elif self.log is None and now - self.drawn + wall > REDRAW_SECONDS:  # so would the next step
                self.redraw()
        self.stepped = time.monotonic()
        return False

    def on_train_end(self, model: nn.Module, history: dict[str, Any]) -> None:
        """The last step's frame, when the last step was not a frame's (pass this callback before
        ``Validate``, so that the frame shows the weights the run trained, not the best epoch's)."""
        frames, steps = self.record["frames"], history["steps"]
        if self.every and steps and (not frames or frames[-1]["step"] != steps[-1]["step"]):
            self.frame(model, steps[-1]["step"], steps[-1]["seconds"])

    def frame(self, model: nn.Module, step: int, seconds: float) -> dict[str, Any]:
        """Score ``model`` now, keep the frame as optimiser step ``step`` at ``seconds`` of training, show it."""
        started = time.perf_counter()
        sentences = [text for text, _ in self.examples]
        with torch.inference_mode():  # fill_mask switches to eval mode (no dropout) and back
            found = fill_mask(model, self.tokenizer, sentences, top_k=SHOWN) if sentences else []
            hits = score_probes(model, self.tokenizer, self.probes, top_k=1)["hits_top1"] if self.probes else 0
            s, names = self.settings, self.names
            right = score_names(model, names, self.tokenizer, s.eval_batch_size, s.precision) if names else {}
        guesses = [[[{"token": c["token"], "score": round(c["score"], 4)} for c in mask] for mask in s] for s in found]
        frame = {
            "step": step,
            "seconds": seconds,
            "examples": guesses,
            "probes_right": hits,
            "probes": len(self.probes),
            "names": right,
        }
        self.record["frames"].append(frame)
        self.record["first_right"] = self.first_right()
        if names:
            self.record["names_learned"] = first_learned(self.record["frames"], self.record["names"])
        self.show()
        self.record["seconds"] += time.perf_counter() - started
        return frame

    def first_right(self) -> list[dict[str, Any]]:
        """For each mask of each example: ``{"mask"`` (its short name), ``"answer"``, ``"step"``, ``"seconds"}``
        of the first frame whose first guess was the corpus's word (step and seconds None: not yet)."""
        firsts = []
        for s, (text, answers) in enumerate(self.examples):
            for m, answer in enumerate(answers):
                hit = next((f for f in self.record["frames"] if f["examples"][s][m][0]["token"] == answer), {})
                firsts.append(
                    {
                        "mask": mask_label(text, m),
                        "answer": answer,
                        "step": hit.get("step"),
                        "seconds": hit.get("seconds"),
                    }
                )
        return firsts

    def show(self) -> None:
        """The last frame as a line (``log``), or the whole table, the curves and the line in a notebook, in place."""
        if self.log is not None:
            self.log(frame_line(self.record["frames"][-1], self.examples, self.record.get("names")))
            return
        from IPython.display import display

        curves, line = self.moving()  # the line first: it is what moves, and a table of rows grows under it
        shown = (line, FramesTable(self.record["frames"], self.examples, self.record.get("names")), curves)
        if self.handles is None:
            self.handles = [display(item, display_id=True) for item in shown]
        else:
            for handle, item in zip(self.handles, shown):
                handle.update(item)
        self.drawn = self.curve["at"] = time.monotonic()

    def redraw(self) -> None:
        """Between frames, in a notebook: the line (step, loss, time left) redrawn in place, and the loss
        curve so far where its plot's cost allows (``CURVE_SPACING``); no model is run (its seconds are the
        watch's, off the training clock)."""
        started, now, (curves, line) = time.perf_counter(), time.monotonic(), self.moving()
        if now - self.curve["at"] >= CURVE_SPACING * self.curve["seconds"]:
            self.handles[2].update(curves)
            self.curve = {"at": time.monotonic(), "seconds": time.perf_counter() - started}
        self.handles[0].update(line)
        self.drawn = time.monotonic()
        self.record["seconds"] += time.perf_counter() - started

    def moving(self) -> tuple[LearningCurves, RunLine]:
        """What a redraw between frames changes: the curves and the line."""
        curves = LearningCurves(self.losses, self.record["frames"], self.record.get("names"))
        return curves, RunLine(self.last, self.total, self.budget, self.losses, self.since)


def key_frames(watch: dict[str, Any]) -> list[dict[str, Any]]:
    """The frames that tell a run's story (notebook 04): the first, each frame where a mask's corpus word
    first came first or a followed name was first right at a third of its occurrences, and the last, in step
    order. ``watch``: a run's ``history["watch"]``."""
    frames = watch["frames"]
    turned = {hit["step"] for hit in watch["first_right"] + watch.get("names_learned", []) if hit["step"] is not None}
    return [f for i, f in enumerate(frames) if i in (0, len(frames) - 1) or f["step"] in turned]


def stop_reason(history: dict[str, Any], epochs: int | None = None) -> str | None:
    """What ended a run before the end of its plan: the reason the callback that stopped it returned
    (``history["stopped_by"]``: ``callbacks.TIME_BUDGET`` or ``callbacks.EARLY_STOPPING``), or None for a run
    that trained every epoch it planned (a stop at its very last step included). ``epochs``: the epochs it
    planned (None: the watch's record of the plan, ``history["watch"]["planned"]``)."""
    planned = (history.get("watch") or {}).get("planned") or {}
    epochs, last = epochs or planned.get("epochs"), (history.get("epochs") or [{}])[-1]
    if not history.get("stopped_by") or not last or not epochs:
        return None
    return history["stopped_by"] if "batches_done" in last or last["epoch"] < epochs else None


def stopped_early(history: dict[str, Any]) -> str:
    """Why a watched run (``history["watch"]["planned"]`` kept) trained less than it planned, in words
    (``"the time budget stopped it at optimiser step 3 of 480"``), from :func:`stop_reason`; "" when it
    trained every epoch."""
    planned, reason = (history.get("watch") or {}).get("planned"), stop_reason(history)
    if reason == EARLY_STOPPING:
        return f"early stopping ended it after epoch {history['epochs'][-1]['epoch']} of {planned['epochs']}"
    if reason == TIME_BUDGET:
        return f"the time budget stopped it at optimiser step {history['optimizer_steps']} of {planned['steps']}"
    return ""


#: How to train further once a run has ended (no checkpoint continues it): a new run from its saved model.
TRAIN_FURTHER = (
    "train further from the saved model into a new folder (its `model/` folder as the `model` setting, "
    "another `output_dir`), or train again with more epochs (HP_MLM_EPOCHS; with early stopping, a larger "
    "early_stopping_patience)"
)


def run_ending(
    history: dict[str, Any], again: str = "run the notebook again from the top", further: str = TRAIN_FURTHER
) -> str:
    """What a watched run's end means, for a learner: "" when an example's corpus word came first during
    training (a frame after step 0), or a followed name was right at a third of its held-out occurrences; else
    a few sentences saying why none did (a time budget, early stopping, or a run too short for this model:
    :func:`stop_reason`, never the words of a message), that this is a normal ending and the model is saved all
    the same, and what to do next: a time budget's run continues from its checkpoint (``again``: how, e.g. the
    main job's same command with ``--resume``); a run that ended is trained further from its saved model (``further``; the job names its command)."""
    watch = history.get("watch") or {}
    if not watch.get("frames") or any(hit["step"] for hit in watch["first_right"] + watch.get("names_learned", [])):
        return ""
    steps, why = history["optimizer_steps"], stopped_early(history)
    if stop_reason(history) == TIME_BUDGET:
        more = f"{again}: training continues from its checkpoint for another budget"
    else:
        why = why or f"it trained all {steps} steps it planned, too few for this model"
        more = further
    names = " and no name of the book was right at a third of its held-out occurrences" if watch.get("names") else ""
    none = f"No example's word came first{names}"
    return (
        f"{none} in this run's {steps} optimiser step{'s' * (steps != 1)}: {why}. "
        "That is a normal ending, not a fault: the model is saved as it is, and notebook 04 evaluates it. To see "
        "the words turn, "
        f"{more}; or use the trained model a teacher hands out (`python -m hp_mlm handout` makes it once, on "
        "a fast machine; HP_MLM_TRAINED_MODEL pointed at it makes notebook 04 evaluate that model)."
    )


def in_kernel() -> bool:
    """True when an IPython kernel (Jupyter, Colab, VS Code) runs this: display handles update there."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _guess(c: dict[str, Any], with_score: bool = True) -> str:
    return f"{c['token']} {c['score']:.2f}" if with_score else c["token"]


def names_text(frame: dict[str, Any], names: dict[str, int] | None, mark: Callable[[str], str] = str) -> str:
    """A frame's followed names, each right at how many of its held-out occurrences (``names``: ``{name:
    occurrences}``), ``mark`` marking those right at a third or more: ``"mary 31/74, colin 2/26"``; "" without."""
    right = frame.get("names") or {}
    said = [(f"{n} {right.get(n, 0)}/{seen}", right.get(n, 0) >= LEARNED * seen) for n, seen in (names or {}).items()]
    return ", ".join(mark(text) if learned else text for text, learned in said)


def frame_line(
    frame: dict[str, Any], shown: Sequence[tuple[str, Sequence[str]]], names: dict[str, int] | None = None
) -> str:
    """One frame as a log line: the first example's top-3, how many masks have the corpus's word first,
    the probes right and the followed names (:func:`names_text`), e.g. ``step 40 (0.3 min)  Hob [MASK] -> tanner
    0.41, ##water, ##by  masks 1/5  probes 3/35  names mary 31/74, colin 2/26``."""
    line = f"step {frame['step']} ({frame['seconds'] / 60:.1f} min)"
    if shown:  # a run without examples shows its probes alone
        first = frame["examples"][0][0]
        guesses = ", ".join(_guess(c, i == 0) for i, c in enumerate(first))
        answers = [a for _, words in shown for a in words]
        tops = [mask[0]["token"] for sentence in frame["examples"] for mask in sentence]
        right = sum(t == a for t, a in zip(tops, answers))
        line += f"  {mask_label(shown[0][0], 0)} -> {guesses}  masks {right}/{len(answers)} first"
    line += f"  probes {frame['probes_right']}/{frame['probes']}" if frame["probes"] else ""
    return line + (f"  names {names_text(frame, names)}" if names else "")


class FramesTable:
    """The frames as a table, a row per frame: the optimiser step, the top-3 at each mask (the corpus's
    word in bold where it comes first), probes right (no times: they change every run). Renders as HTML in a notebook, text elsewhere."""

    def __init__(
        self,
        frames: Sequence[dict[str, Any]],
        shown: Sequence[tuple[str, Sequence[str]]],
        names: dict[str, int] | None = None,
    ) -> None:
        self.frames, self.shown, self.names = frames, shown, names
        self.masks = [  # numbered by sentence: two sentences may name the same word beside their masks
            (s, m, f"{s + 1} · {mask_label(text, m)}", a)
            for s, (text, words) in enumerate(shown)
            for m, a in enumerate(words)
        ]

    def cells(self, frame: dict[str, Any], mark: Callable[[str], str], escape: Callable[[str], str] = str) -> list[str]:
        """One frame's row; ``mark`` marks a first guess that is the corpus's word, ``escape`` each guess."""
        row = [str(frame["step"])]
        for s, m, _, answer in self.masks:
            guesses = frame["examples"][s][m]
            texts = [escape(_guess(c, i == 0)) for i, c in enumerate(guesses)]
            if guesses and guesses[0]["token"] == answer:
                texts[0] = mark(texts[0])
            row.append(", ".join(texts))
        row += [f"{frame['probes_right']}/{frame['probes']}"] if self.frames[0]["probes"] else []
        return row + ([names_text(frame, self.names, mark)] if self.names else [])  # names: letters only

    def header(self) -> list[str]:
        probes = ["one-token probes right"] if self.frames[0]["probes"] else []
        names = ["the book's names: right at how many held-out occurrences"] if self.names else []
        return ["step", *(f"{label} ({answer})" for _, _, label, answer in self.masks), *probes, *names]

    def __repr__(self) -> str:
        rows = [self.header()] + [self.cells(f, lambda t: f"*{t}*") for f in self.frames]
        sentences = [f"{s + 1}. {text}" for s, (text, _) in enumerate(self.shown)]
        return "\n".join(["  |  ".join(row) for row in rows] + sentences)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header())
        body = "".join(
            "<tr>" + "".join(f"<td>{c}</td>" for c in self.cells(f, lambda t: f"<b>{t}</b>", html.escape)) + "</tr>"
            for f in self.frames
        )
        note = "the top-3 tokens at each mask, after each optimiser step shown (in bold: the corpus's word, first)"
        note += "; the book's names in bold where right at a third of their held-out occurrences" if self.names else ""
        sentences = "".join(f"<li>{html.escape(text)}</li>" for text, _ in self.shown)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        return f"{table}<p><small>{note}; the sentences:</small></p><ol><small>{sentences}</small></ol>"


#: What to do when the whole run is too long, said with the first estimate of its length.
TOO_LONG = (
    "too long? set a time budget in minutes (`--time-budget 10` on the command line, HP_MLM_TIME_BUDGET=10 for a "
    "notebook, then run again from the top): training stops there, saves, evaluates, and a later run resumes it; "
    "or use a model trained once on a fast machine (the handout: docs/teaching.md)"
)


def minutes(seconds: float) -> str:
    """``seconds`` for a clock line: ``"40 s"`` under 1.5 minutes, else ``"3.3 min"``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def whole_run(step: dict[str, Any], total: int, budget: float, since: dict[str, Any] | None = None) -> str:
    """The whole run's length at this pace, in words: the pace is this session's (the training clock from
    ``since``, ``{"step", "seconds"}``, to ``step``, the same; None: from step 0), times all ``total``
    optimiser steps of every epoch, and what is left; when the time budget (``budget``, seconds of the
    training clock; inf: none) ends the run sooner, where it stops. E.g. ``"the whole run: about 3.3 min of
    training for its 480 steps, 2.9 min left"``. Raises ZeroDivisionError when no step was taken since ``since``."""
    since = since or {"step": 0, "seconds": 0.0}
    pace = (step["seconds"] - since["seconds"]) / (step["step"] - since["step"])
    left = (total - step["step"]) * pace
    text = f"the whole run: about {minutes(total * pace)} of training for its {total} steps, {minutes(left)} left"
    if budget - step["seconds"] < left:
        stops = step["step"] + max(0, math.floor((budget - step["seconds"]) / pace)) + 1
        text += f"; the time budget stops it in {minutes(max(0.0, budget - step['seconds']))}, near step {stops}"
    return text


class RunLine:
    """The run so far in one line: the optimiser step of how many, the loss (mean of the last 10 steps), the
    seconds a step takes, the whole run's length at that pace and what is left (:func:`whole_run`, over all
    epochs), and what to do if that is too long (:data:`TOO_LONG`, in short), e.g. ``step 58 of 480 · loss
    5.214 · 7.3 s a step · the whole run: about 58.4 min of training for its 480 steps, 51.3 min left · too
    long? ...``. ``step``: ``{"step", "seconds"}`` (training clock); ``budget``: seconds (inf: none);
    ``since``: the step this session started from (a resumed run's pace is its own)."""

    def __init__(
        self,
        step: dict[str, Any],
        total: int,
        budget: float,
        losses: Sequence[tuple[int, float]],
        since: dict[str, Any] | None = None,
    ) -> None:
        self.step, self.total, self.budget, self.losses = step, total, budget, losses
        self.since = since or {"step": 0, "seconds": 0.0}

    def __repr__(self) -> str:
        n, seconds = self.step["step"], self.step["seconds"]
        if n <= self.since["step"]:
            return f"step {n} of {self.total}: training starts"
        pace = (seconds - self.since["seconds"]) / (n - self.since["step"])
        recent = [loss for _, loss in self.losses[-10:]]
        loss = f" · loss {sum(recent) / len(recent):.3f}" if recent else ""
        advice = "" if self.budget < math.inf else " · too long? HP_MLM_TIME_BUDGET, or the handout (docs/teaching.md)"
        whole = whole_run(self.step, self.total, self.budget, self.since)
        return f"step {n} of {self.total}{loss} · {pace:.1f} s a step · {whole}{advice}"


class RunClock(Callback):
    """The whole run's clock in a log (the main job): after the first ``first`` optimiser steps of this
    session, a line with :func:`whole_run` and what to do if it is too long (:data:`TOO_LONG`; with a time
    budget set, where it stops instead), then a shorter line each time another ``1 / updates`` of the run's
    steps is done, so the estimate follows the machine's pace. Reads the training clock from each step's
    record (callbacks excluded), so a test drives it with step records alone. ``log``: where the lines go."""

    def __init__(self, plan: TrainingPlan, log: Callable[[str], None], first: int = 3, updates: int = 10) -> None:
        last = plan.history["steps"][-1] if plan.history["steps"] else {"step": 0, "seconds": 0.0}
        self.since = {"step": last["step"], "seconds": last["seconds"]}  # a resumed run's pace is its own
        self.log, self.total, self.budget = log, plan.total_steps, time_budget(plan).seconds
        self.first, self.every, self.said = first, max(1, math.ceil(plan.total_steps / updates)), False

    def on_step(self, model: nn.Module, step: dict[str, Any]) -> None:  # noqa: ARG002 - a hook's signature
        done = step["step"] - self.since["step"]
        if done < self.first or step["step"] >= self.total:
            return
        if not self.said:
            advice = "" if self.budget < math.inf else f". {TOO_LONG[0].upper()}{TOO_LONG[1:]}"
            self.log(
                f"clock: {done} steps took {minutes(step['seconds'] - self.since['seconds'])}; {self.text(step)}{advice}"
            )
            self.said = True
        elif step["step"] % self.every == 0:
            self.log(f"clock: step {step['step']} of {self.total}; {self.text(step)}")

    def text(self, step: dict[str, Any]) -> str:
        return whole_run(step, self.total, self.budget, self.since)


class LearningCurves:
    """The loss so far (per step, and its running mean) beside the probes right at each frame and, given
    ``names`` (``{name: held-out occurrences}``), each followed name's share of its occurrences right, as a PNG."""

    def __init__(
        self,
        losses: Sequence[tuple[int, float]],
        frames: Sequence[dict[str, Any]],
        names: dict[str, int] | None = None,
        smooth: int = 10,
    ) -> None:
        self.losses, self.frames, self.names, self.smooth = losses, frames, names or {}, smooth

    def __repr__(self) -> str:
        last = self.frames[-1]
        probes = f", {last['probes_right']} of {last['probes']} one-token probes right" if last["probes"] else ""
        names = f"; names right: {names_text(last, self.names)}" if self.names else ""
        return f"<learning curves: {len(self.losses)} steps, {len(self.frames)} frames{probes}{names}>"

    def names_panel(self, ax) -> None:
        """Each followed name's share of its held-out occurrences right (first guess), frame by frame."""
        steps = [f["step"] for f in self.frames]
        for name, seen in self.names.items():
            ax.plot(steps, [f.get("names", {}).get(name, 0) / seen for f in self.frames], "o-", ms=3, label=name)
        ax.axhline(LEARNED, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="optimiser step", ylabel="share right (top-1)", ylim=(0, 1))
        ax.set_title("The book's names, at every held-out occurrence", fontsize=10)
        ax.legend(fontsize=7, ncol=2)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:  # noqa: ARG002 - IPython's signature
        from matplotlib.figure import Figure

        probes = self.frames[-1]["probes"] or not self.names  # a run with neither keeps the (empty) probes panel
        fig = Figure(figsize=(9 + 4.5 * (bool(self.names) and bool(probes)), 2.8))
        loss_ax, *others = fig.subplots(1, 1 + bool(probes) + bool(self.names))
        if self.names:
            self.names_panel(others.pop())
        steps, losses = [s for s, _ in self.losses], [x for _, x in self.losses]
        loss_ax.plot(steps, losses, lw=0.8, alpha=0.4, label="per step")
        if losses:
            k = self.smooth
            running = [
                sum(losses[max(0, i - k + 1) : i + 1]) / len(losses[max(0, i - k + 1) : i + 1])
                for i in range(len(losses))
            ]
            loss_ax.plot(steps, running, lw=2, label=f"running mean ({k} steps)")
            loss_ax.legend(fontsize=8)
        else:  # the frame before the first step
            loss_ax.text(0.5, 0.5, "no step yet", ha="center", va="center", transform=loss_ax.transAxes)
            loss_ax.set(xticks=[], yticks=[])
        loss_ax.set(xlabel="optimiser step", ylabel="cross-entropy (nats)", title="Training loss so far")
        if probes:
            (probe_ax,) = others
            probe_ax.plot([f["step"] for f in self.frames], [f["probes_right"] for f in self.frames], "o-")
            probe_ax.set(
                xlabel="optimiser step",
                ylabel="right (top-1)",
                title=f"One-token probes right, of {self.frames[-1]['probes']}",
            )
            probe_ax.set_ylim(0, max(1, self.frames[-1]["probes"]))
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=90)
        return {"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"), "text/plain": repr(self)}
