"""Grid checks: find where step time is not smooth between measured grid values and measure
there, instead of letting the simulator interpolate across a kink.

Why: on a CPU the GEMM kernel is chosen by row count, so a batch-3 pass can cost more than a
batch-4 one; a quick grid of batch 1 and 4 priced batch-2 and batch-3 steps 1.43–1.54× too
cheap (issue 41). The check probes a value between two measured ones at a decode and a widest
verification cell, compares it with what the simulator would interpolate there
(``sim.contracts.grid.GridInterpolator``, the simulator's own rule), and when they disagree by
more than the tolerance adds that value to the grid's axis (its whole row is then measured).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from profiler.grids.timing_grids import Measured, Point, TimingGrids, point
from sim.contracts.grid import GridInterpolator

TOLERANCE = 0.05
"""Relative disagreement with interpolation that makes a value worth measuring: half the 10 %
the fidelity bar allows, so interpolation error and noise together stay inside it."""
SCAN_ALL = 4
"""Gaps with at most this many values inside are checked value by value (b−1 against b+1);
wider ones by bisection, going deeper only where the middle disagreed."""
AXES = ("batch", "context")


@dataclass(frozen=True)
class Check:
    """One probe: the measured time of a cell between two grid values and the interpolated one."""

    axis: str
    value: int
    lo: int
    hi: int
    probe: Point
    measured: float
    interpolated: float
    added: bool
    why: str = ""

    @property
    def error(self) -> float:
        return self.measured / self.interpolated - 1.0 if self.interpolated > 0 else float("inf")

    def line(self) -> str:
        d = self.probe.as_dict()
        at = ", ".join(f"{k}={v}" for k, v in d.items() if k != self.axis)
        verdict = "measured" if self.added else (self.why or "smooth: interpolated")
        return (f"{self.axis} {self.value} ({at}): {self.measured * 1e3:.2f} ms against {self.interpolated * 1e3:.2f} ms "
                f"interpolated from {self.lo} and {self.hi} ({self.error:+.0%}): {verdict}")


def interpolated(lo: int, hi: int, y_lo: float, y_hi: float, x: int) -> float:
    """What the simulator charges at ``x`` from the two measured neighbours."""
    return float(GridInterpolator([[lo, hi]], np.array([y_lo, y_hi]), name="check")(x))


def _probe_coords(g: TimingGrids, axis: str) -> list[dict[str, int]]:
    """The other axes' values a check is made at: plain decode and the widest verification, at
    the smallest context (batch axis) or at batch 1 (context axis)."""
    widths = sorted({g.tokens_per_seq[0], g.tokens_per_seq[-1]})
    if axis == "batch":
        return [{"tokens_per_seq": s, "context": g.context[0]} for s in widths]
    return [{"batch": g.batch[0], "tokens_per_seq": s} for s in widths]


def _cell(axis: str, value: int, other: dict[str, int]) -> Point:
    coords = {"batch": 0, "tokens_per_seq": 0, "context": 0, **other, axis: value}
    return point("target_forward", batch=coords["batch"], tokens_per_seq=coords["tokens_per_seq"],
                 context=coords["context"])


def row_points(g: TimingGrids, axis: str, value: int) -> list[Point]:
    """Every target_forward cell that adding ``value`` to ``axis`` would measure."""
    if axis == "batch":
        return [point("target_forward", batch=value, tokens_per_seq=s, context=c)
                for c in g.context for s in g.tokens_per_seq]
    return [point("target_forward", batch=b, tokens_per_seq=s, context=value)
            for b in g.batch for s in g.tokens_per_seq]


Measure = Callable[[Sequence[Point], Sequence[Point]], dict[Point, Measured]]
"""``measure(probes, ends)``: the probes (grid cells from now on) and their neighbours timed
again beside them, so a machine whose speed drifts during the run (a shared CPU) does not read
as a kink: the comparison is between passes timed minutes apart otherwise."""
Afford = Callable[[Sequence[Point], bool], bool]
"""``afford(points, row)``: whether measuring these points fits what is left of the budget (``row``:
a whole added row, measured in every round; else a check's probes and re-timed neighbours)."""


def refine(grids: TimingGrids, measure: Measure, *, afford: Afford | None = None,
           tolerance: float = TOLERANCE, axes: Sequence[str] = AXES) -> tuple[TimingGrids, list[Check]]:
    """The grid with every checked value that disagreed added, and every check made.

    ``measure(probes, ends)`` returns the probes and, timed beside them, the measured neighbours;
    ``afford(points, row)`` says whether measuring them fits what is left of the budget (None:
    always). A value is only added when its whole row is affordable.
    """
    g = grids
    checks: list[Check] = []
    for axis in axes:
        vals = list(getattr(g, axis))
        gaps = [(lo, hi) for lo, hi in zip(vals, vals[1:], strict=False) if hi - lo > 1]
        while gaps:
            lo, hi = gaps.pop(0)
            inside = hi - lo - 1
            mids = list(range(lo + 1, hi)) if inside <= SCAN_ALL else [(lo + hi) // 2]
            left = lo
            for x in mids:
                got = _check(g, axis, left, hi, x, measure, afford, tolerance)
                if got is None:
                    break  # over budget or not measurable: stop this gap
                checks.append(got)
                if got.added:
                    g = replace(g, **{axis: tuple(sorted({*getattr(g, axis), x}))})
                    left = x
                    if inside > SCAN_ALL:
                        gaps += [(a, b) for a, b in ((lo, x), (x, hi)) if b - a > 1]
    return g, checks


def _check(g: TimingGrids, axis: str, lo: int, hi: int, x: int, measure: Measure, afford: Afford | None,
           tolerance: float) -> Check | None:
    probes = [_cell(axis, x, o) for o in _probe_coords(g, axis)]
    ends = [(_cell(axis, lo, o), _cell(axis, hi, o)) for o in _probe_coords(g, axis)]
    if afford is not None and not afford([*probes, *(p for pair in ends for p in pair)], False):
        return None
    got = measure(probes, [p for pair in ends for p in pair])
    worst: Check | None = None
    for pr, (a, b) in zip(probes, ends, strict=True):
        m, ya, yb = (got.get(p) for p in (pr, a, b))
        if m is None or ya is None or yb is None or None in (m.median, ya.median, yb.median):
            continue  # a limit (out of memory, past the window): nothing to compare
        c = Check(axis, x, lo, hi, pr, float(m.median), interpolated(lo, hi, ya.median, yb.median, x), False)
        if worst is None or abs(c.error) > abs(worst.error):
            worst = c
    if worst is None:
        return None
    if abs(worst.error) <= tolerance:
        return worst
    row = [p for p in row_points(g, axis, x) if p not in probes]
    if afford is not None and not afford(row, True):
        return replace(worst, why="not smooth, but its row does not fit the budget: interpolated")
    return replace(worst, added=True)
