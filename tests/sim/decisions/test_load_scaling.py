"""A capacity probe of a recorded trace replays the same requests, compressed or stretched in
time: the rule of ``Scenario.with_load_scale`` that ``load_scaling.at_load`` builds probes with."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.synthetic_trace import bursty_rows
from sim.decisions.load_scaling import arrival_rate, at_load
from sim.workload.workload import generate_requests
from tests.helpers import trace_scenario_path


def trace_scenario(folder: Path, rows: list[dict[str, object]], **kw: object) -> Scenario:
    return load_scenario(trace_scenario_path(folder, rows, **kw))


def replayed(sc: Scenario) -> tuple[np.ndarray, list[tuple[int, int]], int]:
    """(arrival times, (prompt, output) per request in order, requests in the warm-up)."""
    reqs = generate_requests(sc, rng=0)
    times = np.array([r.arrival_s for r in reqs])
    return times, [(r.prompt_tokens, r.output_tokens) for r in reqs], int(np.sum(times < sc.run.warmup_s))


def test_a_probe_at_twice_the_rate_replays_the_same_requests_in_half_the_time(tmp_path: Path) -> None:
    # the bug: rate_scale × 2 with the window following it replayed twice the rows (a longer,
    # different slice); a probe must compress the one slice the scenario names
    rows = bursty_rows(np.random.default_rng(3), 40, per_tick=10, grid_ms=3000)
    sc = trace_scenario(tmp_path, rows, duration_s=60.0, warmup_s=6.0)
    t1, lens1, warm1 = replayed(sc)
    fast = at_load(sc, 2.0 * arrival_rate(sc), 1)
    t2, lens2, warm2 = replayed(fast)
    assert lens2 == lens1  # same requests, same order
    np.testing.assert_allclose(t2, t1 / 2.0, rtol=1e-12, atol=1e-9)
    assert warm2 == warm1  # the same requests are warm-up
    assert arrival_rate(fast) == pytest.approx(2.0 * arrival_rate(sc))
    slow = at_load(sc, 0.25 * arrival_rate(sc), 1)
    assert replayed(slow)[1] == lens1 and arrival_rate(slow) == pytest.approx(0.25 * arrival_rate(sc))


def test_a_scaled_trace_keeps_its_window_and_restart_at_the_same_request(tmp_path: Path) -> None:
    rows = bursty_rows(np.random.default_rng(4), 40, per_tick=4)
    sc = trace_scenario(tmp_path, rows, duration_s=100.0, warmup_s=10.0,
                        trace={"start_s": 15.0, "window_s": 60.0}, replicas=2)
    sc = sc.with_overrides({"fleet.restart": {"at_s": 40.0, "cold_start_s": 5.0}})
    x3 = sc.with_load_scale(3.0)
    assert x3.workload.trace.window_s == 60.0 and x3.run.duration_s == pytest.approx(100 / 3)
    assert x3.fleet.restart.at_s == pytest.approx(40 / 3) and x3.fleet.restart.cold_start_s == 5.0
    assert replayed(x3)[1] == replayed(sc)[1]


@st.composite
def bursty_traces(draw: st.DrawFn) -> tuple[list[dict[str, object]], float, float, float]:
    """A generated bursty trace (groups on a grid, random sizes), a replayed run length and the
    factor of the probe."""
    seed = draw(st.integers(0, 2**32 - 1))
    ticks = draw(st.integers(2, 30))
    grid_ms = draw(st.sampled_from([250, 1000, 3000, 7000]))
    rows = bursty_rows(np.random.default_rng(seed), ticks, per_tick=draw(st.floats(0.5, 12.0)),
                       grid_ms=grid_ms)
    if not rows:
        rows = bursty_rows(np.random.default_rng(seed), 1, per_tick=50.0)
    span = rows[-1]["timestamp"] / 1e3  # type: ignore[operator]
    duration = draw(st.floats(0.3, 1.5)) * max(span, 1.0) + 0.5
    factor = draw(st.floats(0.05, 40.0))
    warm = draw(st.one_of(st.just(0.0), st.floats(1e-3, 0.5)))  # not a subnormal that ÷ factor rounds to 0
    return rows, duration, warm * duration, factor


@given(bursty_traces())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_scaled_replay_keeps_order_lengths_and_inter_arrival_ratios(case) -> None:
    rows, duration, warmup, factor = case
    with tempfile.TemporaryDirectory() as d:
        sc = trace_scenario(Path(d), rows, duration_s=duration, warmup_s=warmup)
        t1, lens1, warm1 = replayed(sc)
        scaled = sc.with_load_scale(factor)
        t2, lens2, warm2 = replayed(scaled)
        rates = (sc.workload.mean_rate(sc.run.duration_s), scaled.workload.mean_rate(scaled.run.duration_s))
    assert lens2 == lens1  # the same requests, in the same order
    gaps1, gaps2 = np.diff(t1), np.diff(t2)
    # every gap divided by the factor: bursts stay bursts (0 gaps stay 0), ratios kept
    np.testing.assert_allclose(gaps2 * factor, gaps1, rtol=1e-9, atol=1e-9)
    if gaps1.size and gaps1.max() > 0:
        np.testing.assert_allclose(gaps2 / gaps2.max(), gaps1 / gaps1.max(), rtol=1e-9, atol=1e-9)
    assert warm2 == warm1
    assert rates[1] == pytest.approx(factor * rates[0], rel=1e-9)
