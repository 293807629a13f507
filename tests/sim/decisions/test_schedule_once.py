"""A capacity search computes a ``schedule = "auto"`` candidate's k schedule once, not once per
probe (``SimulatedLoad.candidate_of``), and finds the same capacity as computing it per probe."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.model.k_schedule as ks
from sim.contracts.scenario import load_scenario
from sim.decisions.load_scaling import at_load
from sim.decisions.simulated_load import SimulatedLoad
from sim.results.runner import resolve_profile
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

AUTO = {"name": "auto", "proposer": "ngram", "policy": "k_by_batch", "schedule": "auto", "k": 3}


def _scenario(tmp: Path):
    text = scenario_toml(
        "schedule-once", run={"duration_s": 20, "warmup_s": 2, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 20},
        segments=[segment(prompt={"dist": "lognormal", "median": 200, "sigma": 0.5, "min": 16, "max": 1000},
                          output={"dist": "lognormal", "median": 40, "sigma": 0.5, "min": 4, "max": 200})],
        fleet={"profile": "profile.json", "replicas": 1}, engine={"max_num_seqs": 16},
        slo={"ttft_ms": 2000, "tpot_ms": 60, "percentile": 95}, candidates=[BASELINE, AUTO])
    return load_scenario(write_scenario(tmp, text, per_token_s=0.0008, acceptance_rates=[0.7, 0.49, 0.343]))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = ks.candidate_schedule

    def counted(scenario, profile, cand):
        calls.append(cand.name)
        return real(scenario, profile, cand)

    monkeypatch.setattr(ks, "candidate_schedule", counted)
    return calls


def _capacity(sc) -> tuple[float, ...]:
    from sim.decisions.capacity import plan_capacity

    rep = plan_capacity(sc, candidates=["auto"], rel_tol=0.1, max_evals=5, min_requests=60,
                        load_fractions=(1.0,), profile_band=False)
    return tuple(s.rate for c in rep.candidates for s in c.per_seed)


def test_a_capacity_search_computes_the_auto_schedule_once_and_finds_the_same_capacity(monkeypatch) -> None:
    with tempfile.TemporaryDirectory() as d:
        sc = _scenario(Path(d))
        calls = _counting(monkeypatch)
        once = _capacity(sc)
        assert calls == ["auto"], f"schedule computed {len(calls)} times in one capacity search"
        # the old way: every probe's run_scenario resolves the candidate itself
        calls.clear()
        monkeypatch.setattr(SimulatedLoad, "candidate_of", lambda self, name: self.scenario.candidate(name))
        per_probe = _capacity(sc)
        assert len(calls) > 1  # (the comparison is with a search that recomputed it)
        assert once == per_probe


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.floats(0.05, 20.0), replicas=st.integers(1, 8), min_requests=st.sampled_from([0, 200, 5000]))
def test_the_auto_schedule_does_not_depend_on_the_probed_rate_replicas_or_duration(scale, replicas, min_requests) -> None:
    """Why computing it once is safe: what a probe changes never reaches the schedule."""
    with tempfile.TemporaryDirectory() as d:
        sc = _scenario(Path(d))
        prof = resolve_profile(sc, None)
        base = ks.resolve_candidate(sc, prof, sc.candidate("auto"))
        probed = at_load(sc, 20 * scale, replicas, min_requests)
        assert ks.resolve_candidate(probed, prof, probed.candidate("auto")) == base
