"""Calibrate acceptance on the lightest load of a measured sweep; predict every other load.

Why: acceptance is the least certain input, and the question a planner asks is where speculation
stops paying. The protocol (issue 37's bar): fit the acceptance scale on the lightest load alone
— its measured acceptance length when written, else its speed-up, else the speculative side's
TPOT p50 or output tok/s (``sweep_points.FIT_TO``; ``fit_to`` in the file chooses) — then predict every heavier load with nothing else fitted, and
compare TPOT p50, the speed-up and where it crosses 1 with what was measured.

The simulator is a black box: each evaluation writes a scale into a copy of the profile or the
candidate's assumed acceptance (``calibration_terms.apply_terms``) and runs ``simulate_once`` at
the point's load on the same seeds (common random numbers), so the search is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.contracts.sweep_points import HIGHER_IS_BETTER, SIDE_FIELDS, SweepPoints, fit_targets
from sim.fidelity.calibration_search import fit_rough
from sim.fidelity.calibration_terms import TERM_SPECS, Terms, apply_terms, starting_terms
from sim.results import metric_names as mn
from sim.results.metrics import latency_arrays
from sim.results.plain_numbers import rate

SUMMARY_COLUMN: dict[str, str] = {
    "tpot_p50_ms": "tpot_ms_median", "ttft_p50_ms": "ttft_ms_median", "e2el_p50_ms": "e2el_ms_median",
    "output_tok_s": mn.OUTPUT_THROUGHPUT, "acceptance_length": mn.MEAN_ACCEPTANCE_LENGTH,
}
"""Where each measured quantity is read in a run's summary (segment ``all``)."""
TPOT_BAR = 0.15
"""Issue 37's bar: TPOT p50 within 15 % at every load."""


def load_text(kind: str, load: float) -> str:
    """A load as a reader says it: ``N = 64`` clients, or ``2.5 req/s``."""
    return f"N = {load:g}" if kind == "concurrency" else rate(load)


@dataclass(frozen=True, slots=True)
class Crossover:
    """Where the speed-up crosses 1 over a sweep's loads: between two loads (linear
    interpolation), or nowhere in the range (pays throughout / never pays)."""

    kind: Literal["at", "pays_throughout", "never_pays", "unknown"]
    load: float | None = None
    bracket: tuple[float, float] | None = None
    direction: str = ""
    """``stops paying`` (speed-up falls through 1) or ``starts paying``."""

    def text(self, kind: str) -> str:
        if self.kind == "at" and self.load is not None and self.bracket is not None:
            return (f"{self.direction} at {load_text(kind, float(f'{self.load:.3g}'))} (between "
                    f"{load_text(kind, self.bracket[0])} and {load_text(kind, self.bracket[1])})")
        return {"pays_throughout": "none in range: pays at every load",
                "never_pays": "none in range: pays at no load"}.get(self.kind, "unknown (no speed-up at two loads)")

    def same_as(self, other: Crossover) -> bool:
        """Lands where ``other`` does: the same kind, and for a crossing the same pair of loads."""
        return self.kind == other.kind and self.bracket == other.bracket and self.direction == other.direction


def crossover(loads: Sequence[float], speedups: Sequence[float | None]) -> Crossover:
    """The first load where the speed-up crosses 1 (pays: speed-up > 1), interpolated linearly
    between the two loads around it; loads ascending."""
    pts = [(float(x), float(s)) for x, s in zip(loads, speedups, strict=True) if s is not None]
    if len(pts) < 2:
        return Crossover("unknown")
    for (x0, s0), (x1, s1) in zip(pts, pts[1:], strict=False):
        if (s0 > 1.0) != (s1 > 1.0):
            at = x0 + (1.0 - s0) * (x1 - x0) / (s1 - s0) if s1 != s0 else x0
            return Crossover("at", min(max(at, x0), x1), (x0, x1), "stops paying" if s0 > 1.0 else "starts paying")
    return Crossover("pays_throughout" if pts[0][1] > 1.0 else "never_pays")


@dataclass(frozen=True)
class PointResult:
    """One load: what was measured, predicted with the default terms and with the fitted scale."""

    load: float
    role: str
    """``fit`` (the lightest) or ``held out``."""
    source: str
    read_from_figure: bool
    speedup: tuple[float | None, float | None, float | None]
    """(measured, default, calibrated), higher is better, of ``speedup_of``."""
    speedup_of: str | None
    values: dict[str, tuple[float | None, float | None, float | None]]
    """``side.quantity`` → (measured, default, calibrated), every quantity the point gives, plus
    the predicted acceptance length."""
    band: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """``speculative.quantity`` → predicted at the low and high end of the scale band."""


@dataclass(frozen=True)
class SweepCalibration:
    points: SweepPoints
    candidate: str
    baseline: str
    scale: float
    matched: str
    rows: tuple[PointResult, ...]
    crossovers: dict[str, Crossover]
    """``measured``, ``default``, ``calibrated``, and ``band_low``, ``band_high``: at the scale
    band's ends (when all three calibrated ones agree, the lightest load pins the crossover)."""
    tpot_worst: tuple[float | None, float | None]
    """Worst |TPOT p50 error| over the held-out loads: (default, calibrated); None when no held-out
    load writes a TPOT p50."""
    tpot_band_worst: float | None
    """Worst |TPOT p50 error| over the held-out loads to the nearest of the predictions over the
    scale band (its ends and the fitted scale; 0 where the measurement lies between them): how
    far from the held-out loads the scales the lightest load cannot tell apart can leave them."""
    simulations: int
    scale_band: tuple[float, float]
    """The scales the lightest load cannot tell from ``scale`` (``calibration_search.fit_rough``)."""
    profile_doc: dict[str, Any]
    scenario: Scenario
    seeds: tuple[int, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def scenario_at(sc: Scenario, kind: str, load: float, origin: str = "points") -> Scenario:
    """The scenario at one point's load: N closed-loop clients, or Poisson arrivals at a rate
    (whatever arrival the scenario had; its other settings kept)."""
    if kind == "concurrency":
        if load != int(load):
            raise SpecplanError(f"{origin}: load {load:g}: a number of clients must be whole")
        return sc.with_overrides({"workload.arrival": "concurrency", "workload.concurrency": int(load),
                                  "workload.rate": None})
    return sc.with_overrides({"workload.arrival": "poisson", "workload.rate": float(load),
                              "workload.concurrency": None})


MEDIANS = ("ttft_p50_ms", "tpot_p50_ms", "e2el_p50_ms")
"""The medians a point may write, in ``latency_arrays``' order."""
WIDTH = ":halfwidth"
"""Suffix of a median's ``median_halfwidth`` in a prediction (the fitted load only)."""


def median_ranks(n: int) -> tuple[int, int]:
    """The order statistics (0-based) bounding the distribution-free 95 % interval of the median
    of ``n`` values: n/2 ∓ 1.96·√n/2, widened to whole ranks (the whole sample under 6 values)."""
    h = 1.96 * math.sqrt(n) / 2.0
    return max(0, math.floor(n / 2.0 - h)), min(n - 1, math.ceil(n / 2.0 + h))


def median_halfwidth(values: np.ndarray) -> float | None:
    """Half the log-width of the 95 % interval of a sample's median (``median_ranks``). Why: the
    measured p50 is itself one sample's median, so the scales whose simulated p50 lies that
    close to it cannot be told apart by it; None under three values."""
    v = np.sort(values[np.isfinite(values)])
    if v.size < 3:
        return None
    j, k = median_ranks(v.size)
    return math.log(v[k] / v[j]) / 2.0 if v[j] > 0 else None


def _rel(p: float | None, m: float | None) -> float | None:
    return None if p is None or m is None or not m else (p - m) / m


def _outside(m: float | None, predicted: Sequence[float | None]) -> float | None:
    """|relative distance| of ``m`` to the span of ``predicted`` (0 inside it)."""
    got = [v for v in predicted if v is not None]
    if m is None or not m or not got:
        return None
    return max(0.0, min(got) - m, m - max(got)) / abs(m)


class _SweepModel:
    """Predicts a point's summary values for a candidate under given terms (cached)."""

    def __init__(self, points: SweepPoints, scenario: Scenario, profile_doc: dict[str, Any], origin: str,
                 candidate: str, baseline: str, seeds: tuple[int, ...], k: int) -> None:
        self.points, self.scenario, self.doc, self.origin = points, scenario, profile_doc, origin
        self.candidate, self.baseline, self.seeds, self.k = candidate, baseline, seeds, k
        self.cache: dict[tuple[float, int, str], dict[str, float | None]] = {}
        self.simulations = 0
        self.start = starting_terms(profile_doc, scenario)
        self.matched, self.target = self._target()

    def predict(self, scale: float, i: int, cand: str) -> dict[str, float | None]:
        from sim.results.simulation import simulate_once

        key = (scale if cand == self.candidate else 1.0, i, cand)
        if key not in self.cache:
            terms = self.start.with_value("acceptance_scale", key[0])
            doc, sc = apply_terms(self.doc, self.scenario, cand, terms, "fitted by specplan calibrate --points")
            profile = Profile.from_dict(doc, self.origin)
            sc = scenario_at(sc, self.points.load_kind, self.points.points[i].load, self.points.origin)
            got: dict[str, list[float]] = {q: [] for q in SUMMARY_COLUMN}
            for seed in self.seeds:
                run = simulate_once(sc, profile, cand, seed, keep_itl=False)
                row = run.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS).row(0, named=True)
                for q, col in SUMMARY_COLUMN.items():
                    if (v := row.get(col)) is not None and math.isfinite(v):
                        got[q].append(float(v))
                if i == 0:  # the fitted load: how far one sample's p50 may sit from another's
                    for q, w in zip(MEDIANS, latency_arrays(run.requests.filter(pl.col("in_window"))), strict=True):
                        if (h := median_halfwidth(w)) is not None:
                            got.setdefault(q + WIDTH, []).append(h)
                self.simulations += 1
            self.cache[key] = {q: (float(np.mean(v)) if v else None) for q, v in got.items()}
        return self.cache[key]

    def _target(self) -> tuple[str, float]:
        light = self.points.points[0]
        q = self.points.fit_to or fit_targets(light)[0]  # the contract refuses a lightest point with none
        spec = dict(light.speculative)
        if "acceptance_rate" in spec:
            spec["acceptance_length"] = 1.0 + self.k * spec.pop("acceptance_rate")
        if q == "speedup":
            s = light.measured_speedup()
            assert s is not None
            return q, s
        return q, spec[q]

    def tolerance(self) -> float:
        """How far (log) the lightest load's fitted value may sit from the simulated one by
        sampling alone: a median's ``median_halfwidth`` (both sides' for a speed-up of
        medians, in quadrature); 0 for a mean or a rate (the trend's scatter says it)."""
        light = self.points.points[0]
        q = light.speedup_quantity() if self.matched == "speedup" else self.matched
        if q not in MEDIANS:
            return 0.0
        sides = (self.candidate, self.baseline) if self.matched == "speedup" else (self.candidate,)
        widths = [self.predict(1.0, 0, c).get(q + WIDTH) for c in sides]
        return math.sqrt(sum(w * w for w in widths if w is not None))

    def speedup(self, scale: float, i: int, quantity: str | None) -> float | None:
        q = quantity or "output_tok_s"
        b, s = self.predict(1.0, i, self.baseline).get(q), self.predict(scale, i, self.candidate).get(q)
        if b is None or s is None or b <= 0 or s <= 0:
            return None
        return s / b if q in HIGHER_IS_BETTER else b / s

    # the calibration_search.Objective protocol, over the acceptance scale alone
    def residuals(self, terms: Terms, train: Sequence[int]) -> np.ndarray:
        s = terms.acceptance_scale
        if self.matched == "speedup":
            p = self.speedup(s, 0, self.points.points[0].speedup_quantity())
        else:
            p = self.predict(s, 0, self.candidate).get(self.matched)
        return np.asarray([math.log(p / self.target) if p is not None and p > 0 else 5.0])

    def objective(self, terms: Terms, train: Sequence[int]) -> float:
        r = self.residuals(terms, train)
        return float(r @ r)


def calibrate_sweep(points: SweepPoints, scenario: Scenario, profile_doc: dict[str, Any], origin: str,
                    candidate: str, seeds: Sequence[int], evals_per_line: int = 12) -> SweepCalibration:
    """Fit the acceptance scale on the lightest point, then predict every point with the default
    terms and with the fitted scale (nothing else changed)."""
    cand = scenario.candidate(candidate)
    if not cand.speculates or cand.k is None:
        raise SpecplanError(f"--candidate: {candidate!r} does not speculate with a fixed k; a sweep's speed-up needs "
                            "the speculative candidate that served it")
    if cand.acceptance_trace is not None:
        raise SpecplanError(f"{scenario.origin}: candidate {candidate!r} replays an acceptance trace; there is no "
                            "acceptance scale to fit (use a candidate with the profile's or an assumed acceptance)")
    base = scenario.baseline.name
    model = _SweepModel(points, scenario, profile_doc, origin, candidate, base, tuple(seeds), cand.k)
    box = TERM_SPECS["acceptance_scale"]
    band = fit_rough(lambda v: float(model.residuals(model.start.with_value("acceptance_scale", v), (0,))[0]),
                     box.low, box.high, evals_per_line, tolerance=(tol := model.tolerance()))
    scale = band.value
    rows = []
    for i, p in enumerate(points.points):
        q = p.speedup_quantity()
        values: dict[str, tuple[float | None, float | None, float | None]] = {}
        for side, meas, name, sc in (("baseline", p.baseline, base, 1.0), ("speculative", p.speculative, candidate, None)):
            d = model.predict(1.0, i, name)
            c = model.predict(scale if sc is None else sc, i, name)
            for qty in SIDE_FIELDS:
                if qty in meas:
                    values[f"{side}.{qty}"] = (meas[qty], d.get(qty), c.get(qty))
        acc = dict(p.speculative)
        if "acceptance_rate" in acc:
            acc["acceptance_length"] = 1.0 + cand.k * acc["acceptance_rate"]
        values["speculative.acceptance_length"] = (acc.get("acceptance_length"),
                                                   model.predict(1.0, i, candidate).get("acceptance_length"),
                                                   model.predict(scale, i, candidate).get("acceptance_length"))
        ends = {} if i == 0 else {f"speculative.{qty}": (model.predict(band.low, i, candidate).get(qty),
                                                          model.predict(band.high, i, candidate).get(qty))
                                  for qty in SIDE_FIELDS if qty in p.speculative}
        rows.append(PointResult(p.load, "fit" if i == 0 else "held out", p.source, p.read_from_figure,
                                (p.measured_speedup(), model.speedup(1.0, i, q), model.speedup(scale, i, q)), q, values,
                                ends))
    loads = [r.load for r in rows]
    crossovers = {name: crossover(loads, [r.speedup[j] for r in rows])
                  for j, name in enumerate(("measured", "default", "calibrated"))}
    for end, at in (("band_low", band.low), ("band_high", band.high)):  # where the band's ends put it
        crossovers[end] = crossover(loads, [model.speedup(at, i, r.speedup_of) for i, r in enumerate(rows)])
    worst: list[float | None] = []
    for j in (1, 2):
        errs = [abs(e) for r in rows if r.role == "held out" for key, v in r.values.items()
                if key.endswith("tpot_p50_ms") and (e := _rel(v[j], v[0])) is not None]
        worst.append(max(errs) if errs else None)
    spans = [_outside(v[0], (v[2], *r.band[key])) for r in rows if r.role == "held out"
             for key, v in r.values.items() if key == "speculative.tpot_p50_ms" and key in r.band]
    band_worst = max((e for e in spans if e is not None), default=None)
    note = (f"acceptance scale {scale:.4g} fitted by specplan calibrate --points {points.origin} on its lightest load "
            f"({load_text(points.load_kind, points.points[0].load)}, {model.matched}); candidate {candidate}, "
            f"seeds {','.join(map(str, seeds))}")
    terms = model.start.with_value("acceptance_scale", scale)
    doc, sc = apply_terms(profile_doc, scenario, candidate, terms, note, ("acceptance_scale",))
    notes = []
    miss = math.expm1(float(model.residuals(terms, (0,))[0]))
    if abs(miss) > max(0.02, 2.0 * band.scatter, tol):  # within the value's own steps or sampling: a match
        spec = TERM_SPECS["acceptance_scale"]
        edge = " at the edge of its box" if min(scale - spec.low, spec.high - scale) < 0.05 * (spec.high - spec.low) else ""
        notes.append(f"the lightest load's {model.matched} is matched only to {miss:+.1%} (scale {scale:.3g}{edge}): "
                     "acceptance alone cannot reach it, so another term (step time, an overhead) is off there")
    if not band.pinned:
        notes.append(f"the lightest load's {model.matched} does not move with the acceptance scale beyond its own "
                     f"step-to-step scatter over {band.low:.3g}–{band.high:.3g}: that load does not pin the scale")
    if any(r.read_from_figure for r in rows):
        notes.append("some measured numbers were read from a figure (marked *), not written by the source")
    return SweepCalibration(points, candidate, base, scale, f"{model.matched} at the lightest load", tuple(rows),
                            crossovers, (worst[0], worst[1]), band_worst, model.simulations, (band.low, band.high),
                            doc, sc, tuple(seeds), tuple(notes))
