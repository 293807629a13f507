"""import-vllm counts as vLLM does: rates given a proposal, and the proposal rate (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.imported.vllm_import import import_vllm_metrics
from profiler.measured_acceptance.acceptance import check_entry

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LAB = f'engine="0",model_name="{MODEL}"'
# A scrape of an n-gram server (k=3) after 40 requests finished, none in flight, in the text
# format prometheus_client prints for vLLM's counters (vllm/v1/metrics/loggers.py names).
RECORDED = f"""# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{LAB}}} 10000.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{{{LAB},finished_reason="stop"}} 31.0
vllm:request_success_total{{{LAB},finished_reason="length"}} 9.0
vllm:request_success_total{{{LAB},finished_reason="abort"}} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{LAB}}} 1400.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{LAB}}} 4012.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{LAB}}} 1920.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="0"}} 900.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="1"}} 600.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="2"}} 420.0
"""


def test_survival_rates_are_vllms_per_position_acceptance_rates(tmp_path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(RECORDED, encoding="utf-8")
    entry = import_vllm_metrics(str(path), task="code", language="en")
    check_entry(entry)
    seg = entry["segments"][0]
    # vLLM's SpecDecodingLogging.log: acceptance_rates = np.sum(pos_matrix, axis=0) / num_drafts
    vllm_rates = np.sum(np.array([[900, 600, 420]]), axis=0) / 1400
    ours = np.array(seg["accepted_per_pos"]) / seg["num_drafts"]
    np.testing.assert_array_equal(ours, vllm_rates)
    # vLLM: mean acceptance length = 1 + accepted / drafts
    assert 1 + seg["num_accepted_tokens"] / seg["num_drafts"] == pytest.approx(1 + 1920 / 1400)
    # steps = generation tokens - finished requests (their prefill tokens) - accepted
    assert seg["num_steps"] == 10000 - 40 - 1920
    assert "a proposal on 17.4% of steps" in entry["provenance"]["notes"]


def test_without_generation_counters_the_proposal_rate_is_unknown_and_said(tmp_path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text("\n".join(line for line in RECORDED.splitlines() if "request_success" not in line))
    entry = import_vllm_metrics(str(path))
    assert "num_steps" not in entry["segments"][0]
    assert "proposal rate unknown" in entry["provenance"]["notes"]


def test_requests_in_flight_that_break_the_formula_are_not_trusted(tmp_path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(RECORDED.replace("10000.0", "3000.0"))
    entry = import_vllm_metrics(str(path))
    assert "num_steps" not in entry["segments"][0]
    assert "requests in flight" in entry["provenance"]["notes"]
