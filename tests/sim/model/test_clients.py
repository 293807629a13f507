"""Closed-loop clients (``sim.model.drivers.clients``): each client's next request arrives when its
last one ends (plus think time); with no think time and room in the engine, every step runs
exactly N sequences; the pool's rows never depend on its size (common random numbers)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from sim.contracts.synthetic import synthetic_profile
from sim.model.drivers.clients import ClientFleet, PoolExhausted, pool_specs
from sim.model.drivers.engine import FleetSpec
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer, ProfileStepTimer
from sim.results.records import requests_frame, steps_frame

ROOMY = SchedulerConfig.of(max_num_seqs=64, max_num_batched_tokens=2048, block_size=16, kv_blocks=20_000)
TINY = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=8, block_size=4, kv_blocks=100)


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
    cfg = SchedulerConfig.of(max_num_seqs=seqs, max_num_batched_tokens=256, block_size=16, kv_blocks=2_000)
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
    from sim.model.drivers.clients import pool_thinks

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


@pytest.mark.parametrize("think", [0.0, 0.05])
def test_next_request_waits_for_the_answer_overhead_included(think: float) -> None:
    """1 client, 0.1 s a step, 0.2 s overhead outside the engine: each request reaches the engine
    its overhead after the client sent it, and the client sends the next at the answer's end +
    think, so arrival(k+1) = finish(k) + think + overhead and the client-side E2E (finish −
    arrival + overhead) plus think tiles the client's time."""
    reqs = [Request(i, i, 0.0, 4, o) for i, o in enumerate((3, 2, 4, 5, 1))]
    fleet = ClientFleet(FleetSpec(TINY), FixedStepTimer(0.1), None, 1, think, 1.5, 0.2)
    rf, _ = frames(fleet, reqs)
    want_arr, want_fin, sent = [], [], 0.0
    for o in (3, 2, 4)[: rf.height]:
        want_arr.append(sent + 0.2)
        want_fin.append(sent + 0.2 + 0.1 * o)
        sent = sent + 0.2 + 0.1 * o + think
    assert rf.height == 3
    assert rf["arrival_s"].to_list() == pytest.approx(want_arr, abs=1e-12)
    assert rf["finish_s"].to_list() == pytest.approx(want_fin, abs=1e-12)


def test_overhead_per_request_follows_its_own_prompt() -> None:
    """Overhead per pool row (a per-prompt-token part): request k reaches the engine its own
    overhead after its client sent it, at the previous end + think."""
    reqs = [Request(i, i, 0.0, 8 + 40 * (i % 3), 3 + i % 4) for i in range(50)]
    over = np.array([0.01 + 0.001 * r.prompt_tokens for r in reqs])
    fleet = ClientFleet(FleetSpec(ROOMY), ProfileStepTimer(synthetic_profile()), None, 1, 0.03, 1.0, over)
    rf, _ = frames(fleet, reqs)
    arr, fin = rf["arrival_s"].to_numpy(), rf["finish_s"].to_numpy()
    assert rf.height > 5 and arr[0] == over[0]
    np.testing.assert_allclose(arr[1:], fin[:-1] + 0.03 + over[1: rf.height], rtol=0, atol=1e-12)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 6), think=st.sampled_from([0.0, 0.02, 0.1]), fixed=st.sampled_from([0.05, 0.2]),
       per_token=st.sampled_from([0.0, 0.0005]), exp_think=st.booleans(), seed=st.integers(0, 2**16))
def test_littles_law_holds_with_request_overhead(n: int, think: float, fixed: float, per_token: float,
                                                  exp_think: bool, seed: int) -> None:
    """N = X · (R + Z) within 3 % over the measured window (arrivals after warm-up, before the
    clients stop), R the E2E latency the results report (engine time + overhead), Z the think
    time: a client's next request waits for the whole answer as it sees it."""
    rng = np.random.default_rng(seed)
    m = 4000
    reqs = [Request(i, i, 0.0, int(p), int(o)) for i, (p, o) in
            enumerate(zip(rng.integers(8, 200, m), rng.integers(2, 40, m), strict=True))]
    over = fixed + per_token * np.array([r.prompt_tokens for r in reqs], float)
    thinks = rng.exponential(think, m) if exp_think and think > 0 else think
    warm, stop = 5.0, 80.0
    fleet = ClientFleet(FleetSpec(ROOMY), ProfileStepTimer(synthetic_profile()), None, n, thinks, stop, over)
    rf, _ = frames(fleet, reqs)
    sel = rf.with_row_index("row").filter((pl.col("arrival_s") >= warm) & (pl.col("arrival_s") < stop))
    rows = sel["row"].to_numpy()
    assert (sel["outcome"] == "completed").all()
    x = sel.height / (stop - warm)
    r = float((sel["finish_s"].to_numpy() - sel["arrival_s"].to_numpy() + over[rows]).mean())
    z = float(np.mean(thinks[rows])) if isinstance(thinks, np.ndarray) else think
    assert x * (r + z) == pytest.approx(n, rel=0.03)


def test_python_priced_steps_give_the_compiled_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closed loop with overhead and timeouts: the compiled step (the timer packed) and the
    SimPy-priced step (Python prices every step) give the same records, bit for bit."""
    from sim.model import timer_packing

    def run() -> tuple[pl.DataFrame, pl.DataFrame]:
        reqs = [Request(i, i, 0.0, 8 + (13 * i) % 120, 2 + (7 * i) % 30, timeout_s=0.4) for i in range(3000)]
        over = np.array([0.02 + 0.0004 * r.prompt_tokens for r in reqs])
        cfg = SchedulerConfig.of(max_num_seqs=6, max_num_batched_tokens=128, block_size=16, kv_blocks=400)
        fleet = ClientFleet(FleetSpec(cfg, replicas=2), ProfileStepTimer(synthetic_profile()), None, 9, 0.01,
                            3.0, over)
        return frames(fleet, reqs)

    compiled = run()
    monkeypatch.setattr(timer_packing, "pack", lambda timer, proposer: None)
    python = run()
    assert compiled[0].height > 50
    assert_frame_equal(compiled[0], python[0])
    assert_frame_equal(compiled[1], python[1])
