"""Probes: cloze sentences about the corpus whose answer is known, scored before and after fine-tuning.

Taught in ``notebooks/04_evaluation.ipynb``. A probe whose answer is one token of the vocabulary is
scored by the token top-k at its mask, as always. An answer of several word pieces (most of the books'
names: ``hermione`` = ``her ##mi ##one``) can never be one token, so such a probe is scored by whole-word
prediction (``scoring.predict_words``), never by its first piece; and where the probe lists
candidates, by the answer's rank among them (``scoring.score_words``; top-1 and mean reciprocal rank).
Reports keep the one-piece and the multi-piece probes apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from hp_mlm.config import Settings
from hp_mlm.inference import fill_mask
from hp_mlm.profiles import PACKAGE_PROBES
from hp_mlm.scoring import length_limit, log_probs_at, mask_place, predict_words, score_words, word_pieces

KINDS = ("one_piece", "multi_piece")


def normalise_answer(answer: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """An answer as the tokenizer sees it (lower-cased, accents stripped for uncased BERT)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and backend.normalizer is not None:
        return backend.normalizer.normalize_str(answer).strip()
    return answer.strip().lower()


def _candidates(item: dict, where: str) -> list[str] | None:
    """A probe's ``candidates``: a list of distinct words that holds its answer, or None."""
    if "candidates" not in item:
        return None
    found = item["candidates"]
    if not isinstance(found, list) or not found or not all(isinstance(c, str) and c.strip() for c in found):
        raise ValueError(f"{where}: 'candidates' must be a non-empty list of words")
    if str(item["answer"]).strip().lower() not in [c.strip().lower() for c in found]:
        raise ValueError(f"{where}: the answer {item['answer']!r} is not among its candidates; add it to the list")
    return [c.strip() for c in found]


def load_probes(path: str | Path, candidates: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Read a ``.jsonl`` file of ``{"text": "... [MASK] ...", "answer": "word"}`` lines, each optionally
    with ``"candidates": ["word", ...]`` (words to rank, the answer among them).

    Args:
        candidates: words ranked for every probe without its own list (``--candidates FILE``); the
            probe's answer is added to them where missing.
    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line that is not JSON, lacks ``text``/``answer`` or a ``[MASK]``, or whose
            candidates are not a list of words holding the answer (names the line number); a file
            without any probe.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"probes file {str(path)!r} does not exist")
    probes = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number} is not valid JSON ({error.msg})") from None
        if not isinstance(item, dict) or "text" not in item or "answer" not in item:
            raise ValueError(f"{path}:{number} needs both 'text' and 'answer'")
        if not any(spelling in str(item["text"]) for spelling in ("[MASK]", "<mask>")):
            raise ValueError(f"{path}:{number}: the text has no [MASK] where the answer goes")
        probe: dict[str, Any] = {"text": str(item["text"]), "answer": str(item["answer"])}
        own = _candidates(item, f"{path}:{number}")
        if own is None and candidates:
            own = list(dict.fromkeys([*candidates, probe["answer"]]))
        if own is not None:
            probe["candidates"] = own
        probes.append(probe)
    if not probes:
        raise ValueError(f"probes file {str(path)!r} holds no probe; write one JSON object per line")
    return probes


def read_candidates(path: str | Path) -> list[str]:
    """Candidate words from a file: one per line, or comma-separated. Raises ValueError when it holds none,
    FileNotFoundError when it does not exist."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"candidates file {str(path)!r} does not exist")
    words = [w.strip() for line in path.read_text(encoding="utf-8").splitlines() for w in line.split(",")]
    words = [w for w in words if w]
    if not words:
        raise ValueError(f"candidates file {str(path)!r} holds no word; write one word per line")
    return list(dict.fromkeys(words))


def _probe_row(model, tokenizer, probe, prediction, top_k, max_pieces) -> dict[str, Any]:
    """One probe scored (see :func:`score_probes`)."""
    answer = normalise_answer(probe["answer"], tokenizer)
    pieces = tokenizer.tokenize(answer)
    if len(pieces) == 1:  # one token: the token top-k at the mask
        words = [c["token"].strip() for c in prediction[0]]
    else:  # several pieces: whole words (never the first piece alone)
        found = predict_words(model, tokenizer, probe["text"], top_k=top_k, max_pieces=max(max_pieces, len(pieces)))
        words = [w["word"] for w in found]
    row = {
        "text": probe["text"],
        "answer": answer,
        "pieces": pieces,
        "kind": KINDS[len(pieces) > 1],
        "top1": words[0],
        "topk": words,
        "hit_top1": words[0] == answer,
        "hit_topk": answer in words,
    }
    if probe.get("candidates"):
        row["candidate_rank"], ranked = candidate_rank(model, tokenizer, probe)
        row["candidates"] = [{"word": s["word"], "log_prob": s["log_prob"], "n_pieces": s["n_pieces"]} for s in ranked]
    return row


def candidate_rank(model, tokenizer, probe: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The rank (1 = first) of a probe's answer among its ``candidates`` by ``scoring.score_words``
    (PLL-word-l2r at the probe's first mask), and the candidates' scores, best first."""
    ranked = sorted(score_words(model, tokenizer, probe["text"], probe["candidates"]), key=lambda s: -s["log_prob"])
    names = [normalise_answer(s["word"], tokenizer) for s in ranked]
    return names.index(normalise_answer(probe["answer"], tokenizer)) + 1, ranked


def _summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Hits, and with candidates the ranked-first count and mean reciprocal rank, over ``rows``."""
    ranked = [r["candidate_rank"] for r in rows if "candidate_rank" in r]
    return {
        "n": len(rows),
        "hits_top1": sum(r["hit_top1"] for r in rows),
        "hits_topk": sum(r["hit_topk"] for r in rows),
        "n_with_candidates": len(ranked),
        "candidates_top1": sum(rank == 1 for rank in ranked),
        "candidates_mrr": sum(1 / rank for rank in ranked) / len(ranked) if ranked else None,
    }


def score_probes(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    probes: Sequence[dict[str, Any]],
    top_k: int = 5,
    max_pieces: int = 4,
) -> dict[str, Any]:
    """Score each probe at its first mask against its answer, normalised as the tokenizer does.

    A one-token answer is right in the token top-1 / top-``top_k`` of ``fill_mask``; an answer of
    several pieces is right in the top-1 / top-``top_k`` *words* of ``scoring.predict_words`` (beam 5,
    up to ``max_pieces`` pieces, more if the answer has more). A probe with ``candidates`` also gets the
    answer's rank among them by ``scoring.score_words`` (1 = ranked first).

    Returns:
        ``{"hits_top1", "hits_topk", "n", "n_with_candidates", "candidates_top1", "candidates_mrr",
        "by_kind": {"one_piece": {same counts}, "multi_piece": {...}}, "rows": [{"text", "answer",
        "pieces", "kind", "top1", "topk", "hit_top1", "hit_topk"[, "candidates", "candidate_rank"]}]}``;
        ``candidates_mrr`` (mean reciprocal rank, in (0, 1]) is None without candidates.
    """
    predictions = fill_mask(model, tokenizer, [p["text"] for p in probes], top_k=top_k) if probes else []
    rows = [_probe_row(model, tokenizer, p, pred, top_k, max_pieces) for p, pred in zip(probes, predictions)]
    by_kind = {kind: _summary([r for r in rows if r["kind"] == kind]) for kind in KINDS}
    return {**_summary(rows), "by_kind": by_kind, "rows": rows}


def default_probes(settings: Settings) -> Path | None:
    """The corpora shipped with the package come with probes; others have none unless ``probes`` are given."""
    if settings.dataset in PACKAGE_PROBES:
        from importlib import resources

        return Path(str(resources.files("hp_mlm") / "corpora" / PACKAGE_PROBES[settings.dataset]))
    return None


def original_pll(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, text: str, word: str, mask_index: int = 0
) -> float:
    """The original PLL of ``word`` at the place the ``mask_index``-th mask marks (Salazar et al. 2020):
    each piece masked alone, the word's other pieces visible, the log-probabilities summed (nats).
    Notebook 04 shows it beside ``scoring.score_words`` because it over-rates long words: ``##mi`` is easy
    once ``her`` and ``##one`` show.

    Raises:
        ValueError: a bad word (see ``scoring.word_pieces``); no mask, or ``mask_index`` beyond the masks; a
            sentence longer than the model's positions once the word is in.
    """
    ids, position = mask_place(text, tokenizer, mask_index)
    piece_ids = tokenizer.convert_tokens_to_ids(word_pieces(word, tokenizer))
    full, mask, k = ids[:position] + piece_ids + ids[position + 1 :], tokenizer.mask_token_id, len(piece_ids)
    if len(full) > (limit := length_limit(model, tokenizer)):
        raise ValueError(f"the sentence with {word!r} is {len(full)} tokens, over the model's {limit}; shorten it")
    rows = [full[: position + i] + [mask] + full[position + i + 1 :] for i in range(k)]
    log_probs = log_probs_at(model, tokenizer, rows, [position + i for i in range(k)])
    return sum(log_probs[torch.arange(k), torch.tensor(piece_ids)].tolist())
