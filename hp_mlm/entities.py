"""Entities: names of people, places and things in a corpus, for entity masking and per-kind metrics.

Taught in ``notebooks/05_going_further.ipynb``. Found offline from capitalisation
(:func:`find_entities`), or with a spaCy model when one is installed (:func:`find_entities_spacy`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence


def find_entities(texts: Sequence[str], min_count: int = 3, capitalised_share: float = 0.9) -> list[str]:
    """Names of people, places and things in a corpus, found offline from capitalisation.

    A word counts as an entity when it appears at least ``min_count`` times capitalised *not* at
    the start of a sentence, and is capitalised in at least ``capitalised_share`` of all its
    appearances (so "The" or "But" never qualify, "Dorothy" and "Emerald" do).

    Words are runs of letters (BERT's pre-tokenizer splits at apostrophes and hyphens); "I" and
    one-letter words never count.

    Returns:
        Lower-cased entity words, most frequent first.
    """
    word = re.compile(r"[^\W\d_]+")  # letters only: BERT's pre-tokenizer splits at ' and -
    inside, total, capital = Counter(), Counter(), Counter()
    for text in texts:
        for m in word.finditer(text or ""):
            token = m.group()
            key = token.lower()
            total[key] += 1
            if token[0].isupper():
                capital[key] += 1
                before = text[: m.start()].rstrip()
                sentence_start = not before or before[-1] in ".!?\"“”'‘’:;(—-"
                if not sentence_start:
                    inside[key] += 1
    found = [
        k for k, n in inside.items() if n >= min_count and capital[k] >= capitalised_share * total[k] and len(k) > 1
    ]
    return sorted(found, key=lambda k: (-inside[k], k))


def find_entities_spacy(texts: Sequence[str], model: str = "en_core_web_sm", min_count: int = 2) -> list[str]:
    """Entity words found by a spaCy model you have installed (people, places, organisations, things).

    Raises:
        ImportError: spaCy or the model is not installed (says how to install it, or to use
            :func:`find_entities`, which needs nothing).
    """
    try:
        import spacy

        nlp = spacy.load(model, disable=["parser", "lemmatizer"])
    except (ImportError, OSError) as error:
        raise ImportError(
            f"spaCy model {model!r} is not available ({error}); install it with "
            f"'pip install spacy && python -m spacy download {model}', or use find_entities()"
        ) from None
    kinds = {"PERSON", "GPE", "LOC", "ORG", "FAC", "NORP", "PRODUCT", "WORK_OF_ART"}
    counts: Counter = Counter()
    for doc in nlp.pipe(t for t in texts if t):
        for ent in doc.ents:
            if ent.label_ in kinds:
                counts.update(w.lower() for w in re.findall(r"[^\W\d_]+", ent.text))
    return [k for k, n in counts.most_common() if n >= min_count]
