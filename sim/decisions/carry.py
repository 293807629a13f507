""""Carries the load at the SLO", judged across seeds: the one rule for a fleet, a replica count
and a candidate.

Why not pass/fail per seed: a candidate near its SLO passes on some seeds and fails on others,
so "carries on every seed" gets *less* likely the more seeds run, and a two-seed "carries" is a
coin toss presented as a verdict. Here each check of the sustain rule (every SLO'd metric's
percentile ÷ its limit, and the share of requests lost ÷ the tolerated share:
``SustainCriteria.ratios``) is a number per seed; over the seeds its mean gets a Student t 95 %
interval, and

- **carries**: every check's upper end is at most 1 (the one-sided 97.5 % bound is within the SLO);
- **cannot carry**: some check's lower end is above 1;
- **undetermined**: otherwise — a bound straddles the SLO; more seeds narrow it, so they make
  the verdict more certain, never less.

A seed too short to judge (fewer measured requests than the percentile needs) or with nothing
completed counts as ``CAP`` × the limit. One seed has no interval: its point decides the label
(the decision itself never calls one seed certain).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sim.results.intervals import t_quantile_975

CarryVerdict = Literal["carries", "cannot carry", "undetermined"]

TOO_SHORT = "too_short"
"""The check a verdict names when no seed held enough requests to judge the percentile."""

CAP = 10.0
"""A check's ratio is clipped here (an unmeasurable or infinite percentile): one such seed
still moves the mean far, without an infinite spread that no number of seeds could narrow."""


@dataclass(frozen=True, slots=True)
class Carry:
    """Whether a candidate carries the load, over seeds, and the check that says so."""

    verdict: CarryVerdict
    check: str
    """The binding check ("tpot_ms_p95", "lost"; "" without any)."""
    mean: float
    """Mean over seeds of the binding check's observed ÷ limit."""
    low: float | None
    high: float | None
    """The 95 % interval of that mean (None with one seed)."""
    n: int

    def words(self) -> str:
        """"TPOT p95 0.93–1.07 × its SLO over 4 seeds" (the binding check's interval)."""
        if not self.check:
            return "no seeds" if not self.n else f"passes on {round(self.mean * self.n)} of {self.n} seeds"
        if self.check == TOO_SHORT:
            return f"too few requests to judge the percentile on any of {self.n} seed(s)"
        name = _label(self.check)
        if self.low is None or self.high is None:
            return f"{name} {self.mean:.2f} × its limit (one seed)"
        return f"{name} {max(self.low, 0.0):.2f}–{self.high:.2f} × its limit over {self.n} seeds"


def _label(check: str) -> str:
    if "_ms_" not in check:
        return {"lost": "requests lost", "queue": "the queue (runaway: growing)"}.get(check, check)
    metric, _, pct = check.partition("_ms_")
    return f"{metric.upper()} {'p50' if pct == 'median' else pct}"


def carry_of(per_seed: Sequence[Mapping[str, float] | None]) -> Carry:
    """The verdict over seeds from each seed's ``SustainCriteria.ratios`` (None: the seed was
    too short to judge, counted as ``CAP`` on every check)."""
    n = len(per_seed)
    checks = list(dict.fromkeys(k for r in per_seed if r for k in r))
    if n == 0:
        return Carry("cannot carry", "", math.nan, None, None, 0)
    if not checks:  # no seed long enough to judge: each counts as CAP × the limit
        return Carry("cannot carry", TOO_SHORT, CAP, CAP if n > 1 else None, CAP if n > 1 else None, n)
    judged: list[tuple[CarryVerdict, str, float, float | None, float | None]] = []
    for k in checks:
        v = np.array([min(float(r.get(k, CAP)) if r else CAP, CAP) for r in per_seed], dtype=float)
        v = np.where(np.isnan(v), CAP, v)
        mean = float(v.mean())
        if n < 2:
            judged.append(("carries" if mean <= 1.0 else "cannot carry", k, mean, None, None))
            continue
        half = float(t_quantile_975(n - 1) * v.std(ddof=1) / math.sqrt(n))
        lo, hi = mean - half, mean + half
        verdict: CarryVerdict = "carries" if hi <= 1.0 else "cannot carry" if lo > 1.0 else "undetermined"
        judged.append((verdict, k, mean, lo, hi))
    for want, key in (("cannot carry", lambda j: j[3] if j[3] is not None else j[2]),
                      ("undetermined", lambda j: j[4]), ("carries", lambda j: j[4] if j[4] is not None else j[2])):
        hits = [j for j in judged if j[0] == want]
        if hits:
            verdict, k, mean, lo, hi = max(hits, key=key)
            return Carry(verdict, k, mean, lo, hi, n)
    raise AssertionError("unreachable: every check has a verdict")


def seed_ratios(criteria: Any, probe: Any, row: Mapping[str, Any]) -> dict[str, float] | None:
    """One capacity probe's checks as observed ÷ limit (``criteria.ratios`` of its row); a probe
    failed for a runaway queue, or judged without a margin, as one ``queue`` check (0 or ``CAP``);
    None when the run was too short to judge."""
    if not probe.conclusive:
        return None
    if probe.margin is None or (not probe.sustained and probe.margin <= 1.0):
        return {"queue": 0.0 if probe.sustained else CAP}
    return criteria.ratios(row)


def carry_of_flags(flags: Sequence[bool]) -> Carry:
    """The verdict from per-seed pass/fail alone (facts built without ratios): every seed passes
    → carries, none → cannot carry, some → undetermined."""
    ok = sum(bool(f) for f in flags)
    n = len(flags)
    verdict: CarryVerdict = "carries" if n and ok == n else "cannot carry" if ok == 0 else "undetermined"
    return Carry(verdict, "", ok / n if n else math.nan, None, None, n)
