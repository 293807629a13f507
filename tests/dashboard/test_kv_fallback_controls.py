"""The what-if controls on a scenario with a ``kv_fallback`` candidate: its policy is offered, kept
when unchanged, and switching away removes its thresholds (the scenario still loads)."""

from __future__ import annotations

from pathlib import Path

from dashboard import state as st
from sim.contracts.scenario import load_scenario
from tests.helpers import scenario_toml, segment, write_scenario

KVF = {"name": "kvf", "proposer": "ngram", "k": 2, "policy": "kv_fallback",
       "kv_fallback": {"off_above": 0.9, "on_below": 0.6, "window_s": 2.0}}


def test_a_kv_fallback_candidate_through_the_controls(tmp_path: Path) -> None:
    sc = load_scenario(write_scenario(tmp_path, scenario_toml(
        "kvf", run={"duration_s": 20, "warmup_s": 2, "seeds": [1]}, workload={"arrival": "poisson", "rate": 2.0},
        segments=[segment()], fleet={"profile": "profile.json"}, candidates=[KVF])))
    policy = next(f for f in st.whatif_fields(sc) if f.key == "candidates[kvf].policy")
    assert policy.value == "kv_fallback" and "kv_fallback" in policy.options
    same = st.control_values(sc, {})
    assert st.overrides_from_controls(sc, same) == {}
    ov = st.overrides_from_controls(sc, dict(same, **{"candidates[kvf].policy": "fixed"}))
    assert ov == {"candidates[kvf].policy": "fixed", "candidates[kvf].kv_fallback": None}
    fixed = sc.with_overrides(ov).candidate("kvf")
    assert (fixed.policy, fixed.k, fixed.kv_fallback) == ("fixed", 2, None)
