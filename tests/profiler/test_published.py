"""Published acceptance: explicit rate kinds, nominal counts, citation required."""

from __future__ import annotations

import pytest

from profiler.imported.published import published_entry, survival_rates
from profiler.measured_acceptance.acceptance import check_entry
from profiler.measured_acceptance.acceptance_report import mean_acceptance_length
from sim.contracts.errors import SpecplanError

CITE = "Example et al. 2025, Table 3 (https://arxiv.org/abs/0000.00000)"


@pytest.mark.parametrize(
    ("rates", "kind", "k_max", "expected"),
    [
        ([0.8, 0.6, 0.4], "survival", None, [0.8, 0.6, 0.4]),
        ([0.8, 0.75, 0.5], "conditional", None, [0.8, 0.6, 0.3]),
        ([0.5], "alpha", 3, [0.5, 0.25, 0.125]),
        ([1.0, 1.0], "survival", 2, [1.0, 1.0]),
        ([0.0, 0.0], "conditional", None, [0.0, 0.0]),
    ],
)
def test_survival_rates_table(rates, kind, k_max, expected):
    assert survival_rates(rates, kind, k_max) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rates", "kind", "k_max", "message"),
    [
        ([0.5, 0.7], "survival", None, "non-increasing; were these conditional"),
        ([1.2], "survival", None, r"rates\[0\]=1.2"),
        ([], "survival", None, "at least one rate"),
        ([0.5, 0.4], "alpha", 3, "exactly one rate"),
        ([0.5], "alpha", None, "k_max: required"),
        ([0.5, 0.4], "survival", 3, "differs from the 2 rates"),
        ([0.5], "median", None, "expected one of survival"),
    ],
)
def test_survival_rates_errors(rates, kind, k_max, message):
    with pytest.raises(SpecplanError, match=message):
        survival_rates(rates, kind, k_max)


def test_entry_is_valid_and_says_where_it_is_from():
    entry = published_entry(
        [0.8, 0.75, 0.5], kind="conditional", citation=CITE, task="chat", language="en",
        temperature=0.0, models={"target": "llama-70b", "eagle": "EAGLE head"},
    )
    check_entry(entry)
    seg = entry["segments"][0]
    assert seg["accepted_per_pos"] == [800, 600, 300]
    assert seg["num_drafts"] == 1000 and seg["num_draft_tokens"] == 3000
    assert mean_acceptance_length(seg) == pytest.approx(2.7)
    assert seg["per_request"] == []
    prov = entry["provenance"]
    assert prov["method"] == "published" and prov["citation"] == CITE
    assert "nominal" in prov["notes"] and "conditional" in prov["notes"]


def test_alpha_notes_the_independence_assumption():
    entry = published_entry([0.7], kind="alpha", k_max=4, citation=CITE, num_drafts=10000)
    check_entry(entry)
    assert entry["segments"][0]["accepted_per_pos"] == [7000, 4900, 3430, 2401]
    assert "assumed equal and independent" in entry["provenance"]["notes"]


@pytest.mark.parametrize("citation", [None, "", "   "])
def test_citation_required(citation):
    with pytest.raises(SpecplanError, match="citation: required"):
        published_entry([0.5], kind="survival", citation=citation)


def test_segment_dict_and_default_kind_survival():
    entry = published_entry(
        [0.9, 0.7], citation=CITE, command="specplan profile published ...",
        segment={"task": "code", "language": "de", "temperature": 0.7},
    )
    seg = entry["segments"][0]
    assert seg["segment"] == {"task": "code", "language": "de", "temperature": 0.7}
    assert seg["accepted_per_pos"] == [900, 700]
    assert entry["provenance"]["command"] == "specplan profile published ..."
    assert "published survival rates" in entry["provenance"]["notes"]


def test_bad_nominal_drafts_and_temperature():
    with pytest.raises(SpecplanError, match="num_drafts=0"):
        published_entry([0.5], kind="survival", citation=CITE, num_drafts=0)
    with pytest.raises(SpecplanError, match="temperature"):
        published_entry([0.5], kind="survival", citation=CITE, temperature=-0.1)


def test_simulator_reads_the_entry():
    from sim.contracts.profile import Profile
    from sim.contracts.synthetic import synthetic_profile_dict

    d = synthetic_profile_dict()
    d["acceptance"]["ngram"] = published_entry([0.8, 0.6, 0.5], kind="conditional", citation=CITE)
    profile = Profile.from_dict(d, "published.json")
    assert any("published" in line and CITE in line for line in profile.sources())
