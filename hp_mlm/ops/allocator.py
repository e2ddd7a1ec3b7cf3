"""The CPU's memory allocator while training: keep freed memory in the process for the next step.

Every training step allocates and frees the same large tensors (activations, their gradients, the
attention scores, the logits). On Linux, PyTorch takes CPU memory from the C library's ``malloc``
(glibc), which serves blocks above a threshold (32 MB at most) with their own ``mmap`` and returns
them to the operating system as soon as they are freed, and gives back the top of its heap once
enough is free there. So the next step asks the kernel for the same memory again, and the kernel
zeroes it page by page on first touch (a minor page fault per 4 kB page). On the 2-core machine
that built the course, a bert-base step of 16 x 512 tokens in bf16 made 4.5 million such faults
and spent 29 s of its 42.5 s in the kernel; with this module's setting, the same step took 21.0 s
(1.02-1.09x faster at 16 x 128, where steps allocate less; ``benchmarks/README.md``).

:func:`reuse_freed_memory` switches that off for the duration of a ``with`` block, with two
``mallopt`` settings documented in glibc's manual (``man 3 mallopt``): no ``mmap`` for large
blocks (``M_MMAP_MAX`` 0), and no trimming of the heap's top (``M_TRIM_THRESHOLD``). Freed memory
then stays in the process and the next step reuses it. On leaving the block, glibc's defaults come
back and ``malloc_trim`` hands the free memory back to the system, so a notebook's kernel does not
keep it after training. (glibc stops adjusting its mmap threshold by itself once ``mallopt`` has
set one of these, as ``man 3 mallopt`` says; after the block the threshold stays where it was.) The
price is memory: glibc's heap cannot give back a hole in its middle, so while training runs the
process holds about its largest step's memory, a few GB more at 512 tokens. PyTorch's CPU
performance tuning guide makes the same point when it suggests a caching allocator (jemalloc or
TCMalloc) loaded with ``LD_PRELOAD``; this needs no extra library.

Where the C library is not glibc (macOS, Windows, musl) nothing is changed. Numbers, weights and
results are the same either way: only where memory comes from changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import platform
from collections.abc import Iterator

#: ``mallopt`` parameters (glibc's malloc.h) and glibc's default values for them.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
DEFAULTS = {M_TRIM_THRESHOLD: 128 * 1024, M_MMAP_MAX: 65536}
#: The trim threshold while training: -1 disables trimming (``man 3 mallopt``); a positive int would
#: cap it at 2 GB, which a bert-base step of 16 x 512 tokens frees and would fault in again.
NEVER_TRIM = -1


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's glibc, or None where the C library is another (then nothing is changed)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


@contextlib.contextmanager
def reuse_freed_memory(enabled: bool = True) -> Iterator[bool]:
    """Keep memory that tensors free inside the process while the block runs (see the module's text).

    Args:
        enabled: False leaves the allocator as it is (e.g. when training runs on a GPU, whose memory
            PyTorch already caches).
    Yields:
        True when the allocator was switched (Linux with glibc), else False.
    Raises:
        Nothing of its own: where ``mallopt`` refuses a value, the defaults stay and it yields False.
    """
    libc = glibc() if enabled else None
    switched = (
        libc is not None and bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
    )
    try:
        yield switched
    finally:
        if libc is not None:
            for parameter, value in DEFAULTS.items():
                libc.mallopt(parameter, value)
            libc.malloc_trim(0)
