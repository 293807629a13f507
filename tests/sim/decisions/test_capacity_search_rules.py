"""The rules of ``sim.decisions.capacity_search`` against a known boundary: the answer brackets
it (the lower end passed, the upper failed), the bracket is as tight as asked or the budget is
spent, the bracket grows by ``growth``, ``growth²``, … capped at 16× a step, and each narrowing
probe lies in the middle 80 % of the bracket (log-rate), landing on the boundary when the
margin is exactly log-linear."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.decisions.capacity_search import CapacitySearch, Probe, _next_point, find_capacity


def threshold(boundary: float, margin: bool):
    """Passes at or below ``boundary``; margin = rate / boundary (crosses 1 there)."""
    def check(rate: float) -> Probe:
        return Probe(rate, rate <= boundary, rate / boundary if margin else None)
    return check


boundaries = st.floats(1e-2, 5e3)
starts = st.floats(1e-2, 5e3)


@settings(max_examples=300, deadline=None)
@given(boundary=boundaries, start=starts, margin=st.booleans(), rel_tol=st.sampled_from([0.01, 0.05, 0.2]),
       max_evals=st.integers(2, 30))
def test_capacity_search_brackets_the_boundary_within_tolerance_or_budget(
        boundary, start, margin, rel_tol, max_evals) -> None:
    res = find_capacity(threshold(boundary, margin), start, rel_tol=rel_tol, max_evals=max_evals)
    assert len(res.probes) <= max_evals
    for p in res.probes:  # every probe's verdict is the check's
        assert p.sustained == (p.rate <= boundary)
    if res.status == "bracketed":
        assert res.lower <= boundary < res.upper and res.rate == res.lower
        assert any(p.rate == res.lower and p.sustained for p in res.probes)
        assert any(p.rate == res.upper and not p.sustained for p in res.probes)
        assert res.relative_width <= rel_tol or len(res.probes) == max_evals
        assert res.relative_width == pytest.approx(res.upper / res.lower - 1.0)
    elif res.status == "below_probes":
        assert res.rate == 0.0 and boundary < res.upper
    elif res.status == "above_probes":
        assert res.rate <= boundary and res.upper == math.inf
    else:
        pytest.fail(f"boundary {boundary} inside [min_rate, max_rate] gave {res.status}")


@settings(max_examples=100, deadline=None)
@given(start=starts, margin=st.booleans())
def test_capacity_search_says_below_min_and_above_max_at_the_range_ends(start, margin) -> None:
    low = find_capacity(threshold(1e-4, margin), start, max_evals=40)
    assert low.status == "below_min" and low.rate == 0.0 and low.upper == pytest.approx(1e-3)
    high = find_capacity(threshold(1e5, margin), start, max_evals=40)
    assert high.status == "above_max" and high.rate == 1e4 and high.upper == math.inf
    assert high.relative_width == math.inf


def test_capacity_search_bracket_grows_by_growth_powers_capped_at_16() -> None:
    res = find_capacity(threshold(5000.0, margin=False), 1.0, max_evals=30)
    rates = [p.rate for p in res.probes[:6]]
    assert rates == pytest.approx([1.0, 2.0, 8.0, 64.0, 1024.0, 10_000.0])
    down = find_capacity(threshold(1e-2, margin=False), 1000.0, max_evals=30)
    assert [p.rate for p in down.probes[:4]] == pytest.approx([1000.0, 500.0, 125.0, 15.625])


@settings(max_examples=300, deadline=None)
@given(lo=st.floats(1e-2, 1e3), ratio=st.floats(1.01, 100.0), m_lo=st.floats(0.01, 0.999),
       m_hi=st.floats(1.001, 100.0), interpolate=st.booleans())
def test_next_probe_lies_in_the_middle_80_percent_of_the_log_bracket(lo, ratio, m_lo, m_hi, interpolate) -> None:
    hi = lo * ratio
    x = math.log(_next_point(Probe(lo, True, m_lo), Probe(hi, False, m_hi), interpolate))
    a, b = math.log(lo), math.log(hi)
    assert a + 0.1 * (b - a) - 1e-9 <= x <= b - 0.1 * (b - a) + 1e-9
    if not interpolate:
        assert x == pytest.approx(0.5 * (a + b))


@settings(max_examples=200, deadline=None)
@given(lo=st.floats(1e-2, 1e3), ratio=st.floats(1.5, 100.0), share=st.floats(0.1, 0.9))
def test_next_probe_lands_on_the_boundary_of_a_log_linear_margin(lo, ratio, share) -> None:
    hi = lo * ratio
    boundary = math.exp(math.log(lo) + share * math.log(ratio))
    x = _next_point(Probe(lo, True, lo / boundary), Probe(hi, False, hi / boundary))
    assert x == pytest.approx(boundary, rel=1e-9)


def test_next_probe_bisects_without_margins() -> None:
    assert _next_point(Probe(1.0, True), Probe(100.0, False)) == pytest.approx(10.0)


def test_inconclusive_probes_are_a_floor_not_a_failure() -> None:
    # below 2.0 the check cannot judge; the capacity (1.0) is under that floor
    def check(rate: float) -> Probe:
        if rate < 2.0:
            return Probe(rate, False, None, conclusive=False)
        return Probe(rate, rate <= 1.0)
    res = find_capacity(check, 64.0, max_evals=30)
    assert res.status == "below_probes" and res.rate == 0.0
    assert all(p.rate >= 2.0 or not p.conclusive for p in res.probes)


@pytest.mark.parametrize("kw", [dict(start=0.0), dict(start=1.0, min_rate=0.0), dict(start=1.0, max_rate=1e-3),
                                dict(start=1.0, rel_tol=0.0), dict(start=1.0, max_evals=1),
                                dict(start=1.0, growth=1.0)])
def test_capacity_search_rejects_a_search_that_cannot_bracket(kw) -> None:
    with pytest.raises(SpecplanError):
        find_capacity(threshold(1.0, True), **kw)


def test_relative_width_is_infinite_unless_bracketed() -> None:
    assert CapacitySearch(1.0, 1.0, math.inf, "above_probes", ()).relative_width == math.inf
    assert CapacitySearch(0.0, 0.0, 2.0, "bracketed", ()).relative_width == math.inf
    assert CapacitySearch(2.0, 2.0, 2.5, "bracketed", ()).relative_width == pytest.approx(0.25)


def test_search_stops_when_the_unjudgeable_floor_is_within_tolerance_of_a_failure_inclusive() -> None:
    # 2.5 fails; 1.25 cannot be judged (floor); 2.5 / 1.25 − 1 = 1.0 = rel_tol: nothing left to probe
    def check(rate: float) -> Probe:
        return Probe(rate, False, None, conclusive=rate >= 2.0)
    res = find_capacity(check, 2.5, rel_tol=1.0, max_evals=30)
    assert res.status == "below_probes" and [p.rate for p in res.probes] == [2.5, 1.25]


def test_search_below_an_unjudgeable_floor_narrows_until_floor_and_failure_are_within_tolerance() -> None:
    # capacity < 2.0 but rates below 2.0 cannot be judged: the answer's upper end must come
    # within rel_tol of the highest rate found unjudgeable, not stop at the first floor
    def check(rate: float) -> Probe:
        return Probe(rate, False, None, conclusive=rate >= 2.0)
    res = find_capacity(check, 2.5, rel_tol=0.05, max_evals=40)
    floor = max(p.rate for p in res.probes if not p.conclusive)
    assert res.status == "below_probes" and res.rate == 0.0
    assert res.upper / floor - 1.0 <= 0.05


def test_a_failing_end_with_margin_exactly_one_gives_no_crossing_so_the_step_bisects() -> None:
    assert _next_point(Probe(1.0, True, 0.5), Probe(100.0, False, 1.0)) == pytest.approx(10.0)


def test_a_passing_end_with_margin_exactly_one_is_the_boundary_so_the_step_goes_to_the_clamp_near_it() -> None:
    # log-margins 0 (at lo) and log 10 (at hi): the crossing is lo itself; the clamp keeps the
    # probe 10 % of the log-bracket inside, at 100^0.1
    assert _next_point(Probe(1.0, True, 1.0), Probe(100.0, False, 10.0)) == pytest.approx(100 ** 0.1)


def trailing_run(sides: list[str]) -> int:
    """How many of the last entries are the same as the last one (0 for none)."""
    run = 0
    for s in reversed(sides):
        if s != sides[-1]:
            break
        run += 1
    return run


@settings(max_examples=200, deadline=None)
@given(boundary=st.floats(0.1, 1e3), start=st.floats(0.1, 1e3), below=st.floats(0.2, 5.0),
       above=st.floats(0.2, 5.0), rel_tol=st.sampled_from([1e-4, 0.01, 0.05]))
def test_narrowing_bisects_after_the_same_end_moved_twice_running_else_interpolates(
        boundary, start, below, above, rel_tol) -> None:
    # a kinked margin (different log-slopes each side of the boundary) makes the secant land on
    # one side again and again; the safeguard must bisect once that side has moved twice running
    def check(rate: float) -> Probe:
        r = rate / boundary
        return Probe(rate, r <= 1.0, r ** (below if r <= 1.0 else above))
    res = find_capacity(check, start, rel_tol=rel_tol, max_evals=40)
    lo = hi = None
    sides: list[str] = []
    for p in res.probes:
        if lo is not None and hi is not None:  # a narrowing probe: replay the rule
            assert p.rate == _next_point(lo, hi, interpolate=trailing_run(sides) < 2)
            sides.append("lo" if p.sustained else "hi")
        if p.sustained:
            lo = p if lo is None or p.rate > lo.rate else lo
        else:
            hi = p if hi is None or p.rate < hi.rate else hi


@pytest.mark.parametrize("lo_margin,hi_margin", [(0.5, None), (None, 2.0), (0.0, 2.0), (0.5, math.inf),
                                                 (-0.5, 2.0), (0.5, 0.0)])
def test_next_probe_bisects_unless_both_ends_have_a_finite_positive_margin(lo_margin, hi_margin) -> None:
    # log(margin) is the interpolation's axis: a missing, zero, negative or infinite margin has none
    assert _next_point(Probe(1.0, True, lo_margin), Probe(100.0, False, hi_margin)) == pytest.approx(10.0)
