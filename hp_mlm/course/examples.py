"""Example sentences for any corpus: the ones it ships, the ones you give, or ones picked from your held-out rows.

The live view (``course.watch``), the main job's report, ``metrics.json`` and the model card show the model
learning a few example sentences. The course's corpora ship theirs (``course.shipped.EXAMPLES``); for your own
text, :func:`pick_examples` picks them from the rows held out of training, before training starts, so that
what you watch is the model learning *your* words. :func:`run_examples` says which list a run uses, and
where it came from: one list for the watch, the report, ``metrics.json`` and the card.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.course.shipped import examples as shipped_examples
from hp_mlm.data import find_entities
from hp_mlm.inference import fill_mask
from hp_mlm.studies.probes import normalise_answer, score_probes

#: Where a run's examples came from, as the report's header says it.
SHIPPED, GIVEN, PICKED = "shipped with the corpus", "from your examples file", "picked from your held-out rows"
#: Sentences picked at most, and at least when enough words qualify (as the shipped profiles: 4 or 5).
PICKED_AT_MOST = 5
#: A candidate sentence's length in words: a line of a book, not a paragraph (the frame shows the word beside the gap).
SENTENCE_WORDS = (6, 40)
#: Held-out sentences tried per word (a seeded draw): one pass of the stock model scores them all.
SENTENCES_PER_WORD = 4
#: Names tried at most, most frequent first (only sentences whose neighbour decides the name reach the model).
WORDS_TRIED = 60


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
        decided_by: for picked examples, then for those scored whole: ``{"word", "phrase", "together",
            "neighbour"}`` (:func:`decided_by`), the neighbour in the sentence that decides the word.
    """

    examples: tuple[tuple[str, tuple[str, ...]], ...]
    source: str
    scored_whole: list[dict[str, str]] = field(default_factory=list)
    note: str = ""
    known: tuple[str, ...] = ()
    candidates: int = 0
    already_right: int = 0
    decided_by: tuple[dict, ...] = ()


#: Titles and other words written with a full stop that never ends a sentence ("Mr. Baker" is one sentence).
ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "st", "mt", "prof", "rev", "capt", "col", "gen", "lt", "sgt", "jr", "sr")
#: Words that stand where a name stands in any book: one among the stock model's first guesses means the
#: sentence does not decide the name (*disturb [MASK] seriously*: *them*).
PRONOUNS = frozenset("i me my you your he him his she her it its we us our they them their one".split())
#: Pronouns and the other small words of English that fit a gap whatever the book: the stock model's first
#: guess may not be one (*in front of [MASK]*: *the*), unless it repeats the word beside the gap (*the the*).
FUNCTION_WORDS = PRONOUNS | frozenset(
    "mine myself yours yourself himself hers herself itself ours ourselves theirs themselves someone something "
    "everyone everything nobody nothing a an the this that these those some any each every no all both either "
    "neither such other another of in on at to for with by from about into onto over under through between after "
    "before behind beside near off out up down upon around across toward towards along against among within "
    "without and or but nor so yet if then than because while when where what who whom whose which how why as "
    "is are was were be been being am have has had do does did will would shall should can could may might must "
    "not there here also too very just now only again still".split()
)
#: A gap is decided when the masked word comes at least this share of the times its neighbour does, in the
#: training rows ("tin [MASK]": woodman after nearly every "tin").
DECIDES = 0.5
#: The stock model's guesses looked at per gap: none of them may be a word of :data:`FUNCTION_WORDS`.
STOCK_GUESSES = 3
_ABBREVIATION = re.compile(rf"\b({'|'.join(ABBREVIATIONS)})\.", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]+|[^\w\s]")  # a word of letters, or one mark: marks part words, as a reader reads


def sentences_of(text: str) -> list[str]:
    """``text`` cut into sentences after ``.``, ``!`` or ``?`` (and a closing quote or bracket) followed by a
    space, never after a title of :data:`ABBREVIATIONS` (``Mrs.``) or an initial (``J.``)."""
    sentences, start = [], 0
    for end in re.finditer(r"[.!?][\"'”’)]*\s+", text or ""):
        before = re.search(r"[^\W\d_]+$", text[start : end.start()])
        if end.group()[0] == "." and before and (before.group().lower() in ABBREVIATIONS or len(before.group()) == 1
                                                 and before.group().isupper()):  # fmt: skip
            continue
        sentences.append(text[start : end.end()].strip())
        start = end.end()
    sentences.append((text or "")[start:].strip())
    return [s for s in sentences if s]


def a_word_of_any_book_fits(guesses: Sequence[str], masked: str) -> bool:
    """True when the stock model's first guesses at ``masked``'s gap say a word of any book fits there: a pronoun
    among them (:data:`PRONOUNS`), or a first guess of :data:`FUNCTION_WORDS` that is not the word beside the gap."""
    before, _, after = masked.partition("[MASK]")
    beside = set(words_of(before)[-1:] + words_of(after)[:1])
    return bool(PRONOUNS & set(guesses)) or (guesses[0] in FUNCTION_WORDS and guesses[0] not in beside)


def words_of(text: str) -> list[str]:
    """``text``'s words, lower-cased, and its marks, one item each (``Mr.`` is the word ``mr``)."""
    return [w.lower() for w in _WORD.findall(_ABBREVIATION.sub(r"\1", text))]


def neighbours(train_texts: Sequence[str]) -> tuple[Counter, Counter]:
    """How often each word occurs in the training rows, and each pair of words side by side (no mark between)."""
    single, pairs = Counter(), Counter()
    for text in train_texts:
        words = words_of(text)
        single.update(words)
        pairs.update(zip(words, words[1:]))
    return single, pairs


def decided_by(masked: str, word: str, counts: tuple[Counter, Counter], min_count: int) -> dict | None:
    """The neighbour that decides the gap of ``masked`` (a sentence with one ``[MASK]``) for ``word``, if one does.

    The neighbours are the word right before the mask and the word right after it (no mark between). One
    decides the gap when, in the training rows (``counts``: :func:`neighbours`), ``word`` follows the word
    before (or precedes the word after) in at least :data:`DECIDES` of that neighbour's occurrences, and at least
    ``min_count`` times: P(word | neighbour) >= 0.5, as *Harry* is followed by *Potter*.

    Returns:
        ``{"word", "phrase"`` (e.g. ``"tin [MASK]"``), ``"together"`` (times the pair occurs), ``"neighbour"``
        (times the neighbour occurs)``}`` for the neighbour with the larger share; None when neither decides.
    """
    single, pairs = counts
    before, _, after = masked.partition("[MASK]")
    options = []  # (times together, times the neighbour occurs, the phrase)
    if (left := words_of(before)[-1:]) and left[0].isalpha():
        options.append((pairs[left[0], word], single[left[0]], f"{left[0]} [MASK]"))
    if (right := words_of(after)[:1]) and right[0].isalpha():
        options.append((pairs[word, right[0]], single[right[0]], f"[MASK] {right[0]}"))
    decided = [o for o in options if o[0] >= min_count and o[0] >= DECIDES * o[1]]
    if not decided:
        return None
    together, neighbour, phrase = max(decided, key=lambda o: o[0] / o[1])
    return {"word": word, "phrase": phrase, "together": together, "neighbour": neighbour}


def pick_examples(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    train_texts: Sequence[str],
    held_out_texts: Sequence[str],
    seed: int,
    at_most: int = PICKED_AT_MOST,
    min_count: int = 3,
) -> Examples:
    """Pick example sentences from the held-out rows, each hiding a name of the corpus that the sentence itself
    decides, as *Harry [MASK]* decides *Potter*, and that the stock model gets wrong.

    A reader of the book could fill each gap: the other half of a name (*Tin [MASK]*), a title and its holder
    (*Aunt [MASK]*), a fixed phrase of the book. The method, in five steps:

    1. **Count** the names in the training rows (``data.find_entities``: words capitalised inside
       sentences at least ``min_count`` times, most frequent first): the corpus's people, places and
       things, the words fine-tuning on it teaches. Count too every word and every pair of words side by side
       there (:func:`neighbours`).
    2. **Cut** the held-out rows into sentences of 6 to 40 words (:func:`sentences_of`, never after *Mrs.* or
       another title); drop any sentence that a training row holds (so no picked sentence was trained on). For
       each of the ``WORDS_TRIED`` most frequent names, hide it with ``[MASK]`` in the sentences that hold it
       once, and keep those whose neighbour decides it (:func:`decided_by`: in the training rows the name
       follows the word before the gap, or precedes the word after it, in at least half of that word's
       occurrences, ``min_count`` times or more). Draw up to ``SENTENCES_PER_WORD`` of them
       (``random.Random(seed)``: the same seed picks the same sentences). A name the vocabulary spells with its
       unknown token is left out.
    3. **Ask the stock model once** (the model before fine-tuning, ``inference.fill_mask``, its
       ``STOCK_GUESSES`` first guesses) at every candidate of a one-piece name, and keep only those where its
       first guess is not the name (a word it already knows would show nothing being learned) and no word of
       any book fits the gap (:func:`a_word_of_any_book_fits`: a pronoun among its guesses, *she*; or a small
       word first, *the*): then the sentence does not decide the name.
    4. **Spread**: one sentence per name, the names whose deciding pair occurs most often in the training rows
       first (the model sees that pair most), ``at_most`` of them. Fewer than three: the note says so and
       the run shows what there is.
    5. A name of several word pieces cannot be one token's guess, so the token view leaves them out; the
       first candidate of one that the stock model misses as a whole word (``studies.probes.score_probes``: a
       beam over whole words) is kept as one probe, scored whole in the report.

    Args:
        model, tokenizer: the stock model, before any training step.
        train_texts, held_out_texts: the text of the training rows and of the held-out rows.
        seed: the run's seed.
    Returns:
        :class:`Examples` with ``source`` :data:`PICKED` and ``decided_by`` (the neighbour of each pick);
        ``examples`` empty (and ``note`` saying so) when no held-out sentence qualifies.
    """
    counts = neighbours(train_texts)
    names = find_entities(train_texts, min_count)[:WORDS_TRIED]
    trained = "\n".join(train_texts)
    sentences = [
        s
        for text in held_out_texts
        for s in sentences_of(text)
        if SENTENCE_WORDS[0] <= len(s.split()) <= SENTENCE_WORDS[1] and s not in trained
    ]
    one_piece, several = [], []  # (name, masked sentence, the answer as the tokenizer sees it, its neighbour)
    for name in names:
        word = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
        decided = []  # (the name as written, masked sentence, its neighbour)
        for sentence in sentences:
            if len(word.findall(sentence)) == 1:
                found = word.search(sentence)
                masked = sentence[: found.start()] + "[MASK]" + sentence[found.end() :]
                if neighbour := decided_by(masked, name, counts, min_count):
                    decided.append((found.group(), masked, neighbour))
        for written, masked, neighbour in random.Random(f"{seed}-{name}").sample(
            decided, min(SENTENCES_PER_WORD, len(decided))
        ):
            pieces = tokenizer.tokenize(written)
            if tokenizer.unk_token in pieces:  # a word the vocabulary cannot spell: no guess can be it
                break
            answer = pieces[0] if len(pieces) == 1 else normalise_answer(written, tokenizer)
            (one_piece if len(pieces) == 1 else several).append((name, masked, answer, neighbour))
    guesses = fill_mask(model, tokenizer, [c[1] for c in one_piece], top_k=STOCK_GUESSES) if one_piece else []
    missed, kept, right = set(), [], 0
    for (name, masked, answer, neighbour), guess in zip(one_piece, guesses):
        tokens = [g["token"] for g in guess[0]]
        right += tokens[0] == answer
        if tokens[0] != answer:
            missed.add(name)
            if not a_word_of_any_book_fits(tokens, masked):  # else she or the fits: the sentence does not decide
                kept.append((name, masked, answer, neighbour))
    picked: dict[str, tuple[str, tuple[str, ...], dict]] = {}
    for name, masked, answer, neighbour in sorted(kept, key=lambda c: -c[3]["together"]):  # stable: seeded order
        if name not in picked and len(picked) < at_most:
            picked[name] = (masked, (answer,), neighbour)
    known = tuple(dict.fromkeys(name for name, *_ in one_piece if name not in missed))
    whole, whole_by = first_missed_whole(model, tokenizer, several)
    return Examples(
        tuple((masked, answers) for masked, answers, _ in picked.values()),
        PICKED,
        whole,
        picked_note([n for *_, n in picked.values()], whole, min_count),
        known,
        len(one_piece),
        right,
        tuple(n for *_, n in picked.values()) + whole_by,
    )


def picked_note(decided: Sequence[dict], whole: Sequence[dict[str, str]], min_count: int) -> str:
    """One line for the log: the words picked and the phrase that decides each, fewer than three said so, or
    why none was picked."""
    words = ", ".join(f"{d['word']} ({d['phrase']}: {d['together']} of {d['neighbour']})" for d in decided)
    if len(decided) >= 3:
        note = f"examples: {len(decided)} picked from your held-out rows, each decided by its neighbour: {words}"
    elif decided:
        note = (f"examples: only {len(decided)} held-out sentence(s) hide a name that its neighbour decides and the "
                f"stock model gets wrong (fewer than three), shown: {words}")  # fmt: skip
    else:
        note = (
            "examples: none picked: no held-out sentence hides a name of the training rows (a word written with a "
            f"capital inside sentences, {min_count} times or more) that its neighbour decides (the name follows or "
            "precedes it in at least half of its occurrences there) and the stock model gets wrong; the run goes "
            "on without examples (pass `examples` to give your own)"
        )
    return note + "".join(f"; {w['answer']}: several word pieces, scored whole in the report" for w in whole)


def first_missed_whole(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, candidates: Sequence[tuple[str, str, str, dict]]
) -> tuple[list[dict[str, str]], tuple[dict, ...]]:
    """The first candidate ``(name, masked sentence, answer, its neighbour)`` of a name of several pieces whose
    whole word the stock model does not guess first (``studies.probes.score_probes``), as a one-probe list, and
    its neighbour; ``([], ())`` if none."""
    for _, masked, answer, neighbour in candidates:
        probe = {"text": masked, "answer": answer}
        if not score_probes(model, tokenizer, [probe], top_k=1)["rows"][0]["hit_top1"]:
            return [probe], ({**neighbour, "word": answer},)
    return [], ()


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
    (``course.shipped.EXAMPLES``), else those :func:`pick_examples` picks from the held-out rows with the stock
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
