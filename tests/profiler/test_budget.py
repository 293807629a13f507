"""A profile run knows its time before it starts: it shrinks the grid to a budget or refuses,
before anything is measured (a fake device with a known pass time, so the tests are fast)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.grids.budget import (
    AcceptancePlan,
    fit_budget,
    grid_points,
    parse_budget,
    phase_seconds,
)
from profiler.grids.profile_request import ProfileRequest, ProposerRequest
from profiler.grids.timing_grids import default_grids
from profiler.passes.models import load_model
from profiler.run import partial_path, run_profile
from sim.contracts.errors import SpecplanError
from tests.profiler.fake_passes import FakePasses, factory, kinked, linear_cost


@pytest.fixture(scope="module")
def full_cpu_grid():
    return default_grids(load_model("config:tiny-llama", device="cpu"), quick=False, k_max=6)


@pytest.mark.parametrize(("text", "seconds"), [("600", 600), ("600s", 600), ("10m", 600), ("1.5h", 5400),
                                               ("90 min", 5400)])
def test_budget_accepts_seconds_minutes_and_hours(text: str, seconds: float):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "ten minutes", "10d"])
def test_a_bad_budget_is_one_line_naming_the_valid_forms(text: str):
    with pytest.raises(SpecplanError, match="10m"):
        parse_budget(text)


@settings(max_examples=40, deadline=None)
@given(per_pass=st.floats(1e-3, 5.0), budget=st.floats(10, 20000))
def test_a_fitted_plan_is_within_its_budget_or_refused(full_cpu_grid, per_pass: float, budget: float):
    cost = linear_cost(per_pass)
    acc = AcceptancePlan(requests=60, max_new_tokens=24, prompts_per_segment=10, prompt_tokens=100,
                         proposers=("ngram",), segments=(10,) * 3, temperatures=2)
    try:
        plan = fit_budget(full_cpu_grid, ["ngram"], cost, rounds=1, acceptance=acc, budget_s=budget)
    except SpecplanError as exc:
        assert "smallest grid needs" in str(exc) and "\n" not in str(exc)
        return
    assert plan.total_s <= budget
    assert plan.total_s == pytest.approx(sum(phase_seconds(plan.grids, ["ngram"], cost, 1, plan.acceptance).values()))
    # every verification width stays measured, whatever was cut
    assert plan.grids.tokens_per_seq == full_cpu_grid.tokens_per_seq


def test_without_a_budget_the_requested_grid_is_kept(full_cpu_grid):
    plan = fit_budget(full_cpu_grid, [], linear_cost(5.0), rounds=1, acceptance=None, budget_s=None)
    assert plan.grids == full_cpu_grid and plan.shrunk == ()


def request(out: Path, **kw) -> ProfileRequest:
    return ProfileRequest(target="config:tiny-llama", out=out, device="cpu", proposers=(ProposerRequest.parse("ngram"),),
                          progress=False, command="test", **kw)


def test_budget_60_on_a_grid_that_needs_hours_refuses_before_measuring_anything(tmp_path: Path, full_cpu_grid):
    made: list[FakePasses] = []
    out = tmp_path / "p.json"
    slow = linear_cost(per_pass=2.0)  # a 2 s pass: the full CPU grid needs hours
    assert sum(phase_seconds(full_cpu_grid, ["ngram"], slow, 1, None).values()) > 3600
    points: list[int] = []
    with pytest.raises(SpecplanError, match=r"--budget 60 s: even the smallest grid needs about .*h"):
        run_profile(request(out, grids=full_cpu_grid, budget_s=60), passes=factory(cost=slow, made=made),
                    on_point=points.append)
    assert made[0].probed == 1 and made[0].measured == [] and points == []
    assert not partial_path(out).exists() and not out.exists()


def test_a_budget_the_grid_overruns_shrinks_it_and_the_run_measures_only_the_shrunk_grid(tmp_path: Path,
                                                                                         full_cpu_grid):
    made: list[FakePasses] = []
    said: list[str] = []
    cost = linear_cost(per_pass=0.05)
    need = sum(phase_seconds(full_cpu_grid, ["ngram"], cost, 1, None).values())
    budget = need / 3
    profile = run_profile(request(tmp_path / "p.json", grids=full_cpu_grid, budget_s=budget, grid_checks=False),
                          passes=factory(cost=cost, made=made), say=said.append)
    plan = profile["x-run"]["plan"]
    assert plan["shrunk"] and sum(plan["estimated_s"].values()) <= budget
    assert said and "shrunk to fit" in said[0] and said[0].startswith("estimated run time about")
    grids = profile["x-run"]["grids"]
    assert len(grids["batch"]) < len(full_cpu_grid.batch) or grids["repeats"] < full_cpu_grid.repeats
    measured_forward = {p for p in made[0].measured if p.quantity == "target_forward"}
    assert {p.as_dict()["batch"] for p in measured_forward} == set(grids["batch"])


def test_the_profile_cli_refuses_an_impossible_budget_in_one_line(tmp_path: Path, capsys, monkeypatch):
    from cli.main import main
    from profiler.grids import timing_run

    monkeypatch.setattr(timing_run.RealPasses, "probe", lambda self, grids: linear_cost(per_pass=30.0))
    rc = main(["profile", "--target", "config:tiny-llama", "--device", "cpu", "--no-progress", "--budget", "1m",
               "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--budget 60 s" in err[0] and "smallest grid needs" in err[0]


def test_the_grid_checks_fill_a_kink_within_the_budget(tmp_path: Path):
    sparse = replace(default_grids(load_model("config:tiny-llama", device="cpu"), quick=True, k_max=6), batch=(1, 4))
    made: list[FakePasses] = []
    req = replace(request(tmp_path / "p.json", grids=sparse), measure_acceptance=False)
    profile = run_profile(req, passes=factory(step=kinked(2, 1.5), made=made))
    tf = profile["timing"]["target_forward"]
    assert tf["axes"]["batch"][:3] == [1, 2, 3]  # 2 disagreed with 1..4; 3 then with 2..4
    assert profile["timing"]["batch_origin"] == {"measured": [1, 4], "refined": [2, 3]}
    assert any("grid check: batch 2" in n for n in profile["timing"]["provenance"]["notes"].split("; "))


def test_a_machine_that_slows_down_during_the_run_is_not_read_as_a_kink(tmp_path: Path):
    """The grid is measured at one speed, the checks run at half of it: the neighbours are timed
    again beside each probe, so a smooth step time adds nothing."""
    quick = default_grids(load_model("config:tiny-llama", device="cpu"), quick=True, k_max=6)
    made: list[FakePasses] = []

    class Slowing(FakePasses):
        def value(self, pt):
            n_grid = len(grid_points(quick, self.proposer_names))
            return super().value(pt) * (2.0 if len(self.measured) > n_grid else 1.0)

    def make(target, proposers, **kw):
        fp = Slowing(target, proposers, **kw)
        fp.proposer_names = [p.name for p in proposers]
        made.append(fp)
        return fp

    req = replace(request(tmp_path / "p.json", grids=quick), measure_acceptance=False)
    profile = run_profile(req, passes=make)
    assert profile["timing"]["target_forward"]["axes"]["batch"] == list(quick.batch)
    assert profile["timing"]["target_forward"]["axes"]["context"] == list(quick.context)
    assert profile["x-run"]["plan"]["grid_checks"]  # the checks ran, and found it smooth
