"""Capacity search: the root finder on pure monotone functions, the 'sustains' rule, and the
search through the simulator against a closed-form capacity."""

from __future__ import annotations

import math

import pytest

from sim.capacity import (
    Probe,
    SustainCriteria,
    ci95_halfwidth,
    find_capacity,
    loss_fraction,
)
from sim.errors import SpecplanError


def threshold_check(boundary: float, with_margin: bool = True):
    calls: list[float] = []

    def check(rate: float) -> Probe:
        calls.append(rate)
        m = rate / boundary if with_margin else None
        return Probe(rate, rate <= boundary, m)

    return check, calls


@pytest.mark.parametrize("boundary", [0.013, 0.7, 3.7, 55.0, 900.0])
@pytest.mark.parametrize("with_margin", [True, False])
def test_finds_boundary_of_monotone_function(boundary: float, with_margin: bool) -> None:
    check, calls = threshold_check(boundary, with_margin)
    res = find_capacity(check, start=2.0, rel_tol=0.02, max_evals=40)
    assert res.status == "bracketed"
    assert res.lower <= boundary < res.upper
    assert res.upper / res.lower - 1 <= 0.02
    assert res.rate == res.lower
    assert len(calls) == len(res.probes) <= 40


def test_interpolation_beats_bisection_on_smooth_margin() -> None:
    # margin = (rate/b)^2, smooth in log-log: the secant step lands next to the root
    b = 3.7

    def check(rate: float) -> Probe:
        return Probe(rate, rate <= b, (rate / b) ** 2)

    smart = find_capacity(check, start=1.0, rel_tol=0.01, max_evals=40)
    blind = find_capacity(lambda r: Probe(r, r <= b, None), start=1.0, rel_tol=0.01, max_evals=40)
    assert smart.lower <= b < smart.upper and blind.lower <= b < blind.upper
    assert len(smart.probes) < len(blind.probes)


def test_kinked_margin_still_converges() -> None:
    # a queue at saturation: margin flat then exploding; the clamp keeps shrinking the bracket
    b = 10.0

    def check(rate: float) -> Probe:
        m = 0.5 if rate <= b else 1e6
        return Probe(rate, rate <= b, m)

    res = find_capacity(check, start=1.0, rel_tol=0.05, max_evals=40)
    assert res.lower <= b < res.upper and res.relative_width <= 0.05


def test_limits_of_the_search() -> None:
    never = find_capacity(lambda r: Probe(r, False, 2.0), start=1.0, min_rate=0.1, max_evals=50)
    assert never.status == "below_min" and never.rate == 0.0
    always = find_capacity(lambda r: Probe(r, True, 0.1), start=1.0, max_rate=64, max_evals=50)
    assert always.status == "above_max" and always.rate == 64 and math.isinf(always.upper)
    budget = find_capacity(lambda r: Probe(r, r <= 1000, None), start=1.0, max_evals=3)
    assert budget.status == "above_max" and len(budget.probes) == 3  # says it is a lower bound
    with pytest.raises(SpecplanError):
        find_capacity(lambda r: Probe(r, True), start=0.0)


def test_sustain_rule_reads_percentile_columns_and_losses() -> None:
    c = SustainCriteria({"ttft": 2000.0, "tpot": 100.0}, percentile=95, max_loss_fraction=0.01)
    row = {"ttft_ms_p95": 1500.0, "tpot_ms_p95": 90.0, "ttft_ms_p99": 9000.0,
           "completed": 995, "rejected": 3, "timed_out": 2}
    p = c.judge(row, 2.0)
    assert p.sustained and p.margin == pytest.approx(0.9) and "tpot_ms_p95" in p.reason
    assert not SustainCriteria({"ttft": 2000.0}, percentile=99).judge(row, 2.0).sustained
    lossy = {**row, "rejected": 30}
    q = c.judge(lossy, 2.0)
    assert not q.sustained and "lost" in q.reason
    assert loss_fraction(lossy) == pytest.approx(32 / 1027)
    assert loss_fraction({"completed": 0}) == 1.0  # nothing measured is not a pass
    with pytest.raises(SpecplanError, match="percentile"):
        SustainCriteria({"ttft": 1.0}, percentile=90)
    with pytest.raises(SpecplanError, match="at least one"):
        SustainCriteria({})


def test_ci95_student_t() -> None:
    assert ci95_halfwidth([5.0]) == 0.0
    # two values 1, 3: sd = sqrt(2), t(1) = 12.706 → 12.706 * sqrt(2)/sqrt(2)
    assert ci95_halfwidth([1.0, 3.0]) == pytest.approx(12.706)
