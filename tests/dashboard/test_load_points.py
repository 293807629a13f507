"""Load points around each candidate's capacity: the estimate from a sweep and the points that
bracket it (dashboard.load_points)."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from dashboard import load_points as lp
from sim.decisions.sustain import SustainCriteria

CRIT = SustainCriteria(limits_ms={"ttft": 1000.0})


def rows(cand: str, points: list[tuple[float, float]]) -> pl.DataFrame:
    """Summary rows with a p95 TTFT per per-replica rate (every request completed)."""
    return pl.DataFrame([{"candidate": cand, "segment": "all", "rate": r, "ttft_ms_p95": t,
                          "completed": 500, "rejected": 0, "timed_out": 0, "unfinished": 0}
                         for r, t in points])


def test_estimate_interpolates_the_slo_crossing_on_log_rate() -> None:
    # margin 0.5 at 2 req/s, 2.0 at 8 req/s: log-linear → crosses 1 at 4 req/s
    e = lp.estimate(rows("a", [(1, 200), (2, 500), (8, 2000), (16, 9000)]), CRIT, "a")
    assert (e.lower, e.upper) == (2, 8) and e.estimate == pytest.approx(4.0)
    assert "estimated from the load points" in e.text()


def test_unbracketed_capacities_say_which_side_they_lie_on() -> None:
    above = lp.estimate(rows("a", [(1, 100), (2, 200)]), CRIT, "a")
    below = lp.estimate(rows("a", [(1, 1100), (2, 5000)]), CRIT, "a")
    assert above.estimate is None and above.lower == 2 and "above 2" in above.text()
    assert below.estimate is None and below.lower is None and "below 1" in below.text()
    extra = lp.bracket_factors({"a": above, "b": below}, rate_per_factor=2.0, have=(0.5, 1.0))
    assert extra == {"a": (1.5,), "b": (0.25,)}
    # too few requests to judge a p95 anywhere: said so, and no more points of the same length
    few = lp.estimate(rows("a", [(1, 100), (2, 200)]).with_columns(completed=pl.lit(10)), CRIT, "a")
    assert few.judged == 0 and "too few measured requests" in few.text()
    assert lp.bracket_factors({"a": few}, rate_per_factor=1.0, have=(1.0, 2.0)) == {}


@settings(max_examples=80, deadline=None)
@given(cap=hs.floats(0.2, 50.0), grid=hs.lists(hs.floats(0.1, 60.0), min_size=2, max_size=6, unique=True),
       steep=hs.floats(0.5, 4.0))
def test_bracketing_points_lie_inside_the_grid_bracket_around_the_estimate(cap, grid, steep) -> None:
    # p95 TTFT = 1000 ms × (rate / cap)^steep: the SLO breaks exactly at ``cap``
    pts = [(r, 1000.0 * (r / cap) ** steep) for r in sorted(grid)]
    e = lp.estimate(rows("a", pts), CRIT, "a")
    (extra,) = lp.bracket_factors({"a": e}, rate_per_factor=1.0, have=tuple(r for r, _ in pts)).values()
    if e.estimate is None:
        return
    assert e.lower <= cap <= e.upper  # noqa: PT018 - the bracket holds the true capacity
    assert e.estimate == pytest.approx(cap, rel=1e-6)  # the margin is log-linear here: exact
    assert len(extra) <= 2
    for f in extra:
        assert e.lower * 0.99 <= f <= e.upper * 1.01
        assert not any(math.isclose(f, r) for r, _ in pts)
    if len(extra) == 2:
        assert extra[0] <= e.estimate * 1.01 and extra[1] >= e.estimate * 0.99
