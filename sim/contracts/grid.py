"""Multilinear interpolation over a profile grid, linear extrapolation outside it, with counts.

Called several times per simulated engine step, so the lookup works on plain Python floats
(``bisect`` on per-axis lists, a flat value list, a small result cache): for one scalar point
that is several times faster than numpy, whose per-call overhead dominates on tiny grids.

Rules (docs/profile-format.md, "How the simulator interpolates"):

- ``null`` cells (NaN) are filled before interpolation from the nearest measured cell along the
  last axis (ties: the lower one); a line with nothing measured is then filled along the axis
  before it, and so on. :attr:`GridInterpolator.filled` counts filled cells.
- Inside the grid: piecewise-linear per axis (multilinear), reduced from the last axis to the
  first.
- Outside the grid on an axis: linear extrapolation from the two end points on that side, but
  never below the smaller of those two values: a grid may tell us time grows beyond its edge,
  never that it shrinks (so a decreasing end segment is held flat and values stay >= 0).
  Every lookup outside the grid is counted per axis and side.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

import numpy as np


def fill_nulls(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Copy of ``values`` with NaN cells filled as documented; returns (array, cells filled)."""
    out = np.array(values, dtype=float, copy=True)
    missing = int(np.isnan(out).sum())
    if missing == 0:
        return out, 0
    if np.isnan(out).all():
        raise ValueError("grid has no measured cell")
    for axis in range(out.ndim - 1, -1, -1):
        if not np.isnan(out).any():
            break
        moved = np.moveaxis(out, axis, -1)  # view: writes go to ``out``
        lines = moved.reshape(-1, moved.shape[-1])
        filled_lines = lines.copy()
        for r in range(lines.shape[0]):
            line = lines[r]
            ok = np.flatnonzero(~np.isnan(line))
            if ok.size == 0 or ok.size == line.size:
                continue
            for i in np.flatnonzero(np.isnan(line)):
                # nearest measured index; ties go to the lower index
                j = ok[np.argmin(np.abs(ok - i) * 2 + (ok > i))]
                filled_lines[r, i] = line[j]
        moved[...] = filled_lines.reshape(moved.shape)
    return out, missing


class GridInterpolator:
    """Scalar lookups ``f(x_0, ..., x_{n-1})`` on one grid, counting extrapolations."""

    __slots__ = (
        "name", "axis_names", "axes", "filled", "calls", "_xs", "_strides", "_flat",
        "_n", "_below", "_above", "_cache", "_cache_size",
    )  # fmt: skip

    def __init__(
        self,
        axes: Sequence[Sequence[float]],
        values: np.ndarray,
        *,
        name: str = "grid",
        axis_names: Sequence[str] | None = None,
        cache_size: int = 4096,
    ) -> None:
        arr = np.asarray(values, dtype=float)
        shape = tuple(len(a) for a in axes)
        if arr.shape != shape:
            raise ValueError(f"{name}: values have shape {arr.shape}, axes give {shape}")
        for xs in axes:
            if any(not b > c for c, b in zip(xs, xs[1:], strict=False)):
                raise ValueError(f"{name}: axis values must be strictly increasing: {list(xs)}")
        filled, n_filled = fill_nulls(arr)
        self.name = name
        self.axis_names = tuple(axis_names) if axis_names is not None else tuple(f"x{i}" for i in range(len(axes)))
        self.axes = tuple(tuple(float(x) for x in a) for a in axes)
        self.filled = n_filled
        self.calls = 0
        self._xs = [list(a) for a in self.axes]
        self._n = len(axes)
        strides = []
        s = 1
        for size in reversed(shape):
            strides.append(s)
            s *= size
        self._strides = list(reversed(strides))
        self._flat = [float(x) for x in filled.ravel()]
        self._below = [0] * self._n
        self._above = [0] * self._n
        self._cache: dict[tuple[float, ...], tuple[float, tuple[int, ...], tuple[int, ...]]] = {}
        self._cache_size = cache_size

    def __call__(self, *x: float) -> float:
        """Value at point ``x`` (one coordinate per axis, in axis order)."""
        self.calls += 1
        hit = self._cache.get(x)
        if hit is not None:
            value, below, above = hit
            for j in below:
                self._below[j] += 1
            for j in above:
                self._above[j] += 1
            return value
        if len(x) != self._n:
            raise ValueError(f"{self.name}: expected {self._n} coordinates, got {len(x)}")
        value, below, above = self._compute(x)
        for j in below:
            self._below[j] += 1
        for j in above:
            self._above[j] += 1
        cache = self._cache
        if len(cache) >= self._cache_size:
            del cache[next(iter(cache))]  # drop the oldest entry
        cache[x] = (value, below, above)
        return value

    def _compute(self, x: tuple[float, ...]) -> tuple[float, tuple[int, ...], tuple[int, ...]]:
        lo_idx: list[int] = []
        hi_idx: list[int] = []
        ts: list[float] = []
        outside: list[bool] = []
        below: list[int] = []
        above: list[int] = []
        for j in range(self._n):
            xs = self._xs[j]
            v = x[j]
            if v != v:  # NaN
                raise ValueError(f"{self.name}: coordinate {self.axis_names[j]} is NaN")
            n = len(xs)
            if v < xs[0]:
                below.append(j)
            elif v > xs[-1]:
                above.append(j)
            if n == 1:
                lo_idx.append(0)
                hi_idx.append(0)
                ts.append(0.0)
                outside.append(v != xs[0])
                continue
            i = bisect_right(xs, v) - 1
            if i < 0:
                i = 0
            elif i > n - 2:
                i = n - 2
            t = (v - xs[i]) / (xs[i + 1] - xs[i])
            lo_idx.append(i)
            hi_idx.append(i + 1)
            ts.append(t)
            outside.append(t < 0.0 or t > 1.0)
        flat = self._flat
        strides = self._strides
        last = self._n - 1
        # base offsets of all corners over axes 0..last-1; the later axis varies fastest
        offs = [0]
        for j in range(last):
            s = strides[j]
            a, b = lo_idx[j] * s, hi_idx[j] * s
            offs = [o + d for o in offs for d in (a, b)]
        s = strides[last]
        a_off, b_off = lo_idx[last] * s, hi_idx[last] * s
        t = ts[last]
        out = outside[last]
        vals = []
        for o in offs:
            va = flat[o + a_off]
            vb = flat[o + b_off]
            v = va + t * (vb - va)
            if out:
                floor = va if va < vb else vb
                if v < floor:
                    v = floor
            vals.append(v)
        for j in range(last - 1, -1, -1):
            t = ts[j]
            out = outside[j]
            nxt = []
            for m in range(0, len(vals), 2):
                va = vals[m]
                vb = vals[m + 1]
                v = va + t * (vb - va)
                if out:
                    floor = va if va < vb else vb
                    if v < floor:
                        v = floor
                nxt.append(v)
            vals = nxt
        return vals[0], tuple(below), tuple(above)

    def extrapolations(self) -> dict[str, int]:
        """Lookups outside the grid, keyed ``"<axis> below <min>"`` / ``"<axis> above <max>"``."""
        out: dict[str, int] = {}
        for j, name in enumerate(self.axis_names):
            if self._below[j]:
                out[f"{name} below {_fmt(self.axes[j][0])}"] = self._below[j]
            if self._above[j]:
                out[f"{name} above {_fmt(self.axes[j][-1])}"] = self._above[j]
        return out

    def extrapolations_by_axis(self) -> dict[str, int]:
        """Lookups outside the grid per axis (either side)."""
        return {
            name: self._below[j] + self._above[j]
            for j, name in enumerate(self.axis_names)
            if self._below[j] + self._above[j]
        }

    def reset_counts(self) -> None:
        """Forget call and extrapolation counts (the cache keeps its values)."""
        self.calls = 0
        self._below = [0] * self._n
        self._above = [0] * self._n


def _fmt(v: float) -> str:
    return str(int(v)) if math.isfinite(v) and v == int(v) else f"{v:g}"
