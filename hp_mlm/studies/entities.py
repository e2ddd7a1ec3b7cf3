"""Names in a corpus found by a spaCy model, the alternative notebook 05 names to ``data.find_entities``.

``data.find_entities`` (the course's default, in the core) needs nothing; this needs spaCy and one of its
models installed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence


def find_entities_spacy(texts: Sequence[str], model: str = "en_core_web_sm", min_count: int = 2) -> list[str]:
    """Entity words found by a spaCy model you have installed (people, places, organisations, things).

    Raises:
        ImportError: spaCy or the model is not installed (says how to install it, or to use
            ``data.find_entities``, which needs nothing).
    """
    try:
        import spacy

        nlp = spacy.load(model, disable=["parser", "lemmatizer"])
    except (ImportError, OSError) as error:
        raise ImportError(
            f"spaCy model {model!r} is not available ({error}); install it with "
            f"'pip install spacy && python -m spacy download {model}', or use hp_mlm.data.find_entities()"
        ) from None
    kinds = {"PERSON", "GPE", "LOC", "ORG", "FAC", "NORP", "PRODUCT", "WORK_OF_ART"}
    counts: Counter = Counter()
    for doc in nlp.pipe(t for t in texts if t):
        for ent in doc.ents:
            if ent.label_ in kinds:
                counts.update(w.lower() for w in re.findall(r"[^\W\d_]+", ent.text))
    return [k for k, n in counts.most_common() if n >= min_count]
