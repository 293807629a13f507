"""A segment's sample size and bootstrap interval (sim/contracts/acceptance_interval.py) and the
profile's ``uncertainty`` object that stores them (sim/contracts/profile_acceptance.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.acceptance_interval import bootstrap_interval, more_prompts, segment_uncertainty
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import parse_profile_text
from sim.contracts.synthetic import synthetic_profile_dict

K = 3


@st.composite
def prompt_rows(draw, min_size=2, max_size=12):
    """Per-prompt counters: drafts ≥ 1 and non-increasing accepted counts per position."""
    n = draw(st.integers(min_size, max_size))
    drafts, acc = [], []
    for _ in range(n):
        d = draw(st.integers(1, 30))
        row = sorted(draw(st.lists(st.integers(0, d), min_size=K, max_size=K)), reverse=True)
        drafts.append(d)
        acc.append(row)
    return drafts, acc


@settings(max_examples=40, deadline=None)
@given(rows=prompt_rows(), seed=st.integers(0, 2**32 - 1))
def test_the_interval_holds_the_estimate_and_repeats_with_the_seed(rows, seed):
    drafts, acc = rows
    got = bootstrap_interval(drafts, acc, np.random.default_rng(seed), resamples=400)
    assert got == bootstrap_interval(drafts, acc, np.random.default_rng(seed), resamples=400)
    s_lo, s_hi, l_lo, l_hi = got
    point = np.array(acc).sum(axis=0) / sum(drafts)
    length = 1 + np.cumsum(point)
    for i in range(K):
        assert 0.0 <= s_lo[i] <= point[i] + 1e-6 and point[i] - 1e-6 <= s_hi[i] <= 1.0
        assert l_lo[i] <= length[i] + 1e-6 <= l_hi[i] + 2e-6
    assert all(a <= b + 1e-9 for a, b in zip(l_lo, l_lo[1:], strict=False))  # a longer draft never accepts less


@settings(max_examples=25, deadline=None)
@given(rows=prompt_rows(min_size=4), m=st.sampled_from([4, 9]))
def test_the_interval_shrinks_with_the_square_root_of_the_prompts(rows, m):
    """The same prompts measured m times over: the width falls by about √m."""
    drafts, acc = rows
    one = bootstrap_interval(drafts, acc, np.random.default_rng(1), resamples=3000)
    many = bootstrap_interval(drafts * m, acc * m, np.random.default_rng(1), resamples=3000)
    w1, wm = one[3][-1] - one[2][-1], many[3][-1] - many[2][-1]
    if w1 > 0.05:
        assert 0.6 / math.sqrt(m) < wm / w1 < 1.5 / math.sqrt(m)


def test_under_two_drafting_prompts_there_is_no_interval():
    assert bootstrap_interval([10], [[5, 3, 1]], np.random.default_rng(0)) is None
    assert bootstrap_interval([10, 0, 0], [[5, 3, 1], [0, 0, 0], [0, 0, 0]], np.random.default_rng(0)) is None
    assert bootstrap_interval([], [], np.random.default_rng(0)) is None


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 500), h=st.floats(0.01, 5), ratio=st.floats(0.02, 0.99))
def test_more_prompts_is_the_fewest_that_settle(n, h, ratio):
    target = h * ratio
    m = more_prompts(n, h, target)
    assert h * math.sqrt(n / (n + m)) <= target * (1 + 1e-9)
    if m > 1:
        assert h * math.sqrt(n / (n + m - 1)) > target


def _profile(**seg_extra):
    d = synthetic_profile_dict(acceptance_rates=(0.7, 0.5, 0.3), per_request_rows=5)
    seg = d["acceptance"]["ngram"]["segments"][0]
    seg.update(seg_extra)
    return d


def test_a_profile_reads_its_uncertainty_and_one_without_it_still_loads():
    d = _profile()
    seg = d["acceptance"]["ngram"]["segments"][0]
    seg["uncertainty"] = segment_uncertainty(seg, np.random.default_rng(0))
    got = parse_profile_text(json.dumps(d), "p.json").acceptance["ngram"].segments[0].uncertainty
    assert got.prompts == 5 and got.has_interval and len(got.length_low) == 3
    old = parse_profile_text(json.dumps(_profile()), "p.json").acceptance["ngram"].segments[0]
    assert old.uncertainty is None


@pytest.mark.parametrize(("unc", "says"), [
    ({"prompts": 0}, "prompts: must be >= 1"),
    ({"prompts": 3, "length_low": [1, 1, 1]}, "give all of survival_low, survival_high, length_low, length_high"),
    ({"prompts": 3, "survival_low": [0.5, 0.4, 0.3], "survival_high": [0.4, 0.4, 0.3],
      "length_low": [1.5, 1.9, 2.2], "length_high": [1.5, 1.9, 2.2]}, "survival_low[0]: must be <= survival_high[0]"),
    ({"prompts": 3, "survival_low": [0.5, 0.4], "survival_high": [0.6, 0.4],
      "length_low": [1.5, 1.9], "length_high": [1.6, 2.0]}, "expected a list of k_max = 3 numbers"),
])
def test_a_bad_uncertainty_object_is_one_line_naming_the_field(unc, says):
    with pytest.raises(SpecplanError) as e:
        parse_profile_text(json.dumps(_profile(uncertainty=unc)), "p.json")
    msg = str(e.value)
    assert "\n" not in msg and "acceptance.ngram.segments[0].uncertainty" in msg and says in msg
