"""The memory a run will need at least, against the memory the machine has, checked up front.

Why: a run too large for the machine used to grow until the kernel killed it, Python raised
MemoryError deep inside numpy or polars, or (seen under pressure) a pyo3 panic surfaced as a
traceback. Refusing it before the first request is made, with its size and the limit in one
line, is the design; ``cli/main.py`` turning a late MemoryError into one line is the last resort.

The estimate is a floor, so a run that would fit is never refused: only what every run holds
for each request (its spec, its request object and planner row, its record and summary arrays:
``REQUEST_BYTES``) and each run's kept records (``KEPT_BYTES``). Generated tokens (ITL samples)
are left out: how many a run generates depends on how much the fleet serves, unknown up front.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.contracts.errors import SpecplanError
from sim.contracts.input_limits import MIB, env_limit

REQUEST_BYTES = 1_000
"""Bytes a run holds at its peak per request, at least: measured ~1,150 B at 10^6 requests
(``bench/bench_memory.py``'s 10^6 req/s case, one candidate: peak RSS growth over the imports)."""
KEPT_BYTES = 20
"""Bytes per request a scenario result keeps of each finished run, at least (compressed
records, ``sim.results.request_parts``: ~17 B for refused requests, more for served ones)."""
BASE_BYTES = 150 * MIB
"""The process before any request: interpreter, numpy, polars, numba's kernels (measured ~190 MiB)."""
ENV = "SPECPLAN_MAX_MEMORY_MB"


def available_bytes() -> int | None:
    """Memory this process may still use: ``SPECPLAN_MAX_MEMORY_MB`` when set, else the lower
    of the kernel's MemAvailable and the cgroup's room (None: not known, nothing is refused)."""
    value = env_limit(ENV, "an integer number of MiB")
    if value is not None:
        return value * MIB
    found = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
    return min(found) if found else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip()), 0)
    except (OSError, ValueError):
        return None


def memory_floor(requests_per_run: float, runs: int) -> float:
    """Bytes a scenario run needs at least: its largest run's requests, every run's kept records."""
    n = max(requests_per_run, 0.0)
    return BASE_BYTES + n * REQUEST_BYTES + n * KEPT_BYTES * max(runs, 1)


def check_memory(requests_per_run: float, runs: int, origin: object) -> None:
    """Refuse up front a run whose memory floor (``memory_floor``) exceeds what is available."""
    limit = available_bytes()
    if limit is None:
        return
    need = memory_floor(requests_per_run, runs)
    if need > limit:
        raise SpecplanError(
            f"{origin}: about {requests_per_run:.3g} requests per run × {runs} run(s) need at least "
            f"{need / MIB:,.0f} MiB of memory, over the {limit / MIB:,.0f} MiB available "
            f"({ENV if os.environ.get(ENV) else 'MemAvailable'}); shorten run.duration_s, lower the "
            "rate or run fewer seeds/candidates"
        )
