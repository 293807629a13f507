"""The 95 % Student t interval of a mean over replications: one table, one formula, one way
to show it.

Used for the summary's ``± CI`` over seeds (``mean_ci95``) and for capacity's spread over
seeds (``ci95_halfwidth``). With few seeds the interval is wide, as it should be, and can pass
the metric's own range (SLO met 14.8 % ± 44.1 %); ``clip_interval`` is the one rule every
surface (terminal table, verdict, report, dashboard) shows it by: the ends clipped to
``metric_names.metric_range``, written as ``[low–high]`` when clipped, ``± half`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

# two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)


def t_quantile_975(df: int) -> float:
    """``t_{0.975, df}``: table up to 30, then the Cornish–Fisher expansion (error < 1e-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963984540054
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_ci95(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and CI half-width over seeds; nulls are skipped, ``inf`` propagates (CI null)."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return None, None
    if any(math.isinf(x) for x in xs):
        return (math.inf if all(x > 0 for x in xs if math.isinf(x)) else -math.inf), None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    sd = float(np.std(xs, ddof=1))
    return mean, t_quantile_975(len(xs) - 1) * sd / math.sqrt(len(xs))


def ci95_halfwidth(values: Sequence[float]) -> float:
    """Half-width of the 95 % interval of the mean of the finite values; 0 for fewer than two."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if v.size < 2:
        return 0.0
    return float(t_quantile_975(v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))


def clip_interval(mean: float, half: float, lo: float = 0.0, hi: float = math.inf) -> tuple[float, float, bool]:
    """The interval ``mean ± half`` with its ends clipped to ``[lo, hi]`` (the metric's range),
    and whether either end was clipped. A mean outside the range (it cannot be one, but a
    rounding can put it there) is clipped too, so ``lo <= low <= high <= hi`` always holds."""
    m = min(max(float(mean), lo), hi)
    h = abs(float(half))
    low, high = max(m - h, lo), min(m + h, hi)
    return low, high, (float(mean) - h < lo) or (float(mean) + h > hi)


def interval_text(mean: float, half: float | None, fmt: Callable[[float], str], lo: float = 0.0,
                  hi: float = math.inf, half_fmt: Callable[[float], str] | None = None) -> str:
    """The interval as a surface shows it after the mean: `` ± 0.3`` inside the range
    (``half_fmt``, default ``fmt``), `` [0.0–31.2]`` when clipped to it (never a ``±`` wider
    than the range allows), ``""`` without an interval (one seed, a zero or infinite width)."""
    if half is None or not math.isfinite(half) or half == 0 or not math.isfinite(mean):
        return ""
    low, high, clipped = clip_interval(mean, half, lo, hi)
    return f" [{fmt(low)}–{fmt(high)}]" if clipped else f" ± {(half_fmt or fmt)(abs(half))}"
