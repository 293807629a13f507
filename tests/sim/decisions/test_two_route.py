"""Two routes: the router's rule, both pools' records joined, both pools' GPUs priced, and the
[[two_routes]] table's bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cli.main import main
from sim.contracts.scenario import load_scenario
from sim.decisions.sustain import criteria_from_scenario
from sim.decisions.two_route import (
    _seed_requests,
    evaluate,
    hourly_of,
    pool_records,
    route_by_overflow,
    route_by_rate,
    route_records,
)
from sim.decisions.two_route_sizing import load_range, size_two_route
from sim.results import metric_names as mn
from sim.results.runner import candidate_profiles
from tests.helpers import scenario_toml, segment, write_scenario

arrivals = st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=200).map(
    lambda xs: np.sort(np.asarray(xs)))


@settings(max_examples=200, deadline=None)
@given(t=arrivals, window=st.floats(0.1, 30.0), thr=st.floats(0.01, 50.0), more=st.floats(0.0, 50.0))
def test_the_rate_rule_matches_a_readable_counter_and_a_higher_threshold_sends_more(t, window, thr, more):
    """Each request counts the arrivals of the last window (itself included) against the
    threshold; raising the threshold never takes a request from the speculative pool."""
    got = route_by_rate(t, thr, window)
    want = [sum(1 for u in t[: i + 1] if u > x - window) / window <= thr for i, x in enumerate(t)]
    assert got.tolist() == want
    assert not (got & ~route_by_rate(t, thr + more, window)).any()
    assert route_by_rate(t, len(t) / window, window).all()  # above any load: all speculative
    assert not route_by_rate(t, 0.99 / window, window).any()  # below any load: all baseline


@settings(max_examples=200, deadline=None)
@given(t=arrivals, window=st.floats(0.1, 30.0), thr=st.floats(0.01, 50.0))
def test_the_overflow_rule_matches_a_readable_counter_of_what_it_sent(t, window, thr):
    """Each request counts what the router already sent to the speculative pool in the last
    window (itself included); so that pool never gets more than the threshold in any window."""
    got = route_by_overflow(t, thr, window)
    sent: list[float] = []
    want = []
    for x in t:
        ok = (sum(1 for u in sent if u > x - window) + 1) / window <= thr
        want.append(ok)
        if ok:
            sent.append(x)
    assert got.tolist() == want
    assert route_by_overflow(t, len(t) / window, window).all()
    assert not route_by_overflow(t, 0.99 / window, window).any()
    assert (route_by_rate(t, thr, window) <= got).all()  # what the rate rule sends, overflow sends too


SPEC = {"name": "spec", "proposer": "ngram", "k": 2, "assumed_acceptance": [0.7, 0.5]}


def _scenario(folder: Path, rate: float, routes: str = "", price: float = 2.0, draft: float = 0.5) -> Path:
    text = scenario_toml(
        "tr", run={"duration_s": 30, "warmup_s": 3, "seeds": [1, 2]},
        workload={"arrival": "poisson", "rate": rate}, segments=[segment(prompt=48, output=12)],
        slo={"ttft_ms": 800}, fleet={"profile": "profile.json", "price_per_gpu_hour": price,
                                     "draft_price_per_hour": draft},
        candidates=[{"name": "baseline", "speculation": "off"}, SPEC],
    ) + routes
    return write_scenario(folder, text)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(rate=st.sampled_from([2.0, 9.0]), s=st.integers(1, 2), b=st.integers(1, 2),
       rule=st.sampled_from(["rate", "overflow"]))
def test_a_threshold_above_or_below_any_load_is_one_candidate_alone_bit_for_bit(tmp_path_factory, rate, s, b,
                                                                              rule):
    sc = load_scenario(_scenario(tmp_path_factory.mktemp("tr"), rate))
    profs = candidate_profiles(sc, None, list(sc.candidates))
    crit = criteria_from_scenario(sc)
    win = 5.0
    for thr, who, n in ((1e9, "spec", s), (0.5 / win, "baseline", b)):
        joined, pools, share = route_records(sc, profs, name="two", speculative="spec", s=s, baseline="baseline",
                                             b=b, threshold_rps=thr, window_s=win, seed=1, rule=rule)
        alone = pool_records(sc, profs, who, n, 1, _seed_requests(sc, 1))
        assert_frame_equal(joined.drop(mn.CANDIDATE), alone.drop(mn.CANDIDATE))
        assert share == (1.0 if who == "spec" else 0.0) and len(pools) == 1
    opt, _ = evaluate(sc, profs, crit, name="two", speculative="spec", s=s, baseline="baseline", b=b,
                      threshold_rps=1e9, window_s=win, seeds=[1], rate=rate)
    assert opt.gpus == s + b  # both pools are paid for, used or not


def test_cost_counts_both_pools_gpus(tmp_path):
    """2 speculative replicas at 2 $/GPU-h + 0.5 $/h of draft hardware each, 3 baseline replicas
    at 2 $/GPU-h: 2 × 2.5 + 3 × 2 = 11 $/h on 5 GPUs; per 1,000 good answers that is
    1000 × 11 / 3600 / goodput."""
    sc = load_scenario(_scenario(tmp_path, 12.0))
    assert hourly_of(sc, "spec", 2, "baseline", 3) == (5, 11.0)
    profs = candidate_profiles(sc, None, list(sc.candidates))
    opt, _ = evaluate(sc, profs, criteria_from_scenario(sc), name="two", speculative="spec", s=2,
                      baseline="baseline", b=3, threshold_rps=8.0, window_s=5.0, seeds=[1, 2], rate=12.0)
    assert (opt.gpus, opt.hourly_usd) == (5, 11.0)
    assert 0 < np.mean(opt.speculative_share) < 1  # both pools served requests
    assert opt.cost_per_1k == pytest.approx(1000 * 11.0 / 3600 / np.mean(opt.goodput))
    assert opt.to_json()["gpus"] == 5 and "two routes: spec ×2 + baseline ×3" in opt.line()


@pytest.mark.parametrize(("table", "field"), [
    ('name = "r"\nspeculative = "baseline"', "two_routes[0].speculative"),
    ('name = "r"\nspeculative = "spec"\nbaseline = "spec"', "two_routes[0].baseline"),
    ('name = "spec"\nspeculative = "spec"', "two_routes[0].name"),
    ('name = "r"\nspeculative = "spec"\nwindow_s = 0', "two_routes[0].window_s"),
    ('name = "r"\nspeculative = "spec"\nthreshold_rps = -1', "two_routes[0].threshold_rps"),
    ('name = "r"\nspeculative = "spec"\nrule = "queue"', "two_routes[0].rule"),
    ('name = "r"\nspeculative = "spec"\nspeculative_replicas = 0\nbaseline_replicas = 0',
     "two_routes[0].baseline_replicas"),
    ('name = "r"\nspeculative = "spec"\nidealised = "nope"', "two_routes[0].idealised"),
    ('name = "r"\nspeculative = "spec"\nrouter = 1', "two_routes[0]"),
])
def test_bad_two_routes_fields_exit_2_with_one_line(tmp_path, capsys, table, field):
    path = _scenario(tmp_path, 4.0, "\n[[two_routes]]\n" + table + "\n")
    assert main(["capacity", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "s.toml" in err[0], err
    assert "Traceback" not in err[0]


def test_a_two_routes_table_round_trips(tmp_path):
    sc = load_scenario(_scenario(tmp_path, 4.0, '\n[[two_routes]]\nname = "r"\nspeculative = "spec"\n'
                                                 'window_s = 5\nthreshold_rps = 3.5\n'))
    r = sc.two_routes[0]
    assert (r.baseline, r.rule, r.window_s, r.threshold_rps, r.speculative_replicas) == ("baseline", "rate", 5.0, 3.5, None)
    assert type(sc).from_dict(json.loads(json.dumps(sc.to_dict())), sc.origin, sc.base_dir) == sc


PEAK = {"arrival": "piecewise", "piecewise": {"shape": "step", "points": [[0, 3.0], [12, 14.0], [24, 3.0]]}}


def test_sized_two_routes_carry_and_one_replica_fewer_in_either_pool_does_not(tmp_path):
    """The search's answer carries on every seed with requests on both pools and is locally
    fewest at its threshold: take one replica from either pool (the threshold following S
    where it is the capacity one) and it misses, or routes nothing to one pool."""
    text = scenario_toml(
        "trp", run={"duration_s": 36, "warmup_s": 2, "seeds": [1, 2]}, workload=PEAK,
        segments=[segment(prompt=256, output=24)], slo={"ttft_ms": 400, "tpot_ms": 30},
        fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0}, engine={"max_num_seqs": 4},
        candidates=[{"name": "baseline", "speculation": "off"}, SPEC],
    ) + '\n[[two_routes]]\nname = "two"\nspeculative = "spec"\nwindow_s = 4\n'
    sc = load_scenario(write_scenario(tmp_path, text))
    profs = candidate_profiles(sc, None, list(sc.candidates))
    crit = criteria_from_scenario(sc)
    cfg = sc.two_routes[0]
    opt = size_two_route(sc, profs, crit, cfg, {"spec": 2.0, "baseline": 2.5}, [1, 2], max_evals=30)
    assert opt.carried and "evaluations" in opt.search, opt.search
    assert not opt.unused_pool and 0 < np.mean(opt.speculative_share), opt.search
    s, b = opt.speculative_replicas, opt.baseline_replicas
    _, peak, mean = load_range(sc)
    follows = opt.threshold_rps is not None and opt.threshold_rps == pytest.approx(s * 2.0 * peak / mean)
    for n_s, n_b in ((s - 1, b), (s, b - 1)):
        if n_s < 1 or n_b < 0:
            continue
        thr = n_s * 2.0 * peak / mean if follows else opt.threshold_rps
        fewer, _ = evaluate(sc, profs, crit, name="two", speculative="spec", s=n_s, baseline="baseline", b=n_b,
                            threshold_rps=thr, window_s=4.0, seeds=[1, 2], rate=mean)
        assert not fewer.carried or fewer.unused_pool, (s, b, n_s, n_b, opt.search)


def test_capacity_prints_two_routes_beside_its_candidates(tmp_path, capsys):
    text = scenario_toml(
        "trc", run={"duration_s": 40, "warmup_s": 4, "seeds": [1]}, workload={"arrival": "poisson", "rate": 4.0},
        segments=[segment(prompt=48, output=12)], slo={"ttft_ms": 800},
        fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0},
        candidates=[{"name": "baseline", "speculation": "off"}, SPEC],
    ) + '\n[[two_routes]]\nname = "two"\nspeculative = "spec"\nspeculative_replicas = 1\nbaseline_replicas = 1\n'
    path = write_scenario(tmp_path, text)
    assert main(["capacity", str(path), "--json", "--max-evals", "4", "--rel-tol", "0.3", "--max-seeds", "1",
                 "--no-profile-band"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (tr,) = doc["two_routes"]
    o = tr["option"]
    assert (o["speculative_replicas"], o["baseline_replicas"], o["gpus"], o["hourly_usd"]) == (1, 1, 2, 4.0)
    assert {b["name"] for b in tr["beside"]} == {"spec", "baseline"}
    assert all(b["gpus"] == b["speculative_replicas"] + b["baseline_replicas"] for b in tr["beside"])
    assert 0 <= o["slo_attainment"] <= 1 and o["usd_per_1k_good_answers"] > 0


@pytest.mark.parametrize("rule", ["overflow", "rate"])
def test_no_speculative_pool_leaves_the_baseline_pool_at_least_one_replica(tmp_path, rule):
    """speculative_replicas = 0 with the baseline pool sized: the baseline pool serves every
    request, so the search never tries (or shrinks to) a fleet of no replicas at all."""
    text = scenario_toml(
        "trz", run={"duration_s": 20, "warmup_s": 2, "seeds": [1]}, workload={"arrival": "poisson", "rate": 0.5},
        segments=[segment(prompt=48, output=12)], slo={"ttft_ms": 800},
        fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0},
        candidates=[{"name": "baseline", "speculation": "off"}, SPEC],
    ) + f'\n[[two_routes]]\nname = "two"\nspeculative = "spec"\nspeculative_replicas = 0\nrule = "{rule}"\n'
    sc = load_scenario(write_scenario(tmp_path, text))
    profs = candidate_profiles(sc, None, list(sc.candidates))
    opt = size_two_route(sc, profs, criteria_from_scenario(sc), sc.two_routes[0], {"spec": 50.0, "baseline": 50.0},
                         [1], max_evals=6)
    assert opt.speculative_replicas == 0 and opt.baseline_replicas >= 1, opt.search


def _steady(folder: Path, threshold: str = "") -> Path:
    text = scenario_toml(
        "trs", run={"duration_s": 36, "warmup_s": 2, "seeds": [1, 2]}, workload={"arrival": "poisson", "rate": 9.0},
        segments=[segment(prompt=256, output=24)], slo={"ttft_ms": 400, "tpot_ms": 30},
        fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0}, engine={"max_num_seqs": 4},
        candidates=[{"name": "baseline", "speculation": "off"}, SPEC],
    ) + '\n[[two_routes]]\nname = "two"\nspeculative = "spec"\nwindow_s = 4\n' + threshold
    return write_scenario(folder, text)


def test_sizing_never_reports_a_pool_that_receives_no_traffic_and_searches_the_threshold(tmp_path):
    """9 req/s steady, the speculative pool's capacity given as 3 req/s per replica: with the
    threshold tied to S, shrinking S lowers the threshold below every arrival's load, and the
    old search reported S=1, B=2 "carries the load" with 0 % of requests on the speculative
    pool. Now such a step is refused, the router's threshold is searched as well, and the
    answer carries with requests on every pool it has (here: fewer GPUs than before)."""
    sc = load_scenario(_steady(tmp_path))
    profs = candidate_profiles(sc, None, list(sc.candidates))
    opt = size_two_route(sc, profs, criteria_from_scenario(sc), sc.two_routes[0],
                         {"spec": 3.0, "baseline": 9.0}, [1, 2], max_evals=30)
    assert opt.carried and opt.unused_pool is None, opt.search
    if opt.speculative_replicas and opt.baseline_replicas:
        assert 0 < min(opt.speculative_share) and max(opt.speculative_share) < 1, opt.search
    elif opt.speculative_replicas:
        assert min(opt.speculative_share) == 1.0
    assert "routes nothing to the speculative pool" in opt.search  # the step the old search took
    assert "a quantile of the load the router sees" in opt.search  # thresholds searched too
    assert opt.gpus <= 3  # no more than the old answer's 1 + 2, which wasted one


def test_a_threshold_below_every_load_is_said_in_the_routers_words_and_never_carries(tmp_path):
    sc = load_scenario(_steady(tmp_path, "threshold_rps = 0.1\n"))
    profs = candidate_profiles(sc, None, list(sc.candidates))
    crit = criteria_from_scenario(sc)
    opt, _ = evaluate(sc, profs, crit, name="two", speculative="spec", s=1, baseline="baseline", b=2,
                      threshold_rps=0.1, window_s=4.0, seeds=[1], rate=9.0)
    assert opt.unused_pool == "speculative"
    said = "the rate rule never routes to the speculative pool at this threshold (0.1 req/s)"
    assert said in opt.line() and "carries the load" not in opt.line()
    assert opt.to_json()["carries"] is False and said in opt.to_json()["unused"]
    sized = size_two_route(sc, profs, crit, sc.two_routes[0], {"spec": 3.0, "baseline": 9.0}, [1], max_evals=4)
    assert sized.unused_pool == "speculative" and said in sized.line(), sized.search
