"""The objective: cross-entropy at the masked positions only (Devlin et al. 2019, section 3.1).

Taught in ``notebooks/03_training.ipynb``. :func:`masked_lm_loss` is what the training loop
minimises; :class:`MaskedLMObjective` wraps a model so that its ``forward`` returns that loss, which
lets ``accelerate`` (DDP, autocast) see one module.
"""

from __future__ import annotations

import torch
from torch import nn

from .common import mlm_logits, sum_across_processes
from .masking import IGNORE_INDEX


def masked_lm_loss(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    masked_positions_only: bool = True,
    num_items: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy (nats) over the positions whose label is not -100: a scalar FloatTensor.

    ``input_ids``, ``attention_mask``, ``labels``: LongTensor[batch, seq_len]. With
    ``masked_positions_only`` the MLM head runs only at the labelled positions; the loss is the
    same as ``model(..., labels=labels).loss`` (a test checks it to 1e-5). With ``num_items`` the
    sum of the cross-entropies is divided by it instead of by this batch's labelled positions: the
    training loop passes the masked tokens of a whole accumulation window (over every process), so
    that the window's gradient is the large batch's, each masked token weighing the same (as
    transformers' ``num_items_in_batch``). A batch with no labelled position gives a zero loss that
    still has a gradient graph, never NaN.
    """
    target = labels != IGNORE_INDEX
    if not bool(target.any()):
        return model(input_ids=input_ids, attention_mask=attention_mask).logits.sum() * 0.0
    logits = mlm_logits(model, input_ids, attention_mask, target if masked_positions_only else None)
    if not masked_positions_only:
        logits = logits[target]
    if num_items is None:
        return nn.functional.cross_entropy(logits.float(), labels[target])
    return nn.functional.cross_entropy(logits.float(), labels[target], reduction="sum") / num_items


class MaskedLMObjective(nn.Module):
    """Wraps a masked-LM so that ``forward(input_ids, attention_mask, labels, num_items)`` returns
    :func:`masked_lm_loss`."""

    def __init__(self, model: nn.Module, masked_positions_only: bool = True) -> None:
        super().__init__()
        self.model, self.masked_positions_only = model, masked_positions_only

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, num_items: int | None = None
    ) -> torch.Tensor:
        return masked_lm_loss(self.model, input_ids, attention_mask, labels, self.masked_positions_only, num_items)


def masked_counts(batches: list[dict[str, torch.Tensor]]) -> list[int]:
    """Masked tokens (labels other than -100) of each batch of an accumulation window, summed over
    every process (one ``all_reduce`` for the window).

    A batch whose count is 0 (a short row, a low ``mlm_probability``) is skipped by the loop on
    every process together (or their steps would go out of step); the sum is what
    :func:`masked_lm_loss` divides by (``num_items``), counted before the window starts.
    """
    counts = sum_across_processes([float((b["labels"] != IGNORE_INDEX).sum()) for b in batches])
    return [int(c) for c in counts]
