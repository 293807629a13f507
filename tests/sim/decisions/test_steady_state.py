"""Runaway queues are told apart from steady ones by the trend of waits over the window."""

from __future__ import annotations

import numpy as np
import polars as pl

from sim.decisions.steady_state import queue_trend
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer
from sim.results.records import requests_frame

CFG = SchedulerConfig.of(max_num_seqs=1, max_num_batched_tokens=16, block_size=16, kv_blocks=4)


def md1_requests(rho: float, seed: int, duration_s: float = 120.0) -> pl.DataFrame:
    """M/D/1 with service 1 s for ``duration_s`` of arrivals at ``rho``; 10 s warm-up."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rho, size=int(duration_s * rho * 2)))
    reqs = [Request(i, i, float(t), 1, 1) for i, t in enumerate(times[times < duration_s])]
    run = Fleet(FleetSpec(CFG), FixedStepTimer(1.0)).run(reqs)
    return requests_frame(run, "c", seed, warmup_s=10.0)


def test_an_overloaded_queue_is_growing():
    trends = [queue_trend(md1_requests(1.1, seed, duration_s=600.0)) for seed in range(10)]
    assert all(t.growing for t in trends), [t.describe() for t in trends]
    assert trends[0].describe().startswith("queue growing: the wait rises +")


def test_a_stable_queue_is_steady():
    trends = [queue_trend(md1_requests(0.6, seed, duration_s=300.0)) for seed in range(10)]
    assert not any(t.growing for t in trends), [t.describe() for t in trends]


def test_a_short_window_cannot_tell():
    t = queue_trend(md1_requests(0.6, 0, duration_s=30.0))
    assert t.state == "unknown" and "needs 40" in t.describe()


def test_requests_still_queued_at_the_end_count_with_their_whole_wait():
    frame = pl.DataFrame({
        "in_window": [True] * 40,
        "arrival_s": [float(i) for i in range(40)],
        "scheduled_s": [float(i) + 0.1 for i in range(20)] + [None] * 20,
        "finish_s": [float(i) + 1.0 for i in range(20)] + [None] * 20,
    })
    t = queue_trend(frame)
    assert abs(t.first_half_wait_s - 0.1) < 1e-9
    assert t.growing and t.growth_s > 5.0  # the last 20 waited until the run's end (39 s)
