"""A bursty trace is sized as `simulate` confirms it: the fleet `capacity` names carries the
trace when simulated at that count, and one replica fewer does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic_trace import bursty_rows
from sim.decisions.answer import answer_scenario, capacity_answer
from sim.decisions.capacity import plan_capacity
from tests.helpers import BASELINE, trace_scenario_path

SLO = {"ttft_ms": 1000, "percentile": 95}


def bursty(folder: Path, replicas: int = 1, seed: int = 7):
    """Mooncake-style: ~10 requests at a time on a 3 s grid, 1.5k-token prompts (generated)."""
    rows = bursty_rows(np.random.default_rng(seed), 40, per_tick=10, grid_ms=3000, prompt_median=1500,
                       output_median=60)
    return load_scenario(trace_scenario_path(folder, rows, duration_s=120, warmup_s=6, replicas=replicas,
                                             slo=SLO, seeds=(1, 2)))


def simulate_carries(sc, replicas: int, candidate: str = "baseline") -> bool:
    """What `specplan simulate` says of the scenario at ``replicas``: it carries (across seeds)."""
    _, ans = answer_scenario(sc.with_overrides({"fleet.replicas": replicas}), None, candidates=[candidate],
                             max_seeds=2)
    (c,) = ans.whole.facts.candidates
    return c.carry.verdict == "carries"


def test_capacity_fleet_for_a_bursty_trace_is_the_one_simulate_confirms(tmp_path: Path) -> None:
    sc = bursty(tmp_path)
    report = plan_capacity(sc, None, max_evals=4, load_fractions=(), profile_band=False, max_seeds=2)
    n = capacity_answer(report).whole.facts.candidate("baseline").replicas
    assert n is not None and n > 1  # one replica cannot take ten 1.5k-token prompts at once
    assert simulate_carries(sc, n)
    assert not simulate_carries(sc, n - 1)
    assert report.searched_fleet == "a" and report.candidates[0].fleet_replicas == n  # searched where carried


def test_a_trace_fleet_does_not_depend_on_the_fleet_the_scenario_states(tmp_path: Path) -> None:
    # sized from 1 replica or from 6, the trace needs what it needs: the count is simulated
    counts = []
    for stated in (1, 6):
        (tmp_path / str(stated)).mkdir()
        rep = plan_capacity(bursty(tmp_path / str(stated), stated), None, max_evals=3, load_fractions=(),
                            profile_band=False, max_seeds=2)
        counts.append(capacity_answer(rep).whole.facts.candidate("baseline").replicas)
    assert counts[0] is not None and counts[0] == counts[1]


def test_a_trace_probe_is_its_slice_run_once_even_when_its_queue_grows(tmp_path: Path, monkeypatch) -> None:
    # lengthening a trace's probe would judge idle time and another warm-up, not what simulate runs
    import sim.decisions.steady_state as ss
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.decisions.sustain import criteria_from_scenario

    monkeypatch.setattr(ss, "queue_trend", lambda _req, **_kw: ss.QueueTrend("growing", 9.0, 0.1, 100))
    sc = bursty(tmp_path, replicas=8)
    load = SimulatedLoad(sc, None, criteria_from_scenario(sc))
    runs: list[float] = []
    real = load.simulate
    monkeypatch.setattr(load, "simulate", lambda s, c, seeds: runs.append(s.run.duration_s) or real(s, c, seeds))
    load.probe("baseline", 10.0, 1, 8)
    assert len(runs) == 1 and runs[0] == sc.with_load_scale(10.0 / sc.workload.mean_rate(120)).run.duration_s


def test_a_candidate_with_no_capacity_on_the_searched_fleet_is_still_sized(tmp_path: Path) -> None:
    # a slow candidate carries no rate on the baseline's fleet, yet a larger fleet splits the bursts
    rows = bursty_rows(np.random.default_rng(7), 40, per_tick=10, grid_ms=3000, prompt_median=1500,
                       output_median=60)
    sc = load_scenario(trace_scenario_path(
        tmp_path, rows, duration_s=120, warmup_s=6, slo=SLO, seeds=(1, 2),
        candidates=[BASELINE, {"name": "slow-k4", "proposer": "ngram", "k": 4}],
        acceptance_rates=(0.02, 0.01, 0.01, 0.01, 0.01), draft_base_s=0.03, draft_per_token_s=0.001))
    report = plan_capacity(sc, None, max_evals=4, load_fractions=(), profile_band=False, max_seeds=2)
    slow = next(c for c in report.candidates if c.candidate == "slow-k4")
    assert slow.mean == 0.0 and slow.replicas is not None
    assert simulate_carries(sc, slow.replicas, "slow-k4") and not simulate_carries(sc, slow.replicas - 1, "slow-k4")
