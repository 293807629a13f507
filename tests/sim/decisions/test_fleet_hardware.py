"""Hardware × speculation in one answer: candidates on their own fleets ([fleets.NAME]) are
simulated on the same requests, priced from their own fleet, and ranked by GPUs of one kind
and by cost across kinds."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.answer import answer_of
from sim.decisions.decision import decide
from sim.decisions.facts import CandidateFacts, Facts, fleet_facts
from sim.results.runner import run_scenario
from tests.helpers import scenario_toml, segment

seed_caps = st.builds(lambda base, jit: [base * (1 + j) for j in jit], st.floats(1.0, 50.0),
                      st.lists(st.floats(-0.01, 0.01), min_size=3, max_size=5))
"""Capacities per seed that agree within ±1 %, as a resolved search's do."""


def capacity_facts_of(cands: list[CandidateFacts], seeds: int, rate: float = 20.0) -> Facts:
    return Facts("capacity", tuple(cands), tuple(range(1, seeds + 1)), cands[0].name, True, rate, 1,
                 device="4× H100", indifference=0.02)


@settings(max_examples=60, deadline=None)
@given(caps=seed_caps, cheap=st.floats(1.0, 20.0), dear=st.floats(1.05, 3.0))
def test_equal_capacity_on_different_gpus_ranks_by_cost(caps, cheap, dear):
    """Same capacities per seed and fleet size on two kinds of GPU: the cheaper hardware wins at
    the cost step, whichever is listed first; GPUs of different kinds never decide alone."""
    reps = 3
    for order in (1, -1):
        a = CandidateFacts("h100", True, capacity=tuple(caps), replicas=reps, replicas_per_hour_usd=cheap * dear,
                           gpus_per_replica=4, device="4× H100")
        b = CandidateFacts("h200", False, capacity=tuple(caps), replicas=reps, replicas_per_hour_usd=cheap,
                           gpus_per_replica=2, device="2× H200")
        d = decide(capacity_facts_of([a, b][::order], len(caps)))
        assert d.winner == "h200" and d.standing("h100").step == "cost"
        assert [s for s, _ in d.steps] == ["load", "GPUs", "cost"]
        assert "different kinds of GPU" in dict(d.steps)["GPUs"] and "6 GPU(s)" in dict(d.steps)["GPUs"]


@settings(max_examples=60, deadline=None)
@given(caps=seed_caps, ratio=st.floats(1.1, 3.0))
def test_one_kind_of_gpu_in_two_shapes_is_compared_per_gpu(caps, ratio):
    """TP4 carrying ``ratio`` × what TP2 carries per replica (< 2×) uses its GPUs worse: the TP2
    replica wins at the GPUs step although it carries less per replica."""
    tp4 = CandidateFacts("tp4", True, capacity=tuple(c * ratio for c in caps), gpus_per_replica=4, device="4× H100")
    tp2 = CandidateFacts("tp2", False, capacity=tuple(caps), gpus_per_replica=2, device="2× H100")
    d = decide(capacity_facts_of([tp4, tp2], len(caps)))
    per_gpu = ratio / 2.0
    if per_gpu < 0.9:
        assert d.winner == "tp2" and d.standing("tp4").step == "GPUs"
        assert "req/s per GPU" in dict(d.steps)["GPUs"]
    elif per_gpu > 1.1:
        assert d.winner == "tp4" and d.standing("tp2").step == "GPUs"


def _profile(name: str, tp: int, device: str | None, step_s: float) -> dict:
    p = synthetic_profile_dict(name=name, base_step_s=step_s)
    p["replica"] = {"tensor_parallel_size": tp}
    if device is not None:
        p["timing"]["provenance"]["device"] = {"kind": "cuda", "name": device, "memory_bytes": 16 * 1024**3,
                                               "driver": None, "count": tp}
    return p


def fleets_scenario(folder: Path, rate: float, k: int, acc: float, fleets: str, extra: list[dict]) -> Path:
    (folder / "a.json").write_text(json.dumps(_profile("prof-a", 1, None, 0.010)), encoding="utf-8")
    (folder / "b.json").write_text(json.dumps(_profile("prof-b", 2, "h200_sxm", 0.006)), encoding="utf-8")
    spec = {"proposer": "ngram", "k": k, "assumed_acceptance": [acc] * k}
    text = scenario_toml(
        "hw", run={"duration_s": 30, "warmup_s": 3, "seeds": [1, 2]},
        workload={"arrival": "poisson", "rate": rate}, segments=[segment(prompt=48, output=12)],
        slo={"ttft_ms": 800}, fleet={"profile": "a.json", "price_per_gpu_hour": 2.0},
        candidates=[{"name": "baseline", "speculation": "off"}, {"name": "spec", **spec},
                    *[{**spec, **c} for c in extra]],
    ) + fleets
    path = folder / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


SAME = '\n[fleets.same]\nprofile = "a.json"\ntensor_parallel_size = 1\nprice_per_gpu_hour = 2.0\n'


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(rate=st.sampled_from([2.0, 8.0, 20.0]), k=st.sampled_from([1, 3]), acc=st.sampled_from([0.3, 0.9]))
def test_a_named_fleet_equal_to_fleet_gives_bit_for_bit_the_same_results(tmp_path_factory, rate, k, acc):
    tmp = tmp_path_factory.mktemp("same")
    sc = load_scenario(fleets_scenario(tmp, rate, k, acc, SAME, [{"name": "spec-same", "fleet": "same"}]))
    res = run_scenario(sc)
    ps = res.per_seed.drop("candidate")
    assert ps.filter(res.per_seed["candidate"] == "spec").equals(ps.filter(res.per_seed["candidate"] == "spec-same"))
    rq = res.requests.drop("candidate")
    assert rq.filter(res.requests["candidate"] == "spec").equals(rq.filter(res.requests["candidate"] == "spec-same"))
    f = fleet_facts(res, None)
    a, b = f.candidate("spec"), f.candidate("spec-same")
    assert (a.goodput, a.hourly_usd, a.gpus_per_replica) == (b.goodput, b.hourly_usd, b.gpus_per_replica)
    d = answer_of(res).whole
    assert not d.facts.mixed_fleets and d.standing("spec").status == d.standing("spec-same").status


BIG = '\n[fleets.big]\nprofile = "b.json"\ntensor_parallel_size = 2\nprice_per_gpu_hour = 5.0\n'


def test_candidates_on_other_hardware_serve_the_same_requests_on_their_own_profile(tmp_path):
    sc = load_scenario(fleets_scenario(tmp_path, 6.0, 2, 0.8, BIG, [
        {"name": "spec-big", "fleet": "big"}]))
    extra = {"name": "big-base", "speculation": "off", "fleet": "big"}
    sc = sc.with_overrides({"candidates": [*json.loads(json.dumps(sc.to_dict()["candidates"])), extra]})
    res = run_scenario(sc)
    assert {n: p.name for n, p in (res.profiles or {}).items()} == {
        "baseline": "prof-a", "big-base": "prof-b", "spec": "prof-a", "spec-big": "prof-b"}
    req = res.requests
    ids = {n: req.filter((req["candidate"] == n) & (req["seed"] == 1)).sort("arrival_s")["arrival_s"].to_list()
           for n in res.candidates}
    assert ids["baseline"] == ids["big-base"] == ids["spec-big"]  # common random numbers across hardware
    fast = res.per_seed.filter(res.per_seed["candidate"] == "big-base")["tpot_ms_median"].to_list()
    slow = res.per_seed.filter(res.per_seed["candidate"] == "baseline")["tpot_ms_median"].to_list()
    assert all(x < y for x, y in zip(fast, slow, strict=True))  # its own (faster) profile's steps
    f = answer_of(res).whole.facts
    assert f.mixed_fleets and f.device_of("big-base") == "2× H200" and f.device_of("baseline") == "replica"
    assert f.candidate("big-base").hourly_usd == 2 * 5.0 and f.candidate("baseline").hourly_usd == 2.0
    assert f.candidate("spec-big").gpus_per_replica == 2
