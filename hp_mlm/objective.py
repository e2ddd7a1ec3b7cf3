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
) -> torch.Tensor:
    """Mean cross-entropy (nats) over the positions whose label is not -100: a scalar FloatTensor.

    ``input_ids``, ``attention_mask``, ``labels``: LongTensor[batch, seq_len]. With
    ``masked_positions_only`` the MLM head runs only at the labelled positions; the loss is the
    same as ``model(..., labels=labels).loss`` (a test checks it to 1e-5). A batch with no labelled
    position gives a zero loss that still has a gradient graph, never NaN.
    """
    target = labels != IGNORE_INDEX
    if not bool(target.any()):
        return model(input_ids=input_ids, attention_mask=attention_mask).logits.sum() * 0.0
    logits = mlm_logits(model, input_ids, attention_mask, target if masked_positions_only else None)
    if not masked_positions_only:
        logits = logits[target]
    return nn.functional.cross_entropy(logits.float(), labels[target])


class MaskedLMObjective(nn.Module):
    """Wraps a masked-LM so that ``forward(input_ids, attention_mask, labels)`` returns :func:`masked_lm_loss`."""

    def __init__(self, model: nn.Module, masked_positions_only: bool = True) -> None:
        super().__init__()
        self.model, self.masked_positions_only = model, masked_positions_only

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return masked_lm_loss(self.model, input_ids, attention_mask, labels, self.masked_positions_only)


def has_masked_position(labels: torch.Tensor) -> bool:
    """Whether any process's batch has a label other than -100 (``labels``: LongTensor[batch, seq_len]).

    A batch with nothing masked (a short row, a low ``mlm_probability``) is skipped by the loop: no
    optimiser step, no loss of 0.0 in the log. All processes skip together (one sum over
    processes), or their steps would go out of step.
    """
    return sum_across_processes([float((labels != IGNORE_INDEX).sum())])[0] > 0
