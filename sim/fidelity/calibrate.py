"""Calibrate a profile's free terms on a few measured points of the user's own deployment.

Why: a profile's step times come from kernels (measured, imported or estimated); what the
kernels cannot know — the host's per-step and per-request overheads, the spec-decode
bookkeeping per row, and above all the acceptance the user's traffic gets — decides whether
speculation pays. ``vllm bench serve --save-detailed`` runs at two or three loads pin them down.

The fit treats the simulator as a black box: each evaluation writes candidate values of the
free terms into the profile and scenario (``calibration_terms``) and re-runs
``simulate_vllm`` (the same replay ``validate --vllm-results`` uses) on common random numbers.
The search is a bounded coordinate search, a golden-section line search per term; the
objective is the sum of squared log errors of TTFT, TPOT, ITL and E2EL p50 over the training
points (plus the measured acceptance length when given). At least one measured point is always
held out and its error reported (docs/fidelity.md, "Calibrating from your own runs").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.contracts.vllm_results import VllmBenchResult
from sim.fidelity.calibration_search import Fit, fit_terms, uncertainty
from sim.fidelity.calibration_terms import TERM_SPECS, Terms, apply_terms, starting_terms
from sim.fidelity.vllm_compare import (
    client_values,
    measured_chunking,
    simulate_vllm,
    vllm_measured_values,
)
from sim.results import metric_names as mn

Holdout = Literal["last", "lightest", "loo"]
HOLDOUTS: tuple[str, ...] = ("last", "lightest", "loo")
"""``last``: fit on every point but the heaviest load, hold that one out; ``lightest``: fit on
the lightest load only, hold out every heavier one (the issue's bar); ``loo``: leave each point
out in turn (one fit per point), then fit the written profile on all of them."""

FIT_COLUMNS: tuple[str, ...] = ("ttft_ms_mean", "tpot_ms_mean", "e2el_ms_mean")
"""What the objective compares: means, not medians. A median of a few hundred requests is one
request's value and jumps as the terms move (the search then stalls on a step); a mean moves
smoothly. TTFT carries the per-request overhead, TPOT the per-step costs over the acceptance,
E2EL both; ITL is left out (a stream's chunking changes it, not the engine)."""
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("TTFT p50 (ms)", "ttft_ms_median"), ("TTFT p95 (ms)", "ttft_ms_p95"),
    ("TPOT p50 (ms)", "tpot_ms_median"), ("TPOT p95 (ms)", "tpot_ms_p95"),
    ("ITL p50 (ms)", "itl_ms_median"), ("ITL p95 (ms)", "itl_ms_p95"),
    ("E2EL p50 (ms)", "e2el_ms_median"), ("E2EL p95 (ms)", "e2el_ms_p95"),
    ("output throughput (tok/s)", mn.OUTPUT_THROUGHPUT),
    ("mean acceptance length", mn.MEAN_ACCEPTANCE_LENGTH),
)
MISSING_PENALTY = 5.0
"""Residual of a metric the simulation did not produce (no completed request): far worse than
any real error, so the search leaves such values."""


@dataclass(frozen=True, slots=True)
class MeasuredAcceptance:
    """The deployment's own mean acceptance length (vLLM: 1 + accepted / drafts) and its source."""

    value: float
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value) and self.value >= 1.0):
            raise SpecplanError(f"{self.source}: mean acceptance length must be a number >= 1, got {self.value}")


@dataclass(frozen=True)
class CalibrationRequest:
    """What to calibrate on: measured runs (any order), the scenario and profile document that
    predict them, the candidate that served them, the terms to fit and how to hold out."""

    results: tuple[VllmBenchResult, ...]
    scenario: Scenario
    profile_doc: dict[str, Any]
    profile_origin: str
    candidate: str
    fit: tuple[str, ...]
    holdout: Holdout = "last"
    seeds: tuple[int, ...] = (0,)
    acceptance: MeasuredAcceptance | None = None
    rounds: int = 1
    """Coordinate-search sweeps over the fitted terms, each term over its whole box."""
    evals_per_line: int = 10
    """Objective evaluations per golden-section line search."""
    iterations: int = 15
    """Levenberg–Marquardt iterations after the coordinate search (each: the Jacobian, then
    trial steps until one lowers the objective)."""

    def __post_init__(self) -> None:
        if len(self.results) < 2:
            raise SpecplanError("--vllm-results: calibration needs at least two measured loads (one is held out); "
                                f"got {len(self.results)}")
        if self.holdout not in HOLDOUTS:
            raise SpecplanError(f"--holdout: expected one of {', '.join(HOLDOUTS)}, got {self.holdout!r}")
        if not self.seeds:
            raise SpecplanError("--seeds: give at least one seed")
        if not (0 <= self.rounds <= 10 and 3 <= self.evals_per_line <= 50 and 0 <= self.iterations <= 100):
            raise SpecplanError(f"--rounds 0..10, --evals-per-line 3..50 and --iterations 0..100; got {self.rounds}, "
                                f"{self.evals_per_line} and {self.iterations}")
        cand = self.scenario.candidate(self.candidate)
        spec_terms = [t for t in self.fit if t in ("acceptance_scale", "spec_host_us_per_row", "draft_host_scale")]
        if spec_terms and not cand.speculates:
            raise SpecplanError(f"--fit: {', '.join(spec_terms)} need a speculative candidate; "
                                f"{self.candidate!r} does not speculate")
        if self.acceptance is not None and not cand.speculates:
            raise SpecplanError(f"{self.acceptance.source}: measured acceptance given, but candidate "
                                f"{self.candidate!r} does not speculate")

    def ordered(self) -> tuple[VllmBenchResult, ...]:
        """Results from the lightest load to the heaviest (an infinite rate last)."""
        return tuple(sorted(self.results, key=lambda r: r.request_rate))


@dataclass(frozen=True)
class Calibration:
    """The result: values before and after, their uncertainty, the side-by-side table, the
    held-out errors, the calibrated documents and what it cost."""

    before: Terms
    after: Terms
    fitted: tuple[str, ...]
    sigma: dict[str, float | None]
    folds: tuple[tuple[int, Fit], ...]
    """(held-out point, the fit without it) — one fold for ``last``/``lightest``, one per point for ``loo``."""
    table: pl.DataFrame
    heldout: pl.DataFrame
    simulations: int
    budget: int
    note: str
    profile_doc: dict[str, Any]
    scenario: Scenario
    points: tuple[str, ...]
    """The measured points' sources, lightest load first (``folds`` index them)."""
    correlated: tuple[tuple[str, str, float], ...] = ()
    """Pairs of fitted terms whose estimates correlate beyond ±0.9, with the correlation."""
    notes: tuple[str, ...] = ()
    """What the comparison rests on that the user should know (a closed-loop run replayed open loop)."""
    acceptance: MeasuredAcceptance | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)


class _Evaluator:
    """Simulates one measured point under given terms (common random numbers: the same seeds and
    arrival draws every time), caching each (terms, point)."""

    def __init__(self, req: CalibrationRequest) -> None:
        self.req = req
        self.points = req.ordered()
        self.chunking = [measured_chunking(r) for r in self.points]
        self.measured = [vllm_measured_values(r, req.scenario.slo.limits) for r in self.points]
        for r, m in zip(self.points, self.measured, strict=True):
            ok = r.requests_frame().filter(pl.col("success"))
            stats = client_values(ok, r.itl_values_s(), r.duration_s, None)
            m.update({c: stats.get(c) for c in FIT_COLUMNS})
            if req.acceptance is not None:
                m[mn.MEAN_ACCEPTANCE_LENGTH] = req.acceptance.value
        self.cache: dict[tuple[tuple[float, ...], int], dict[str, float | None]] = {}
        self.sources: dict[tuple[tuple[float, ...], int], tuple[str, ...]] = {}
        self.simulations = 0

    def predict(self, terms: Terms, i: int, note: str = "fitted by specplan calibrate") -> dict[str, float | None]:
        key = (tuple(terms.as_dict().values()), i)
        if key not in self.cache:
            doc, sc = apply_terms(self.req.profile_doc, self.req.scenario, self.req.candidate, terms, note)
            profile = Profile.from_dict(doc, self.req.profile_origin)
            pred = simulate_vllm(self.points[i], sc, profile, self.req.candidate, self.req.seeds, self.chunking[i])
            self.sources[key] = pred.sources
            self.simulations += len(self.req.seeds)
            values = dict(pred.values)
            for col in FIT_COLUMNS:  # the runs' own means (one-token stream: vLLM's first-alone chunks leave them)
                got = [float(v) for run in pred.runs
                       if (v := run.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)[col].item()) is not None]
                values[col] = float(np.mean(got)) if got else None
            self.cache[key] = values
        return self.cache[key]

    def residuals(self, terms: Terms, train: Sequence[int]) -> np.ndarray:
        """Log errors of the fitted metrics over ``train`` (and of the acceptance length, once)."""
        res: list[float] = []
        als: list[float] = []
        for i in train:
            pred, meas = self.predict(terms, i), self.measured[i]
            for col in FIT_COLUMNS:
                m = meas.get(col)
                if m is None or not m > 0:
                    continue
                p = pred.get(col)
                res.append(math.log(p / m) if p is not None and p > 0 else MISSING_PENALTY)
            if (a := pred.get(mn.MEAN_ACCEPTANCE_LENGTH)) is not None:
                als.append(a)
        if self.req.acceptance is not None:
            res.append(math.log(float(np.mean(als)) / self.req.acceptance.value) if als else MISSING_PENALTY)
        return np.asarray(res, dtype=float)

    def objective(self, terms: Terms, train: Sequence[int]) -> float:
        r = self.residuals(terms, train)
        return float(np.sum(r * r))


def _folds(n: int, holdout: str) -> list[tuple[int, tuple[int, ...]]]:
    """(held-out point, training points) per fit; points are ordered lightest first."""
    if holdout == "last":
        return [(n - 1, tuple(range(n - 1)))]
    if holdout == "lightest":
        return [(i, (0,)) for i in range(1, n)]
    return [(i, tuple(j for j in range(n) if j != i)) for i in range(n)]


def _rel(p: float | None, m: float | None) -> float | None:
    return None if p is None or m is None or not m else (p - m) / m


def calibrate(req: CalibrationRequest, say: Callable[[str], None] = lambda _m: None) -> Calibration:
    """Fit ``req.fit`` on the training points, report every point calibrated and uncalibrated,
    the held-out error, and the calibrated profile document and scenario."""
    ev = _Evaluator(req)
    n = len(ev.points)
    start = starting_terms(req.profile_doc, req.scenario)
    names = list(req.fit)
    folds = _folds(n, req.holdout)
    per_fit = 1 + (req.rounds + 1) * len(names) * req.evals_per_line + req.iterations * (len(names) + 4)
    trains = list(dict.fromkeys(train for _, train in folds)) + ([tuple(range(n))] if req.holdout == "loo" else [])
    seeds = len(req.seeds)
    budget = seeds * (sum(per_fit * len(t) for t in trains) + (len(names) + 1) * len(trains[-1]) + 2 * n)
    say(f"budget: about {budget} simulations ({len(trains)} fit(s): {req.rounds} coordinate round(s) × "
        f"{len(names)} term(s) × {req.evals_per_line} evaluations, then up to {req.iterations} Levenberg–Marquardt "
        f"steps and a polishing round, of the training points on {seeds} seed(s); then the uncertainty and the table)")
    fold_fits: list[tuple[int, Fit]] = []
    lightest_fit: Fit | None = None
    for held, train in folds:
        if req.holdout == "lightest" and lightest_fit is not None:
            fold_fits.append((held, lightest_fit))
            continue
        with_resid = ev.residuals(start, train).size
        if with_resid <= len(names):
            raise SpecplanError(f"--fit: {len(names)} term(s) but only {with_resid} measured number(s) to fit them on "
                                f"(points {', '.join(ev.points[i].source for i in train)}); fit fewer terms")
        f = fit_terms(ev, start, names, train, req.rounds, req.evals_per_line, req.iterations)
        say(f"fit on {', '.join(ev.points[i].source for i in train)}: " + ", ".join(f"{k} {f.terms.get(k):.4g}" for k in names)
            + f" ({f.evaluations} simulations)")
        fold_fits.append((held, f))
        lightest_fit = f
    final = fold_fits[0][1] if req.holdout != "loo" else fit_terms(ev, start, names, tuple(range(n)), req.rounds,
                                                                    req.evals_per_line, req.iterations)
    sigma, correlated = uncertainty(ev, final, names)
    held_of = {h: f for h, f in fold_fits}
    table_rows, held_rows, sources = [], [], set()
    for i, res in enumerate(ev.points):
        cal_terms = held_of[i].terms if i in held_of else final.terms
        role = "held out" if i in held_of else "fit"
        unc, cal, meas = ev.predict(start, i), ev.predict(cal_terms, i), ev.measured[i]
        sources.update(ev.sources[(tuple(cal_terms.as_dict().values()), i)])
        rate = res.request_rate if math.isfinite(res.request_rate) else None
        for label, col in TABLE_COLUMNS:
            m, u, c = meas.get(col), unc.get(col), cal.get(col)
            if m is None and u is None and c is None:
                continue
            row = {"source": res.source, "rate": rate, "role": role, "metric": label, "column": col,
                   "measured": m, "uncalibrated": u, "calibrated": c,
                   "rel_error_uncalibrated": _rel(u, m), "rel_error_calibrated": _rel(c, m)}
            table_rows.append(row)
            if role == "held out":
                held_rows.append(row)
    table = pl.DataFrame(table_rows, schema={
        "source": pl.String, "rate": pl.Float64, "role": pl.String, "metric": pl.String, "column": pl.String,
        "measured": pl.Float64, "uncalibrated": pl.Float64, "calibrated": pl.Float64,
        "rel_error_uncalibrated": pl.Float64, "rel_error_calibrated": pl.Float64}, orient="row")
    heldout = table.filter(pl.col("role") == "held out")
    note = provenance_note(req, ev, final, names, heldout)
    doc, scenario = apply_terms(req.profile_doc, req.scenario, req.candidate, final.terms, note, tuple(names))
    sources.update(Profile.from_dict(doc, req.profile_origin).sources())
    return Calibration(start, final.terms, tuple(names), sigma, tuple(fold_fits), table, heldout,
                       ev.simulations, budget, note, doc, scenario, tuple(r.source for r in ev.points),
                       correlated, _notes(ev.points), req.acceptance, tuple(sorted(sources)))


def _notes(points: Sequence[VllmBenchResult]) -> tuple[str, ...]:
    return tuple(f"{r.source}: not open loop (max_concurrency={r.max_concurrency}); the simulator sends at the "
                 "rate regardless, as validate --vllm-results does" for r in points if r.max_concurrency is not None)


def heldout_error(heldout: pl.DataFrame, column: str = "tpot_ms_median") -> tuple[float | None, float | None]:
    """Worst |relative error| of ``column`` over the held-out points: (uncalibrated, calibrated)."""
    rows = heldout.filter(pl.col("column") == column)
    if rows.height == 0:
        return None, None
    u, c = rows["rel_error_uncalibrated"].abs().max(), rows["rel_error_calibrated"].abs().max()
    return (None if u is None else float(u)), (None if c is None else float(c))


def provenance_note(req: CalibrationRequest, ev: _Evaluator, fit: Fit, names: Sequence[str],
                    heldout: pl.DataFrame) -> str:
    """The one line the calibrated sections carry: from which files, which terms, what held-out error."""
    files = ", ".join(dict.fromkeys(r.source for r in ev.points))
    terms = ", ".join(f"{k} {fit.terms.get(k):.4g} {TERM_SPECS[k].unit}" for k in names)
    u, c = heldout_error(heldout)
    err = ("held-out TPOT p50 error " + (f"{c:.1%}" if c is not None else "n/a")
           + (f" (uncalibrated {u:.1%})" if u is not None else ""))
    acc = f"; measured acceptance length {req.acceptance.value:.3g} from {req.acceptance.source}" if req.acceptance else ""
    return (f"calibrated from {files} (candidate {req.candidate}, holdout {req.holdout}, seeds "
            f"{','.join(map(str, req.seeds))}{acc}): fitted {terms}; {err}")
