"""Freed memory handed back to the operating system where a run has just let go of a lot of it.

Why: glibc's malloc keeps freed blocks in its heap, resident, for later ``malloc`` calls; after
a block of up to 32 MiB is freed it also moves its threshold for fresh mappings up, so later
arrays of that size come from the heap too. Polars allocates through its own allocator, which
cannot reuse them. On the Azure conversation hour (``bench/bench_memory.py``) the first run's
freed logs and records stayed resident under the second run and under the joined steps frame:
peak RSS 555 MiB where ~470 MiB were ever in use at once. ``malloc_trim(0)`` returns every free
page of the heap (~0.3 ms there); results do not change. Without glibc (macOS, musl) nothing is
done: their allocators return large blocks as they are freed.
"""

from __future__ import annotations

import ctypes

try:
    _TRIM = ctypes.CDLL(None).malloc_trim
except (AttributeError, OSError):  # not glibc
    _TRIM = None
else:
    _TRIM.argtypes = (ctypes.c_size_t,)
    _TRIM.restype = ctypes.c_int


def give_back_freed() -> None:
    """Return the heap's free pages to the operating system (glibc; elsewhere nothing)."""
    if _TRIM is not None:
        _TRIM(0)
