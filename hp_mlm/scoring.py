"""Whole words at a mask: score candidate words of any number of word pieces, and predict whole words.

One ``[MASK]`` is one vocabulary token, and most of the books' names are several WordPiece pieces
(``hermione`` = ``her ##mi ##one``). Here the mask marks the *place* of a word: a word of k pieces fills
it with k masks and is scored by PLL-word-l2r (Kauf & Ivanova 2023, "A Better Way to Do Masked Language
Model Scoring", building on the pseudo-log-likelihood of Salazar et al. 2020): piece i is predicted with
pieces before it filled in and pieces from i on still masked, and the word's log-probability is the sum.

Why not the alternatives:
- the original PLL masks one piece at a time and leaves the word's other pieces visible, so ``##mi`` is
  easy once ``her`` and ``##one`` show: long, rare words come out too likely;
- k masks predicted at once, their probabilities multiplied, ignores that the pieces depend on each other
  (each mask is guessed as if the others were anything), which gives incoherent combinations;
- the first piece only (what ``pipeline("fill-mask", targets=...)`` does, with a warning) scores another
  word: ``hermione`` becomes the pronoun ``her``.

Taught in ``notebooks/04_evaluation.ipynb``; a test checks :func:`score_words` against ``minicons``'
``within_word_l2r`` scores and against forward passes built by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .common import inference_mode, mlm_logits, model_device, out_of_memory_in
from .models import model_max_positions
from .tokens import check_max_length, continuation_table, replacement_ids, wordlike_table


def with_mask_token(sentence: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """Write the common mask spellings (``[MASK]``, ``<mask>``) as this tokenizer's mask token."""
    for spelling in ("[MASK]", "<mask>"):  # the tokenizer's own spelling is replaced by itself
        sentence = sentence.replace(spelling, tokenizer.mask_token)
    return sentence


def word_pieces(word: str, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The word pieces of ``word``: the vocabulary entry as written (so ``"##ing"`` works), else the
    tokenizer's pieces (``"Hermione"`` -> ``["her", "##mi", "##one"]`` for bert-base-uncased).

    Raises:
        ValueError: the word is not a string, becomes no token (empty, or only characters the tokenizer
            drops) or contains the unknown token (the message names the pieces).
    """
    if not isinstance(word, str):
        raise ValueError(f"word {word!r} is a {type(word).__name__}; write each word as a string")
    as_written = tokenizer.convert_tokens_to_ids(word)  # a vocabulary entry, or the unknown token's id
    pieces = (
        [word] if as_written != tokenizer.unk_token_id and word != tokenizer.unk_token else tokenizer.tokenize(word)
    )
    if not pieces or tokenizer.unk_token in pieces:
        found = f"the pieces {pieces}" if pieces else "no token"
        raise ValueError(
            f"word {word!r} becomes {found} for this tokenizer ({len(tokenizer):,} tokens); "
            "write it as the books spell it, in letters this vocabulary knows"
        )
    return pieces


def mask_place(text: str, tokenizer: PreTrainedTokenizerBase, mask_index: int = 0) -> tuple[list[int], int]:
    """``text`` as token ids (special tokens included) and the position of its ``mask_index``-th mask.

    Raises:
        ValueError: no mask token in ``text``; ``mask_index`` beyond its masks.
    """
    ids = tokenizer(with_mask_token(text, tokenizer), truncation=False)["input_ids"]
    masks = [i for i, t in enumerate(ids) if t == tokenizer.mask_token_id]
    if not masks:
        raise ValueError(f"{text!r} has no mask token; write {tokenizer.mask_token} where the word goes")
    if not 0 <= mask_index < len(masks):
        raise ValueError(f"mask_index={mask_index}, but {text!r} has {len(masks)} mask(s); count from 0")
    return ids, masks[mask_index]


def l2r_inputs(ids: Sequence[int], position: int, piece_ids: Sequence[int], mask_id: int) -> list[list[int]]:
    """The k inputs of PLL-word-l2r for a word of k pieces put at ``position`` (where one mask was):
    input i has the pieces before i filled in and pieces i..k-1 masked; piece i is read at ``position + i``."""
    k, left, right = len(piece_ids), list(ids[:position]), list(ids[position + 1 :])
    return [left + list(piece_ids[:i]) + [mask_id] * (k - i) + right for i in range(k)]


def log_probs_at(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[Sequence[int]],
    positions: Sequence[int],
    batch_size: int = 64,
) -> torch.Tensor:
    """Log-softmax over the vocabulary at one position of each row (fp32, eval mode, no grad).

    Args:
        rows: token id lists (special tokens included), padded per pass by ``tokenizer.pad``.
        positions: the position to read in each row.
    Returns:
        FloatTensor[len(rows), vocab] of log-probabilities (nats).
    Raises:
        common.OutOfMemory: the device ran out of memory (names the rows per pass to lower).
    """
    device, out = model_device(model), []
    lower = f"the candidates per call (now {len(rows)} inputs, {batch_size} per pass)"
    with inference_mode(model), out_of_memory_in("scoring words", lower):
        for start in range(0, len(rows), batch_size):
            chunk, where = rows[start : start + batch_size], positions[start : start + batch_size]
            batch = tokenizer.pad({"input_ids": [list(r) for r in chunk]}, return_tensors="pt")
            input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
            shift = [input_ids.shape[1] - len(r) if tokenizer.padding_side == "left" else 0 for r in chunk]
            read = torch.zeros_like(input_ids, dtype=torch.bool)
            read[torch.arange(len(chunk)), torch.tensor(where) + torch.tensor(shift)] = True
            logits = mlm_logits(model, input_ids.to(device), attention_mask.to(device), read.to(device))
            out.append(logits.float().log_softmax(dim=-1).cpu())
    return torch.cat(out)


def length_limit(model: nn.Module, tokenizer: PreTrainedTokenizerBase, max_length: int | None = None) -> int:
    """Tokens per input at most: the smallest of ``max_length`` (if given), the model's usable positions
    (``models.model_max_positions``: 512 for BERT and for RoBERTa's 514) and the tokenizer's
    ``model_max_length``, which counts only below a million (a tokenizer saved without one says 1e30,
    meaning unset).

    Raises:
        ValueError: ``max_length`` < 3 (a mask and the two special tokens need 3), or above the model's
            usable positions (``tokens.check_max_length``).
    """
    if max_length is not None and max_length < 3:
        raise ValueError(f"max_length={max_length} leaves no room for a mask between the special tokens; pass >= 3")
    check_max_length(max_length or 0, model_max_positions(model))  # as the command line and `prepare` refuse it
    limits = (max_length, model_max_positions(model), tokenizer.model_max_length)
    return min([n for n in limits if n is not None and n < 10**6] or [10**9])


def score_words(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    words: Sequence[str],
    mask_index: int = 0,
    max_length: int | None = None,
) -> list[dict[str, Any]]:
    """Score candidate words of any number of pieces at the place one mask marks (PLL-word-l2r).

    A word of k pieces replaces the mask with k masks; piece i is scored with pieces < i filled in and
    pieces >= i masked (k inputs per word, all words in padded batches). Other masks in ``text`` stay
    masks. A one-piece word's score is the softmax probability at the mask, as ``fill_mask`` and
    ``pipeline("fill-mask")`` give. Longer words pay for every piece: the score is a probability of the
    word in that place, not a per-piece average.

    Args:
        text: a sentence with at least one ``[MASK]`` (the ``mask_index``-th, from 0, marks the word).
        words: candidate words, e.g. ``["ron", "hermione"]``; each as :func:`word_pieces` reads it.
        max_length: tokens per input at most (default the model's limit); inputs are never truncated.
    Returns:
        One dict per word, in the order given: ``{"word", "pieces": [str], "piece_ids": [int],
        "piece_log_probs": [float], "log_prob": float (nats, the sum), "score": exp(log_prob) in [0, 1],
        "n_pieces": int}``.
    Raises:
        ValueError: no words; a bad word (see :func:`word_pieces`); no mask; an input longer than
            ``max_length`` once the word's pieces are in.
        common.OutOfMemory: see :func:`log_probs_at`.
    """
    if isinstance(words, str) or not words:
        raise ValueError("words must be a non-empty list of candidate words, e.g. ['ron', 'hermione']")
    limit = length_limit(model, tokenizer, max_length)
    ids, position = mask_place(text, tokenizer, mask_index)
    found = [(w, word_pieces(w, tokenizer)) for w in words]
    longest = len(ids) - 1 + max(len(p) for _, p in found)
    if longest > limit:
        raise ValueError(f"{text!r} with its longest candidate is {longest} tokens, over max_length={limit}")
    rows, read, wanted = [], [], []
    for _, pieces in found:
        piece_ids = tokenizer.convert_tokens_to_ids(pieces)
        rows += l2r_inputs(ids, position, piece_ids, tokenizer.mask_token_id)
        read += [position + i for i in range(len(pieces))]
        wanted += piece_ids
    log_probs = log_probs_at(model, tokenizer, rows, read)
    picked = log_probs[torch.arange(len(wanted)), torch.tensor(wanted)].tolist()
    results, at = [], 0
    for word, pieces in found:
        per_piece, at = picked[at : at + len(pieces)], at + len(pieces)
        results.append(
            {
                "word": word,
                "pieces": pieces,
                "piece_ids": tokenizer.convert_tokens_to_ids(pieces),
                "piece_log_probs": per_piece,
                "log_prob": sum(per_piece),
                "score": math.exp(sum(per_piece)),
                "n_pieces": len(pieces),
            }
        )
    return results


def _allowed(tokenizer: PreTrainedTokenizerBase) -> tuple[torch.Tensor, torch.Tensor]:
    """LongTensors: the ordinary ids that start a word, and those that continue one (``##`` pieces).
    Special tokens, reserved slots (``[unused12]``) and pieces without a letter or digit (punctuation:
    a cloze asks for a word) are neither."""
    ordinary = replacement_ids(tokenizer)
    wordlike = wordlike_table(tokenizer)[ordinary]
    continues = continuation_table(tokenizer)[ordinary]
    return ordinary[~continues & wordlike], ordinary[continues & wordlike]


def predict_words(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    top_k: int = 5,
    max_pieces: int = 4,
    beam_size: int = 5,
    mask_index: int = 0,
    max_length: int | None = None,
) -> list[dict[str, Any]]:
    """The ``top_k`` most likely whole words at the place a mask marks, of 1 to ``max_pieces`` pieces.

    For each length L, a left-to-right beam search over L masks: the first piece is an ordinary token
    that starts a word, the others ``##`` pieces that continue it (pieces with a letter or digit only:
    punctuation is not a word); each step keeps the ``beam_size``
    best partial words by summed log-probability, exactly the PLL-word-l2r chain of
    :func:`score_words`. Then one ranking across lengths, by that log-probability (the length rule:
    none, so a word predicted here gets the number :func:`score_words` gives it, and each extra piece
    must earn its place). Words that read the same (``ash ##down`` and a one-token ``ashdown``) are
    kept once, with the better score.

    Cost: ``max_pieces`` forward passes (one per piece position, all lengths in one batch), of at
    most ``beam_size * max_pieces`` inputs each: 4 passes of <= 20 inputs for the defaults.

    Returns:
        Up to ``top_k`` dicts ``{"word", "pieces", "piece_ids", "log_prob", "score", "n_pieces"}``,
        best first (``score`` = exp(log_prob), a probability in [0, 1]).
    Raises:
        ValueError: ``top_k``, ``max_pieces`` or ``beam_size`` < 1; no mask; an input over ``max_length``.
        common.OutOfMemory: see :func:`log_probs_at`.
    """
    for name, value in (("top_k", top_k), ("max_pieces", max_pieces), ("beam_size", beam_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    ids, position = mask_place(text, tokenizer, mask_index)
    limit = length_limit(model, tokenizer, max_length)
    if len(ids) - 1 + max_pieces > limit:
        raise ValueError(
            f"the sentence with {max_pieces} pieces is {len(ids) - 1 + max_pieces} tokens, over {limit}; "
            "lower max_pieces or raise max_length"
        )
    starts, continues = _allowed(tokenizer)
    mask = tokenizer.mask_token_id
    beams = {n: [([], 0.0)] for n in range(1, max_pieces + 1)}  # length -> [(piece ids so far, log-prob)]
    if len(continues) == 0:  # a vocabulary without ## pieces: one-piece words only
        beams = {1: beams[1]}
    for step in range(max(beams)):
        active = [(n, prefix, lp) for n, kept in beams.items() if n > step for prefix, lp in kept]
        rows = [ids[:position] + prefix + [mask] * (n - step) + ids[position + 1 :] for n, prefix, _ in active]
        log_probs = log_probs_at(model, tokenizer, rows, [position + step] * len(rows))
        allowed = starts if step == 0 else continues
        for n in {n for n, _, _ in active}:
            mine = [i for i, (m, _, _) in enumerate(active) if m == n]
            totals = torch.tensor([active[i][2] for i in mine])[:, None] + log_probs[mine][:, allowed]
            best = totals.flatten().topk(min(beam_size, totals.numel()))
            beams[n] = [
                (active[mine[flat // len(allowed)]][1] + [int(allowed[flat % len(allowed)])], value)
                for value, flat in zip(best.values.tolist(), best.indices.tolist())
            ]
    found: dict[str, dict[str, Any]] = {}
    for n, kept in beams.items():
        for piece_ids, lp in kept:
            word = tokenizer.decode(piece_ids, clean_up_tokenization_spaces=False).strip()  # a word: nothing to clean
            if word not in found or lp > found[word]["log_prob"]:
                pieces = tokenizer.convert_ids_to_tokens(piece_ids)
                found[word] = {"word": word, "pieces": pieces, "piece_ids": piece_ids, "log_prob": lp, "n_pieces": n}
    ranked = sorted(found.values(), key=lambda w: -w["log_prob"])[:top_k]
    return [{**w, "score": math.exp(w["log_prob"])} for w in ranked]
