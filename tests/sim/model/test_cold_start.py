"""A restart's cold start: the scenario's, else the profile's measured one, else an assumed
default, the same seconds in the fleet's downtime, the decision's window and the run's sources."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.fleet_config import RestartConfig
from sim.contracts.profile import Profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile, synthetic_profile_dict
from sim.decisions.windows import MIN_WINDOW_S, windows
from sim.model.cold_start import DEFAULT_COLD_START_S, cold_start_of, resolved
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

REPO = Path(__file__).resolve().parents[3]
MEASURED = {"method": "measured", "date": "2026-12-05T00:00:00Z",
            "device": {"kind": "cpu", "name": "AMD EPYC 7B13", "count": 1}}


def cold_section(cold_s: float, load_s: float = 4.0) -> dict[str, Any]:
    return {"provenance": dict(MEASURED), "load_s": load_s, "cold_start_s": cold_s, "prompt_tokens": 128,
            "first_request": {"ttft_s": 0.9, "first_step_s": 0.05},
            "warm_request": {"ttft_s": 0.3, "first_step_s": 0.04}}


def profile_with_cold_start(cold_s: float | None) -> Profile:
    d = synthetic_profile_dict()
    if cold_s is not None:
        d["cold_start"] = cold_section(cold_s)
    return Profile.from_dict(d, "p.json")


def test_the_scenario_value_wins_then_the_measured_one_then_the_default():
    measured = profile_with_cold_start(12.5)
    typed = RestartConfig(at_s=10, cold_start_s=3.0)
    unset = RestartConfig(at_s=10)
    assert (cold_start_of(typed, measured).seconds, cold_start_of(typed, measured).method) == (3.0, "scenario")
    got = cold_start_of(unset, measured)
    assert (got.seconds, got.method) == (12.5, "measured") and "AMD EPYC 7B13" in got.words
    for prof in (profile_with_cold_start(None), None):
        got = cold_start_of(unset, prof)
        assert (got.seconds, got.method) == (DEFAULT_COLD_START_S, "assumed") and "assumed default" in got.words
    assert resolved(unset, measured).cold_start_s == 12.5 and resolved(typed, measured) is typed


def test_a_cold_start_section_is_read_and_checked():
    p = profile_with_cold_start(12.5)
    assert p.cold_start is not None and p.cold_start.load_s == 4.0
    assert p.cold_start.first_request is not None and p.cold_start.first_request.ttft_s == 0.9
    d = synthetic_profile_dict()
    d["cold_start"] = cold_section(1.0, load_s=4.0)  # out of service shorter than the load itself
    with pytest.raises(SpecplanError, match=r"p\.json: cold_start\.cold_start_s: must be >= load_s"):
        Profile.from_dict(d, "p.json")
    assert synthetic_profile().cold_start is None  # absent: not measured, still loads


def restart_scenario_without_cold_start() -> Any:
    sc = load_scenario(REPO / "scenarios" / "decision-grid-restart.toml")
    assert sc.fleet.restart.cold_start_s is None  # the shipped file leaves it to the profile
    return sc


def test_the_restart_window_uses_the_measured_cold_start_and_says_so():
    sc = restart_scenario_without_cold_start()
    restart, _after = windows(sc, profile_with_cold_start(45.0))
    assert (restart.t0, restart.t1) == (600.0, 645.0)
    assert "cold start 45 s measured on cpu 'AMD EPYC 7B13'" in restart.label
    short, after = windows(sc, profile_with_cold_start(7.5))
    assert (short.t0, short.t1) == (600.0, 600.0 + MIN_WINDOW_S) and "cold start 7.5 s measured" in short.label
    assert after.t0 == short.t1
    assumed, _ = windows(sc, profile_with_cold_start(None))
    assert (assumed.t0, assumed.t1) == (600.0, 600.0 + DEFAULT_COLD_START_S) and "assumed default" in assumed.label


def test_the_shipped_restart_scenario_says_its_cold_start_is_assumed_until_measured():
    from sim.contracts.profile import load_profile

    sc = load_scenario(REPO / "scenarios" / "decision-grid-restart.toml")
    shipped = load_profile(REPO / "profiles" / "smollm2-135m-cpu.json")
    restart, _ = windows(sc, shipped)
    assert (restart.t0, restart.t1) == (600.0, 660.0) and "cold start 60 s assumed default" in restart.label
    typed, _ = windows(sc.with_overrides({"fleet.restart.cold_start_s": 90}), profile_with_cold_start(5.0))
    assert (typed.t0, typed.t1) == (600.0, 690.0) and "cold start 90 s set in the scenario" in typed.label


def test_the_fleet_is_down_for_the_measured_cold_start(tmp_path: Path):
    """Replica 0 restarts at 20 s and serves again only after the profile's 7.5 s; the run's
    sources name where those seconds come from."""
    from sim.results.runner import run_scenario

    text = scenario_toml(
        "cold", run={"duration_s": 60, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 4.0}, segments=[segment(prompt=32, output=8)],
        fleet={"profile": "profile.json", "replicas": 2, "routing": "least_outstanding"},
        candidates=[BASELINE])
    text = text.replace('[[candidates]]', '[fleet.restart]\nat_s = 20\nreplica = 0\n\n[[candidates]]', 1)
    path = write_scenario(tmp_path, text)
    d = synthetic_profile_dict()
    d["cold_start"] = cold_section(7.5)
    (tmp_path / "profile.json").write_text(__import__("json").dumps(d), encoding="utf-8")
    res = run_scenario(load_scenario(path))
    r0 = res.steps.filter(pl.col("replica") == 0)
    starts = r0["t_start_s"].to_numpy()
    assert (starts < 20).any() and (starts >= 27.5).any()
    assert not ((starts > 20) & (starts < 27.5)).any()
    assert any(s.startswith("restart cold start: 7.5 s, measured on cpu") for s in res.sources)


def test_a_scenario_restart_without_cold_start_loads():
    base = copy.deepcopy(RestartConfig(at_s=1.0))
    assert base.cold_start_s is None
    with pytest.raises(Exception, match="cold_start_s"):
        RestartConfig(at_s=1.0, cold_start_s=-1.0)
