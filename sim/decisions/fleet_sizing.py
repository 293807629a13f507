"""Replicas each candidate needs, read off a load sweep: the fixed-fleet cost answer.

Why: at a fixed fleet every candidate that meets the SLO costs the same per good answer, so a
single simulation cannot say whether speculation pays; what differs is how many replicas each
needs for the offered load. ``specplan capacity`` answers that with a search; a what-if sweep
over load levels (the dashboard's, ``specplan report``'s) already holds a coarse answer: the
highest per-replica rate at which the candidate still sustains its SLOs (``SustainCriteria``),
so ``replicas = ceil(offered rate / that rate)`` — an upper bound, since capacity lies between
that level and the next one that fails.

Cost at that size comes from the sweep row's own cost per good answer ``c`` at its rate ``r``:
a replica costs ``c · r · a`` dollars per second (``a`` its SLO attainment), so ``n`` replicas
serving ``R`` cost about ``c · r · n / R`` per good answer (attainment at the lower per-replica
load is at least ``a``; taking it equal keeps the estimate on the expensive side).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from sim.decisions.sustain import SustainCriteria
from sim.results import metric_names as mn


@dataclass(frozen=True, slots=True)
class Sizing:
    candidate: str
    sustained_rate: float | None
    """Highest per-replica rate of the sweep the candidate sustains (None: none does)."""
    failed_rate: float | None
    """Lowest per-replica rate above it that fails (None: every higher level passed)."""
    replicas: int | None
    """Replicas for the offered rate at ``sustained_rate`` each (None: not reachable)."""
    cost_per_good_answer_usd: float | None

    def describe(self, offered: float) -> str:
        if self.replicas is None:
            return f"{self.candidate}: not reachable (no load level of the sweep sustains the SLOs)"
        band = (f"capacity {self.sustained_rate:.3g}–{self.failed_rate:.3g} req/s per replica"
                if self.failed_rate is not None else f"capacity ≥ {self.sustained_rate:.3g} req/s per replica")
        cost = ("" if self.cost_per_good_answer_usd is None
                else f", ≈${1000.0 * self.cost_per_good_answer_usd:.3g}/1k good answers")
        return f"{self.candidate}: ≤ {self.replicas} replica(s) for {offered:g} req/s{cost} ({band})"


def size_from_sweep(sweep: pl.DataFrame, offered_rate: float, criteria: SustainCriteria,
                    candidates: Sequence[str]) -> list[Sizing]:
    """One ``Sizing`` per candidate from a sweep frame (segment ``all`` rows with a per-replica
    ``rate`` column and the summary's metric columns)."""
    rows = sweep.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS).sort("rate")
    out = []
    for name in candidates:
        mine = rows.filter(pl.col(mn.CANDIDATE) == name).iter_rows(named=True)
        judged = [(float(r["rate"]), criteria.judge(r, float(r["rate"])).sustained, r) for r in mine]
        passed = [(rate, r) for rate, ok, r in judged if ok]
        if not passed:
            out.append(Sizing(name, None, None, None, None))
            continue
        rate, row = max(passed, key=lambda t: t[0])
        failed = min((x for x, ok, _ in judged if not ok and x > rate), default=None)
        n = max(1, math.ceil(offered_rate / rate - 1e-9))
        c = row.get(mn.COST_PER_GOOD_ANSWER_USD)
        cost = None if c is None or not math.isfinite(float(c)) else float(c) * rate * n / offered_rate
        out.append(Sizing(name, rate, failed, n, cost))
    return out




def sizing_lines(scenario, factors: Sequence[float], *, profile=None,  # noqa: ANN001 - Scenario, Profile | path
                 candidates: Sequence[str] | None = None, seeds: Sequence[int] | None = None) -> tuple[list[str], list[Sizing]]:
    """``specplan simulate --sizing``: the scenario run at each load factor × its rate, then
    the replicas each candidate needs for the scenario's own rate and the cost at that size —
    so one command answers "does it pay" where a fixed fleet makes every candidate cost the same.
    Returns the lines and the sizes (which the decision names when nothing carries the load)."""
    from sim.contracts.errors import SpecplanError
    from sim.decisions.sustain import criteria_from_scenario
    from sim.results.runner import run_scenario

    rate = scenario.workload.mean_rate(scenario.run.duration_s)
    if rate is None or not rate > 0:
        raise SpecplanError(f"{scenario.origin or 'scenario'}: --sizing scales the arrival rate; it needs "
                            "poisson, gamma or piecewise arrivals")
    if not factors or any(not (0 < f <= 100) for f in factors):
        raise SpecplanError(f"--sizing: load factors must be in (0, 100], got {list(factors)}")
    criteria = criteria_from_scenario(scenario)
    parts = []
    for f in sorted(set(factors)):
        res = run_scenario(scenario.with_load_scale(f), profile, candidates, seeds)
        parts.append(res.summary.with_columns(pl.lit(f * rate / scenario.fleet.replicas).alias("rate")))
    names = list(candidates) if candidates else scenario.candidate_names
    sizing = size_from_sweep(pl.concat(parts, how="vertical_relaxed"), rate, criteria, names)
    levels = ", ".join(f"{f:g}" for f in sorted(set(factors)))
    return [f"fleet for {rate:g} req/s from load points ×{levels} (upper bounds; `specplan capacity` "
            f"searches exactly):", *[f"  {z.describe(rate)}" for z in sizing]], sizing


__all__ = ["Sizing", "size_from_sweep", "sizing_lines"]
