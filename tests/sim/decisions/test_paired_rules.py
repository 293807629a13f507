"""The rules of ``sim.decisions.paired`` against independent oracles: the paired-t half-width is
``t_{0.975, n-1} · s / √n`` with the *sample* standard deviation (``ddof=1``, scipy.stats), the
indifference amount is a share of the larger mean, and the verdict reads the interval against
``± delta`` (Law, "comparing two systems")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from sim.decisions.paired import Paired, mean_interval, paired
from sim.results.intervals import ci95_halfwidth, clip_interval, mean_ci95, t_quantile_975

values = st.lists(st.floats(0.0, 1e3, allow_nan=False), min_size=2, max_size=12)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_paired_half_width_is_scipy_paired_t_with_sample_std(data) -> None:
    a = data.draw(values)
    b = data.draw(st.lists(st.floats(0.0, 1e3, allow_nan=False), min_size=len(a), max_size=len(a)))
    p = paired(a, b, higher_better=True, rel_delta=0.01)
    d = np.asarray(a) - np.asarray(b)
    n = len(d)
    expected = stats.t.ppf(0.975, n - 1) * stats.tstd(d) / math.sqrt(n)  # tstd: ddof=1
    assert p.n == n and p.diff == pytest.approx(float(d.mean()), abs=1e-9)
    assert p.half == pytest.approx(expected, rel=1e-3, abs=1e-9)


def test_paired_half_width_uses_sample_not_population_std() -> None:
    # d = (1, -1): sample std √2, population std 1; t_{0.975,1} = 12.706
    p = paired([2.0, 0.0], [1.0, 1.0], higher_better=True, rel_delta=0.0)
    assert p.half == pytest.approx(12.7062 * math.sqrt(2) / math.sqrt(2), rel=1e-4)


@pytest.mark.parametrize("df", [1, 2, 5, 10, 29, 30, 31, 50, 200, 10_000])
def test_t_quantile_975_matches_scipy(df: int) -> None:
    assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-4)


@settings(max_examples=100, deadline=None)
@given(a=values, rel=st.floats(0.0, 0.5))
def test_indifference_amount_is_share_of_larger_mean(a, rel) -> None:
    b = [x * 0.5 + 1.0 for x in a]
    p = paired(a, b, higher_better=False, rel_delta=rel)
    assert p.delta == pytest.approx(rel * max(abs(np.mean(a)), abs(np.mean(b))), rel=1e-12, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(a=values)
def test_lower_is_better_orients_the_difference(a) -> None:
    b = [x + 1.0 for x in a]
    assert paired(a, b, higher_better=False, rel_delta=0.0).diff == pytest.approx(1.0)
    assert paired(a, b, higher_better=True, rel_delta=0.0).diff == pytest.approx(-1.0)


def test_one_seed_has_no_interval_and_never_decides() -> None:
    p = paired([5.0], [1.0], higher_better=True, rel_delta=0.1)
    assert p.half is None and p.verdict == "undetermined"
    assert (p.n, p.diff, p.delta) == (1, 4.0, pytest.approx(0.5))  # its difference is still said
    empty = paired([], [], higher_better=True, rel_delta=0.1)
    assert empty.n == 0 and math.isnan(empty.diff) and empty.verdict == "undetermined"
    assert mean_interval([3.0]) == (3.0, None, "one seed: no interval")


@pytest.mark.parametrize("diff,half,delta,verdict", [
    (1.0, 0.5, 0.1, "better"),       # interval above 0 and the mean beyond delta
    (-1.0, 0.5, 0.1, "worse"),
    (0.05, 0.5, 0.1, "undetermined"),  # interval reaches past ± delta both ways
    (0.05, 0.04, 0.1, "equivalent"),   # interval within ± delta
    (0.05, 0.01, 0.1, "equivalent"),   # above 0 but smaller than delta: does not matter
    (0.2, 0.3, 0.1, "undetermined"),   # mean beyond delta yet interval crosses 0
    (0.1, 0.0, 0.1, "equivalent"),     # exactly delta is within indifference
    (-0.1, 0.0, 0.1, "equivalent"),
    (0.0, 0.1, 0.1, "equivalent"),     # the interval touching ± delta is within it
    (0.0, 0.1000001, 0.1, "undetermined"),
    (-0.2, 0.3, 0.1, "undetermined"),  # the mirror: mean below -delta yet interval crosses 0
    (-0.1, 0.1, 0.1, "undetermined"),  # interval ends at 0 yet reaches past -delta: not settled
    (-0.2, 0.2, 0.1, "undetermined"),  # beyond -delta but the interval touches 0: not worse
    (0.2, 0.2, 0.1, "undetermined"),   # beyond delta but the interval touches 0: not better
    (0.1, 0.1, 0.1, "undetermined"),
    (0.3, 0.25, 0.1, "better"),
    (-0.3, 0.25, 0.1, "worse"),
])
def test_verdict_reads_interval_against_indifference_amount(diff, half, delta, verdict) -> None:
    assert Paired(5, diff, half, delta).verdict == verdict


def test_mean_interval_half_width_is_student_t_with_sample_std() -> None:
    v = [1.0, 2.0, 4.0, 7.0]
    mean, half, _ = mean_interval(v)
    assert mean == pytest.approx(3.5)
    assert half == pytest.approx(stats.t.ppf(0.975, 3) * stats.tstd(v) / 2.0, rel=1e-4)


@settings(max_examples=200, deadline=None)
@given(v=st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=15))
def test_seed_intervals_are_student_t_with_sample_std(v) -> None:
    expected = stats.t.ppf(0.975, len(v) - 1) * stats.tstd(v) / math.sqrt(len(v))
    mean, half = mean_ci95(v)
    assert mean == pytest.approx(float(np.mean(v)), abs=1e-9)
    assert half == pytest.approx(expected, rel=1e-3, abs=1e-9)
    assert ci95_halfwidth(v) == pytest.approx(expected, rel=1e-3, abs=1e-9)
    assert ci95_halfwidth(v[:1]) == 0.0 and mean_ci95(v[:1])[1] is None


@settings(max_examples=300, deadline=None)
@given(mean=st.floats(-10, 10), half=st.floats(0, 10), lo=st.floats(-5, 0), width=st.floats(0, 10))
def test_clipped_interval_stays_in_range_and_says_when_clipped(mean, half, lo, width) -> None:
    hi = lo + width
    low, high, clipped = clip_interval(mean, half, lo, hi)
    assert lo <= low <= high <= hi
    assert clipped == (mean - half < lo or mean + half > hi)


@pytest.mark.parametrize("diff,half,reach", [(0.5, 0.25, 0.75), (-0.5, 0.25, 0.75), (-0.5, None, 0.5)])
def test_reach_of_an_undetermined_answer_is_abs_diff_plus_half_width(diff, half, reach) -> None:
    assert Paired(3, diff, half, 0.0).reach == pytest.approx(reach)


def test_interval_touching_the_range_ends_is_not_clipped() -> None:
    assert clip_interval(1.0, 1.0, 0.0, 2.0) == (0.0, 2.0, False)
    assert clip_interval(1.0, 1.5, 0.0, 2.0) == (0.0, 2.0, True)


def test_seeds_that_all_agree_read_plus_minus_zero_and_others_their_half_width() -> None:
    assert mean_interval([2.0, 2.0, 2.0]) == (2.0, 0.0, "± 0 (all 3 seeds agree)")
    assert mean_interval([101.0, 103.0])[2] == "± 13"  # 12.706 · √2 / √2


@pytest.mark.parametrize("a,b", [([math.inf, 1.0], [1.0, 1.0]), ([1.0, 2.0], [math.inf, math.inf]),
                                 ([math.nan, 1.0], [1.0, 1.0])])
def test_a_seed_without_a_finite_value_leaves_the_comparison_undetermined_without_an_indifference_amount(a, b) -> None:
    # an infinite mean has no share to take: the amount is 0, and the difference is not a number
    p = paired(a, b, higher_better=False, rel_delta=0.05)
    assert p.n == 2 and math.isnan(p.diff) and p.half is None and p.verdict == "undetermined"
    if any(math.isinf(x) for x in (*a, *b)):
        assert p.delta == 0.0


def test_seed_intervals_skip_missing_and_nan_seeds_and_an_infinite_seed_has_no_interval() -> None:
    mean, half = mean_ci95([1.0, None, math.nan, 3.0])
    assert mean == 2.0 and half == pytest.approx(stats.t.ppf(0.975, 1) * stats.tstd([1.0, 3.0]) / math.sqrt(2), rel=1e-4)
    assert mean_ci95([None, math.nan]) == (None, None)
    assert mean_ci95([1.0, math.inf]) == (math.inf, None) and mean_ci95([math.inf, -math.inf]) == (-math.inf, None)
