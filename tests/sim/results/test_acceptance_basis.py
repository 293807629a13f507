"""The verdict says what each speculative candidate's acceptance rests on; assumed acceptance is
named as the last resort, with the step that replaces it. The draft's host time, when assumed,
is named the same way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.imported.published import published_entry
from sim.contracts.candidate import Candidate
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.answer_export import to_json
from sim.decisions.answer_text import Answer, lines
from sim.decisions.decision import decide
from sim.decisions.facts import CandidateFacts, Facts
from sim.results.acceptance_basis import acceptance_basis, draft_host_basis, rates_words

SPEC = Candidate(name="ngram-k3", proposer="ngram", k=3, policy="fixed")


def _profile(method: str) -> Profile:
    d = synthetic_profile_dict()
    if method == "published":
        d["acceptance"]["ngram"] = published_entry([0.8, 0.6, 0.4], citation="Example et al. 2025, Table 3")
    else:
        d["acceptance"]["ngram"]["provenance"]["method"] = method
    return Profile.from_dict(d, "p.json")


def test_assumed_profile_acceptance_is_named_the_last_resort_with_the_fix() -> None:
    line = acceptance_basis(SPEC, _profile("assumed"))
    assert line.startswith("ASSUMED ")
    assert "no published or measured acceptance for n-gram on synthetic-linear" in line
    assert "last resort" in line and "specplan profile import-vllm" in line


def test_published_and_scenario_assumed_and_baseline() -> None:
    assert acceptance_basis(SPEC, _profile("published")) == "published (Example et al. 2025, Table 3)"
    cand = Candidate(name="e", proposer="ngram", k=2, policy="fixed", assumed_acceptance=(0.75, 0.5625))
    assert acceptance_basis(cand, _profile("published")).startswith("ASSUMED 0.75 per position (the scenario's")
    assert acceptance_basis(Candidate(name="baseline", speculation="off"), _profile("assumed")) is None


@settings(max_examples=100, deadline=None)
@given(st.floats(0.05, 1.0), st.integers(1, 8))
def test_a_geometric_curve_reads_as_one_rate_per_position(r, k) -> None:
    assert rates_words([r ** (i + 1) for i in range(k)]) == f"{r:g} per position"


def _facts(name: str, **basis: str) -> CandidateFacts:
    """A candidate that carries the load alike on three seeds, with ``basis`` (what it rests on)."""
    return CandidateFacts(name=name, baseline=name == "baseline", goodput=(10.0, 10.1, 9.9),
                          attainment=(1.0,) * 3, carries=(True,) * 3, carry_reason=("",) * 3,
                          latency_ms=(900.0, 910.0, 905.0), hourly_usd=4.0, **basis)


def test_the_verdict_prints_the_basis_of_each_speculative_candidate() -> None:
    def cand(name, basis=""):
        return _facts(name, acceptance=basis)
    assumed = acceptance_basis(SPEC, _profile("assumed"))
    published = acceptance_basis(SPEC, _profile("published"))
    d = decide(Facts("fleet", (cand("baseline"), cand("a-k3", assumed), cand("a-k2", assumed),
                               cand("p-k3", published)), (1, 2, 3), "baseline", True, 10.0, 1))
    text = lines(Answer(d), wrap=False)
    assert f"acceptance: a-k3, a-k2: {assumed}" in text  # one line per basis, candidates together
    assert f"acceptance: p-k3: {published}" in text
    assert sum(t.startswith("acceptance: ") for t in text) == 2  # the baseline drafts nothing
    said = {s["candidate"]: s["acceptance"] for s in to_json(Answer(d))["standings"]}
    assert said == {"baseline": None, "a-k3": assumed, "a-k2": assumed, "p-k3": published}


def _host(method: str | None) -> Profile:
    """The synthetic profile (timing assumed) with the ngram overhead's own provenance ``method``."""
    d = synthetic_profile_dict()
    if method is not None:
        d["timing"]["proposers"]["ngram"]["overhead_provenance"] = {
            "method": method, "notes": "0.50 ms of host time per draft pass (kernel launches). Not in the database."}
    return Profile.from_dict(d, "p.json")


def test_an_assumed_draft_host_time_is_named_with_what_replaces_it() -> None:
    line = draft_host_basis(SPEC, _host("assumed"))
    assert line is not None and line.startswith("ASSUMED (0.50 ms of host time per draft pass)")
    assert "`specplan breakeven`" in line and "`specplan calibrate` fits it" in line
    assert draft_host_basis(SPEC, _host(None)).startswith("ASSUMED (")  # the timing section's own: assumed
    assert draft_host_basis(SPEC, _host("calibrated")) is None  # what `calibrate --fit draft_host_scale` writes
    assert draft_host_basis(Candidate(name="baseline", speculation="off"), _host("assumed")) is None


def test_the_verdict_and_its_json_name_the_candidates_whose_draft_host_time_is_assumed() -> None:
    def cand(name, host=""):
        return _facts(name, draft_host=host)
    host = draft_host_basis(SPEC, _host("assumed"))
    d = decide(Facts("fleet", (cand("baseline"), cand("a-k3", host), cand("a-k2", host), cand("m-k3")),
                     (1, 2, 3), "baseline", True, 10.0, 1))
    text = lines(Answer(d), wrap=False)
    assert [t for t in text if t.startswith("draft host time: ")] == [f"draft host time: a-k3, a-k2: {host}"]
    said = {s["candidate"]: s["draft_host"] for s in to_json(Answer(d))["standings"]}
    assert said == {"baseline": None, "a-k3": host, "a-k2": host, "m-k3": None}
