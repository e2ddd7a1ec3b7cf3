"""Inference: fill in every mask token of a sentence, each with its own top-k list.

Taught in ``notebooks/04_evaluation.ipynb``. Gives the same tokens and scores as
``transformers.pipeline("fill-mask")`` (a test checks it), also with ``targets`` (score only some
candidate words), and handles sentences with several masks, long sentences and bad input with clear errors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .common import inference_mode, model_device, out_of_memory_in

#: The course's example sentences (the last one has two masks).
EXAMPLE_SENTENCES = (
    "He was a young wizard, his name was Harry [MASK].",
    "Harry [MASK] is a wizard.",
    "Harry walked into [MASK] castle.",
    "[MASK] potter and ron [MASK] went back to hogwarts.",
)


def _with_mask_token(sentence: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """Write the common mask spellings (``[MASK]``, ``<mask>``) as this tokenizer's mask token."""
    for spelling in ("[MASK]", "<mask>"):
        if spelling != tokenizer.mask_token:
            sentence = sentence.replace(spelling, tokenizer.mask_token)
    return sentence


def target_ids(targets: Sequence[str] | str, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The vocabulary ids of ``targets``, each counted once, in the order first given.

    A target is looked up in the vocabulary as written (so ``"##ing"`` works), else tokenised the way
    the tokenizer sees text (``"Wizard"`` becomes ``"wizard"`` for an uncased tokenizer), as
    ``pipeline("fill-mask")``'s ``get_target_ids`` does; unlike the pipeline, which keeps only the first
    piece of a longer word or skips it with a warning, a target that is not one token is refused.

    Raises:
        ValueError: no targets; a target that the tokenizer splits into several pieces (the message
            shows them), that becomes no token or the unknown token.
    """
    targets = [targets] if isinstance(targets, str) else list(targets)
    if not targets:
        raise ValueError("targets is empty; pass at least one word, or targets=None to rank the whole vocabulary")
    vocab, ids = tokenizer.get_vocab(), []
    rule = (
        f"a target must be a single token of this tokenizer's vocabulary of {len(tokenizer):,} tokens "
        "(try a shorter or more common word)"
    )
    for target in targets:
        pieces = [target] if target in vocab else tokenizer.tokenize(target)
        if len(pieces) > 1:
            raise ValueError(f"target {target!r} is split into the pieces {pieces}; {rule}")
        if not pieces or pieces[0] == tokenizer.unk_token:
            raise ValueError(f"target {target!r} becomes {pieces[0] if pieces else 'no token'}; {rule}")
        ids.append(vocab[pieces[0]])
    return list(dict.fromkeys(ids))  # a target given twice (or as "Wizard" and "wizard") counts once


def _masked_texts(sentences: Sequence[str], tokenizer: PreTrainedTokenizerBase, limit: int) -> list[str]:
    """The sentences with the tokenizer's mask token, each checked (see :func:`fill_mask`'s errors)."""
    texts = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str) or not sentence.strip():
            raise ValueError(
                f"sentence {i} is empty; write a sentence with {tokenizer.mask_token} where a word is missing"
            )
        text = _with_mask_token(sentence, tokenizer)
        full = tokenizer(text, truncation=False)["input_ids"]
        n_masks = sum(1 for t in full if t == tokenizer.mask_token_id)
        if n_masks == 0:
            raise ValueError(
                f"sentence {i} has no mask token: {sentence!r}. Write {tokenizer.mask_token} "
                f"(this tokenizer's mask token) where the missing word goes."
            )
        kept = tokenizer(text, truncation=True, max_length=limit)["input_ids"]
        if sum(1 for t in kept if t == tokenizer.mask_token_id) < n_masks:
            raise ValueError(
                f"sentence {i} is {len(full)} tokens long and a {tokenizer.mask_token} falls after the "
                f"max_length={limit} token limit; shorten the sentence or move the mask earlier."
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
    token. Runs in eval mode under ``no_grad`` and restores the model's mode.

    Args:
        sentences: one string or a list of strings, each with at least one mask token.
        top_k: candidates per mask, 1 to the model's vocabulary size. With ``targets``, at most
            ``min(top_k, number of distinct targets)`` come back, as in the pipeline.
        max_length: tokens per sentence after truncation; default the tokenizer's/model's limit.
        targets: optional words to score instead of the whole vocabulary (see :func:`target_ids`).
            Each keeps its probability in the softmax over the *whole* vocabulary, so their scores
            can sum to less than 1 (``pipeline("fill-mask")(..., targets=...)`` gives the same).
    Returns:
        ``result[s][m]`` is the list for mask ``m`` of sentence ``s``: ``top_k`` dicts (fewer with ``targets``)
        ``{"token": str, "token_id": int, "score": float in [0, 1], "is_subword": bool}``, highest
        score first. ``is_subword`` flags a continuation piece (``##...``), not a whole word.
    Raises:
        ValueError: no sentences; an empty sentence; a sentence without a mask token (the message
            shows the tokenizer's mask token); a mask that truncation at ``max_length`` would cut
            off; ``top_k`` < 1 or more than the vocabulary; a bad target (see :func:`target_ids`).
        common.OutOfMemory: the device ran out of memory (names ``max_length`` to lower).
    """
    if isinstance(sentences, str):
        sentences = [sentences]
    if len(sentences) == 0:
        raise ValueError(f"no sentences given; pass at least one sentence containing {tokenizer.mask_token}")
    config = getattr(model, "config", None)
    vocab_size = getattr(config, "vocab_size", None) or len(tokenizer)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_k > vocab_size:
        raise ValueError(
            f"top_k={top_k} is more than this model's vocabulary of {vocab_size:,} tokens; pass top_k <= {vocab_size}"
        )
    chosen = None if targets is None else torch.tensor(target_ids(targets, tokenizer))
    limit = max_length or min(tokenizer.model_max_length, getattr(config, "max_position_embeddings", 10**9))
    texts = _masked_texts(sentences, tokenizer, limit)
    device = model_device(model)
    enc = tokenizer(texts, truncation=True, max_length=limit, padding=True, return_tensors="pt")
    lower = f"`max_length` (now {limit}) or pass fewer sentences at once (now {len(texts)})"
    with inference_mode(model), out_of_memory_in("prediction (fill_mask)", lower):
        logits = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device)).logits
    results = []
    for row in range(len(texts)):
        positions = (enc["input_ids"][row] == tokenizer.mask_token_id).nonzero().flatten().tolist()
        per_mask = []
        for pos in positions:
            probs = logits[row, pos].float().softmax(dim=-1)  # over the whole vocabulary, targets or not
            if chosen is None:
                scores, ids = probs.topk(top_k)
            else:  # rank the targets only
                scores, places = probs[chosen].topk(min(top_k, len(chosen)))
                ids = chosen[places]
            pieces = tokenizer.convert_ids_to_tokens(ids.tolist())
            per_mask.append(
                [
                    {
                        "token": tokenizer.decode([token_id]),
                        "token_id": token_id,
                        "score": score,
                        "is_subword": piece.startswith("##"),
                    }
                    for token_id, score, piece in zip(ids.tolist(), scores.tolist(), pieces)
                ]
            )
        results.append(per_mask)
    return results


def normalise_answer(answer: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """An answer as the tokenizer sees it (lower-cased, accents stripped for uncased BERT)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and backend.normalizer is not None:
        return backend.normalizer.normalize_str(answer).strip()
    return answer.strip().lower()


def load_probes(path: str | Path) -> list[dict[str, str]]:
    """Read a ``.jsonl`` file of ``{"text": "... [MASK] ...", "answer": "word"}`` lines.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line that is not JSON, lacks ``text``/``answer`` or a ``[MASK]`` (names the line
            number), or a file without any probe.
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
        probes.append({"text": str(item["text"]), "answer": str(item["answer"])})
    if not probes:
        raise ValueError(f"probes file {str(path)!r} holds no probe; write one JSON object per line")
    return probes


def score_probes(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, probes: Sequence[dict[str, str]], top_k: int = 5
) -> dict[str, Any]:
    """Fill-mask on each probe's first mask and compare with its answer, normalised as the tokenizer does.

    Returns:
        ``{"hits_top1", "hits_topk", "n", "rows": [{"text", "answer", "top1", "topk", "hit_top1", "hit_topk"}]}``.
    """
    predictions = fill_mask(model, tokenizer, [p["text"] for p in probes], top_k=top_k) if probes else []
    rows = []
    for probe, prediction in zip(probes, predictions):
        answer = normalise_answer(probe["answer"], tokenizer)
        tokens = [c["token"].strip() for c in prediction[0]]
        rows.append(
            {
                "text": probe["text"],
                "answer": answer,
                "top1": tokens[0],
                "topk": tokens,
                "hit_top1": tokens[0] == answer,
                "hit_topk": answer in tokens,
            }
        )
    return {
        "hits_top1": sum(r["hit_top1"] for r in rows),
        "hits_topk": sum(r["hit_topk"] for r in rows),
        "n": len(rows),
        "rows": rows,
    }
