"""Cost over the arrival window and per SLO-conformant answer."""

from __future__ import annotations

import json
import math

import pytest

from sim.contracts.scenario import load_scenario
from sim.results import metric_names as mn
from sim.results.cost import cost_per_good_answer, describe_cost_per_good_answer, fleet_cost_usd
from sim.results.runner import run_scenario
from tests.helpers import NGRAM_K2, scenario_toml, segment, write_scenario


def test_fleet_cost_is_hours_times_price_including_idle() -> None:
    assert fleet_cost_usd(3600.0, 2, 2.5) == pytest.approx(5.0)
    assert fleet_cost_usd(1800.0, 3, 2.0, 1.0, speculative=True) == pytest.approx(4.5)
    # draft hardware is only paid by speculative candidates
    assert fleet_cost_usd(1800.0, 3, 2.0, 1.0, speculative=False) == pytest.approx(3.0)
    assert fleet_cost_usd(100.0, 1, None) is None


def test_cost_per_good_answer() -> None:
    assert cost_per_good_answer(10.0, 4) == pytest.approx(2.5)
    assert math.isinf(cost_per_good_answer(10.0, 0))
    assert cost_per_good_answer(None, 3) is None
    assert "no SLO-conformant" in describe_cost_per_good_answer(math.inf)
    assert "n/a" in describe_cost_per_good_answer(None)


def scenario_text(ttft: float) -> str:
    return scenario_toml(
        'cost',
        run={'duration_s': 120, 'warmup_s': 20, 'seeds': [1]},
        workload={'arrival': 'poisson', 'rate': 2.0},
        segments=[segment()],
        slo={'ttft_ms': ttft},
        fleet={'profile': 'profile.json', 'replicas': 2, 'price_per_gpu_hour': 3.6, 'draft_price_per_hour': 0.36},
        candidates=[NGRAM_K2],
    )


def scenario(tmp_path, ttft: float):
    return load_scenario(write_scenario(tmp_path, scenario_text(ttft)))


def test_simulated_cost_covers_the_window_and_divides_by_good_answers(tmp_path) -> None:
    res = run_scenario(scenario(tmp_path, 5000))
    s = res.summary.filter(res.summary[mn.SEGMENT] == "all")
    req = res.requests
    for cand, spec_price in (("baseline", 0.0), ("ngram-k2", 0.36)):
        row = s.filter(s[mn.CANDIDATE] == cand).row(0, named=True)
        r = req.filter((req["candidate"] == cand) & req["in_window"])
        end = max(120.0, r["finish_s"].max())
        window_h = (120.0 - 20.0) / 3600  # arrivals after warm-up: the drain is not billed
        assert row[mn.COST_TOTAL_USD] == pytest.approx(2 * (3.6 + spec_price) * window_h)
        good = row[mn.REQUEST_GOODPUT] * (end - 20.0)
        assert row[mn.COST_PER_GOOD_ANSWER_USD] == pytest.approx(row[mn.COST_TOTAL_USD] / good)


def test_no_good_answer_reports_infinite_cost(tmp_path) -> None:
    res = run_scenario(scenario(tmp_path, 0.001))
    s = res.summary.filter(res.summary[mn.SEGMENT] == "all")
    assert all(math.isinf(v) for v in s[mn.COST_PER_GOOD_ANSWER_USD].to_list())
    js = res.to_json()
    row = js["summary"][0]
    assert row[mn.COST_PER_GOOD_ANSWER_USD] is None
    assert "no SLO-conformant" in row[f"{mn.COST_PER_GOOD_ANSWER_USD}_note"]
    json.dumps(js, allow_nan=False)  # valid JSON, no Infinity


def test_a_long_drain_is_not_billed_so_equal_good_answers_cost_the_same(tmp_path) -> None:
    """Issue 29: at a fixed fleet, a backlog that drains after the arrivals end made one of two
    candidates with the same good answers look cheaper; the bill covers the arrival window only."""
    text = scenario_text(1e9).replace("rate = 2.0", "rate = 150.0").replace("replicas = 2", "replicas = 1")
    res = run_scenario(load_scenario(write_scenario(tmp_path, text)))
    s = res.summary.filter(res.summary[mn.SEGMENT] == "all")
    req = res.requests.filter(res.requests["in_window"])
    assert req["finish_s"].max() > 125.0  # the backlog drains well after the arrivals end
    for cand, spec_price in (("baseline", 0.0), ("ngram-k2", 0.36)):
        row = s.filter(s[mn.CANDIDATE] == cand).row(0, named=True)
        assert row[mn.COST_TOTAL_USD] == pytest.approx((3.6 + spec_price) * 100.0 / 3600)
        r = req.filter(req["candidate"] == cand)
        good = int((r["outcome"] == "completed").sum())
        assert good > 0 and row[mn.COST_PER_GOOD_ANSWER_USD] == pytest.approx(row[mn.COST_TOTAL_USD] / good)
