"""A policy the named engine cannot run (sim/decisions/engine_config.py) never wins over a
runnable equal, and every surface shows it as idealised with its deployable twin."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from sim.contracts.scenario import load_scenario
from sim.decisions.answer_export import to_json
from sim.decisions.answer_rows import rows
from sim.decisions.answer_text import Answer, headline, lines
from sim.decisions.decision import decide
from sim.decisions.engine_config import deployability, with_engine
from sim.decisions.facts import CandidateFacts, Facts
from tests.helpers import scenario_toml, segment, write_scenario


def _cand(name: str, goodput, latency, *, runnable: bool = True) -> CandidateFacts:
    n = len(goodput)
    return CandidateFacts(name=name, baseline=name == "baseline", goodput=tuple(goodput),
                          attainment=(1.0,) * n, carries=(True,) * n, carry_reason=("",) * n,
                          latency_ms=tuple(latency), hourly_usd=4.0, runnable=runnable,
                          deployable="" if runnable else "eagle-fixed", engine="" if runnable else "vLLM (GPU)")


def _facts(base, fixed, ideal) -> Facts:
    return Facts("fleet", (base, fixed, ideal), tuple(range(1, len(base.goodput) + 1)), "baseline", True,
                 10.0, 1, device="H200")


seeds_goodput = st.lists(st.floats(9.0, 11.0), min_size=3, max_size=6)


@settings(max_examples=60, deadline=None)
@given(g=seeds_goodput, eps=st.floats(0.0, 0.004), faster=st.floats(0.2, 0.6))
def test_an_idealised_policy_never_wins_over_a_runnable_equal(g, eps, faster):
    """The idealised candidate serves as many good answers as the runnable fixed-k one (within
    the indifference amount) and answers much faster: judged as runnable it would win on
    latency; judged as what the engine can run it goes out, and the runnable one wins."""
    base = _cand("baseline", [x * 0.8 for x in g], [1000.0] * len(g))
    fixed = _cand("eagle-fixed", g, [800.0] * len(g))
    ideal = _cand("eagle-adaptive", [x * (1 + eps) for x in g], [800.0 * (1 - faster)] * len(g), runnable=False)
    as_if = decide(_facts(base, fixed, dataclasses.replace(ideal, runnable=True)))
    assert as_if.winner == "eagle-adaptive"  # what the old rule said
    d = decide(_facts(base, fixed, ideal))
    assert d.winner == "eagle-fixed" and "eagle-adaptive" not in d.leaders
    st_ = d.standing("eagle-adaptive")
    assert st_.status == "idealised" and "eagle-fixed" in st_.why
    said = "eagle-adaptive: idealised: vLLM (GPU) cannot run it; deployable twin: eagle-fixed"
    assert any(line.startswith(said) for line in lines(Answer(d), wrap=False))
    assert next(r for r in rows(Answer(d)) if r.candidate == "eagle-adaptive").decision.startswith(
        "do not plan on eagle-adaptive")


def test_an_idealised_policy_ahead_beyond_the_amount_leads_but_says_so_on_every_surface():
    g = [10.0, 10.2, 9.9, 10.1]
    base = _cand("baseline", [x * 0.5 for x in g], [1000.0] * 4)
    fixed = _cand("eagle-fixed", [x * 0.7 for x in g], [900.0] * 4)
    ideal = _cand("eagle-adaptive", g, [800.0] * 4, runnable=False)
    d = decide(_facts(base, fixed, ideal))
    assert d.winner == "eagle-adaptive"
    said = "idealised: vLLM (GPU) cannot run it; deployable twin: eagle-fixed"
    assert said in headline(d)
    assert any(said in line for line in lines(Answer(d), wrap=False))
    doc = to_json(Answer(d))
    st_ = next(s for s in doc["standings"] if s["candidate"] == "eagle-adaptive")
    assert st_["runnable"] is False and st_["deployable_twin"] == "eagle-fixed" and said in st_["idealised"]
    row = next(r for r in rows(Answer(d)) if r.candidate == "eagle-adaptive")
    assert "deploy the twin" in row.decision and not row.decision.startswith("use ")


def _scenario(folder, engine: str):
    text = scenario_toml(
        "ideal", run={"duration_s": 40, "warmup_s": 2, "seeds": [1, 2]},
        workload={"arrival": "poisson", "rate": 3.0}, segments=[segment(prompt=48, output=12)],
        slo={"ttft_ms": 800}, fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0},
        engine={"name": engine},
        candidates=[{"name": "baseline", "speculation": "off"},
                    {"name": "ngram-k2", "proposer": "ngram", "k": 2, "assumed_acceptance": [0.7, 0.5]},
                    {"name": "ngram-kv", "proposer": "ngram", "k": 2, "assumed_acceptance": [0.7, 0.5],
                     "policy": "kv_fallback", "kv_fallback": {"off_above": 0.9, "on_below": 0.7}}])
    return write_scenario(folder, text)


def test_the_engines_verdict_on_a_scenario_names_the_fixed_k_twin(tmp_path):
    sc = load_scenario(_scenario(tmp_path, "vllm"))
    dep = deployability(sc, None)
    assert dep["ngram-k2"].runnable and not dep["ngram-kv"].runnable
    assert dep["ngram-kv"].twin == "ngram-k2" and "KV" in dep["ngram-kv"].why


def test_simulate_on_a_scenario_never_crowns_the_idealised_equal(tmp_path, capsys):
    """On a light load the KV fallback never fires: ngram-kv runs exactly as ngram-k2 (the same
    requests, the same steps), so they are equal and the one the engine can run is named."""
    path = _scenario(tmp_path, "vllm")
    assert main(["simulate", str(path), "--json", "--max-seeds", "2"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    ans = doc["decision"]
    st_ = {s["candidate"]: s for s in ans["standings"]}
    assert st_["ngram-kv"]["runnable"] is False and st_["ngram-kv"]["deployable_twin"] == "ngram-k2"
    assert st_["ngram-kv"]["status"] == "idealised", ans["reasons"]
    assert ans["winner"] != "ngram-kv"


def test_the_reasons_say_why_the_idealised_equal_went_out_when_one_candidate_remains():
    g = [10.0, 10.1, 9.9]
    f = Facts("fleet", (_cand("fixed", g, [900.0] * 3, runnable=True),
                        _cand("ideal", g, [500.0] * 3, runnable=False)), (1, 2, 3), "baseline", True, 10.0, 1)
    d = decide(f)
    assert d.winner == "fixed"
    assert any("out for a runnable equal: ideal" in said for _, said in d.steps), d.steps


def test_with_engine_leaves_facts_alone_without_a_verdict():
    f = _facts(_cand("baseline", [1.0, 1.0], [1.0, 1.0]), _cand("a", [1.0, 1.0], [1.0, 1.0]),
               _cand("b", [1.0, 1.0], [1.0, 1.0]))
    assert with_engine(f, {}) is f


@settings(max_examples=40, deadline=None)
@given(caps=st.lists(st.floats(20.0, 22.0), min_size=3, max_size=6), eps=st.floats(0.0, 0.005))
def test_the_capacity_question_never_crowns_an_idealised_equal_either(caps, eps):
    """Equal capacity per replica (within the amount): the runnable one is named, whichever of
    the two has the larger mean."""
    def c(name, xs, runnable=True):
        return CandidateFacts(name=name, baseline=name == "baseline", capacity=tuple(xs), runnable=runnable,
                              deployable="" if runnable else "fixed", engine="" if runnable else "SGLang")
    f = Facts("capacity", (c("baseline", [x * 0.5 for x in caps]), c("fixed", caps),
                           c("by-batch", [x * (1 + eps) for x in caps], runnable=False)),
              tuple(range(len(caps))), "baseline", True, None, 1)
    d = decide(f)
    assert d.winner == "fixed" and d.standing("by-batch").status == "idealised"


def test_a_capacity_interval_never_reads_below_zero():
    """The search bracket's half-width can exceed a small mean: it is shown clipped at 0."""
    from cli.capacity import _interval

    f = Facts("capacity", (CandidateFacts(name="a", baseline=True, capacity=(0.30, 0.31, 0.30),
                                          capacity_resolution=0.5),), (1, 2, 3), "a", True, None, 1)
    d = decide(f)
    m, half, txt = _interval(Answer(d), "a")
    assert half == 0.5 and "±" not in txt and txt.startswith("0–0.803"), txt


def test_a_proposer_the_engine_has_no_method_for_is_idealised_with_no_twin():
    """The shipped default scenario's self-drafting candidate (a fixed k; vLLM has no method for
    a self-draft proposer): the engine cannot run it at all, and no fixed k of the same
    proposer is offered as its twin; the n-gram candidates are runnable."""
    from pathlib import Path

    sc = load_scenario(Path(__file__).resolve().parents[3] / "scenarios" / "default.toml")
    dep = deployability(sc, None)
    assert not dep["selfdraft-l6-k3"].runnable
    assert dep["selfdraft-l6-k3"].twin.startswith("none on this engine (selfdraft-l6 (self_draft) has no vLLM")
    assert dep["ngram-k3"].runnable and dep["ngram-k2-cutoff2"].runnable
