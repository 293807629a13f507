"""Where the load charts put their points: the grid, then points bracketing each capacity.

Why: on a fixed 0.5/1/1.5/2× grid the goodput cliff falls between two points and is drawn as a
straight line, so the chart hides what the decision rests on. After the grid runs, each
candidate's capacity is *estimated* from its own load points (``SustainCriteria.judge``: the
last level that sustains the SLOs and the first that does not, the crossing of observed/limit
= 1 interpolated on log-rate as the capacity search's secant step does), and two more points
are run for that candidate just below and above the estimate (one point past the grid's end
when the capacity lies beyond it). The charts then mark the
estimate, labelled as an estimate from the load points (``specplan capacity`` searches it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from sim.decisions.sustain import SustainCriteria
from sim.results import metric_names as mn

BRACKET = 1.08
"""The extra points sit at the estimate ÷ and × this (kept inside the grid's bracket)."""


@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """One candidate's capacity per replica as the load points show it."""

    candidate: str
    lower: float | None
    """Highest per-replica rate that sustains the SLOs (None: none does)."""
    upper: float | None
    """Lowest per-replica rate above ``lower`` that does not (None: every point sustains)."""
    estimate: float | None
    """Where observed/limit crosses 1 between them (log-rate interpolation); None unbracketed."""
    judged: int = 0
    """Load points with enough measured requests to judge the SLO percentile at."""

    def text(self) -> str:
        """The estimate in words, with what kind of number it is."""
        if not self.judged:
            return "not judged: too few measured requests at every load point (lengthen the run)"
        if self.estimate is not None:
            return f"≈ {self.estimate:.3g} req/s per replica (estimated from the load points)"
        if self.lower is None:
            low = f" {self.upper:.3g}" if self.upper is not None else " the lowest load point"
            return f"below{low} req/s per replica (no load point meets the SLOs)"
        return f"above {self.lower:.3g} req/s per replica (every load point meets the SLOs)"


def _judged(rows: pl.DataFrame, criteria: SustainCriteria) -> list[tuple[float, bool, float | None]]:
    out = []
    for r in rows.sort("rate").iter_rows(named=True):
        p = criteria.judge(r, float(r["rate"]))
        if p.conclusive:
            out.append((float(r["rate"]), p.sustained, p.margin))
    return out


def estimate(rows: pl.DataFrame, criteria: SustainCriteria, candidate: str) -> CapacityEstimate:
    """The capacity of ``candidate`` from its segment-``all`` rows (per-replica ``rate``)."""
    judged = _judged(rows, criteria)
    n = len(judged)
    passed = [t for t in judged if t[1]]
    if not passed:
        return CapacityEstimate(candidate, None, judged[0][0] if judged else None, None, n)
    lo = max(passed, key=lambda t: t[0])
    above = [t for t in judged if not t[1] and t[0] > lo[0]]
    if not above:
        return CapacityEstimate(candidate, lo[0], None, None, n)
    hi = min(above, key=lambda t: t[0])
    return CapacityEstimate(candidate, lo[0], hi[0], _crossing(lo, hi), n)


def _crossing(lo: tuple[float, bool, float | None], hi: tuple[float, bool, float | None]) -> float:
    """log(margin) linear in log(rate) between the two points, the root clamped inside them."""
    (r0, _, m0), (r1, _, m1) = lo, hi
    mid = math.sqrt(r0 * r1)
    if m0 is None or m1 is None or not (0 < m0 <= 1 < m1) or not math.isfinite(m1):
        return mid
    x0, x1 = math.log(r0), math.log(r1)
    y0, y1 = math.log(m0), math.log(m1)
    x = x0 + (0.0 - y0) * (x1 - x0) / (y1 - y0)
    return math.exp(min(max(x, x0), x1))


def estimates(sweep: pl.DataFrame, criteria: SustainCriteria, candidates: Sequence[str]) -> dict[str, CapacityEstimate]:
    """``estimate`` for every candidate of a sweep frame (segment ``all`` rows are used)."""
    rows = sweep.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    parts = rows.partition_by(mn.CANDIDATE, as_dict=True) if rows.height else {}
    empty = rows.clear()
    return {c: estimate(parts.get((c,), empty), criteria, c) for c in candidates}


def bracket_factors(est: Mapping[str, CapacityEstimate], rate_per_factor: float,
                    have: Sequence[float]) -> dict[str, tuple[float, ...]]:
    """Extra load factors per candidate: just below and above its estimate (inside the grid's
    bracket), or beyond the grid's end when the capacity lies outside it; factors already in
    ``have`` are not repeated. ``rate_per_factor``: per-replica rate at factor 1."""
    out: dict[str, tuple[float, ...]] = {}
    lo_f, hi_f = min(have), max(have)
    for name, e in est.items():
        if not e.judged:
            continue  # more points of the same length would not be judged either
        if e.estimate is not None and e.lower is not None and e.upper is not None:
            rates = [max(e.estimate / BRACKET, math.sqrt(e.lower * e.estimate)),
                     min(e.estimate * BRACKET, math.sqrt(e.estimate * e.upper))]
            fs = [r / rate_per_factor for r in rates]
        elif e.lower is None:
            fs = [lo_f / 2]  # capacity below the grid: one point further down
        else:
            fs = [hi_f * 1.5]  # capacity above the grid: one point further up
        fs = [_round(f) for f in fs]
        out[name] = tuple(f for f in dict.fromkeys(fs) if f > 0 and not any(math.isclose(f, h) for h in have))
    return out


def _round(f: float) -> float:
    """Three significant digits: readable in the report's load list, and the same factors (so the
    same cached runs) for the same inputs."""
    return float(f"{f:.3g}")
