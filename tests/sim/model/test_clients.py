"""Closed-loop clients (``sim.model.clients``): each client's next request arrives when its
last one ends (plus think time); with no think time and room in the engine, every step runs
exactly N sequences; the pool's rows never depend on its size (common random numbers)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.synthetic import synthetic_profile
from sim.model.clients import ClientFleet, PoolExhausted, pool_specs
from sim.model.engine import FleetSpec
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer, ProfileStepTimer
from sim.results.records import requests_frame, steps_frame

ROOMY = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=2048, block_size=16, kv_blocks=20_000)
TINY = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8, block_size=4, kv_blocks=100)


def frames(fleet: ClientFleet, reqs: list[Request]) -> tuple[pl.DataFrame, pl.DataFrame]:
    run = fleet.run(reqs, write_back=False)
    return requests_frame(run, "c", 1, 0.0), steps_frame(run, "c", 1)


@pytest.mark.parametrize("think", [0.0, 0.05])
def test_one_client_exact_trace(think: float) -> None:
    """1 client, prompt 4, outputs 3, 2, 4, 0.1 s a step (prefill gives the first token): A
    0→0.3, B from 0.3 + think for 0.2, C after B + think for 0.4; the client stops at 0.85 +
    2·think, so the pool's fourth request is never sent (and not in the records)."""
    reqs = [Request(i, i, 0.0, 4, o) for i, o in enumerate((3, 2, 4, 5))]
    fleet = ClientFleet(FleetSpec(TINY), FixedStepTimer(0.1), None, 1, think, 0.85 + 2 * think)
    rf, steps = frames(fleet, reqs)
    want_arr, want_fin, t = [], [], 0.0
    for o in (3, 2, 4):
        want_arr.append(t)
        want_fin.append(t + 0.1 * o)
        t = t + 0.1 * o + think
    assert rf["id"].to_list() == [0, 1, 2]
    assert rf["outcome"].to_list() == ["completed"] * 3
    assert rf["arrival_s"].to_list() == pytest.approx(want_arr, abs=1e-12)
    assert rf["finish_s"].to_list() == pytest.approx(want_fin, abs=1e-12)
    assert rf["scheduled_s"].to_list() == rf["arrival_s"].to_list()  # nothing else in the way
    assert steps.height == 3 + 2 + 4


@pytest.mark.parametrize("think", [0.0, 0.02])
def test_compiled_arrivals_follow_ends(think: float) -> None:
    """The compiled step (a profile's timer): each request arrives at the previous one's end +
    think, exactly when there is no think time."""
    reqs = [Request(i, i, 0.0, 16 + i, 5 + (3 * i) % 7) for i in range(40)]
    fleet = ClientFleet(FleetSpec(ROOMY), ProfileStepTimer(synthetic_profile()), None, 1, think, 1.0)
    rf, _ = frames(fleet, reqs)
    arr, fin = rf["arrival_s"].to_numpy(), rf["finish_s"].to_numpy()
    assert 5 < rf.height < 40 and arr[0] == 0.0 and arr[-1] < 1.0 <= fin[-1] + think
    if think == 0:
        assert np.array_equal(arr[1:], fin[:-1])
    else:
        np.testing.assert_allclose(arr[1:], fin[:-1] + think, rtol=0, atol=1e-12)
    assert rf["prompt_tokens"].to_list() == [r.prompt_tokens for r in reqs[: rf.height]]  # pool order


@pytest.mark.parametrize("n", [1, 4, 16, 48])
def test_running_batch_is_n_without_think_time(n: int) -> None:
    """N clients, no think time, max_num_seqs ≥ N and ample KV: every step before the clients
    stop computes exactly N sequences (decoding ones + those prefilling their prompt, which fits
    one step), and the time-weighted number running is N."""
    reqs = [Request(i, i, 0.0, 32, 20 + (7 * i) % 30) for i in range(6000)]
    stop = 2.0
    fleet = ClientFleet(FleetSpec(ROOMY), ProfileStepTimer(synthetic_profile()), None, n, 0.0, stop)
    rf, steps = frames(fleet, reqs)
    steps = steps.filter(pl.col("t_start_s") < stop)
    starts = rf.group_by("scheduled_s").len().rename({"scheduled_s": "t_start_s", "len": "new"})
    per_step = steps.join(starts, on="t_start_s", how="left").with_columns(pl.col("new").fill_null(0))
    running = (per_step["decode_seqs"] + per_step["new"]).to_numpy()
    assert steps.height > 20 and (running == n).all()
    assert steps["queue_len"].max() == 0
    busy = (rf["finish_s"].clip(upper_bound=stop) - rf["scheduled_s"].clip(upper_bound=stop)).sum()
    assert busy / stop == pytest.approx(n, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), think=st.sampled_from([0.0, 0.003, 0.05]), seqs=st.integers(1, 16),
       timeout=st.sampled_from([None, 0.05, 0.3]))
def test_never_more_than_n_in_flight(n: int, think: float, seqs: int, timeout: float | None) -> None:
    """Whatever the limits (a batch smaller than N queues; client timeouts end requests early),
    a client has at most one request in flight, sends the next at its end + think, and the
    records hold only what was sent, in the pool's order."""
    cfg = SchedulerConfig(max_num_seqs=seqs, max_num_batched_tokens=256, block_size=16, kv_blocks=2_000)
    reqs = [Request(i, i, 0.0, 8 + i % 50, 3 + (5 * i) % 40, timeout_s=timeout) for i in range(3000)]
    fleet = ClientFleet(FleetSpec(cfg), ProfileStepTimer(synthetic_profile()), None, n, think, 0.6)
    rf, _ = frames(fleet, reqs)
    assert rf["id"].to_list() == list(range(rf.height))
    assert rf["outcome"].is_in(["completed", "timed_out"]).all()
    arr, fin = rf["arrival_s"].to_numpy(), rf["finish_s"].to_numpy()
    if timeout is not None:  # the client's end: it gives up at its deadline, whatever the engine does
        fin = np.minimum(fin, arr + timeout)
    assert (arr < 0.6).all() and (np.diff(arr) >= 0).all()
    events = sorted([(a, 1) for a in arr] + [(f, -1) for f in fin])  # an end sorts before a start
    assert max(np.cumsum([d for _, d in events])) <= n
    # every arrival after the first N is some earlier request's end + think
    ends = np.sort(fin + think)
    for a in arr[n:]:
        assert np.min(np.abs(ends - a)) <= 1e-9


def test_pool_exhausted_is_signalled() -> None:
    reqs = [Request(i, i, 0.0, 8, 4) for i in range(3)]
    fleet = ClientFleet(FleetSpec(ROOMY), ProfileStepTimer(synthetic_profile()), None, 2, 0.0, 10.0)
    with pytest.raises(PoolExhausted):
        fleet.run(reqs, write_back=False)


def test_pool_rows_do_not_depend_on_pool_size() -> None:
    """Row k of the pool is the same in a pool of any size (a grown pool repeats a run on the
    same requests), and the same for every candidate of a seed."""
    from sim.contracts.scenario import Scenario
    from tests.helpers import segment

    sc = Scenario.from_dict({
        "name": "c", "run": {"duration_s": 10, "seeds": [1]},
        "workload": {"arrival": "concurrency", "concurrency": 4,
                     "segments": [segment("a", 0.3, {"dist": "lognormal", "median": 100, "sigma": 1.0}, 50),
                                  segment("b", 0.7, 20, {"dist": "uniform", "min": 5, "max": 500})]},
        "fleet": {"profile": "p.json"}, "candidates": [{"name": "baseline", "speculation": "off"}],
    }, "t.toml", None)
    seq = np.random.SeedSequence(5)
    small = pool_specs(sc.workload, seq, 1500)
    large = pool_specs(sc.workload, seq, 5000)
    assert small == large[:1500]
    assert {s.segment for s in large} == {"a", "b"}


def test_think_time_per_request() -> None:
    """Exponential think times: one client's next request arrives exactly at its last one's end
    plus the think time drawn for that request (row), and the draws are the same rows in a pool
    of any size with the mean asked for."""
    from sim.contracts.lengths import LengthDist
    from sim.contracts.workload_config import SegmentConfig, WorkloadConfig
    from sim.model.clients import pool_thinks

    fixed = LengthDist("fixed", value=8)
    w = WorkloadConfig("concurrency", (SegmentConfig("a", 1.0, fixed, fixed),), concurrency=1,
                       think_time_s=0.2, think_time_dist="exponential")
    seq = np.random.SeedSequence(3)
    thinks = pool_thinks(w, seq, 3000)
    assert isinstance(thinks, np.ndarray) and np.array_equal(thinks[:1000], pool_thinks(w, seq, 1000))
    assert thinks.mean() == pytest.approx(0.2, rel=0.1) and thinks.std() == pytest.approx(0.2, rel=0.1)
    reqs = [Request(i, i, 0.0, 8, 4 + i % 5) for i in range(200)]
    fleet = ClientFleet(FleetSpec(ROOMY), ProfileStepTimer(synthetic_profile()), None, 1, thinks[:200], 5.0)
    rf, _ = frames(fleet, reqs)
    arr, fin = rf["arrival_s"].to_numpy(), rf["finish_s"].to_numpy()
    assert rf.height > 5
    np.testing.assert_allclose(arr[1:], fin[:-1] + thinks[: rf.height - 1], rtol=0, atol=1e-12)
