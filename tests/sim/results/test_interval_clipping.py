"""Intervals are shown within the metric's range on every surface (attainment never above
100 %, shares never below 0, acceptance lengths never below 1): one rule,
``sim.results.intervals.clip_interval``, over ``metric_names.metric_range``."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.view import format_number
from sim.decisions.paired import mean_interval
from sim.results import metric_names as mn
from sim.results.intervals import clip_interval, interval_text
from sim.results.summary_table import ROWS, _cell

finite = st.floats(-1e6, 1e6, allow_nan=False)
halves = st.floats(0.0, 1e6, allow_nan=False)
metrics = st.sampled_from(mn.METRIC_COLUMNS)


@settings(max_examples=500, deadline=None)
@given(mean=finite, half=halves, col=metrics)
def test_a_clipped_interval_lies_in_the_metrics_range_and_holds_the_mean(mean, half, col):
    lo, hi = mn.metric_range(col)
    low, high, clipped = clip_interval(mean, half, lo, hi)
    assert lo <= low <= high <= hi
    if lo <= mean <= hi:
        assert low <= mean <= high
    assert clipped == (mean - half < lo or mean + half > hi)
    if not clipped:
        assert (low, high) == (mean - half, mean + half)


def test_each_metric_has_its_range():
    for col in mn.SHARE_COLUMNS:
        assert mn.metric_range(col) == (0.0, 1.0)
        assert mn.metric_range(mn.ci_col(col)) == (0.0, 1.0)
    assert mn.metric_range(mn.MEAN_ACCEPTANCE_LENGTH) == (1.0, math.inf)
    assert mn.metric_range(mn.latency_col(mn.TTFT, "p99")) == (0.0, math.inf)


_NUM = r"-?[\d,]+(?:\.\d+)?"


def _ends(text: str) -> tuple[float, float] | None:
    """The interval's ends as a surface wrote them: [low–high], or mean ± half."""
    if m := re.search(rf"\[\$?({_NUM})%?–\$?({_NUM})%?\]", text):
        return float(m[1].replace(",", "")), float(m[2].replace(",", ""))
    if m := re.search(rf"^\$?({_NUM})%? ± \$?({_NUM})%?$", text):
        v, h = float(m[1].replace(",", "")), float(m[2].replace(",", ""))
        return v - h, v + h
    return None


@settings(max_examples=300, deadline=None)
@given(mean=st.floats(0.0, 1.0), half=st.floats(0.0005, 3.0))
def test_no_surface_shows_attainment_outside_0_to_100_percent(mean, half):
    """Terminal table cell, dashboard/report key number and the verdict's interval text."""
    row = {mn.SLO_ATTAINMENT: mean, mn.ci_col(mn.SLO_ATTAINMENT): half}
    spec = next(r for r in ROWS if r.column == mn.SLO_ATTAINMENT)
    for text, top in ((_cell(row, spec, None), 100.0), (format_number(mn.SLO_ATTAINMENT, mean, half), 100.0)):
        ends = _ends(text)
        assert ends is not None, text
        assert -1e-9 <= ends[0] and ends[1] <= top + 0.05, text  # rounding of the printed digits only
    seeds = [max(0.0, mean - half), min(1.0, mean + half)]
    txt = mean_interval(seeds, 0.0, 1.0)[2]
    nums = [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", txt.split(":")[-1])]
    if "clipped" in txt:
        assert all(0.0 <= x <= 1.0 for x in nums[-2:]), txt


@settings(max_examples=200, deadline=None)
@given(mean=st.floats(1.0, 5.0), half=st.floats(0.001, 10.0), col=st.sampled_from(
    [mn.SPEC_OFF_STEPS, mn.SPEC_OFF_TIME, mn.PREFIX_HIT_RATE, mn.MEAN_ACCEPTANCE_LENGTH, mn.REQUEST_GOODPUT]))
def test_interval_text_never_writes_a_plus_minus_past_the_range(mean, half, col):
    lo, hi = mn.metric_range(col)
    m = min(max(mean, lo), hi)
    text = interval_text(m, half, lambda x: f"{x:.6f}", lo, hi)
    if text.startswith(" ±"):
        assert m - half >= lo and m + half <= hi
    else:
        a, b = (float(x) for x in text.strip(" []").split("–"))
        assert lo <= a <= b <= hi
