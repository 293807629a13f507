"""The engine against closed forms: M/M/1 and M/D/1 mean waits, and Little's law.

Batch size 1 (``max_num_seqs = 1``), no speculation, one-token prompts and outputs: a request is
exactly one engine step, so a pluggable step timer *is* the service-time distribution
(exponential → M/M/1, fixed → M/D/1). Poisson arrivals are exponential gaps, uncapped.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer, RandomServiceTimer
from sim.results.records import requests_frame
from sim.results.time_weighted import number_in_system_tw

LAMBDA = 0.5  # arrivals per second
MU = 1.0  # services per second (mean service 1 s)
RHO = LAMBDA / MU
N_REQUESTS = 25_000
WARMUP = 1_000  # requests dropped per seed
SEEDS = range(20)

CFG = SchedulerConfig.of(max_num_seqs=1, max_num_batched_tokens=16, block_size=16, kv_blocks=4)


def poisson_requests(rng: np.random.Generator, n: int) -> list[Request]:
    times = np.cumsum(rng.exponential(1.0 / LAMBDA, size=n)).tolist()
    return [Request(i, i, t, 1, 1) for i, t in enumerate(times)]


def run_mm1(seed: int, timer_kind: str):
    ss_arr, ss_svc = np.random.SeedSequence(seed).spawn(2)
    reqs = poisson_requests(np.random.default_rng(ss_arr), N_REQUESTS)
    if timer_kind == "exp":
        timer = RandomServiceTimer.exponential(1.0 / MU, np.random.default_rng(ss_svc))
    else:
        timer = FixedStepTimer(1.0 / MU)
    run = Fleet(FleetSpec(CFG), timer).run(reqs)
    return run, reqs


def mean_wait(timer_kind: str) -> float:
    waits = []
    for seed in SEEDS:
        _, reqs = run_mm1(seed, timer_kind)
        w = np.array([r.scheduled_s - r.arrival_s for r in reqs[WARMUP:]])
        waits.append(w.mean())
    return float(np.mean(waits))


def test_each_request_is_one_step() -> None:
    run, reqs = run_mm1(0, "exp")
    assert len(run.steps) == N_REQUESTS
    assert all(r.outcome == "completed" and r.num_bursts == 1 for r in reqs)
    # service = step duration = finish - start of service
    service = np.array([r.finish_s - r.scheduled_s for r in reqs])
    np.testing.assert_allclose(service, np.frombuffer(run.steps.duration_s), rtol=0, atol=1e-9)


@pytest.mark.slow
def test_mm1_mean_wait_matches_closed_form() -> None:
    wq_theory = RHO / (MU - LAMBDA)
    wq = mean_wait("exp")
    assert wq == pytest.approx(wq_theory, rel=0.03)


@pytest.mark.slow
def test_md1_mean_wait_matches_closed_form() -> None:
    wq_theory = RHO / (2 * MU * (1 - RHO))
    wq = mean_wait("fixed")
    assert wq == pytest.approx(wq_theory, rel=0.03)


def test_littles_law() -> None:
    """Time-weighted number in system = arrival rate × mean sojourn (and ≈ ρ/(1-ρ) for M/M/1)."""
    ls, lws = [], []
    for seed in range(5):
        run, reqs = run_mm1(100 + seed, "exp")
        df = requests_frame(run, "c", seed, warmup_s=reqs[WARMUP].arrival_s)
        t0 = reqs[WARMUP].arrival_s
        t1 = reqs[-1].arrival_s
        window = [r for r in reqs if t0 <= r.arrival_s < t1]
        lam = len(window) / (t1 - t0)
        w = float(np.mean([r.finish_s - r.arrival_s for r in window]))
        big_l = number_in_system_tw(df, t0, t1)
        ls.append(big_l)
        lws.append(lam * w)
        assert big_l == pytest.approx(lam * w, rel=0.03)
    assert float(np.mean(ls)) == pytest.approx(RHO / (1 - RHO), rel=0.06)
    assert float(np.mean(ls)) == pytest.approx(float(np.mean(lws)), rel=0.01)
