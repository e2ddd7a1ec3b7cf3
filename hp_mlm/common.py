"""Helpers shared by the steps, below all of them: seeds, atomic writes, precision, eval mode, logits.

Nothing here knows about settings, data or the course; every step module may import it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

#: Precisions a run can use. ``auto`` picks one for the device (see :func:`resolve_precision`).
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: What a run is told when bf16 is forced on a CPU that only emulates it.
EMULATED_BF16 = (
    "this CPU has no native bf16 instructions: bf16 runs emulated, slower than fp32; set `precision` to auto or fp32"
)
#: accelerate's names for them (``Accelerator(mixed_precision=...)``).
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def derive_seed(seed: int, *parts: int | str) -> int:
    """One seed for one purpose, derived from the run's ``seed`` and labels such as ``("masks", epoch, batch)``.

    The same inputs always give the same seed (a BLAKE2 hash, not Python's salted ``hash``), and
    different labels give unrelated seeds, so the split, the shuffling, the masks of every batch and
    the evaluation masks never share a random stream.

    Returns:
        An int in [0, 2**63), suitable for ``torch.Generator().manual_seed``.
    """
    text = "/".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") % 2**63


def generator(seed: int, *parts: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed` of the same arguments."""
    return torch.Generator().manual_seed(derive_seed(seed, *parts))


def error_summary(error: BaseException, limit: int = 200) -> str:
    """``"TypeName: first line of the message"`` (at most ``limit`` characters of it), to quote a
    library's error inside one of ours without its whole text."""
    text = str(error).splitlines()[0][:limit] if str(error) else ""
    return f"{type(error).__name__}: {text}"


class OutOfMemory(RuntimeError):
    """Memory ran out in a named phase of a run; the message names the phase and what to lower."""


@contextlib.contextmanager
def out_of_memory_in(phase: str, lower: str) -> Iterator[None]:
    """Turn a ``torch.OutOfMemoryError`` raised inside into :class:`OutOfMemory`, one line: ``phase``
    (where it ran out), the library's first line, and ``lower`` (the settings that need less memory).

    Raises:
        OutOfMemory: in place of ``torch.OutOfMemoryError`` (CUDA or MPS memory).
    """
    try:
        yield
    except torch.OutOfMemoryError as error:
        raise OutOfMemory(f"out of memory in {phase} ({error_summary(error)}). Lower {lower}") from error


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace`` (never half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' logging and progress bars inside the block (its load report, for one:
    the loaders summarise it in one line instead); the user's levels come back after it."""
    import transformers

    level = transformers.logging.get_verbosity()
    bars = transformers.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)
        if bars:
            transformers.logging.enable_progress_bar()


def cpu_process_group() -> bool:
    """True when this process is one of several (``WORLD_SIZE`` > 1, set by ``accelerate launch`` or
    ``torchrun``) on a machine without a CUDA GPU: accelerate then needs ``cpu=True`` to join them
    over gloo; without it each process would train alone on every batch."""
    return not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1


def device_kind() -> str:
    """Where a run computes: ``"cuda"`` when a GPU is visible, ``"mps"`` on Apple silicon
    (``torch.backends.mps.is_available()``), else ``"cpu"``; accelerate chooses in the same order."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def run_device() -> torch.device:
    """The device this process trains and evaluates on: accelerate's for CUDA (``cuda:<local rank>``
    under ``accelerate launch``, ``cpu`` when launched with ``--cpu``), else ``mps`` or ``cpu``."""
    kind = device_kind()
    return process_state().device if kind == "cuda" else torch.device(kind)


def process_state():
    """accelerate's ``PartialState`` of this process (created on first use, with :func:`cpu_process_group`).

    ``.process_index``, ``.num_processes``, ``.is_main_process``, ``.wait_for_everyone()``: one
    process alone is process 0 of 1. Every step asks here, so evaluation before training and the
    training loop see the same process group.
    """
    from accelerate import PartialState

    return PartialState(cpu=cpu_process_group())


def sum_across_processes(values: list[float]) -> list[float]:
    """Element-wise sums of ``values`` over all processes (float64 ``all_reduce``); unchanged for one process."""
    state = process_state()
    if state.num_processes == 1:
        return values
    total = torch.tensor(values, dtype=torch.float64, device=state.device)
    torch.distributed.all_reduce(total)
    return total.tolist()


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter."""
    return next(model.parameters()).device


@contextlib.contextmanager
def inference_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Switch ``model`` to eval mode (dropout off) under ``torch.no_grad``, then restore its mode."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


# ---------------------------------------------------------------------------------------------
# Precision: bf16 / fp16 autocast where the hardware does it natively, fp32 elsewhere.
# ---------------------------------------------------------------------------------------------


def cuda_has_native_bf16() -> bool:
    """True when the CUDA GPU computes bf16 natively: compute capability 8.0 (Ampere) or newer, or
    an AMD GPU (ROCm). Not ``torch.cuda.is_bf16_supported()``'s default, which counts emulation too
    and so says True on a T4 (7.5), where bf16 runs emulated and slower than fp16."""
    if torch.version.hip:
        return True
    return torch.cuda.get_device_properties(torch.cuda.current_device()).major >= 8


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU has bf16 instructions (x86 ``avx512_bf16`` or ``amx_bf16``).

    Read from ``/proc/cpuinfo`` (Linux); elsewhere False, so such machines stay in fp32.
    Measured on a 2-core AMD EPYC with ``avx512_bf16``: a MiniLM-L6 training step (16 x 128
    tokens) took 0.93 s in bf16 autocast against 1.43 s in fp32 (benchmarks/precision_step.py).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = [line.split(":", 1)[-1].split() for line in cpuinfo.splitlines() if line.startswith("flags")]
    return any({"avx512_bf16", "amx_bf16"} & set(cpu_flags) for cpu_flags in flags)


def resolve_precision(
    requested: str, device_type: str | None = None, cuda_bf16: bool | None = None, cpu_bf16: bool | None = None
) -> str:
    """The precision a run uses: ``fp32``, ``bf16`` or ``fp16``.

    ``auto``: bf16 on a CUDA GPU that supports it (Ampere and newer), fp16 with loss scaling on
    older GPUs (a Colab T4), bf16 on a CPU with native bf16 instructions, fp32 otherwise.

    Args:
        requested: one of ``PRECISIONS``.
        device_type: ``"cuda"``, ``"mps"`` or ``"cpu"``; default :func:`device_kind`. On ``mps``
            (Apple silicon) ``auto`` is fp32: no mixed precision there was measured by the course.
        cuda_bf16, cpu_bf16: hardware facts, asked from torch and the CPU when None (for tests).
    Raises:
        ValueError: an unknown precision; ``fp16`` without a CUDA GPU (the CPU has no fast fp16
            training path); ``bf16`` on a GPU that lacks it; ``fp16`` or ``bf16`` on ``mps``.
    Warns:
        UserWarning: ``bf16`` asked for on a CPU without native bf16 instructions (it runs, emulated
            and much slower than fp32).
    """
    if requested not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {requested!r}")
    device_type = device_type or device_kind()
    if device_type == "mps":
        if requested in ("fp16", "bf16"):
            raise ValueError(
                f"precision {requested} on Apple's mps device was not measured by this course; "
                "set `precision` to auto or fp32 (auto is fp32 there)"
            )
        return "fp32"
    if device_type == "cuda":
        native = cuda_has_native_bf16() if cuda_bf16 is None else cuda_bf16
        if requested == "auto":
            return "bf16" if native else "fp16"
        if requested == "bf16" and not native:
            raise ValueError(
                "precision bf16 needs a GPU with bf16 support (Ampere or newer); set `precision` to fp16 or fp32"
            )
        return requested
    if requested == "fp16":
        raise ValueError(
            "precision fp16 needs a CUDA GPU, and none is visible; set `precision` to auto, bf16 or fp32 on a CPU"
        )
    native = cpu_has_native_bf16() if cpu_bf16 is None else cpu_bf16
    if requested == "auto":
        return "bf16" if native else "fp32"
    if requested == "bf16" and not native:  # emulated bf16 runs from 2 to about 90 times slower than fp32
        warnings.warn(EMULATED_BF16, stacklevel=1)  # one location: shown once however often precision is resolved
    return requested


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``precision`` on ``device`` (a no-op context for fp32).

    Raises:
        ValueError: a precision other than ``fp32``, ``bf16`` or ``fp16`` (``auto`` is settled first, by
            :func:`resolve_precision`).
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"precision {precision!r}: pass fp32, bf16 or fp16 (settle auto with resolve_precision)")
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


# ---------------------------------------------------------------------------------------------
# Logits only where they are needed.
# ---------------------------------------------------------------------------------------------


def _encoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The encoder and MLM head of a BERT-like (``cls``) or RoBERTa-like (``lm_head``) model."""
    head = getattr(model, "cls", None) or getattr(model, "lm_head", None)
    encoder = getattr(model, getattr(model, "base_model_prefix", ""), None)
    return (encoder, head) if head is not None and encoder is not None else None


def mlm_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Vocabulary logits, either at every position or only at ``positions``.

    Projecting the hidden states onto the vocabulary (30,522 tokens for BERT) is a large share
    of the compute of a small model; the loss only needs it where a token was masked.

    Args:
        input_ids, attention_mask: LongTensor[batch, seq_len].
        positions: optional BoolTensor[batch, seq_len]; when given, only those positions are scored.
    Returns:
        FloatTensor[batch, seq_len, vocab] without ``positions``, else FloatTensor[n_selected, vocab]
        in row-major order of the selected positions.
    """
    parts = _encoder_and_head(model) if positions is not None else None
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits if positions is None else logits[positions]
    encoder, head = parts
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
    return head(hidden[positions])
