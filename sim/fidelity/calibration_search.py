"""The search behind `specplan calibrate`: a bounded coordinate search, Levenberg–Marquardt
steps, a polishing round, and the fitted values' standard errors.

Why its own module: it knows nothing of profiles or vLLM files, only an objective over the
free terms (``residuals(terms, train)``: log errors of the training points), so the rules of
the search can be read apart from what is simulated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.fidelity.calibration_terms import TERM_SPECS, Terms


class Objective(Protocol):
    """Residuals of the training points under given terms (deterministic: common random numbers)."""

    simulations: int

    def residuals(self, terms: Terms, train: Sequence[int]) -> np.ndarray: ...

    def objective(self, terms: Terms, train: Sequence[int]) -> float: ...


@dataclass(frozen=True)
class Fit:
    """One fit: the points it trained on, its values, and the simulations it cost."""

    train: tuple[int, ...]
    terms: Terms
    objective: float
    evaluations: int


GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def _line_search(f: Callable[[float], float], lo: float, hi: float, n: int) -> tuple[float, float]:
    """Golden-section search of ``f`` on [lo, hi] with ``n`` evaluations; the best point seen."""
    a, b = lo, hi
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    best = min((fc, c), (fd, d))
    for _ in range(max(0, n - 2)):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
            best = min(best, (fc, c))
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
            best = min(best, (fd, d))
    return best[1], best[0]


def _jacobian(ev: Objective, terms: Terms, names: Sequence[str], train: Sequence[int],
              r0: np.ndarray) -> np.ndarray:
    """d residuals / d term by forward differences of 1 % of each term's box (backwards at the top)."""
    cols = []
    for name in names:
        spec = TERM_SPECS[name]
        h = 0.01 * (spec.high - spec.low)
        x = terms.get(name)
        h = -h if x + h > spec.high else h
        cols.append((ev.residuals(terms.with_value(name, x + h), train) - r0) / h)
    return np.column_stack(cols)


def _clip(terms: Terms, names: Sequence[str], step: np.ndarray) -> Terms:
    out = terms
    for name, d in zip(names, step, strict=True):
        spec = TERM_SPECS[name]
        out = out.with_value(name, min(spec.high, max(spec.low, terms.get(name) + float(d))))
    return out


def fit_terms(ev: Objective, start: Terms, names: Sequence[str], train: Sequence[int],
              rounds: int, evals_per_line: int, iterations: int) -> Fit:
    """Coordinate search to reach the basin (each term in turn by golden section over its whole
    box, ``rounds`` sweeps), then Levenberg–Marquardt steps on the log residuals (finite-difference
    Jacobian, bounded by the boxes) along the valleys a coordinate search crawls in (acceptance
    and per-step overhead both move TPOT), then one more golden section per term within ±5 % of
    its box (acceptance counts are whole drafts, so the objective has steps finite differences
    misread). A move is kept only if it lowers the objective: never worse than the start."""
    before = ev.simulations
    cur, fcur = start, ev.objective(start, train)
    for _ in range(rounds):
        for name in names:
            spec = TERM_SPECS[name]
            base = cur
            x, fx = _line_search(lambda v, base=base, name=name: ev.objective(base.with_value(name, v), train),
                                 spec.low, spec.high, evals_per_line)
            if fx < fcur:
                cur, fcur = cur.with_value(name, x), fx
    lam = 1e-3
    for _ in range(iterations):
        r0 = ev.residuals(cur, train)
        jac = _jacobian(ev, cur, names, train, r0)
        jtj, g = jac.T @ jac, jac.T @ r0
        if not np.any(g):
            break
        moved = False
        while lam < 1e6:
            step = -np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-12), g)
            trial = _clip(cur, names, step)
            ft = ev.objective(trial, train)
            if ft < fcur:
                cur, fcur, lam, moved = trial, ft, max(lam / 10, 1e-6), True
                break
            lam *= 10
        if not moved or fcur < 1e-12:
            break
    for name in names if rounds else ():  # polish: the objective is rough at the scale of the differences
        spec = TERM_SPECS[name]
        half, x0, base = 0.05 * (spec.high - spec.low), cur.get(name), cur
        x, fx = _line_search(lambda v, base=base, name=name: ev.objective(base.with_value(name, v), train),
                             max(spec.low, x0 - half), min(spec.high, x0 + half), evals_per_line)
        if fx < fcur:
            cur, fcur = cur.with_value(name, x), fx
    return Fit(tuple(train), cur, fcur, ev.simulations - before)


def uncertainty(ev: Objective, fit: Fit, names: Sequence[str]
                ) -> tuple[dict[str, float | None], tuple[tuple[str, str, float], ...]]:
    """Standard errors from the residuals' Jacobian at the optimum (forward differences of 1 %
    of each term's box): s²(JᵀJ)⁻¹ with s² = RSS / (residuals − terms); and the pairs of terms
    whose estimates are correlated beyond ±0.9 (the points cannot tell them apart). None where
    the data cannot determine a term (no more residuals than terms, or residuals it does not
    move); nan where the Jacobian is singular."""
    r0 = ev.residuals(fit.terms, fit.train)
    n, p = r0.size, len(names)
    if n <= p:
        return {name: None for name in names}, ()
    jac = _jacobian(ev, fit.terms, names, fit.train, r0)
    s2 = float(r0 @ r0) / (n - p)
    jtj = jac.T @ jac
    if np.linalg.matrix_rank(jtj) < p:
        return {name: (None if not np.any(jac[:, j]) else float("nan")) for j, name in enumerate(names)}, ()
    inv = np.linalg.inv(jtj)
    sd = np.sqrt(np.maximum(np.diag(inv), 0.0))
    pairs = tuple((names[a], names[b], float(inv[a, b] / (sd[a] * sd[b])))
                  for a in range(p) for b in range(a + 1, p)
                  if sd[a] > 0 and sd[b] > 0 and abs(inv[a, b] / (sd[a] * sd[b])) > 0.9)
    return {name: float(math.sqrt(s2) * sd[j]) for j, name in enumerate(names)}, pairs


@dataclass(frozen=True)
class Band:
    """One term fitted on a rough residual: the value, the values the measurement cannot tell
    from it, whether the residual moves with the term at all beyond its own step-to-step
    scatter, and that scatter (a log error: what "matched" can mean here)."""

    value: float
    low: float
    high: float
    pinned: bool
    scatter: float


def _trend(residual: Callable[[float], float], lo: float, hi: float, n: int, tolerance: float
           ) -> tuple[float, tuple[float, float], float, float, float]:
    """A straight line fitted to ``residual`` at ``n`` even points of [lo, hi]: where it crosses
    zero; the values consistent with zero (within twice the points' scatter about the line, or
    ``tolerance`` if more: the crossing ± that over the slope, and every point whose own residual
    is that small, with the grid step either side of it); the slope, its standard error and the
    scatter."""
    xs = np.linspace(lo, hi, n)
    ys = np.array([residual(float(x)) for x in xs])
    slope, icept = np.polyfit(xs, ys, 1)
    scatter = float(np.sqrt(np.sum((ys - (icept + slope * xs)) ** 2) / (n - 2)))
    se = scatter / float(np.sqrt(np.sum((xs - xs.mean()) ** 2)))
    if slope == 0.0:
        return float(xs.mean()), (lo, hi), 0.0, se, scatter
    at, step = float(-icept / slope), (hi - lo) / (n - 1)
    tol = max(2.0 * scatter, tolerance)
    half = max(tol / abs(float(slope)), step)
    near = [float(x) for x, y in zip(xs, ys, strict=True) if abs(y) <= tol]
    return (at, (min([at - half, *(x - step for x in near)]), max([at + half, *(x + step for x in near)])),
            float(slope), se, scatter)


def fit_rough(residual: Callable[[float], float], low: float, high: float, evals: int,
              tolerance: float = 0.0, window: float = 0.1, grid: int = 9) -> Band:
    """One term fitted where its residual (a log error) is a step function of it — a median of a
    few dozen simulated requests jumps from one request to the next as the term moves, so
    several values match the measurement to within a step, and a golden section over the whole
    box ends in whichever its first brackets hold (the round trip's scale 0.543 came back 0.59).

    So: a golden section over the box finds the basin; a straight line through ``grid`` points
    within ±``window`` of it (re-centred once if it crosses zero outside) gives the trend, and
    the values within twice the points' scatter about it — or ``tolerance``, how far the
    measurement itself may sit from another sample's, if more — are those the one measurement
    cannot tell apart (the band); a golden section inside the band, and the best value
    evaluated there is kept. A trend whose slope is within two standard errors of zero is looked
    for again over twice the window (steps as large as the trend across ±``window`` can hide it),
    until the window covers the box; one that is still flat there pins nothing: the basin's value
    is kept, ``pinned`` False."""
    seen: dict[float, float] = {}

    def r(v: float) -> float:
        if v not in seen:
            seen[v] = residual(v)
        return seen[v]

    x0, _ = _line_search(lambda v: r(v) ** 2, low, high, evals)
    centred = 0
    while centred < 2:
        lo, hi = max(low, x0 - window), min(high, x0 + window)
        at, (b_lo, b_hi), slope, se, scatter = _trend(r, lo, hi, grid, tolerance)
        if abs(slope) <= 2.0 * se:
            if lo <= low and hi >= high:
                return Band(x0, lo, hi, False, scatter)
            window *= 2.0
            continue
        centred += 1
        inside = lo <= at <= hi
        x0 = min(high, max(low, at))
        if inside:
            break
    b_lo, b_hi = max(low, min(b_lo, x0)), min(high, max(b_hi, x0))  # a zero past the box: its edge
    _line_search(lambda v: r(v) ** 2, b_lo, b_hi, evals)
    best = min((abs(y), x) for x, y in seen.items() if b_lo <= x <= b_hi)[1]
    return Band(best, b_lo, b_hi, True, scatter)
