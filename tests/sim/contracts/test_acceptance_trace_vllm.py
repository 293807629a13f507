"""vLLM's per-request acceptance (`--per-request-spec-decode-metrics detailed`) read as a trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.acceptance_trace import measured_acceptance_length, read_vllm_per_request
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict

FIXTURE = Path(__file__).parent / "traces" / "vllm_spec_decode_detailed.jsonl"


def test_both_response_layouts_are_read_and_a_response_without_stats_is_skipped():
    recs = read_vllm_per_request(str(FIXTURE))
    assert [r.request for r in recs] == ["chatcmpl-1", "cmpl-2"]
    assert recs[0].values == (3, 0, 1, 2) and recs[0].k == 3
    assert recs[1].values == (-1, 0, 2)  # a step that drafted nothing had no proposal


def test_measured_acceptance_length_counts_only_steps_with_a_proposal():
    # 4 + 2 drafts, 6 + 2 accepted: vLLM's 1 + accepted / drafts
    assert measured_acceptance_length(read_vllm_per_request(str(FIXTURE)), 3) == pytest.approx(1 + 8 / 6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=30))
def test_acceptance_length_is_vllms_ratio_for_any_steps(tmp_path_factory, steps):
    drafted = [d for d, _ in steps]
    accepted = [min(a, d) for d, a in steps]
    path = tmp_path_factory.mktemp("t") / "r.jsonl"
    path.write_text(json.dumps({"num_spec_tokens": 4, "per_step_accepted": accepted,
                                "per_step_drafted": drafted}) + "\n", encoding="utf-8")
    recs = read_vllm_per_request(str(path))
    drafts = sum(1 for d in drafted if d > 0)
    if drafts == 0:
        with pytest.raises(SpecplanError, match="no step with a proposal"):
            measured_acceptance_length(recs, 4)
    else:
        want = 1 + sum(a for a, d in zip(accepted, drafted, strict=True) if d > 0) / drafts
        assert measured_acceptance_length(recs, 4) == pytest.approx(want)


@pytest.mark.parametrize(("line", "message"), [
    ({"num_spec_tokens": 3, "per_step_accepted": [1], "per_step_drafted": [1, 2]}, "1 steps but per_step_drafted has 2"),
    ({"num_spec_tokens": 3, "per_step_accepted": [2], "per_step_drafted": [1]}, "per_step_accepted[0]: 2 exceeds per_step_drafted[0] = 1"),
    ({"num_spec_tokens": 0, "per_step_accepted": [0], "per_step_drafted": [0]}, "num_spec_tokens: expected the draft length"),
    ({"num_spec_tokens": 3, "per_step_accepted": [1]}, "per_step_drafted: missing"),
    ({"num_spec_tokens": 3, "per_step_accepted": [1], "per_step_drafted": [3], "num_accepted_draft_tokens": 2},
     "num_accepted_draft_tokens: 2 but per_step_accepted sums to 1"),
    ({"choices": [{"index": 0}], "usage": {}, "x": 1, "metrics": {}}, "no response with speculative decoding stats"),
    ({"model": "m"}, "per_step_accepted: missing (run vLLM with --per-request-spec-decode-metrics detailed)"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    with pytest.raises(SpecplanError) as exc:
        read_vllm_per_request(str(path))
    assert message in str(exc.value)
    assert str(path) in str(exc.value)


def test_calibrated_provenance_needs_notes_saying_what_it_was_fitted_to():
    doc = synthetic_profile_dict()
    doc["timing"]["step_overhead"] = {"seconds": 0.001, "provenance": {"method": "calibrated"}}
    with pytest.raises(SpecplanError, match="timing.step_overhead.provenance.notes: required when method is 'calibrated'"):
        Profile.from_dict(doc, "p.json")
    doc["timing"]["step_overhead"]["provenance"]["notes"] = "calibrated from a.json, b.json"
    assert Profile.from_dict(doc, "p.json").timing.step_overhead.provenance.method == "calibrated"


def test_a_candidate_replays_vllm_per_request_acceptance(tmp_path):
    from sim.contracts.scenario import load_scenario
    from sim.results.simulation import simulate_once
    from tests.helpers import scenario_toml, write_scenario

    (tmp_path / "acc.jsonl").write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    path = write_scenario(tmp_path, scenario_toml(
        "vllm-trace", run={"duration_s": 5, "seeds": [0]}, workload={"arrival": "poisson", "rate": 2.0},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
                   "output_tokens": {"dist": "fixed", "value": 16}}],
        fleet={"profile": "p.json"}, engine={"max_num_seqs": 8, "max_num_batched_tokens": 256, "block_size": 16},
        candidates=[{"name": "baseline", "speculation": "off"},
                    {"name": "replay", "proposer": "ngram", "k": 3, "acceptance_trace": "acc.jsonl",
                     "trace_format": "vllm-per-request"}]), profile_file="p.json")
    run = simulate_once(load_scenario(path), Profile.from_dict(synthetic_profile_dict(), "p"), "replay", 0)
    row = run.summary.filter(run.summary["segment"] == "all").row(0, named=True)
    assert 1.0 < row["mean_acceptance_length"] <= 4.0
    assert any("acc.jsonl" in s for s in run.sources)
