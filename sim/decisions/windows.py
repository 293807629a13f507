"""The parts of a run judged on their own: the load peak, a restart and the fallback after it.

Why: a whole-run average hides the ten minutes a proposer collapses under a peak, or what a
fleet serves while a replica reloads. Each window is judged by the same decision function as
the whole run, over the requests arriving in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.model.cold_start import cold_start_of


@dataclass(frozen=True, slots=True)
class Window:
    label: str
    t0: float
    t1: float
    rate: float | None
    """Mean arrival rate in the window (req/s), for the answer's words."""


PEAK_SHARE = 0.9
"""The peak window: where the arrival rate is at least this share of its maximum."""
MIN_WINDOW_S = 30.0


def windows(scenario: Any, profile: Any | None = None) -> list[Window]:
    """The scenario's peak (a piecewise rate whose maximum is well above its mean), its
    restart (the cold start: the scenario's, else ``profile``'s measured one, else assumed; its
    label says which) and, with ``fallback = "baseline"``, the rest of the run after it."""
    run = scenario.run
    w0, end = float(run.warmup_s), float(run.duration_s)
    out: list[Window] = []
    pw = scenario.workload.piecewise
    if pw is not None:
        t = np.arange(0.0, end, 1.0)
        r = pw.rate_at(t)
        top = float(r.max()) if r.size else 0.0
        mean = scenario.workload.mean_rate(end) or 0.0
        if top > 1.2 * mean > 0:
            hot = np.flatnonzero(r >= PEAK_SHARE * top)
            first = hot[0]
            last = first
            while last + 1 < len(r) and r[last + 1] >= PEAK_SHARE * top:
                last += 1
            a, b = max(float(t[first]), w0), min(float(t[last]) + 1.0, end)
            if b - a >= MIN_WINDOW_S:
                out.append(Window(f"peak {a:g}–{b:g} s", a, b, float(r[first:last + 1].mean())))
    rs = scenario.fleet.restart
    rate = scenario.workload.mean_rate(end)
    if rs is not None and rs.at_s < end:
        cold = cold_start_of(rs, profile)
        a = max(float(rs.at_s), w0)
        b = min(end, a + max(cold.seconds, MIN_WINDOW_S))
        if b > a:
            out.append(Window(f"restart {a:g}–{b:g} s (replica {rs.replica} down; cold start {cold.seconds:.3g} s "
                              f"{cold.words})", a, b, rate))
        if rs.fallback == "baseline" and end - b >= MIN_WINDOW_S:
            out.append(Window(f"after the restart {b:g}–{end:g} s (replica {rs.replica} back without "
                              f"speculation)", b, end, rate))
    return out
