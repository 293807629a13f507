"""The per-batch best-k rule, its ranges, the threshold warning and the ``schedule = "auto"``
candidate fields (``sim.model.k_schedule``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.candidate import Candidate
from sim.contracts.errors import FieldError
from sim.contracts.synthetic import synthetic_profile
from sim.model.k_schedule import (
    MIX_POINTS,
    SWITCH_GAIN,
    BatchCost,
    compute_schedule,
    drafting_mix,
    ranges,
    straddled,
)
from sim.model.step_time import ProfileStepTimer


def _cells(ks: list[int]) -> list[BatchCost]:
    """Cells whose best k is ``ks[b - 1]`` at batch b (that k's time lowest)."""
    return [BatchCost(b, tuple(0.5 if j == k else 1.0 for j in range(6))) for b, k in enumerate(ks, 1)]


@given(st.lists(st.integers(0, 5), min_size=1, max_size=80))
def test_ranges_cover_every_batch_once_with_its_best_k_and_merge_equal_neighbours(ks) -> None:
    sched = ranges(_cells(ks))
    assert sched[0][0] == 1 and sched[-1][1] == len(ks)
    for (a, b, k), nxt in zip(sched, (*sched[1:], None), strict=True):
        assert a <= b and all(ks[i - 1] == k for i in range(a, b + 1))
        if nxt is not None:
            assert nxt[0] == b + 1 and nxt[2] != k


@given(st.lists(st.lists(st.floats(0.1, 10.0), min_size=4, max_size=4), min_size=1, max_size=60),
       st.sampled_from([0.0, 0.02, 0.2]))
def test_a_batch_keeps_the_current_k_only_while_it_is_within_the_gain_of_its_best(times, gain) -> None:
    cells = [BatchCost(b, tuple(t)) for b, t in enumerate(times, 1)]
    sched = ranges(cells, gain)
    for (a, b, k), nxt in zip(sched, (*sched[1:], None), strict=True):
        for c in cells[a - 1:b]:
            assert c.per_k_s[k] <= min(c.per_k_s) * (1 + gain)
        assert cells[a - 1].best_k == k  # a range starts at its first batch's best k
        if nxt is not None:  # and it ends only where its k is no longer good enough
            assert nxt[2] != k and cells[b].per_k_s[k] > min(cells[b].per_k_s) * (1 + gain)


@settings(max_examples=15, deadline=None)
@given(per_token_s=st.floats(0.0001, 0.003), alpha=st.floats(0.2, 0.95), top=st.integers(1, 64))
def test_each_batch_gets_a_k_within_the_switch_gain_of_the_fewest_seconds_per_token(per_token_s, alpha, top) -> None:
    prof = synthetic_profile(per_token_s=per_token_s)
    timer = ProfileStepTimer(prof)
    rates = [alpha ** i for i in range(1, 6)]
    s = compute_schedule(timer, "ngram", top, 300.0, rates, 1.0, "assumed")
    for a, b, k in s.ranges:
        for cell in s.cells[a - 1:b]:
            assert cell.per_k_s[k] <= min(cell.per_k_s) * (1 + SWITCH_GAIN)
    # k never pays less at a larger batch on a linear profile: the schedule's k does not rise
    assert [k for *_, k in s.ranges] == sorted((k for *_, k in s.ranges), reverse=True)


def test_a_batch_straddling_a_switch_warns_and_one_far_from_it_does_not() -> None:
    kbb = ((1, 3), (20, 1))
    hover = np.array([18] * 30 + [19] * 10 + [20] * 30 + [21] * 20 + [5] * 10)
    assert straddled(kbb, hover) == [(20, 3, 1, pytest.approx(0.4), pytest.approx(0.5))]
    assert straddled(kbb, np.array([5] * 50 + [40] * 50)) == []
    assert straddled(kbb, np.array([19] * 90 + [20] * 10)) == []  # one side only: 10 % ≤ 20 %
    assert straddled(((1, 2), (20, 2)), hover) == []  # no switch where k stays


def test_schedule_auto_needs_k_by_batch_policy_and_k_and_no_rows_of_its_own() -> None:
    ok = Candidate("a", proposer="ngram", policy="k_by_batch", schedule="auto", k=4)
    assert ok.max_k == 4 and ok.k_by_batch is None
    with pytest.raises(FieldError, match="k_by_batch.*give one of the two"):
        Candidate("a", proposer="ngram", policy="k_by_batch", schedule="auto", k=4, k_by_batch=((1, 2),))
    with pytest.raises(FieldError, match="k.*required"):
        Candidate("a", proposer="ngram", policy="k_by_batch", schedule="auto")
    with pytest.raises(FieldError, match="schedule.*only for policy"):
        Candidate("a", proposer="ngram", policy="fixed", schedule="auto", k=4)


@given(b=st.integers(1, 10**7), p=st.floats(0.001, 0.999))
def test_drafting_mix_is_a_distribution_over_the_batch_with_the_binomials_mean_and_spread(b, p) -> None:
    mix = drafting_mix(b, p)
    assert all(0 <= n <= b for n, _ in mix) and len(mix) <= MIX_POINTS + 1
    assert sum(w for _, w in mix) == pytest.approx(1.0, abs=1e-12)
    mean = sum(n * w for n, w in mix)
    assert mean == pytest.approx(b * p, rel=1e-9, abs=1e-9)
    var = sum((n - mean) ** 2 * w for n, w in mix)
    assert abs(var - b * p * (1 - p)) <= 0.25 + 1e-9 * b  # exact, or a node's two neighbours


@given(b=st.integers(1, 30), p=st.floats(0.01, 0.99))
def test_drafting_mix_is_the_exact_binomial_for_small_batches(b, p) -> None:
    mix = dict(drafting_mix(b, p))
    for n in range(b + 1):
        assert mix.get(n, 0.0) == pytest.approx(math.comb(b, n) * p**n * (1 - p) ** (b - n), abs=1e-12)
    assert drafting_mix(b, p, full_width=True) == ((b, 1.0),) and drafting_mix(b, 1.0) == ((b, 1.0),)
