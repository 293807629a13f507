"""Multilinear interpolation, clamped linear extrapolation, null filling and counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.grid import GridInterpolator, fill_nulls

AXES = ([1.0, 2.0, 4.0, 8.0], [1.0, 3.0, 5.0], [0.0, 512.0, 2048.0])


def multilinear(b: float, s: float, c: float) -> float:
    """Linear in each variable separately: multilinear interpolation reproduces it exactly."""
    return 0.01 + 0.002 * b + 0.0003 * b * s + 1e-6 * b * c + 2e-7 * s * c + 1e-8 * b * s * c


def make() -> GridInterpolator:
    vals = np.array([[[multilinear(b, s, c) for c in AXES[2]] for s in AXES[1]] for b in AXES[0]])
    return GridInterpolator(AXES, vals, name="f", axis_names=("batch", "tokens_per_seq", "context"))


def test_exact_inside_grid_for_multilinear_function() -> None:
    g = make()
    rng = np.random.default_rng(1)
    for _ in range(300):
        b, s, c = rng.uniform(1, 8), rng.uniform(1, 5), rng.uniform(0, 2048)
        assert g(b, s, c) == pytest.approx(multilinear(b, s, c), rel=1e-12)
    assert g(4, 3, 512) == pytest.approx(multilinear(4, 3, 512), rel=1e-15)
    assert g.extrapolations() == {}
    assert g.calls == 301


def test_extrapolation_above_is_linear_and_counted_per_axis_and_side() -> None:
    g = make()
    # increasing in every axis: above the grid the extrapolation of a multilinear function is exact
    assert g(16, 3, 4096) == pytest.approx(multilinear(16, 3, 4096), rel=1e-12)
    assert g(2, 9, 100) == pytest.approx(multilinear(2, 9, 100), rel=1e-12)
    assert g.extrapolations() == {"batch above 8": 1, "context above 2048": 1, "tokens_per_seq above 5": 1}
    assert g.extrapolations_by_axis() == {"batch": 1, "tokens_per_seq": 1, "context": 1}
    # a cached point still counts
    g(16, 3, 4096)
    assert g.extrapolations()["batch above 8"] == 2
    g.reset_counts()
    assert g.extrapolations() == {} and g.calls == 0


def test_extrapolation_never_falls_below_the_end_point() -> None:
    # increasing line: below the grid it is held at the first value, never extrapolated down
    g = GridInterpolator([[10.0, 20.0, 30.0]], np.array([1.0, 2.0, 4.0]), axis_names=("x",))
    assert g(0.0) == 1.0
    assert g(40.0) == pytest.approx(6.0)  # linear from the last two points: 4 + (40-30)*(2/10)
    # decreasing end segment: above the grid it is held flat instead of shrinking (or going < 0)
    g2 = GridInterpolator([[1.0, 2.0, 3.0]], np.array([5.0, 4.0, 1.0]), axis_names=("x",))
    assert g2(100.0) == 1.0
    assert g2(0.0) == pytest.approx(6.0)  # rising towards the lower edge: linear
    assert g2.extrapolations() == {"x above 3": 1, "x below 1": 1}


def test_single_point_axis_is_constant_and_counts_when_off_point() -> None:
    g = GridInterpolator([[1.0], [0.0, 10.0]], np.array([[1.0, 3.0]]), axis_names=("batch", "c"))
    assert g(1, 5) == pytest.approx(2.0)
    assert g(4, 5) == pytest.approx(2.0)
    assert g.extrapolations() == {"batch above 1": 1}


def test_nulls_filled_from_nearest_along_last_axis_ties_to_lower() -> None:
    vals = np.array([[1.0, math.nan, 3.0, math.nan, math.nan], [math.nan] * 5, [7.0, 8.0, 9.0, 10.0, 11.0]])
    filled, n = fill_nulls(vals)
    assert n == 8
    # row 0: index 1 ties between 0 and 2 -> lower (1.0); 3, 4 -> nearest measured is index 2
    np.testing.assert_array_equal(filled[0], [1.0, 1.0, 3.0, 3.0, 3.0])
    # row 1 has nothing measured: filled along the first axis, ties to the lower row
    np.testing.assert_array_equal(filled[1], filled[0])
    g = GridInterpolator([[1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0, 4.0]], vals)
    assert g.filled == 8
    assert g(1.0, 3.5) == 3.0


def test_fill_refuses_all_null_and_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="no measured cell"):
        fill_nulls(np.full((2, 2), math.nan))
    with pytest.raises(ValueError, match="shape"):
        GridInterpolator([[1.0, 2.0]], np.array([1.0, 2.0, 3.0]))


def test_cache_evicts_but_values_stay_right() -> None:
    g = GridInterpolator([[0.0, 1.0]], np.array([0.0, 1.0]), cache_size=4)
    for i in range(20):
        assert g(i / 19) == pytest.approx(i / 19)
    assert len(g._cache) <= 4
    assert g(0.5) == pytest.approx(0.5)


@settings(max_examples=200, deadline=None)
@given(
    b=st.floats(1, 8),
    s=st.floats(1, 5),
    c=st.floats(0, 2048),
    seed=st.integers(0, 2**32 - 1),
)
def test_inside_grid_value_lies_between_grid_min_and_max(b: float, s: float, c: float, seed: int) -> None:
    vals = np.random.default_rng(seed).uniform(0.0, 1.0, size=(4, 3, 3))
    g = GridInterpolator(AXES, vals)
    v = g(b, s, c)
    assert vals.min() - 1e-12 <= v <= vals.max() + 1e-12


@settings(max_examples=200, deadline=None)
@given(x=st.floats(-1e4, 1e5), seed=st.integers(0, 2**32 - 1))
def test_extrapolated_values_are_never_negative(x: float, seed: int) -> None:
    vals = np.random.default_rng(seed).uniform(0.0, 1.0, size=5)
    g = GridInterpolator([[1.0, 2.0, 4.0, 8.0, 16.0]], vals)
    assert g(x) >= min(vals) - 1e-12
