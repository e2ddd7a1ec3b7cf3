"""Example sentences for any corpus: the ones it ships, the ones you give, or ones picked from your held-out rows.

The live view (``course.watch``), the main job's report, ``metrics.json`` and the model card show the model
learning a few example sentences. The course's corpora ship theirs (``profiles.EXAMPLES``); for your own
text, :func:`pick_examples` picks them from the rows held out of training, before training starts, so that
what you watch is the model learning *your* words. :func:`run_examples` says which list a run uses, and
where it came from: one list for the watch, the report, ``metrics.json`` and the card.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.data import find_entities
from hp_mlm.inference import examples as shipped_examples
from hp_mlm.inference import fill_mask
from hp_mlm.studies.probes import normalise_answer, score_probes

#: Where a run's examples came from, as the report's header says it.
SHIPPED, GIVEN, PICKED = "shipped with the corpus", "from your examples file", "picked from your held-out rows"
#: Sentences picked at most, and at least when enough words qualify (as the shipped profiles: 4 or 5).
PICKED_AT_MOST = 5
#: A candidate sentence's length in words: short enough to read in a frame.
SENTENCE_WORDS = (6, 25)
#: Held-out sentences tried per word (a seeded draw): one pass of the stock model scores them all.
SENTENCES_PER_WORD = 4
#: Words tried at most, most frequent first.
WORDS_TRIED = 20


@dataclass
class Examples:
    """A run's example sentences, and where they came from.

    Attributes:
        examples: ``((sentence with "[MASK]", (the corpus's word at each mask, as a token)), ...)``; empty
            when none were shipped, given or found.
        source: :data:`SHIPPED`, :data:`GIVEN` or :data:`PICKED`.
        scored_whole: probes (``{"text", "answer"}``) whose answer is a word of several pieces, scored whole
            by ``studies.probes.score_probes`` in the report (the token view shows one piece per mask).
        note: one line for the log: what was picked, or why nothing was.
        known: the one-piece names tried whose every candidate sentence the stock model already got right
            (skipped: nothing to learn there).
        candidates, already_right: candidate sentences of one-piece names the stock model was asked about, and
            those where its first guess was already the name (how much of the corpus's names it knew).
    """

    examples: tuple[tuple[str, tuple[str, ...]], ...]
    source: str
    scored_whole: list[dict[str, str]] = field(default_factory=list)
    note: str = ""
    known: tuple[str, ...] = ()
    candidates: int = 0
    already_right: int = 0


def sentences_of(text: str) -> list[str]:
    """``text`` cut into sentences after ``.``, ``!`` or ``?`` (and a closing quote) followed by a space."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’])\s+", text or "") if s.strip()]


def pick_examples(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    train_texts: Sequence[str],
    held_out_texts: Sequence[str],
    seed: int,
    at_most: int = PICKED_AT_MOST,
    min_count: int = 3,
) -> Examples:
    """Pick example sentences from the held-out rows, each hiding a name of the corpus the stock model gets wrong.

    The method, in four steps:

    1. **Count** the names in the training rows (``data.find_entities``: words capitalised inside
       sentences at least ``min_count`` times, most frequent first): the corpus's people, places and
       things, the words fine-tuning on it teaches.
    2. **Cut** the held-out rows into sentences of 6 to 25 words; drop any sentence that a training row
       holds (so no picked sentence was trained on). For each of the ``WORDS_TRIED`` most frequent names,
       take the sentences that hold it exactly once and draw up to ``SENTENCES_PER_WORD`` of them
       (``random.Random(seed)``: the same seed picks the same sentences); hide the name with ``[MASK]``.
       A name the vocabulary spells with its unknown token is left out.
    3. **Ask the stock model once** (the model before fine-tuning, ``inference.fill_mask``, top-1) at every
       candidate of a one-piece name, and keep only those where its first guess is not the name: a word
       it already knows would show nothing being learned.
    4. **Spread**: one sentence per name, most frequent names first, ``at_most`` of them. A name of
       several word pieces cannot be one token's guess, so the token view leaves them out; the most
       frequent one that the stock model misses as a whole word (``studies.probes.score_probes``: a
       beam over whole words) is kept as one probe, scored whole in the report.

    Args:
        model, tokenizer: the stock model, before any training step.
        train_texts, held_out_texts: the text of the training rows and of the held-out rows.
        seed: the run's seed.
    Returns:
        :class:`Examples` with ``source`` :data:`PICKED`; ``examples`` empty (and ``note`` saying so) when
        no held-out sentence hides a name that the stock model gets wrong.
    """
    names = find_entities(train_texts, min_count)[:WORDS_TRIED]
    trained = "\n".join(train_texts)
    sentences = [
        s
        for text in held_out_texts
        for s in sentences_of(text)
        if SENTENCE_WORDS[0] <= len(s.split()) <= SENTENCE_WORDS[1] and s not in trained
    ]
    one_piece, several = [], []  # (name, masked sentence, the answer as the tokenizer sees it)
    for name in names:
        word = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
        holding = [s for s in sentences if len(word.findall(s)) == 1]
        for sentence in random.Random(f"{seed}-{name}").sample(holding, min(SENTENCES_PER_WORD, len(holding))):
            found = word.search(sentence)
            pieces = tokenizer.tokenize(found.group())
            if tokenizer.unk_token in pieces:  # a word the vocabulary cannot spell: no guess can be it
                break
            masked = sentence[: found.start()] + "[MASK]" + sentence[found.end() :]
            answer = pieces[0] if len(pieces) == 1 else normalise_answer(found.group(), tokenizer)
            (one_piece if len(pieces) == 1 else several).append((name, masked, answer))
    picked: dict[str, tuple[str, tuple[str, ...]]] = {}
    missed, wrong = set(), set()
    if one_piece:
        guesses = fill_mask(model, tokenizer, [masked for _, masked, _ in one_piece], top_k=1)
        for (name, masked, answer), guess in zip(one_piece, guesses):
            if guess[0][0]["token"] != answer:
                missed.add(name)
                wrong.add((name, masked))
                if name not in picked and len(picked) < at_most:
                    picked[name] = (masked, (answer,))
    known = tuple(dict.fromkeys(name for name, _, _ in one_piece if name not in missed))
    whole = first_missed_whole(model, tokenizer, several)
    words = ", ".join(answers[0] for _, answers in picked.values())
    note = (
        f"examples: {len(picked)} picked from your held-out rows ({words}), names the stock model gets wrong"
        if picked
        else "examples: none picked: no held-out sentence hides a name of the training rows (a word written "
        f"with a capital inside sentences, {min_count} times or more) that the stock model gets wrong; the run goes "
        "on without examples (pass `examples` to give your own)"
    ) + "".join(f"; {w['answer']}: several word pieces, scored whole in the report" for w in whole)
    right = len(one_piece) - sum(1 for name, masked, answer in one_piece if (name, masked) in wrong)
    return Examples(tuple(picked.values()), PICKED, whole, note, known, len(one_piece), right)


def first_missed_whole(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, candidates: Sequence[tuple[str, str, str]]
) -> list[dict[str, str]]:
    """The first candidate ``(name, masked sentence, answer)`` of a name of several pieces whose whole word
    the stock model does not guess first (``studies.probes.score_probes``), as a one-probe list; [] if none."""
    for _, masked, answer in candidates:
        probe = {"text": masked, "answer": answer}
        if not score_probes(model, tokenizer, [probe], top_k=1)["rows"][0]["hit_top1"]:
            return [probe]
    return []


def read_examples(path: str | Path, tokenizer: PreTrainedTokenizerBase | None = None) -> Examples:
    """Examples from a ``.jsonl`` file, one JSON object a line: ``{"text": "... [MASK] ...", "answer": "word"}``
    (``"answer"`` a list of words, ``["w1", "w2"]``, for a sentence with several masks). Answers are written
    as the tokenizer sees them (``normalise_answer``: ``"Dorothy"`` is ``"dorothy"`` for an uncased one).
    With ``tokenizer``, a sentence with one mask whose answer is several word pieces (an invented name:
    ``quillamor`` is ``qui ##lla ##mo ##r``) goes to ``scored_whole``, as a picked one does: one token's
    guess can never be it, so the live view leaves it out and the report scores it whole.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not JSON, lacks ``text`` or ``answer``, or whose number of answers is
            not its number of ``[MASK]``; an answer of several pieces in a sentence of several masks; a file
            without any example (the message names the line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"examples file {str(path)!r} not found; pass a .jsonl of {{'text', 'answer'}} lines")
    found, whole = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            text, answers = item["text"], item["answer"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(
                f'{path}:{number}: each line must be a JSON object {{"text": "... [MASK] ...", "answer": "word"}}'
            ) from None
        answers = [answers] if isinstance(answers, str) else list(answers)
        if not isinstance(text, str) or text.count("[MASK]") != len(answers) or not answers:
            raise ValueError(f"{path}:{number}: the text has {str(text).count('[MASK]')} [MASK] and {len(answers)} "
                             "answer(s); give one answer per [MASK]")  # fmt: skip
        said = tuple(normalise_answer(a, tokenizer) if tokenizer is not None else a.lower() for a in answers)
        several = [(a, pieces) for a in said if tokenizer is not None and len(pieces := tokenizer.tokenize(a)) > 1]
        if several and len(said) > 1:
            word, pieces = several[0]
            raise ValueError(f"{path}:{number}: {word!r} is {len(pieces)} word pieces ({' '.join(pieces)}); a word "
                             "of several pieces is scored whole only in a sentence with one [MASK]: give it a line of its own")  # fmt: skip
        if several:  # one token's guess can never be it: scored whole in the report
            whole.append({"text": text, "answer": said[0]})
        else:
            found.append((text, said))
    if not found and not whole:
        raise ValueError(f"examples file {str(path)!r} holds no example; add a line per sentence")
    note = f"examples: {len(found)} from {path}" + (
        f"; {', '.join(w['answer'] for w in whole)}: several word pieces, scored whole in the report" if whole else ""
    )
    return Examples(tuple(found), GIVEN, whole, note)


def run_examples(
    prepared: Any, examples_file: str | Path | None = None, log: Callable[[str], None] = print
) -> Examples:
    """The examples a run shows, one list for the watch, the report, ``metrics.json`` and the card: those in
    ``examples_file`` when given (:func:`read_examples`: it wins), else those shipped with the corpus
    (``profiles.EXAMPLES``), else those :func:`pick_examples` picks from the held-out rows with the stock
    model (``prepared``: ``prepare.prepare``'s result, before training). Says in ``log`` where they came from."""
    s, loaded = prepared.settings, prepared.loaded
    if examples_file:
        chosen = read_examples(examples_file, loaded.tokenizer)
    elif shipped := shipped_examples(s.dataset):
        chosen = Examples(shipped, SHIPPED, note=f"examples: {len(shipped)} {SHIPPED} {s.dataset}")
    else:
        chosen = pick_examples(
            loaded.model,
            loaded.tokenizer,
            prepared.train_rows[s.text_column],
            prepared.validation_rows[s.text_column],
            s.seed,
            min_count=s.entity_min_count,
        )
    log(chosen.note)
    return chosen
