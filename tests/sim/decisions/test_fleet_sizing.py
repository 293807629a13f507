"""Replicas per candidate from a load sweep, and the cost at that size, by hand."""

from __future__ import annotations

import polars as pl
import pytest

from sim.decisions.fleet_sizing import size_from_sweep
from sim.decisions.sustain import SustainCriteria
from sim.results import metric_names as mn

TTFT95 = mn.latency_col(mn.TTFT, "p95")


def level(cand: str, rate: float, ttft: float, cost: float) -> dict:
    return {mn.CANDIDATE: cand, mn.SEGMENT: mn.ALL_SEGMENTS, "rate": rate, TTFT95: ttft,
            mn.COMPLETED: 500.0, mn.REJECTED: 0.0, mn.TIMED_OUT: 0.0, mn.UNFINISHED: 0.0,
            mn.COST_PER_GOOD_ANSWER_USD: cost}


def test_replicas_and_cost_follow_the_highest_sustained_level():
    sweep = pl.DataFrame([
        level("baseline", 1.0, 300.0, 2e-4), level("baseline", 2.0, 900.0, 1e-4), level("baseline", 3.0, 5000.0, 9e-5),
        level("draft", 1.0, 200.0, 2e-4), level("draft", 2.0, 400.0, 1e-4), level("draft", 3.0, 800.0, 7e-5),
        level("broken", 1.0, 9000.0, 5e-4),
    ])
    crit = SustainCriteria({"ttft": 1000.0})
    base, draft, broken = size_from_sweep(sweep, 10.0, crit, ["baseline", "draft", "broken"])
    assert (base.sustained_rate, base.failed_rate, base.replicas) == (2.0, 3.0, 5)
    assert base.cost_per_good_answer_usd == pytest.approx(1e-4 * 2.0 * 5 / 10.0)
    assert (draft.sustained_rate, draft.failed_rate, draft.replicas) == (3.0, None, 4)
    assert draft.cost_per_good_answer_usd == pytest.approx(7e-5 * 3.0 * 4 / 10.0)
    assert broken.replicas is None and "not reachable" in broken.describe(10.0)
    assert base.describe(10.0) == ("baseline: ≤ 5 replica(s) for 10 req/s, ≈$0.1/1k good answers "
                                   "(capacity 2–3 req/s per replica)")
