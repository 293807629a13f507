"""`specplan capacity` carries the profile's acceptance interval into its answer
(sim/decisions/capacity_doubt.py, the rule of acceptance_doubt.py): a profile measured on few
prompts cannot give a capacity winner, or a speculative replica count, that changes inside its
interval; one measured on many keeps its answer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sim.contracts.scenario import load_scenario
from sim.decisions.answer import capacity_answer, with_capacity_acceptance_doubt
from sim.decisions.answer_export import to_json
from sim.decisions.answer_text import lines
from sim.decisions.capacity import plan_capacity
from sim.decisions.capacity_doubt import differs
from tests.helpers import scenario_toml
from tests.sim.decisions.test_acceptance_doubt import write_root

SEARCH = {"profile_band": False, "load_fractions": (), "min_requests": 60, "max_evals": 4, "rel_tol": 0.25}
"""A short search: the rule, not the capacity's precision, is under test."""


def capacity_root(tmp: Path, prompts: int | None) -> Path:
    """``write_root``'s profile (one segment on ``prompts`` prompts) under a scenario whose TPOT
    limit only speculation meets at the estimate (acceptance length about 3.3 per step; at 1,
    a verification step costs four decode rows for one token)."""
    write_root(tmp, prompts)
    text = scenario_toml(
        "cap-doubt", run={"duration_s": 30.0, "warmup_s": 5, "seeds": [1, 2, 3], "max_seeds": 3},
        workload={"arrival": "poisson", "rate": 0.1},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
                   "output_tokens": {"dist": "uniform", "min": 30, "max": 60},
                   "acceptance": {"task": "chat", "language": "en"}}],
        slo={"tpot_ms": 8.0, "percentile": 50}, fleet={"profile": "../profiles/p.json"},
        engine={"max_num_seqs": 16},
        candidates=[{"name": "baseline", "speculation": "off"}, {"name": "spec", "proposer": "ngram", "k": 3}])
    path = tmp / "scenarios" / "cap.toml"
    path.write_text(text, encoding="utf-8")
    return path


def capacity_for(tmp: Path, prompts: int | None):
    sc = load_scenario(capacity_root(tmp, prompts))
    report = plan_capacity(sc, None, **SEARCH)
    estimate = capacity_answer(report)
    return estimate, with_capacity_acceptance_doubt(estimate, report, sc, None, min_requests=SEARCH["min_requests"])


def test_capacity_on_one_prompt_per_segment_is_undetermined_with_the_sample_size_reason(tmp_path):
    estimate, ans = capacity_for(tmp_path, 1)
    assert estimate.whole.winner == "spec"  # at the estimate alone it would answer
    assert ans.whole.outcome == "undetermined" and ans.whole.winner is None
    text = "\n".join(lines(ans, wrap=False))
    assert text.startswith("verdict: undetermined: spec: the answer changes inside its acceptance interval: "
                           "the profile measured 1 prompt for segment chat")
    assert "measure at least 9 more" in text
    (doubt,) = ans.doubts
    assert doubt.flips_low and doubt.low == pytest.approx(1.0) and doubt.runs > 0
    doc = to_json(ans)["acceptance_interval"][0]
    assert doc["flips"] is True and "1 prompt for segment chat" in doc["reason"]


def test_capacity_on_many_prompts_keeps_its_winner_and_says_the_interval_holds(tmp_path):
    _, ans = capacity_for(tmp_path, 60)
    assert ans.whole.outcome == "winner" and ans.whole.winner == "spec"
    (doubt,) = ans.doubts
    assert not doubt.flips and doubt.low < doubt.assumed < doubt.high
    assert "the answer is the same at both ends: spec" in "\n".join(lines(ans, wrap=False))


def test_a_profile_without_a_sample_size_keeps_the_capacity_answer_and_says_so(tmp_path):
    _, ans = capacity_for(tmp_path, None)
    assert ans.whole.winner == "spec"
    assert any("records no sample size" in x for x in lines(ans, wrap=False))


def test_a_settled_replica_count_that_changes_at_an_end_is_a_change_and_an_open_one_is_not(tmp_path):
    estimate, _ = capacity_for(tmp_path, 60)
    d = estimate.whole
    spec = d.facts.candidate("spec")
    assert spec.replicas == 1

    def with_spec(**kw):
        facts = dataclasses.replace(d.facts, candidates=tuple(
            dataclasses.replace(c, **kw) if c.name == "spec" else c for c in d.facts.candidates))
        return dataclasses.replace(d, facts=facts)

    assert not differs(d, d, "spec")
    assert differs(d, with_spec(replicas=2, replicas_low=2), "spec")
    assert not differs(d, with_spec(replicas=2, replicas_low=1), "spec")  # n − 1 open: the seeds' doing


def _counting(monkeypatch) -> list[tuple[str, int]]:
    """Every simulation a ``SimulatedLoad`` runs, as (candidate, seeds) (the probes read back from
    a folder or judged before run none)."""
    from sim.decisions.simulated_load import SimulatedLoad

    calls: list[tuple[str, int]] = []
    real = SimulatedLoad.simulate

    def simulate(self, sc, candidate, seeds):
        calls.append((candidate, len(seeds)))
        return real(self, sc, candidate, seeds)

    monkeypatch.setattr(SimulatedLoad, "simulate", simulate)
    return calls


def test_the_intervals_probes_are_kept_with_the_plans_and_a_rerun_simulates_none_of_them(tmp_path, monkeypatch):
    from sim.decisions.capacity_doubt import capacity_doubts

    sc = load_scenario(capacity_root(tmp_path, 1))
    probes = tmp_path / "out" / "probes"
    report = plan_capacity(sc, None, cache_dir=probes, **SEARCH)
    estimate = capacity_answer(report).whole
    kept = len(list(probes.glob("*.json")))
    first = capacity_doubts(report, sc, None, estimate, min_requests=SEARCH["min_requests"], cache_dir=probes)
    assert len(list(probes.glob("*.json"))) > kept  # each end's probes beside the estimate's
    calls = _counting(monkeypatch)
    again = capacity_doubts(report, sc, None, estimate, min_requests=SEARCH["min_requests"], cache_dir=probes)
    assert calls == []  # every probe of both ends and the bisection read back
    assert again == first and first[0].flips_low  # the same doubt, to the flip


def test_a_probes_key_names_the_acceptance_its_candidates_segments_ran_at(tmp_path):
    from sim.decisions.simulated_load import _probe_key

    sc = load_scenario(capacity_root(tmp_path, 1))
    key = lambda shift: _probe_key(sc, None, "spec", [1], 1.0, shift)  # noqa: E731
    assert key(None) == key({}) == _probe_key(sc, None, "spec", [1])  # the estimate's, as written before
    assert key({"chat": 2.0}) != key(None) and key({"chat": 2.0}) != key({"chat": 2.5})
    assert key({"a": 1.5, "b": 2.0}) == key({"b": 2.0, "a": 1.5})  # the same ends, in any order


def test_a_load_judged_twice_in_a_process_is_simulated_once(tmp_path, monkeypatch):
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.decisions.sustain import SustainCriteria

    sc = load_scenario(capacity_root(tmp_path, 60))
    load = SimulatedLoad(sc, None, SustainCriteria({"tpot": 8.0}, 50.0), SEARCH["min_requests"],
                         acceptance_shift={"spec": {"chat": 2.0}})
    calls = _counting(monkeypatch)
    first = load.probe("spec", 0.1, 1, 1)
    once = len(calls)
    assert once >= 1
    assert load.probe("spec", 0.1, 1, 1) == first and len(load.rows) == 2  # judged again, from the first
    assert len(calls) == once
    load.probe("spec", 0.1, 2, 1)  # another seed is another load
    assert len(calls) > once
