"""The calibration search on objectives with a known answer (no simulator): it finds the
minimum inside the boxes, never ends worse than it started, and its standard errors and
correlations read the curvature."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.fidelity.calibration_search import fit_terms, uncertainty
from sim.fidelity.calibration_terms import TERM_SPECS, Terms

NAMES = ("acceptance_scale", "step_overhead_ms", "request_overhead_ms")


class Linear:
    """Residuals linear in the terms (scaled to their boxes): the truth is the unique zero."""

    def __init__(self, truth: Terms, mix: np.ndarray, noise: float = 0.0) -> None:
        self.truth, self.mix, self.noise, self.simulations = truth, mix, noise, 0

    def residuals(self, terms: Terms, train: Sequence[int]) -> np.ndarray:
        self.simulations += 1
        x = np.array([(terms.get(n) - self.truth.get(n)) / (TERM_SPECS[n].high - TERM_SPECS[n].low) for n in NAMES])
        r = self.mix @ x
        return r + self.noise * np.sin(1e3 * r)  # deterministic roughness

    def objective(self, terms: Terms, train: Sequence[int]) -> float:
        r = self.residuals(terms, train)
        return float(r @ r)


@settings(max_examples=30, deadline=None)
@given(s=st.floats(0.3, 1.9), o=st.floats(0.1, 9.0), r=st.floats(5.0, 1900.0))
def test_the_search_recovers_the_minimum_of_a_well_posed_objective(s, o, r):
    truth = Terms(acceptance_scale=s, step_overhead_ms=o, request_overhead_ms=r)
    mix = np.array([[1.0, 0.3, 0.0], [0.2, 1.0, 0.1], [0.0, 0.2, 1.0], [0.5, 0.5, 0.5]])
    fit = fit_terms(Linear(truth, mix), Terms(), NAMES, (0,), rounds=1, evals_per_line=10, iterations=15)
    for n in NAMES:
        width = TERM_SPECS[n].high - TERM_SPECS[n].low
        assert abs(fit.terms.get(n) - truth.get(n)) <= 0.01 * width, (n, fit.terms)


@settings(max_examples=30, deadline=None)
@given(s=st.floats(0.3, 1.9), o=st.floats(0.1, 9.0))
def test_the_search_never_ends_worse_than_it_started(s, o):
    truth = Terms(acceptance_scale=s, step_overhead_ms=o)
    ev = Linear(truth, np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), noise=0.05)
    start = Terms(acceptance_scale=1.0, step_overhead_ms=1.0)
    fit = fit_terms(ev, start, NAMES, (0,), rounds=1, evals_per_line=6, iterations=5)
    assert fit.objective <= ev.objective(start, (0,))


def test_terms_the_residuals_cannot_tell_apart_are_reported_as_correlated():
    truth = Terms(acceptance_scale=0.7, step_overhead_ms=2.0, request_overhead_ms=30.0)
    # acceptance and per-step overhead enter only through their sum: a valley
    mix = np.array([[1.0, 1.0, 0.0], [1.0, 1.01, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])
    ev = Linear(truth, mix)
    fit = fit_terms(ev, Terms(), NAMES, (0,), rounds=1, evals_per_line=10, iterations=10)
    fit_noisy = type(fit)(fit.train, fit.terms.with_value("request_overhead_ms", fit.terms.request_overhead_ms + 1.0),
                          fit.objective, fit.evaluations)  # residuals > 0, so a scale exists
    sigma, pairs = uncertainty(ev, fit_noisy, NAMES)
    assert [(a, b) for a, b, _ in pairs] == [("acceptance_scale", "step_overhead_ms")]
    assert math.isfinite(sigma["request_overhead_ms"])
