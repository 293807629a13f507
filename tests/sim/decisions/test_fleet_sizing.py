"""One fleet answer: `capacity`'s replica count N is confirmed by `simulate` at N on fresh seeds,
N − 1 does not carry (or capacity said it is undetermined), and "carries" is judged across seeds
so that more seeds make it more certain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.decisions.carry import carry_of


def _carry_at(sc, profile, name: str, replicas: int, seeds) -> object:
    """What `simulate` says of ``name`` at ``replicas`` on ``seeds``: its carry verdict."""
    from sim.decisions.facts import fleet_facts
    from sim.decisions.sustain import criteria_from_scenario
    from sim.results.runner import run_scenario

    at = sc.with_overrides({"fleet.replicas": replicas, "run.seeds": list(seeds)})
    res = run_scenario(at, profile, [name], list(seeds))
    facts = fleet_facts(res, criteria_from_scenario(at), rate=at.workload.mean_rate(at.run.duration_s))
    return facts.candidate(name).carry


# ---------------------------------------------------------------------------------------------
# the rule itself


@given(st.lists(st.floats(0.0, 3.0), min_size=2, max_size=12))
@settings(max_examples=200, deadline=None)
def test_more_seeds_never_make_a_settled_carry_verdict_undetermined(ratios):
    # the same seeds' spread, twice as many of them: the interval narrows, never widens
    once = carry_of([{"ttft_ms_p95": r} for r in ratios])
    twice = carry_of([{"ttft_ms_p95": r} for r in ratios * 2])
    if once.verdict != "undetermined":
        assert twice.verdict == once.verdict
    if once.high is not None and twice.high is not None:
        assert twice.high - twice.low <= once.high - once.low + 1e-12


def test_a_candidate_near_its_slo_gets_more_certain_with_more_seeds_not_less():
    # TTFT p95 at 0.90 and 1.02 × the SLO on alternate seeds: per-seed pass/fail would call it
    # "at risk" at every seed count; across seeds, 2 seeds straddle and 40 seeds say it carries
    near = [0.90, 1.02]
    assert carry_of([{"ttft_ms_p95": r} for r in near]).verdict == "undetermined"
    many = carry_of([{"ttft_ms_p95": r} for r in near * 20])
    assert many.verdict == "carries" and many.high < 1.0
    assert "TTFT p95" in many.words() and "40 seeds" in many.words()
    # clearly over: a bound above 1 on any check is "cannot carry", whatever the others say
    over = carry_of([{"ttft_ms_p95": 0.5, "lost": r} for r in (1.8, 2.1, 1.9)])
    assert over.verdict == "cannot carry" and over.check == "lost"
    # a seed too short to judge counts as far over the limit, not as a pass
    assert carry_of([None, {"ttft_ms_p95": 0.5}]).verdict != "carries"


# ---------------------------------------------------------------------------------------------
# capacity's N against simulate at N and N − 1


def _scenario(rate: float, ttft_ms: float, max_num_seqs: int, routing: str, arrival: str = "poisson"):
    from sim.contracts.scenario import Scenario
    from tests.sim.decisions.test_capacity import OUT

    duration = 20.0 + max(60.0, 260.0 / rate)  # ≥ 200 measured requests: capacity's probes run as written
    workload = {"arrival": arrival, "rate": rate, "segments": [
        {"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
         "output_tokens": {"dist": "uniform", "min": OUT - 10, "max": OUT + 10},
         "acceptance": {"task": "chat", "language": "en"}}]}
    if arrival == "gamma":
        workload["burstiness"] = 1e6
    return Scenario.from_dict({
        "name": "sizing", "run": {"duration_s": duration, "warmup_s": 20.0, "seeds": [1, 2], "max_seeds": 6,
                                   "drain": True},
        "workload": workload, "slo": {"ttft_ms": ttft_ms},
        "fleet": {"engine": {"max_num_seqs": max_num_seqs}, "routing": routing, "price_per_gpu_hour": 1.0},
        "candidates": [{"name": "baseline", "speculation": "off"},
                       {"name": "sure-k2", "proposer": "ngram", "k": 2, "assumed_acceptance": [0.9, 0.8]}],
    }, "<sizing>")


def _plan(sc, profile, rate):
    from sim.decisions.capacity import plan_capacity

    return plan_capacity(sc, profile, target_rate=rate, rel_tol=0.2, max_evals=6, load_fractions=(),
                         profile_band=False)


@given(rate=st.floats(2.0, 14.0), ttft_ms=st.sampled_from([300.0, 800.0, 2000.0]),
       max_num_seqs=st.sampled_from([1, 2, 4]), routing=st.sampled_from(["round_robin", "least_outstanding"]))
@settings(max_examples=4, deadline=None, derandomize=True)
def test_capacitys_replica_count_is_confirmed_by_simulate_at_n_and_not_at_n_minus_one(
        rate, ttft_ms, max_num_seqs, routing):
    from tests.sim.decisions.test_capacity import dd1_profile

    sc, prof = _scenario(rate, ttft_ms, max_num_seqs, routing), dd1_profile()
    rep = _plan(sc, prof, rate)
    fresh = [101, 102, 103, 104]  # seeds the capacity search never ran
    for c in rep.candidates:
        assert c.replicas is not None
        at_n = _carry_at(sc, prof, c.candidate, c.replicas, fresh)
        assert at_n.verdict != "cannot carry", (c.candidate, c.replicas, at_n)
        if c.replicas > 1:
            below = _carry_at(sc, prof, c.candidate, c.replicas - 1, fresh)
            # one replica fewer does not carry, or capacity said it is within the margin
            assert below.verdict != "carries" or c.replicas_undetermined, (c.candidate, c.replicas, below)


def test_dd1_fleet_needs_three_replicas_and_simulate_agrees_at_three_and_two():
    from tests.sim.decisions.test_capacity import OUT, PREFILL_S, STEP_S, dd1_profile

    # deterministic arrivals, batch 1: a replica serves 1 / S req/s, S = 50 ms + (OUT - 1) × 10 ms
    s_base = PREFILL_S + (OUT - 1) * STEP_S
    sc = _scenario(10.0, 1000.0, 1, "round_robin", arrival="gamma").with_overrides(
        {"workload.segments": [{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
                                "output_tokens": {"dist": "fixed", "value": OUT},
                                "acceptance": {"task": "chat", "language": "en"}}]})
    prof = dd1_profile()
    rep = _plan(sc, prof, 10.0)
    base = next(c for c in rep.candidates if c.candidate == "baseline")
    assert base.replicas == int(np.ceil(10.0 * s_base)) == 3 and not base.replicas_undetermined
    assert base.replicas_below.startswith("2: cannot carry")
    three = _carry_at(sc, prof, "baseline", 3, [101, 102])
    two = _carry_at(sc, prof, "baseline", 2, [101, 102])
    assert three.verdict == "carries" and three.high < 0.2  # TTFT p95 ≈ the 50 ms prefill vs 1 s
    assert two.verdict == "cannot carry" and two.low > 1.0  # 2 × 3.85 req/s < 10: the queue runs away


def test_simulate_sizing_prints_capacitys_replica_counts(tmp_path, capsys):
    from cli.main import main
    from tests.cli.test_one_answer import make_root, scenario_text

    path = make_root(tmp_path, scenario_text(5.0, 1, 1000.0, 1.0, seeds=(1, 2), max_seeds=2))
    assert main(["simulate", str(path), "--quiet", "--sizing"]) == 0
    out = capsys.readouterr().out
    assert "fleet for 5 req/s, each candidate at its own replica count" in out
    assert main(["capacity", str(path), "--json", "--no-profile-band", "--max-evals", "4", "--rel-tol", "0.2"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    for c in doc["candidates"]:
        n = c["replicas"]
        want = (f"{c['replicas_low']} or {n} replica(s)" if c["replicas_undetermined"] else f"{n} replica(s)")
        assert f"  {c['candidate']}: {want}" in out
    with pytest.raises(SystemExit) as gone:  # load factors are gone: argparse's one line, exit 2
        main(["simulate", str(path), "--sizing", "0.5,1"])
    assert gone.value.code == 2


@pytest.mark.parametrize("rate", [6.0, 11.0])
def test_the_replica_count_with_the_scenarios_seeds_is_the_ten_seed_count_or_says_undetermined(rate):
    from tests.sim.decisions.test_capacity import dd1_profile

    sc, prof = _scenario(rate, 800.0, 2, "least_outstanding"), dd1_profile()
    few = {c.candidate: c for c in _plan(sc, prof, rate).candidates}  # seeds [1, 2], added up to 6
    ten = {c.candidate: c for c in _plan(sc.with_overrides({"run.seeds": list(range(1, 11)), "run.max_seeds": 10}),
                                         prof, rate).candidates}
    for name, a in few.items():
        b = ten[name]
        if not (a.replicas_undetermined or b.replicas_undetermined):
            assert a.replicas == b.replicas, (name, a.replicas, b.replicas)
        else:  # an open count names both sides, and the two answers overlap
            assert a.replicas_low <= b.replicas and b.replicas_low <= a.replicas, (name, a, b)
