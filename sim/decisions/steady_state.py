"""Is a run in steady state, or is its queue running away?

Why: a capacity probe that passes its SLO percentiles over a short window can still be past
saturation — the backlog grows the whole time and a longer window would fail it (120-s probes
overstated capacity by 4–6 % near saturation, and a 20 req/s run whose TTFT p95 reached 17.8 s
at 900 s was reported as a TPOT failure). Percentiles over the window cannot see the trend; the
waits themselves can.

The test: over the measured window's requests, the least-squares line of wait (arrival →
first scheduled) against arrival time; the queue is *growing* when that line rises over the
window by more than twice the first half's mean wait (and more than ``floor_s``). Checked on
M/D/1 queues (tests/sim/decisions/test_steady_state.py, 20 seeds): ρ = 1.1 over 600 s is flagged 20/20,
ρ = 1.2 over 300 s 18/20; ρ = 0.6 over 300 s 0/20 and ρ = 0.8 3/20. Near saturation a
stationary queue drifts for a long time and cannot be told from a slow runaway in a short
window — exactly when a longer probe is needed, so callers lengthen a growing probe and ask
again, and treat one still growing at their longest as a runaway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

MIN_REQUESTS = 40
"""Fewer measured requests than this (10 a quarter) cannot show a trend."""


@dataclass(frozen=True, slots=True)
class QueueTrend:
    """Mean wait per quarter of the measured window and what it says."""

    state: str
    """``"steady"``, ``"growing"`` or ``"unknown"`` (too few requests)."""
    growth_s: float
    """How much the fitted wait rises from the window's first arrival to its last."""
    first_half_wait_s: float
    requests: int

    @property
    def growing(self) -> bool:
        return self.state == "growing"

    def describe(self) -> str:
        if self.state == "unknown":
            return f"queue trend unknown ({self.requests} measured requests; needs {MIN_REQUESTS})"
        what = "queue growing" if self.growing else "queue steady"
        return (f"{what}: the wait rises {self.growth_s:+.2f} s over the window "
                f"(first half's mean wait {self.first_half_wait_s:.2f} s)")


def queue_trend(requests: pl.DataFrame, *, floor_s: float = 0.05) -> QueueTrend:
    """The trend of waits over the measured window (``in_window`` rows of a requests frame).

    Requests never scheduled (rejected, or still queued when the run ended) wait until they
    finish or time out: they count with their whole time in the system so a backlog that was
    cut off still shows.
    """
    rows = requests.filter(pl.col("in_window")).sort("arrival_s")
    n = rows.height
    if n < MIN_REQUESTS:
        return QueueTrend("unknown", 0.0, 0.0, n)
    last = requests.select(pl.max_horizontal(pl.col("arrival_s", "scheduled_s", "finish_s").max())).item()
    end = rows.select(pl.coalesce("scheduled_s", "finish_s", pl.lit(last))).to_series()
    wait = (end - rows["arrival_s"]).to_numpy()
    t = rows["arrival_s"].to_numpy()
    slope = float(np.polyfit(t, wait, 1)[0]) if t[-1] > t[0] else 0.0
    growth = slope * float(t[-1] - t[0])
    first = float(wait[: n // 2].mean())
    state = "growing" if growth > 2.0 * max(first, floor_s) else "steady"
    return QueueTrend(state, growth, first, n)


__all__ = ["MIN_REQUESTS", "QueueTrend", "queue_trend"]
