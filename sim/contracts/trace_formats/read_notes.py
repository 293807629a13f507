"""What a trace's rows leave the replay to assume, said once at load time in the trace's notes
(printed with the results): zero-token lengths replayed as one token, and arrival times on a
grid coarser than the traffic.

Neither is refused: a public trace with a few such rows is still worth replaying, but a reader of
the results must know what was assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

MIN_GRID_ROWS = 20
"""Fewer rows say nothing about a trace's time resolution."""
TOGETHER = 2.0
"""Mean requests per grid slot from which ties are the trace's resolution, not its traffic
(Poisson traffic at 1 req/s on a 1 s grid averages 1.6; at 2 req/s, 2.3)."""
ON_GRID = 0.01
"""How far (in grid steps) a gap between distinct instants may sit from a whole multiple of the
step: logged clocks jitter (Mooncake's conversation trace has 0, 3000, 5999, 9000 ms)."""
ON_GRID_SHARE = 0.9
"""Share of gaps that must sit on the grid: a few stray instants do not hide a grid."""


def zero_length_notes(name: str, columns: Sequence[tuple[str, str, np.ndarray]],
                      where: Callable[[int], str]) -> tuple[str, ...]:
    """One note per length column with rows of 0 tokens (``columns``: (field, "prompt" or
    "output", counts)); ``where(row)`` names the first such row (``line 7``, ``request 3``).

    The replay sends them as 1 token (sim.workload.workload): vLLM refuses an empty prompt and
    needs ``max_tokens`` ≥ 1, and a recorded request that produced nothing still cost its
    prefill, which a 1-token answer keeps."""
    notes = []
    for field, kind, counts in columns:
        zero = np.asarray(counts) == 0
        n = int(zero.sum())
        if not n:
            continue
        why = ("vLLM refuses an empty prompt" if kind == "prompt"
               else "vLLM needs max_tokens ≥ 1; the row's prefill is kept")
        notes.append(f"trace {name}: {n:,} of {len(zero):,} rows have {field} 0 (first at "
                     f"{where(int(np.argmax(zero)))}); replayed as 1 {kind} token ({why})")
    return tuple(notes)


def arrival_grid(offsets_s: np.ndarray) -> tuple[float, float] | None:
    """(grid step in seconds, mean requests per grid slot) when the arrivals sit on a coarse
    grid, else None: at least ``ON_GRID_SHARE`` of the gaps between distinct arrival instants
    are whole multiples of one step (within ``ON_GRID`` of a step), and a slot holds
    ``TOGETHER`` or more requests on average. The step is the smallest typical gap (gaps under
    a quarter of the median are jitter), refined as the median gap per step."""
    n = len(offsets_s)
    if n < MIN_GRID_ROWS:
        return None
    distinct = np.unique(np.asarray(offsets_s, np.float64))
    gaps = np.diff(distinct)
    if len(gaps) < 2:
        return None
    rough = float(gaps[gaps >= 0.25 * float(np.median(gaps))].min())
    steps = np.rint(gaps / rough)
    whole = steps >= 1
    step = float(np.median(gaps[whole] / steps[whole]))
    ratio = gaps / step
    if float(np.mean(np.abs(ratio - np.rint(ratio)) <= ON_GRID)) < ON_GRID_SHARE:
        return None
    together = n / (1 + int((np.rint(ratio) >= 1).sum()))  # instants within jitter share a slot
    return (step, together) if together >= TOGETHER else None


def grid_note(name: str, offsets_s: np.ndarray) -> str | None:
    """The run note of :func:`arrival_grid`, or None when the arrivals are not on a coarse grid."""
    found = arrival_grid(offsets_s)
    if found is None:
        return None
    step, together = found
    return (f"trace {name}: arrivals fall on a {_seconds(step)} grid: {together:.1f} requests arrive "
            "together on average; the trace's time resolution may be coarser than its traffic "
            "(each group is replayed as one burst)")


def _seconds(s: float) -> str:
    """``3 s``, ``250 ms``, ``10 µs``: a grid step in the unit that reads best."""
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if s * scale >= 1.0 - 1e-9:
            return f"{s * scale:.4g} {unit}"
    return f"{s * 1e9:.4g} ns"
