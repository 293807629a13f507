"""Replicas per window of a trace: the windows partition the replay, each window's count is
the one simulation confirms, and peak and mean GPUs follow from the windows."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic_trace import bursty_rows
from sim.decisions.answer import answer_scenario
from sim.decisions.sustain import criteria_from_scenario
from sim.decisions.trace_sizing import size_windows, window_scenarios
from sim.workload.workload import generate_requests
from tests.helpers import trace_scenario_path


def quiet_then_busy(folder: Path, replicas: int = 1):
    """60 s of ~3 requests per 3 s, then 60 s of ~12 per 3 s (generated, Mooncake-style)."""
    rng = np.random.default_rng(11)
    quiet = bursty_rows(rng, 20, per_tick=3, grid_ms=3000, prompt_median=1500, output_median=60)
    busy = bursty_rows(rng, 20, per_tick=12, grid_ms=3000, prompt_median=1500, output_median=60)
    rows = quiet + [{**r, "timestamp": int(r["timestamp"]) + 60_000} for r in busy]
    return load_scenario(trace_scenario_path(folder, rows, duration_s=120, replicas=replicas,
                                             slo={"ttft_ms": 1000, "percentile": 95}, seeds=(1,)))


def simulate_carries(sc, replicas: int) -> bool:
    _, ans = answer_scenario(sc.with_overrides({"fleet.replicas": replicas}), None, max_seeds=1)
    (c,) = ans.whole.facts.candidates
    return c.carry.verdict == "carries"


def test_the_busy_window_needs_more_replicas_and_each_count_is_confirmed(tmp_path: Path) -> None:
    sc = quiet_then_busy(tmp_path)
    rate = sc.workload.mean_rate(120)
    ws = size_windows(sc, None, 60.0, target_rate=rate, seeds=(1,), candidates=["baseline"],
                      criteria=criteria_from_scenario(sc), static_replicas={"baseline": 3})
    quiet, busy = ws.windows
    nq, nb = quiet.replicas["baseline"], busy.replicas["baseline"]
    assert nq is not None and nb is not None and nb > nq
    for (_, _, part), n in zip(window_scenarios(sc, rate, 60.0), (nq, nb), strict=True):
        assert simulate_carries(part, n)
        assert n == 1 or not simulate_carries(part, n - 1)
    assert ws.peak_gpus("baseline") == nb and ws.mean_gpus("baseline") == pytest.approx((nq + nb) / 2)
    doc = json.loads(json.dumps(ws.to_json()))
    assert doc["candidates"]["baseline"]["peak_replicas"] == nb and doc["source"].startswith("simulated")
    assert any("peak GPUs" in line for line in ws.lines())


def test_a_window_with_too_few_requests_is_not_judged_nor_counted(tmp_path: Path) -> None:
    sc = quiet_then_busy(tmp_path)
    ws = size_windows(sc, None, 6.0, target_rate=sc.workload.mean_rate(120), seeds=(1,),
                      candidates=["baseline"], criteria=criteria_from_scenario(sc),
                      static_replicas={"baseline": 3})
    skipped = [w for w in ws.windows if w.replicas["baseline"] is None]
    assert skipped and all(w.requests < 40 and "too few requests" in w.status["baseline"] for w in skipped)
    assert len(ws.judged("baseline")) == len(ws.windows) - len(skipped)


@given(seed=st.integers(0, 2**32 - 1), ticks=st.integers(2, 25), window=st.floats(0.7, 40.0),
       factor=st.floats(0.2, 5.0))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_windows_partition_the_replay_at_the_target_rate(seed: int, ticks: int, window: float,
                                                         factor: float) -> None:
    rows = bursty_rows(np.random.default_rng(seed), ticks, per_tick=6, grid_ms=3000)
    if not rows:
        return
    with tempfile.TemporaryDirectory() as d:
        sc = load_scenario(trace_scenario_path(Path(d), rows, duration_s=3.0 * ticks, warmup_s=1.0))
        rate = factor * sc.workload.mean_rate(sc.run.duration_s)
        scaled = sc.with_load_scale(factor)
        whole = generate_requests(scaled, rng=0)
        parts = window_scenarios(sc, rate, window * scaled.run.duration_s / 40.0)
        got = []
        for t0, _, part in parts:
            if part is None:  # a window no row falls in
                continue
            reqs = generate_requests(part, rng=0)
            shift = (part.workload.trace.start_s - scaled.workload.trace.start_s) / scaled.workload.trace.rate_scale
            assert abs(shift - t0) <= 1.5 * scaled.run.duration_s / ticks  # moved by under a grid gap
            got += [(r.arrival_s + shift, r.prompt_tokens, r.output_tokens) for r in reqs]
    want = [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in whole]
    assert [g[1:] for g in got] == [w[1:] for w in want]  # every request in exactly one window, in order
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], rtol=1e-9, atol=1e-9)


SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "azure_llm_2023_conv.csv"


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared/traces/azure_llm_2023_conv.csv is absent "
                                                 "(the public Azure trace is not part of the project)")
def test_windows_of_the_azure_conversation_hour_hold_every_request_once(tmp_path: Path) -> None:
    rows = bursty_rows(np.random.default_rng(0), 2)  # only to write a scenario; its trace is replaced
    sc = load_scenario(trace_scenario_path(tmp_path, rows, duration_s=3500, warmup_s=60))
    sc = sc.with_overrides({"workload.trace.path": str(SHARED)})
    total = round(sc.workload.mean_rate(3500) * 3500)
    rate = 20.0  # 3.6× the recorded 5.5 req/s: the hour compressed to about 16 minutes
    parts = window_scenarios(sc, rate, 60.0)
    counts = [round(p.workload.mean_rate(p.run.duration_s) * p.run.duration_s) for _, _, p in parts if p]
    assert total > 19_000 and sum(counts) == total
    assert parts[-1][1] == pytest.approx(total / rate, rel=1e-9)
