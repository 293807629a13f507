"""Two candidates compared on paired per-seed differences (Law, *Simulation Modeling and
Analysis*, "comparing two systems": the paired-t confidence interval).

Why paired: every candidate of a seed serves the same requests (common random numbers), so the
seed-to-seed spread that both share cancels in the difference; two overlapping marginal
intervals say nothing about it. Why an indifference amount ``delta``: a difference smaller than
it does not change what a planner buys (a 1 % goodput gap is inside what the model's own inputs
move), so the comparison asks whether the interval of the difference lies beyond ``delta``
(one is better), inside ``± delta`` (no difference that matters), or neither (undetermined:
more seeds would tell). One seed has no interval and never decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sim.results.intervals import clip_interval, t_quantile_975

Verdict = Literal["better", "worse", "equivalent", "undetermined"]


@dataclass(frozen=True, slots=True)
class Paired:
    """``a`` against ``b`` on one metric: the mean per-seed difference, oriented so that
    positive means ``a`` is better, with its 95 % paired-t half-width."""

    n: int
    diff: float
    """Mean of ``a - b`` per seed (``b - a`` for a lower-is-better metric)."""
    half: float | None
    """95 % paired-t half-width of ``diff``; None with one seed."""
    delta: float
    """Indifference amount in the metric's unit: differences within ± this do not matter."""

    @property
    def verdict(self) -> Verdict:
        if self.half is None or not math.isfinite(self.diff):
            return "undetermined"
        lo, hi = self.diff - self.half, self.diff + self.half
        if lo > 0 and self.diff > self.delta:
            return "better"
        if hi < 0 and self.diff < -self.delta:
            return "worse"
        if abs(self.diff) <= self.delta and (lo >= -self.delta and hi <= self.delta or lo > 0 or hi < 0):
            return "equivalent"
        return "undetermined"

    @property
    def reach(self) -> float:
        """How far the difference may lie from zero at 95 % (``|diff| + half``): the ``± x`` of
        an undetermined answer."""
        return abs(self.diff) + (self.half or 0.0)


def paired(a: Sequence[float], b: Sequence[float], *, higher_better: bool, rel_delta: float) -> Paired:
    """Compare per-seed values ``a`` and ``b`` (same seeds, same order); ``rel_delta`` is the
    indifference amount as a share of the larger of the two means."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs the same seeds on both sides, got {len(a)} and {len(b)}")
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    d = (x - y) if higher_better else (y - x)
    n = int(d.size)
    if n == 0:
        return Paired(0, math.nan, None, 0.0)
    scale = max(abs(float(x.mean())), abs(float(y.mean())))
    delta = rel_delta * scale if math.isfinite(scale) else 0.0
    if not np.all(np.isfinite(d)):
        return Paired(n, math.nan, None, delta)
    mean = float(d.mean())
    half = None if n < 2 else float(t_quantile_975(n - 1) * d.std(ddof=1) / math.sqrt(n))
    return Paired(n, mean, half, delta)


def mean_interval(values: Sequence[float], lo: float = 0.0, hi: float = math.inf) -> tuple[float, float | None, str]:
    """Mean, Student t 95 % half-width over seeds (None for one seed) and the interval as text,
    clipped to the metric's range ``[lo, hi]`` (an interval from few seeds can pass it: SLO met
    14.8 % ± 44.1 %) with the clipping said in words; "± 0" only when every value agrees."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if v.size < 2:
        return mean, None, "one seed: no interval"
    half = float(t_quantile_975(v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    if half == 0.0:
        return mean, 0.0, f"± 0 (all {v.size} seeds agree)"
    low, high, clipped = clip_interval(mean, half, lo, hi)
    if clipped:
        return mean, half, f"95 % interval clipped to the metric's range: {low:.3g}–{high:.3g}"
    return mean, half, f"± {half:.2g}"
