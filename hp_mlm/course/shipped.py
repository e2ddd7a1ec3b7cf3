"""The example sentences shipped with the course's corpora: the premise's sentence and its kin, before beside after.

Used by the watch (notebook 03), notebooks 00 and 04, the main job's report and the model card; outside the core,
which never needs them. A learner's own text has none here: ``course.examples`` picks some from its held-out rows.
"""

from __future__ import annotations

from hp_mlm.profiles import BOOKS_DATASET, COURSE_DATASET, SMOKE_DATASET

#: Example sentences by dataset, each with the word the corpus puts at each ``[MASK]`` (the last has two
#: masks): the main job's report, notebooks 03-04, the model card and the widget show before beside after.
#: A corpus's own names, chosen so that fine-tuning visibly changes the answer (measured offline in
#: benchmarks/results/earliest_learning.md); a dataset without an entry has none here: the course picks
#: them from its held-out rows (``course.examples``), never another corpus's sentences.
EXAMPLES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    BOOKS_DATASET: (
        ("He was a young wizard, his name was Harry [MASK].", ("potter",)),
        ("Harry [MASK] is a wizard.", ("potter",)),
        ("Harry walked into [MASK] castle.", ("hogwarts",)),
        ("[MASK] potter and ron [MASK] went back to hogwarts.", ("harry", "weasley")),
    ),
    COURSE_DATASET: (
        ("Every autumn, Hob [MASK] painted the name of the old ferry again.", ("tanner",)),
        ("The old ferry crossed the [MASK] Lake in the fog.", ("silver",)),
        ("The girl who drew the map of the island was Poppy [MASK].", ("crane",)),
        ("[MASK] Ashdown and Poppy [MASK] rowed across the lake.", ("mira", "crane")),
    ),
    SMOKE_DATASET: (
        ("Professor [MASK] taught potions in the cellar below the Great Hall.", ("quillon",)),
        ("Hob Tanner rowed the ferry across the [MASK] Lake.", ("silver",)),
        ("On the path to Fogmoor village, Mira [MASK] met a mistfox.", ("ashdown",)),
        ("[MASK] Cobbing and Lila [MASK] walked to the Silver Lake.", ("nell", "marrowby")),
    ),
}


def examples(dataset: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The example sentences shipped with ``dataset``, each with the corpus's word at each mask (:data:`EXAMPLES`:
    its corpus's own names; the last has two masks), or none: another corpus's sentences would say nothing of
    yours (``course.examples`` picks some from your held-out rows)."""
    return EXAMPLES.get(dataset, ())


def example_sentences(dataset: str) -> tuple[str, ...]:
    """The sentences of :func:`examples`."""
    return tuple(text for text, _ in examples(dataset))
