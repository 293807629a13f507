"""The parser for `vllm bench serve --save-result --save-detailed` JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.vllm_results import load_vllm_results


def _result(**over):
    """A small result in the layout vLLM's `main_async` writes (keys and units as vLLM's)."""
    obj = {
        "date": "20261129-181500",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "tokenizer_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "num_prompts": 3,
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 4.25,
        "completed": 2,
        "failed": 1,
        "total_input_tokens": 300,
        "total_output_tokens": 7,
        "request_throughput": 0.47,
        "request_goodput": None,
        "output_throughput": 1.65,
        "total_token_throughput": 72.2,
        "input_lens": [100, 200, 50],
        "output_lens": [4, 3, 0],
        "ttfts": [0.10, 0.25, 0.0],
        "itls": [[0.02, 0.03, 0.05], [0.04, 0.06], []],
        "generated_texts": ["a b c d", "x y z", ""],
        "errors": ["", "", "Server disconnected"],
        "max_output_tokens_per_s": 5.0,
        "max_concurrent_requests": 2,
        "mean_ttft_ms": 175.0,
        "median_ttft_ms": 175.0,
        "std_ttft_ms": 75.0,
        "p99_ttft_ms": 248.5,
        "mean_tpot_ms": 40.0,
        "median_tpot_ms": 40.0,
        "std_tpot_ms": 8.0,
        "p99_tpot_ms": 49.0,
    }
    obj.update(over)
    return obj


def test_reads_per_request_lists_and_run_facts(tmp_path):
    path = tmp_path / "openai-2.0qps-SmolLM2-135M-Instruct-20261129-181500.json"
    path.write_text(json.dumps(_result()), encoding="utf-8")
    (res,) = load_vllm_results(path)
    assert res.request_rate == 2.0 and res.burstiness == 1.0 and res.duration_s == 4.25
    assert res.num_requests == 3 and res.open_loop
    assert res.input_lens == (100, 200, 50) and res.output_lens == (4, 3, 0)
    assert res.succeeded.tolist() == [True, True, False]
    assert res.summary["p99_ttft_ms"] == 248.5 and "input_lens" not in res.summary
    frame = res.requests_frame()
    assert frame.columns == [
        "id", "prompt_tokens", "output_tokens", "success", "ttft_s", "e2el_s", "tpot_s",
        "num_chunks", "max_pause_s",
    ]
    row0 = frame.row(0, named=True)
    assert row0["e2el_s"] == pytest.approx(0.20)  # ttft + sum(itl)
    assert row0["tpot_s"] == pytest.approx(0.10 / 3)  # vLLM: (latency - ttft) / (out - 1)
    assert row0["max_pause_s"] == pytest.approx(0.05) and row0["num_chunks"] == 4
    failed = frame.row(2, named=True)
    assert failed["ttft_s"] is None and failed["e2el_s"] is None and not failed["success"]
    assert sorted(res.itl_values_s().round(3).tolist()) == [0.02, 0.03, 0.04, 0.05, 0.06]


def test_infinite_rate_and_appended_runs(tmp_path):
    path = tmp_path / "runs.json"
    first = _result(request_rate="inf")
    second = _result(request_rate=4.0, burstiness=0.5, max_concurrency=8)
    path.write_text(json.dumps(first) + "\n" + json.dumps(second), encoding="utf-8")
    a, b = load_vllm_results(path)
    assert math.isinf(a.request_rate) and not a.open_loop
    assert a.arrival_times(np.random.default_rng(0)).tolist() == [0.0, 0.0, 0.0]
    assert b.burstiness == 0.5 and b.max_concurrency == 8 and not b.open_loop
    assert "(run 1)" in b.source


def test_arrivals_follow_vllm_normalisation():
    from sim.contracts.vllm_results import parse_result

    res = parse_result(_result(request_rate=2.0, burstiness=1.0), "x.json")
    t = res.arrival_times(np.random.default_rng(1))
    assert len(t) == 3 and np.all(np.diff(t) >= 0)
    assert t[-1] == pytest.approx(3 / 2.0)  # vLLM rescales so the last send is at n / rate


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"ttfts": [0.1, 0.2]}, "ttfts: has 2 entries"),
        ({"request_rate": "fast"}, "request_rate: expected a number"),
        ({"itls": [[0.1], [-1.0], []]}, "itls[1][0]"),
        ({"input_lens": [1, 2.5, 3]}, "input_lens[1]"),
        ({"request_rate": 1e-310}, "send times beyond floating point"),
        ({"request_rate": 1e-300, "burstiness": 1e-10}, "burstiness 1e-10 and 3 requests"),
        ({"request_rate": 1e308}, "request_rate: 1e.308 req/s is over the limit"),
    ],
)
def test_bad_fields_name_the_field(tmp_path, over, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_result(**over)), encoding="utf-8")
    with pytest.raises(SpecplanError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_vllm_results(path)


def test_summary_only_file_asks_for_save_detailed(tmp_path):
    obj = _result()
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        del obj[key]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    with pytest.raises(SpecplanError, match="--save-detailed"):
        load_vllm_results(path)


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"request_rate": 1.0,\n  "ttfts": [0.1,,]}', encoding="utf-8")
    with pytest.raises(SpecplanError, match=r"broken.json:2: invalid JSON"):
        load_vllm_results(path)
