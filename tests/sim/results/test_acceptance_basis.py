"""The verdict says what each speculative candidate's acceptance rests on; assumed acceptance is
named as the last resort, with the step that replaces it."""

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
from sim.results.acceptance_basis import acceptance_basis, rates_words

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


def test_the_verdict_prints_the_basis_of_each_speculative_candidate() -> None:
    def cand(name, basis=""):
        return CandidateFacts(name=name, baseline=name == "baseline", goodput=(10.0, 10.1, 9.9),
                              attainment=(1.0,) * 3, carries=(True,) * 3, carry_reason=("",) * 3,
                              latency_ms=(900.0, 910.0, 905.0), hourly_usd=4.0, acceptance=basis)
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
