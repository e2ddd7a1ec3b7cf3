"""bf16 weights in the model, fp32 master weights in the optimiser: a bf16 training step on a CPU without
autocast casting every weight to bf16 at every forward.

In bf16 autocast (the course's ``precision="bf16"``) the model's weights stay fp32 and autocast casts each one to
bf16 each time a matrix product reads it, and casts its gradient back to fp32 in the backward pass
(``aten::copy_`` in a profile of the step, about a tenth of a MiniLM-L6 step on 2 CPU cores). Here the model holds
bf16 copies of its weights, so those casts are gone and the gradients are bf16 (half the memory traffic), while
the optimiser keeps the fp32 weights it already had (the "master weights", with AdamW's fp32 state): before each
optimiser step the bf16 gradients are copied into fp32 ones, after it the new fp32 weights are rounded into the
model's bf16 copies. Updates smaller than a bf16 weight's rounding step are therefore not lost (Micikevicius et al.
2018, "Mixed Precision Training", section 3.1). Autocast stays on, so the operations it keeps in fp32 still run
in fp32.

A lever measured, not kept: the course trains with fp32 weights under autocast. On 2 cores of an Intel Xeon with
AMX, a quiet host, a step with it took 0.94 (MiniLM-L6, 16 x 128), 0.96 (16 x 512), 0.94 (bert-base size, 16 x
128) and 0.97 (16 x 512) of the course's, interleaved in one process, at the same peak memory; over 3 seeds of the
offline profile its held-out top-1 was 43.8% [42.4, 45.0] against 43.6% [43.4, 44.0], inside the spread
(``benchmarks/step_levers.py``, ``benchmarks/levers_quality.py --levers weights``, benchmarks/README.md). Not kept
for a few per cent of a step: the model would hold bf16 weights while it trains, so would its checkpoints, and a
resumed run would go on from rounded weights. It applies where :func:`applies` says: a CPU, bf16, one process;
``benchmarks/`` and ``studies.options`` use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


def applies(plan) -> bool:
    """Whether :func:`bf16_weights` changes ``plan``: bf16 on a CPU, in one process."""
    accelerator = plan.accelerator
    return plan.settings.precision == "bf16" and accelerator.device.type == "cpu" and accelerator.num_processes == 1


@contextlib.contextmanager
def bf16_weights(plan, enabled: bool = True) -> Iterator[bool]:
    """While the block runs (``training.train(plan)``), ``plan.model`` holds bf16 copies of the weights that
    ``plan.optimizer`` updates; the optimiser keeps updating the fp32 originals (hooks before and after its
    step). On leaving, the fp32 weights are put back into the model: the model is fp32 again, as before, holding
    the last step's fp32 weights; where a callback loaded other weights into the model meanwhile (the best
    epoch's, ``callbacks.Validate``), those are taken.

    Args:
        plan: a ``training.TrainingPlan`` before :func:`training.train` runs it.
        enabled: False (or a plan :func:`applies` rejects) leaves everything as it is (the benchmarks measure
            the step without it so).
    Yields:
        True when the model's weights were made bf16, else False.
    """
    if not (enabled and applies(plan)):
        yield False
        return
    optimizer = getattr(plan.optimizer, "optimizer", plan.optimizer)  # under accelerate's wrapper
    masters = [p for group in optimizer.param_groups for p in group["params"]]
    pairs = _swap(plan.model, {id(p): p for p in masters}, lambda p: nn.Parameter(p.detach().bfloat16()))

    def gradients_to_masters(*_) -> None:
        for low, master in pairs:
            master.grad = None if low.grad is None else low.grad.float()

    @torch.no_grad()
    def masters_to_model(*_) -> None:
        torch._foreach_copy_([low for low, _ in pairs], [master for _, master in pairs])
        for low, master in pairs:
            low.grad = master.grad = None

    hooks = [
        optimizer.register_step_pre_hook(gradients_to_masters),
        optimizer.register_step_post_hook(masters_to_model),
    ]
    try:
        yield True
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for low, master in pairs:
                if not torch.equal(low, master.to(low.dtype)):  # loaded from elsewhere since the last step
                    master.copy_(low)
        _swap(plan.model, {id(low): master for low, master in pairs}, None)


def _swap(model: nn.Module, chosen: dict[int, nn.Parameter], make) -> list[tuple[nn.Parameter, nn.Parameter]]:
    """Put a new parameter in place of each of the model's parameters listed in ``chosen`` (id -> parameter),
    everywhere the module tree holds it (tied weights stay tied): ``make(old)``, or ``chosen``'s value when
    ``make`` is None. Returns ``[(new, old)]``, one pair per parameter."""
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and id(param) in chosen:
                if id(param) not in made:
                    made[id(param)] = make(param) if make else chosen[id(param)]
                    made[id(param)].requires_grad_(param.requires_grad)
                module._parameters[name] = made[id(param)]
    return [(new, chosen[old]) for old, new in made.items()]
