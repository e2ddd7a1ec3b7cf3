"""Before and after, side by side: the stock model's and the fine-tuned model's guesses for a sentence.

Shown in ``notebooks/04_evaluation.ipynb`` and usable from any notebook that has the two models.
Where a widget front end runs (Colab, a Jupyter server: ``episodes.widgets_front_end``),
:func:`show_before_after` draws a sentence box and a target-word box; each change redraws both
models' top-k at every mask and the target's probability. Elsewhere (CI, a terminal, nbconvert, a
static page) it prints the same table for the sentence given. Only ipywidgets APIs that Colab's 7.x
and JupyterLab's 8.x both have are used (``Text``, ``HTML``, ``HBox``, ``VBox``, ``Layout``, ``observe``).

The guesses come from ``inference.fill_mask``: whole words by default (``scoring.predict_words``, a
word of several pieces marked with its pieces, as ``predict --whole-words`` prints them), or single
tokens; a target word of several pieces is scored whole (PLL-word-l2r, ``scoring.score_words``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.common import OutOfMemory, model_device
from hp_mlm.config import get_settings
from hp_mlm.course.episodes import widgets_front_end
from hp_mlm.course.premise import premise
from hp_mlm.course.watch import in_kernel
from hp_mlm.inference import fill_mask, fill_words
from hp_mlm.models import load_model

#: Free GPU memory a stock model needs beside the fine-tuned one: its weights times this, plus GPU_SPARE.
WEIGHTS_FACTOR = 1.25
GPU_SPARE = 512 * 2**20  # bytes, for one sentence's activations and the allocator's blocks
GIB = 2**30
BEFORE, AFTER = "before (stock model)", "after (fine-tuned)"
#: The widget's opening where a corpus of your own gave no example to pick (as notebook 00 asks then).
PLAIN_EXAMPLE = ("The capital of France is [MASK].", ("paris",))


def model_bytes(model: nn.Module) -> int:
    """Bytes of a model's parameters and buffers (what a copy of it takes on a device)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def stock_device(tuned_device: torch.device, needed: int, free: int | None) -> torch.device:
    """Where the stock model runs: beside the fine-tuned model, unless that is a CUDA GPU with fewer
    than ``needed`` bytes free (``free``: bytes, ``None`` where unknown), where it stays on the CPU."""
    if tuned_device.type == "cuda" and free is not None and free < needed:
        return torch.device("cpu")
    return tuned_device


def place_stock(stock: nn.Module | str, tuned: nn.Module, tokenizer: PreTrainedTokenizerBase) -> tuple[nn.Module, str]:
    """The stock model, ready to answer beside ``tuned``, and a sentence saying where it runs ("" when
    nothing was loaded or moved).

    A model passed in is used where it already is (nothing is copied or moved). A name (Hub id,
    folder or ``hp_mlm:smoke-bert``) is loaded with ``models.load_model`` on the CPU, then moved to
    the fine-tuned model's device, except onto a CUDA GPU with less free memory than its weights x
    ``WEIGHTS_FACTOR`` + ``GPU_SPARE``: there it stays on the CPU, so the GPU never holds a second copy
    it has no room for (each sentence then takes the stock model a little longer).

    Raises:
        FileNotFoundError / HubUnavailableError: see ``models.load_model``.
    """
    if isinstance(stock, nn.Module):
        return stock, ""
    model = load_model(stock, tokenizer).model
    where = model_device(tuned)
    needed = int(model_bytes(model) * WEIGHTS_FACTOR) + GPU_SPARE
    free = torch.cuda.mem_get_info(where)[0] if where.type == "cuda" else None
    device = stock_device(where, needed, free)
    if device.type == "cpu" and where.type == "cuda":
        return model, (
            f"stock model {stock} kept on the CPU: the GPU has {free / GIB:.1f} GiB free and it needs about "
            f"{needed / GIB:.1f} GiB, so the fine-tuned model keeps the GPU (the stock answers take a little longer)"
        )
    return model.to(device), f"stock model {stock} loaded on {device.type}"


def before_after(
    stock: nn.Module,
    tuned: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    top_k: int = 5,
    target: str | None = None,
    whole_words: bool = True,
) -> dict[str, Any]:
    """Both models' top-k at every mask of ``sentence``, and the probability of ``target`` there.

    Returns:
        ``{"sentence", "masks": [{"stock": answers, "tuned": answers}, ...] (one per mask, left to right),
        "target": None or {"word", "pieces", "stock": [p, ...], "tuned": [p, ...]}}``; answers are
        ``inference.fill_mask``'s dicts (``token``, ``score`` a probability in [0, 1], ``pieces``);
        a target's probabilities are one per mask.
    Raises:
        ValueError: an empty sentence, one without a mask token, a target that is no word of this
            tokenizer, ``top_k`` < 1 (``inference.fill_mask``'s messages).
    """
    fill = fill_words if whole_words else fill_mask
    stock_answers, tuned_answers = (fill(model, tokenizer, sentence, top_k=top_k)[0] for model in (stock, tuned))
    result = {
        "sentence": sentence,
        "masks": [{"stock": s, "tuned": t} for s, t in zip(stock_answers, tuned_answers)],
        "target": None,
    }
    if target and target.strip():
        word = target.strip()
        scored = {
            name: [m[0] for m in fill_mask(model, tokenizer, sentence, targets=[word], top_k=1)[0]]
            for name, model in (("stock", stock), ("tuned", tuned))
        }
        pieces = scored["stock"][0]["pieces"]
        result["target"] = {"word": word, "pieces": pieces, **{k: [a["score"] for a in v] for k, v in scored.items()}}
    return result


def percent(p: float) -> str:
    """A probability as a percentage with two significant digits below 0.1% (``0.031%``), else one decimal."""
    return f"{p:.1%}" if p >= 0.001 or p == 0 else f"{100 * p:.2g}%"


def answer_label(answer: dict[str, Any]) -> str:
    """A guess as shown: the word, its pieces in brackets when it has several (``ashdown [ash ##down]``),
    ``(piece)`` after a lone continuation piece (``##wright (piece)``)."""
    if len(answer["pieces"]) > 1:
        return f"{answer['token']} [{' '.join(answer['pieces'])}]"
    return answer["token"] + (" (piece)" if answer["is_subword"] else "")


def target_summary(target: dict[str, Any], mask: int) -> str:
    """One line: the target's probability at mask ``mask`` (from 0), before and after, and the change."""
    before, after = target["stock"][mask], target["tuned"][mask]
    ratio = (
        "from zero" if before == 0 else f"x{after / before:,.0f}" if after >= 10 * before else f"x{after / before:.2g}"
    )
    pieces = f" [{' '.join(target['pieces'])}]" if len(target["pieces"]) > 1 else ""
    return f'"{target["word"]}"{pieces} at mask {mask + 1}: before {percent(before)}, after {percent(after)} ({ratio})'


def format_text(result: dict[str, Any]) -> str:
    """:func:`before_after`'s result as a plain-text table: per mask, each rank's guess and probability
    from the stock model beside the fine-tuned model's; then the target's line per mask."""
    masks = [list(zip(m["stock"], m["tuned"])) for m in result["masks"]]
    width = max([len(BEFORE) - 8] + [len(answer_label(s)) for pairs in masks for s, _ in pairs])
    lines = [result["sentence"]]
    for number, pairs in enumerate(masks, start=1):
        lines.append(f"mask {number:<3} {BEFORE:<{width + 8}}  {AFTER}")
        lines += [
            f"  {rank:<6} {answer_label(s):<{width}} {percent(s['score']):>7}  {answer_label(t)} {percent(t['score'])}"
            for rank, (s, t) in enumerate(pairs, start=1)
        ]
    if result["target"]:
        lines += [target_summary(result["target"], m) for m in range(len(result["masks"]))]
    return "\n".join(lines)


def answers_html(title: str, masks: Sequence[list[dict[str, Any]]]) -> str:
    """One model's guesses as an HTML table per mask (rank, guess, probability), under ``title``."""
    parts = [f"<b>{html.escape(title)}</b>"]
    for number, answers in enumerate(masks, start=1):
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(answer_label(a), quote=False)}</td><td>{percent(a['score'])}</td></tr>"
            for i, a in enumerate(answers, start=1)
        )
        parts.append(f"<table><caption>mask {number}</caption>{rows}</table>")
    return "".join(parts)


def result_html(result: dict[str, Any]) -> str:
    """:func:`before_after`'s result as the widget draws it, in static HTML: the sentence, both models'
    tables side by side, the target's line per mask (for a saved notebook, GitHub, nbviewer, the website)."""
    before = answers_html(BEFORE, [m["stock"] for m in result["masks"]])
    after = answers_html(AFTER, [m["tuned"] for m in result["masks"]])
    target = result["target"]
    lines = [target_summary(target, m) for m in range(len(result["masks"]))] if target else []
    tables = f"<div style='display:flex;gap:3em'><div>{before}</div><div>{after}</div></div>"
    targets = "<br>".join(html.escape(line, quote=False) for line in lines)
    return f"<p>{html.escape(result['sentence'])}</p>{tables}{targets}"


class BeforeAfter:
    """The widget: ``sentence`` and ``target`` text boxes, the ``before`` and ``after`` tables side by
    side (HTML widgets), ``target_line`` and ``message`` (an error, e.g. a sentence without a mask);
    ``box`` holds them all. Editing a box (Enter, or leaving it) calls :meth:`refresh`."""

    def __init__(self, stock, tuned, tokenizer, sentence: str, top_k: int, target: str | None, whole_words: bool):
        import ipywidgets as w

        self.models, self.tokenizer, self.top_k, self.whole_words = (stock, tuned), tokenizer, top_k, whole_words
        wide = w.Layout(width="90%")
        self.sentence = w.Text(value=sentence, description="Sentence", continuous_update=False, layout=wide)
        self.target = w.Text(
            value=target or "",
            description="Target",
            placeholder="a word to score at each mask",
            continuous_update=False,
        )
        self.before, self.after, self.target_line, self.message = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        for box in (self.sentence, self.target):
            box.observe(self.refresh, names="value")
        self.before.layout = w.Layout(margin="0 3em 0 0")  # a gap between the two tables
        tables = w.HBox([self.before, self.after])
        self.box = w.VBox([self.sentence, self.target, self.message, tables, self.target_line])
        self.result = self.refresh()

    def refresh(self, change: dict | None = None) -> dict[str, Any] | None:  # noqa: ARG002 (observe's argument)
        """Redraw both tables and the target line for the boxes' text; returns :func:`before_after`'s result,
        or None after showing an error in ``message``."""
        try:
            result = before_after(
                *self.models, self.tokenizer, self.sentence.value, self.top_k, self.target.value, self.whole_words
            )
        except (ValueError, OutOfMemory) as error:
            self.message.value = f"<span style='color:#b00'>{html.escape(str(error))}</span>"
            self.before.value = self.after.value = self.target_line.value = ""
            return None
        self.message.value = ""
        self.before.value = answers_html(BEFORE, [m["stock"] for m in result["masks"]])
        self.after.value = answers_html(AFTER, [m["tuned"] for m in result["masks"]])
        target = result["target"]
        lines = [target_summary(target, m) for m in range(len(result["masks"]))] if target else []
        self.target_line.value = "<br>".join(html.escape(line, quote=False) for line in lines)
        self.result = result
        return result

    def bundle(self) -> dict[str, Any]:
        """What ``display(..., raw=True)`` shows: the live widget for a front end with widgets, and a static
        copy of its tables (``text/html``, and :func:`format_text`'s ``text/plain``) for a saved notebook,
        GitHub, nbviewer and the course's website, which keep no widget state (ipywidgets 7 and 8 alike)."""
        view = {"version_major": 2, "version_minor": 0, "model_id": self.box._model_id}
        if self.result is None:  # the sentence was refused: its message is what the widget shows
            static, text = self.message.value, html.unescape(re.sub("<[^>]+>", "", self.message.value))
        else:
            static, text = result_html(self.result), format_text(self.result)
        return {"application/vnd.jupyter.widget-view+json": view, "text/html": static, "text/plain": text}


def opening(settings: Any = None) -> tuple[str, str | None]:
    """The sentence the widget opens on, and the corpus's word at its mask (None for a sentence of several masks):
    the run's first example (``course.premise.premise``: the profile's premise, *Hob [MASK]* offline, *Harry
    [MASK]* in ``full`` and ``quick``, or the first sentence picked from your held-out rows), else, where none
    could be picked, :data:`PLAIN_EXAMPLE`. ``settings``: ``config.Settings`` (default: the active profile's)."""
    sentence, answers = premise(settings or get_settings()) or PLAIN_EXAMPLE
    return sentence, answers[0] if len(answers) == 1 else None


def show_before_after(
    stock: nn.Module | str,
    tuned: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str | None = None,
    top_k: int = 5,
    target: str | None = None,
    whole_words: bool = True,
    widgets: bool | None = None,
    settings: Any = None,
) -> BeforeAfter | dict[str, Any]:
    """Show the stock and the fine-tuned model side by side for ``sentence`` (with ``[MASK]``).

    Without ``sentence`` it opens on the run's own first example (:func:`opening`: the profile's premise, or
    the first sentence picked from your held-out rows), with the corpus's word there as ``target`` when none
    is given. ``settings``: the run's ``config.Settings`` (default: ``config.get_settings()``, the active profile).
    ``stock``: the model before fine-tuning, or its name (loaded as :func:`place_stock` says, which
    also keeps it off a GPU short of memory and prints what it did). ``widgets=True`` draws the
    widget and returns it (:class:`BeforeAfter`); ``False`` shows :func:`result_html`'s tables (with
    :func:`format_text`'s text beside them) in a notebook, or prints that text elsewhere, and returns
    :func:`before_after`'s result; ``None`` decides by ``episodes.widgets_front_end``.

    Raises:
        ValueError: in the text path, as :func:`before_after` (the widget shows the message instead).
    """
    if sentence is None:
        sentence, word = opening(settings)
        target = word if target is None else target
    stock, note = place_stock(stock, tuned, tokenizer)
    if note:
        print(note)
    if widgets_front_end() if widgets is None else widgets:
        from IPython.display import display

        shown = BeforeAfter(stock, tuned, tokenizer, sentence, top_k, target, whole_words)
        display(shown.bundle(), raw=True)  # the widget, with a static copy of its tables for saved pages
        return shown
    result = before_after(stock, tuned, tokenizer, sentence, top_k, target, whole_words)
    if in_kernel():  # a notebook without a widget front end (nbconvert, nbval): the tables, and text beside them
        from IPython.display import display

        display({"text/html": result_html(result), "text/plain": format_text(result)}, raw=True)
    else:
        print(format_text(result))
    return result
