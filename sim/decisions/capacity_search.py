"""Root finding over a monotone pass/fail check: bracket by doubling/halving, then a safeguarded
secant step on log-rate (each evaluation is a whole simulation, so few of them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sim.contracts.errors import SpecplanError


@dataclass(frozen=True, slots=True)
class Probe:
    """One evaluation of the check at ``rate``: passed or not, and by how much.

    ``margin`` is a continuous measure that crosses 1 at the boundary (observed/limit); it lets
    the search interpolate. ``None`` when the check has no such measure (pure bisection then).
    """

    rate: float
    sustained: bool
    margin: float | None = None
    reason: str = ""
    conclusive: bool = True
    """False when the run was too small to judge (too few requests for the percentile): the
    search then treats this rate as a floor it cannot look below, not as a failure."""


SearchStatus = Literal["bracketed", "below_min", "above_max", "below_probes", "above_probes"]


@dataclass(frozen=True, slots=True)
class CapacitySearch:
    """Result of one search: the highest rate seen to pass and the lowest seen to fail.

    ``status``: ``bracketed`` (the boundary lies in ``(lower, upper]``), ``below_min`` (even
    ``min_rate`` failed: capacity < ``min_rate``, reported as 0), ``above_max`` (``max_rate``
    still passed: capacity ≥ ``max_rate``, a lower bound), ``below_probes`` / ``above_probes``
    (the evaluation budget ran out before a bracket: capacity < ``upper``, reported as 0, or
    ≥ ``rate``).
    """

    rate: float
    lower: float
    upper: float
    status: SearchStatus
    probes: tuple[Probe, ...]

    @property
    def relative_width(self) -> float:
        """How tight the bracket is: upper/lower − 1 (inf when not bracketed)."""
        if self.status != "bracketed" or self.lower <= 0:
            return math.inf
        return self.upper / self.lower - 1.0


def find_capacity(
    check: Callable[[float], Probe],
    start: float,
    *,
    rel_tol: float = 0.05,
    max_evals: int = 12,
    min_rate: float = 1e-3,
    max_rate: float = 1e4,
    growth: float = 2.0,
) -> CapacitySearch:
    """Highest rate where ``check`` passes, assuming pass below and fail above one boundary.

    Bracket from ``start`` by multiplying/dividing by ``growth``, ``growth²``, … (at most 16×
    a step, so a boundary far from the start costs few probes); then shrink the bracket on
    log-rate until ``upper/lower − 1 ≤ rel_tol`` or ``max_evals`` evaluations were spent.
    Each step interpolates log(margin) linearly in log(rate) when both ends have a margin,
    clamped to the middle 80 % of the bracket (so the bracket shrinks by ≥ 10 % per step and a
    kinked margin, typical at saturation, cannot stall it); else it bisects.
    """
    if not (start > 0 and min_rate > 0 and max_rate > min_rate):
        raise SpecplanError(f"capacity search: need 0 < min_rate < max_rate and start > 0, got "
                            f"start={start}, min_rate={min_rate}, max_rate={max_rate}")
    if rel_tol <= 0 or max_evals < 2 or growth <= 1:
        raise SpecplanError("capacity search: rel_tol must be > 0, max_evals ≥ 2, growth > 1")
    probes: list[Probe] = []

    def ev(rate: float) -> Probe:
        p = check(rate)
        probes.append(p)
        return p

    rate = min(max(start, min_rate), max_rate)
    p = ev(rate)
    lo: Probe | None = p if p.sustained else None
    hi: Probe | None = None if p.sustained else p
    step = growth
    floor: float | None = None  # highest rate found too small to judge
    while lo is None or hi is None:
        if len(probes) >= max_evals:
            break
        if lo is None:  # everything so far failed: go down
            assert hi is not None
            if hi.rate <= min_rate:
                return CapacitySearch(0.0, 0.0, hi.rate, "below_min", tuple(probes))
            if floor is not None and hi.rate / floor - 1.0 <= rel_tol:
                break  # cannot judge lower rates: capacity < hi.rate, below_probes
            x = hi.rate / step
            if floor is not None:
                x = max(x, math.sqrt(floor * hi.rate))
            q = ev(max(x, min_rate))
            if not q.conclusive:
                floor = q.rate if floor is None else max(floor, q.rate)
            elif q.sustained:
                lo = q
            else:
                hi = q
        else:  # everything so far passed: go up
            if lo.rate >= max_rate:
                return CapacitySearch(lo.rate, lo.rate, math.inf, "above_max", tuple(probes))
            q = ev(min(lo.rate * step, max_rate))
            if q.sustained:
                lo = q
            else:
                hi = q
        step = min(step * growth, 16.0)  # accelerate: a far-off boundary is bracketed in few probes
    if lo is None:
        assert hi is not None
        return CapacitySearch(0.0, 0.0, hi.rate, "below_probes", tuple(probes))
    if hi is None:
        return CapacitySearch(lo.rate, lo.rate, math.inf, "above_probes", tuple(probes))
    return _narrow(ev, probes, lo, hi, rel_tol, max_evals)


def _narrow(ev: Callable[[float], Probe], probes: list[Probe], lo: Probe, hi: Probe, rel_tol: float,
            max_evals: int) -> CapacitySearch:
    """Shrink a bracket (``lo`` sustained, ``hi`` not) until ``rel_tol`` or the probe budget."""
    last_side, streak = "", 0
    while hi.rate / lo.rate - 1.0 > rel_tol and len(probes) < max_evals:
        # interpolate, but bisect after the same end moved twice running (Illinois-style
        # safeguard: a one-sided secant on a kinked margin would otherwise creep)
        q = ev(_next_point(lo, hi, interpolate=streak < 2))
        side = "lo" if q.sustained else "hi"
        streak = streak + 1 if side == last_side else 1
        last_side = side
        if q.sustained:
            lo = q
        else:
            hi = q
    return CapacitySearch(lo.rate, lo.rate, hi.rate, "bracketed", tuple(probes))


def _next_point(lo: Probe, hi: Probe, interpolate: bool = True) -> float:
    a, b = math.log(lo.rate), math.log(hi.rate)
    x = 0.5 * (a + b)
    if (interpolate and lo.margin is not None and hi.margin is not None and lo.margin > 0 and hi.margin > 0
            and math.isfinite(hi.margin)):
        fa, fb = math.log(lo.margin), math.log(hi.margin)
        if fb > 0 >= fa:  # a crossing inside the bracket (so hi.margin > lo.margin)
            x = a + (b - a) * (0.0 - fa) / (fb - fa)
    lo_x, hi_x = a + 0.1 * (b - a), b - 0.1 * (b - a)
    return math.exp(min(max(x, lo_x), hi_x))
