"""A task about the books: what kind of thing does each name name? A linear probe on frozen features.

Taught in ``notebooks/06_the_library_way.ipynb``. Does adapting the encoder to the books help a task
about them (Gururangan et al. 2020: domain- and task-adaptive MLM helps most far from the pre-training
domain, and small tasks vary a lot between seeds)? Each name of the corpus, labelled by the project
(person, place, creature, thing, spell), becomes one feature vector: the encoder's last hidden states,
averaged over the name's pieces and over the passages that mention it. A logistic regression
(scikit-learn's) is fitted on part of the names and scored on the rest, for several seeds of that
split, with the majority class and chance beside it. The encoder stays frozen: only the probe learns.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from hp_mlm.profiles import COURSE_DATASET, SMOKE_DATASET

#: Names and what each names, by dataset, labelled by this project (files in ``hp_mlm/corpora``): the
#: course corpus's (which the smoke corpus shares) and well-known names of the Harry Potter books.
NAME_TYPES = {
    COURSE_DATASET: "course_name_types.json",
    SMOKE_DATASET: "course_name_types.json",
    "andjela-r/mlm-harry-potter": "hp_name_types.json",
}


def name_types_file(dataset: str) -> Path | None:
    """The packaged name types for ``dataset`` (:data:`NAME_TYPES`), or None for a dataset without them."""
    from importlib import resources

    name = NAME_TYPES.get(dataset)
    return Path(str(resources.files("hp_mlm") / "corpora" / name)) if name else None


def load_name_types(path: str | Path | None = None) -> dict[str, str]:
    """``{name: type}`` from a JSON object of lower-case single words (default: the course corpus's).

    Raises:
        FileNotFoundError: no such file. ValueError: not a JSON object of word -> type, or a type with
            fewer than 2 names (a probe cannot be scored on a class it never saw).
    """
    path = Path(path) if path is not None else name_types_file(COURSE_DATASET)
    if not path.exists():
        raise FileNotFoundError(f"name types {str(path)!r}: no such file; give a JSON object of name -> type")
    try:
        types = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"name types {str(path)!r} is not JSON ({err.msg}, line {err.lineno})") from None
    bad = (
        [k for k, v in types.items() if not re.fullmatch(r"[a-z]+", k) or not isinstance(v, str)]
        if isinstance(types, dict)
        else [path.name]
    )
    if bad:
        raise ValueError(f"name types {str(path)!r}: want lower-case single words mapped to a type, not {bad[:3]}")
    counts = {t: list(types.values()).count(t) for t in set(types.values())}
    if rare := sorted(t for t, n in counts.items() if n < 2):
        raise ValueError(f"name types {str(path)!r}: types {rare} have fewer than 2 names; add names or drop them")
    return types


@torch.no_grad()
def name_features(
    model, tokenizer, texts: Sequence[str], names: Sequence[str], per_name: int = 8, max_length: int = 128
) -> tuple[torch.Tensor, list[str]]:
    """One vector per name: the encoder's last hidden states over the name's pieces, averaged within
    each of the first ``per_name`` passages of ``texts`` that mention it (a whole word, any case; its
    first mention in the passage), then over those passages.

    Args:
        model: a masked-LM (``BertForMaskedLM``...); only its encoder (``model.base_model``) runs, in fp32, in eval mode.
        max_length: tokens per passage (longer passages are truncated; a name cut off is not used).
    Returns:
        ``(features, kept)``: FloatTensor[len(kept), hidden] on the CPU, and the names that had at
        least one passage, in the order given.
    """
    encoder, device, was_training = model.base_model, next(model.parameters()).device, model.training
    encoder.eval()
    vectors, kept = [], []
    for name in names:
        pattern = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
        hits = [(t, m.span()) for t in texts if (m := pattern.search(t))][:per_name]
        if not hits:
            continue
        enc = tokenizer(
            [t for t, _ in hits],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        offsets = enc.pop("offset_mapping")
        hidden = encoder(**{k: v.to(device) for k, v in enc.items()}).last_hidden_state.float().cpu()
        pooled = []
        for i, (_, (start, end)) in enumerate(hits):
            inside = (offsets[i, :, 0] >= start) & (offsets[i, :, 1] <= end) & (offsets[i, :, 1] > offsets[i, :, 0])
            if inside.any():
                pooled.append(hidden[i][inside].mean(0))
        if pooled:
            vectors.append(torch.stack(pooled).mean(0))
            kept.append(name)
    model.train(was_training)
    return (torch.stack(vectors) if vectors else torch.empty(0, model.config.hidden_size)), kept


def probe_accuracy(
    features: torch.Tensor, labels: Sequence[str], seeds: int = 10, test_fraction: float = 0.3
) -> dict[str, Any]:
    """Held-out accuracy of a logistic-regression probe on ``features`` (FloatTensor[n, hidden]),
    one stratified split per seed (0, 1, ...), beside the majority class of each split's training part.

    Returns:
        ``{"probe", "majority"}``: a list of accuracies (fractions in [0, 1]) per seed;
        ``"probe_mean", "probe_min", "probe_max", "majority_mean"``; ``"chance"`` (1 / classes);
        ``"n_names", "n_test"``, ``"classes"``.
    Raises:
        ValueError: fewer than 2 classes, ``seeds`` < 1, or a split that leaves a class untested.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    classes = sorted(set(labels))
    if len(classes) < 2 or seeds < 1:
        raise ValueError(f"a probe needs at least 2 classes and 1 seed, got {classes} and {seeds}")
    x, y = features.numpy(), list(labels)
    probe, majority = [], []
    for seed in range(seeds):
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=test_fraction, stratify=y, random_state=seed
        )
        fitted = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(x_train, y_train)
        probe.append(float((fitted.predict(x_test) == y_test).mean()))
        common = max(set(y_train), key=y_train.count)
        majority.append(sum(t == common for t in y_test) / len(y_test))
    return {
        "probe": probe,
        "majority": majority,
        "probe_mean": statistics.fmean(probe),
        "probe_min": min(probe),
        "probe_max": max(probe),
        "majority_mean": statistics.fmean(majority),
        "chance": 1 / len(classes),
        "n_names": len(y),
        "n_test": len(y_test),
        "classes": classes,
    }


def compare_encoders(
    models: Mapping[str, Any], tokenizer, texts: Sequence[str], name_types: Mapping[str, str], seeds: int = 10
) -> dict[str, dict[str, Any]]:
    """:func:`probe_accuracy` for each encoder in ``models`` (name -> masked-LM), on the names every
    encoder kept, so all are scored on the same names and the same splits."""
    found = {label: name_features(m, tokenizer, texts, list(name_types)) for label, m in models.items()}
    common = [n for n in name_types if all(n in kept for _, kept in found.values())]
    out = {}
    for label, (features, kept) in found.items():
        rows = torch.stack([features[kept.index(n)] for n in common])
        out[label] = probe_accuracy(rows, [name_types[n] for n in common], seeds)
    return out
