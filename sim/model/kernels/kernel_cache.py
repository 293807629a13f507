"""Where the compiled kernels are cached on disk, keyed by the kernels' own source.

Why: numba's on-disk cache checks only the file that defines a function. ``fleet_kernels.run_fleet``
inlines the planning, apply, draw and price kernels, so after an edit of those alone (a ``git pull``)
it would load stale machine code. Every kernel is cached in a folder named after a digest of all
the kernel files instead, so any change to any of them compiles afresh.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numba

_HERE = Path(__file__).resolve().parent
KERNEL_FILES = ("kernel_cache.py", "kernel_state.py", "kv_blocks.py", "prefix_cache.py", "plan_kernels.py", "apply_kernels.py",
                "queue_kernels.py", "draw_kernels.py", "policy_kernels.py", "price_kernels.py",
                "run_kernel.py", "arrival_kernels.py", "route_kernels.py", "fleet_clock.py", "client_kernels.py",
                "fleet_kernels.py", "kernel_entry.py")


def _cache_dir() -> str:
    digest = hashlib.sha256()
    for name in KERNEL_FILES:
        digest.update((_HERE / name).read_bytes())
    tag = f"specplan-kernels-{digest.hexdigest()[:16]}"
    for base in (_HERE / "__pycache__", Path(tempfile.gettempdir())):
        try:
            base.mkdir(parents=True, exist_ok=True)
            if os.access(base, os.W_OK):
                return str(base / tag)
        except OSError:
            continue
    return str(Path(tempfile.gettempdir()) / tag)


CACHE_DIR = _cache_dir()


def njit(fn=None, **options):
    """``numba.njit(cache=True)`` with the cache in ``CACHE_DIR`` (numba picks a function's
    cache folder when it is decorated; the global setting is put back right after), and without
    reference counting (``_nrt=False``): no kernel allocates an array or keeps one beyond its
    call, and counting every array of a state object in and out of every function cost ~25 ns an
    array (a step's functions took twice the old kernels' time: 6.5 against 3 µs)."""
    if fn is None:
        return lambda f: njit(f, **options)
    before = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = CACHE_DIR
    try:
        return numba.njit(cache=True, _nrt=False, **options)(fn)
    finally:
        numba.config.CACHE_DIR = before
