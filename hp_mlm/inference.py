"""Inference: fill in every mask token of a sentence, each with its own top-k list.

Taught in ``notebooks/04_evaluation.ipynb``. Gives the same tokens and scores as
``transformers.pipeline("fill-mask")`` (a test checks it), less the special tokens and ``[unusedN]``
slots the pipeline can list, also with ``targets`` (score only some
candidate words; a word of several pieces is scored whole by ``scoring.score_words``, where the
pipeline scores its first piece), predicts whole words in :func:`fill_words`
(``scoring.predict_words``), and handles sentences with several masks, long sentences and bad input
with clear errors.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from torch import nn
from transformers import PreTrainedTokenizerBase

from .common import inference_mode, model_device, out_of_memory_in
from .scoring import length_limit, mask_place, predict_words, score_words, with_mask_token, word_pieces
from .tokens import replacement_ids


def target_words(targets: Sequence[str] | str, tokenizer: PreTrainedTokenizerBase) -> list[tuple[str, list[str]]]:
    """Each distinct target with its word pieces, in the order first given.

    A target is looked up in the vocabulary as written (so ``"##ing"`` works), else tokenised the way
    the tokenizer sees text (``"Wizard"`` becomes ``"wizard"`` for an uncased tokenizer), as
    ``pipeline("fill-mask")``'s ``get_target_ids`` does. Unlike the pipeline, which keeps only the first
    piece of a longer word (so ``"hermione"`` is scored as ``"her"``), a word of several pieces keeps all
    of them and is scored whole (``scoring.score_words``). Targets with the same pieces count once.

    Raises:
        ValueError: no targets; a target that becomes no token or holds the unknown token (the message
            names its pieces).
    """
    targets = [targets] if isinstance(targets, str) else list(targets)
    if not targets:
        raise ValueError("targets is empty; pass at least one word, or targets=None to rank the whole vocabulary")
    found: dict[tuple[str, ...], str] = {}
    for target in targets:
        try:
            pieces = word_pieces(target, tokenizer)
        except ValueError as error:
            raise ValueError(f"target {target!r}: {error}") from None
        found.setdefault(tuple(pieces), target)  # "Wizard" and "wizard" (or a target given twice) count once
    return [(word, list(pieces)) for pieces, word in found.items()]


def _checked_sentences(
    tokenizer: PreTrainedTokenizerBase, sentences: Sequence[str] | str, top_k: int, limit: int
) -> list[str]:
    """``top_k`` checked, and the sentences written with the tokenizer's mask token, each checked (see
    :func:`fill_mask`'s errors)."""
    sentences = [sentences] if isinstance(sentences, str) else sentences
    if sentences is None or len(sentences) == 0:
        raise ValueError(f"no sentences given; pass at least one sentence containing {tokenizer.mask_token}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    texts = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise ValueError(f"sentence {i} is a {type(sentence).__name__}; pass each sentence as a string")
        text = with_mask_token(sentence, tokenizer)
        full, _ = mask_place(text, tokenizer)  # refuses a sentence without a mask token (an empty one too)
        if tokenizer.mask_token_id in full[limit - 1 :]:  # truncation keeps limit - 1 tokens and the last
            raise ValueError(
                f"sentence {i} is {len(full)} tokens long and a {tokenizer.mask_token} falls after the "
                f"{limit}-token limit; shorten the sentence or move the mask earlier."
            )
        texts.append(text)
    return texts


def fill_mask(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str] | str,
    top_k: int = 5,
    max_length: int | None = None,
    targets: Sequence[str] | str | None = None,
) -> list[list[list[dict[str, Any]]]]:
    """Top-k candidates for every mask token in every sentence, masks in left-to-right order.

    Scores are the softmax over the vocabulary at each mask position, as in
    ``pipeline("fill-mask")``. ``[MASK]`` and ``<mask>`` are both read as the tokenizer's mask
    token. Runs in eval mode under ``no_grad`` and restores the model's mode. For whole words of
    several pieces at each mask instead of one token, see :func:`fill_words`.

    Args:
        sentences: one string or a list of strings, each with at least one mask token.
        top_k: candidates per mask, at least 1. Only ordinary tokens are listed, never a special token
            (``tokenizer.all_special_ids``) or a reserved ``[unusedN]`` slot (``tokens.replacement_ids``),
            where the pipeline ranks the whole vocabulary; a ``top_k`` above the ordinary tokens is cut to
            them, with one ``UserWarning``. With ``targets``, at most ``min(top_k, number of distinct
            targets)`` come back, as in the pipeline.
        max_length: tokens per sentence after truncation; never more than the model's usable positions
            (``scoring.length_limit``: 512 for BERT and RoBERTa), which is the default.
        targets: optional words to score instead of the whole vocabulary (see :func:`target_words`).
            A one-piece target keeps its probability in the softmax over the *whole* vocabulary, so
            scores can sum to less than 1 (``pipeline("fill-mask")(..., targets=...)`` gives the same);
            a word of several pieces is scored whole, by PLL-word-l2r (``scoring.score_words``), at
            the place the mask marks.
    Returns:
        ``result[s][m]`` is the list for mask ``m`` of sentence ``s``: ``top_k`` dicts (fewer with ``targets``)
        ``{"token": str, "token_id": int or None, "score": float in [0, 1], "is_subword": bool,
        "pieces": [str]}``, highest score first. ``is_subword`` flags a continuation piece (``##...``) given
        alone, not a whole word; ``pieces`` are the word's pieces (one for a token); ``token_id`` is None
        for a word of several pieces.
    Raises:
        ValueError: no sentences; a sentence without a mask token, an empty one too (the message
            shows the tokenizer's mask token); a mask that truncation at that limit would cut
            off; ``top_k`` < 1; a bad target (see :func:`target_words`).
        common.OutOfMemory: the device ran out of memory (names ``max_length`` to lower).
    """
    limit = length_limit(model, tokenizer, max_length)
    texts = _checked_sentences(tokenizer, sentences, top_k, limit)
    chosen = None if targets is None else target_words(targets, tokenizer)
    words = replacement_ids(tokenizer)  # the ordinary tokens: never a special token or an [unusedN] slot
    if chosen is None and top_k > len(words):  # said once a call, however many masks
        said = f"top_k {top_k} is more than the {len(words):,} ordinary tokens of this vocabulary (special tokens and [unusedN] slots are never listed): listing {len(words):,}"
        warnings.warn(said, stacklevel=2)
        top_k = len(words)
    device = model_device(model)
    enc = tokenizer(texts, truncation=True, max_length=limit, padding=True, return_tensors="pt")
    lower = f"`max_length` (now {limit}) or pass fewer sentences at once (now {len(texts)})"
    with inference_mode(model), out_of_memory_in("prediction (fill_mask)", lower):
        logits = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device)).logits
    results = []
    for row in range(len(texts)):
        positions = (enc["input_ids"][row] == tokenizer.mask_token_id).nonzero().flatten().tolist()
        per_mask = []
        for m, pos in enumerate(positions):
            probs = logits[row, pos].float().softmax(dim=-1)  # over the whole vocabulary, targets or not
            if chosen is None:
                scores, at = probs[words].topk(top_k)
                per_mask.append([_token(tokenizer, i, p) for i, p in zip(words[at].tolist(), scores.tolist())])
            else:
                per_mask.append(_targets_at(model, tokenizer, texts[row], m, probs, chosen, top_k, limit))
        results.append(per_mask)
    return results


def fill_words(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str] | str,
    top_k: int = 5,
    max_length: int | None = None,
    max_pieces: int = 4,
) -> list[list[list[dict[str, Any]]]]:
    """Like :func:`fill_mask`, but each answer is a whole word of 1 to ``max_pieces`` word pieces.

    Each mask marks the place of a word (``scoring.predict_words``: a left-to-right beam of 5 per length,
    ``max_pieces`` forward passes per mask, ranked by PLL-word-l2r; punctuation is not a word).

    Returns:
        ``result[s][m]``: up to ``top_k`` answers as :func:`fill_mask` gives them (``token`` the word,
        ``token_id`` None for a word of several pieces, ``is_subword`` False), best first; at most
        5 x ``max_pieces`` (the beams' words), however large ``top_k``.
    Raises:
        ValueError: as :func:`fill_mask`; ``max_pieces`` < 1; a sentence with no room for ``max_pieces``
            more tokens within ``max_length``.
        common.OutOfMemory: see ``scoring.log_probs_at``.
    """
    limit = length_limit(model, tokenizer, max_length)
    results = []
    for text in _checked_sentences(tokenizer, sentences, top_k, limit):
        n_masks = tokenizer(text)["input_ids"].count(tokenizer.mask_token_id)
        found = [
            predict_words(model, tokenizer, text, top_k, max_pieces, mask_index=m, max_length=limit)
            for m in range(n_masks)
        ]
        results.append([[_word(w, w["word"]) for w in words] for words in found])
    return results


def _token(tokenizer: PreTrainedTokenizerBase, token_id: int, score: float) -> dict[str, Any]:
    """One answer that is one vocabulary token."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    return {
        "token": tokenizer.decode([token_id], clean_up_tokenization_spaces=False),  # one token: nothing to clean
        "token_id": token_id,
        "score": score,
        "is_subword": piece.startswith("##"),
        "pieces": [piece],
    }


def _targets_at(model, tokenizer, text, mask_index, probs, chosen, top_k, limit) -> list[dict[str, Any]]:
    """The targets ranked at one mask: one-piece ones from ``probs`` (as the pipeline scores them), the
    others by ``scoring.score_words`` (several masks in that place, PLL-word-l2r)."""
    ids = [tokenizer.convert_tokens_to_ids(p[0]) for _, p in chosen if len(p) == 1]
    answers = [_token(tokenizer, i, probs[i].item()) for i in ids]
    longer = [word for word, p in chosen if len(p) > 1]
    if longer:
        for item in score_words(model, tokenizer, text, longer, mask_index=mask_index, max_length=limit):
            answers.append(_word(item, tokenizer.convert_tokens_to_string(item["pieces"]).strip()))
    return sorted(answers, key=lambda a: -a["score"])[: min(top_k, len(chosen))]


def _word(item: dict[str, Any], token: str) -> dict[str, Any]:
    """A word of ``scoring.score_words`` or ``scoring.predict_words``, written ``token``, as one answer
    (a ``token_id`` only for a word that is one vocabulary token)."""
    one_token = item["n_pieces"] == 1
    return {
        "token": token,
        "token_id": item["piece_ids"][0] if one_token else None,
        "score": item["score"],
        "is_subword": False,
        "pieces": item["pieces"],
    }
