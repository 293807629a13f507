"""`validate --vllm-results`: like with like on chunked streams, and never a NaN on screen."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.contracts.vllm_results import parse_result
from sim.fidelity import comparison
from sim.fidelity.vllm_compare import (
    measured_chunking,
    run_facts,
    simulate_vllm,
    vllm_measured_values,
)
from tests.helpers import scenario_toml, sent_tokens, write_scenario


def _scenario(tmp_path):
    return write_scenario(
        tmp_path,
        scenario_toml(
            "chunks", run={"duration_s": 10, "seeds": [0]}, workload={"arrival": "poisson", "rate": 2.0},
            segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "uniform", "min": 12, "max": 40},
                       "output_tokens": {"dist": "uniform", "min": 4, "max": 12}}],
            slo={"ttft_ms": 500, "e2el_ms": 3000}, fleet={"profile": "p.json"},
            engine={"max_num_seqs": 8, "max_num_batched_tokens": 256, "block_size": 16},
            candidates=[{"name": "baseline", "speculation": "off"}],
        ),
        profile_file="p.json", name="tiny-synthetic", base_step_s=0.004, per_seq_s=0.0005,
        prefill_base_s=0.003,
    )


def _simulated_truth_file(tmp_path, scenario_path, c: int, rate: float | str = 4.0):
    """A `--save-detailed` file of what the simulator itself served (seed 0), streamed by vLLM's
    --stream-interval c: the simulator predicting it on seed 0 is the truth."""
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario

    rng = np.random.default_rng(7)
    n = 60
    outs = [int(x) for x in rng.integers(20, 90, n)]
    skeleton = {"request_rate": rate, "burstiness": 1.0, "duration": 1.0,
                "input_lens": [int(x) for x in rng.integers(20, 200, n)], "output_lens": outs,
                "ttfts": [0.1] * n, "itls": [[0.01] * (o - 1) for o in outs], "errors": [""] * n}
    run = simulate_vllm(parse_result(skeleton, "skeleton"), load_scenario(scenario_path),
                        load_profile(tmp_path / "p.json"), "baseline", [0]).runs[0]
    req = run.requests.sort("id")
    assert (req["generated_tokens"] == req["num_bursts"]).all()  # one token per step: an exact truth
    ttfts, itls = [], []
    for r in req.iter_rows(named=True):
        g = run.itl.filter(pl.col("id") == r["id"])["gap_s"].to_numpy()
        t = r["first_token_s"] + np.concatenate([[0.0], np.cumsum(g)])
        t = t[sent_tokens(int(r["generated_tokens"]), c, "first-alone")]
        ttfts.append(float(t[0] - r["arrival_s"]))
        itls.append(np.diff(t).tolist())
    obj = {**skeleton, "ttfts": ttfts, "itls": itls, "duration": float(req["finish_s"].max()),
           "output_lens": req["generated_tokens"].to_list(), "input_lens": req["prompt_tokens"].to_list()}
    path = tmp_path / f"vllm-stream-interval-{c}.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_a_server_streaming_ten_tokens_a_chunk_shows_no_false_itl_or_tpot_error(tmp_path, capsys):
    scenario = _scenario(tmp_path)
    path = _simulated_truth_file(tmp_path, scenario, 10)
    out = tmp_path / "out"
    assert main(["validate", "--vllm-results", str(path), "--scenario", str(scenario), "--seeds", "0",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ITL per chunk of ~10 tokens (detected from 60 requests: 60 match exactly" in text
    assert "nan" not in text.lower()
    by = {r["column"]: r for r in pl.read_csv(out / "fidelity.csv").to_dicts()}
    for col in ("itl_ms_median", "itl_ms_p95", "tpot_ms_median", "tpot_ms_p95", "tpot_ms_p99",
                "ttft_ms_p99", "e2el_ms_p99", "pause_ms_p95"):
        assert abs(by[col]["rel_error"]) < 1e-9, (col, by[col])
    assert by["itl_ms_median"]["metric"] == "ITL p50 (ms, chunks of ~10 tok)"


def test_an_infinite_rate_without_a_duration_prints_what_is_known(tmp_path, capsys):
    scenario = _scenario(tmp_path)
    path = _simulated_truth_file(tmp_path, scenario, 1, rate="inf")
    obj = json.loads(path.read_text(encoding="utf-8"))
    del obj["duration"]
    path.write_text(json.dumps(obj), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["validate", "--vllm-results", str(path), "--scenario", str(scenario), "--seeds", "0",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower()
    assert "request_rate inf: vLLM sent all 60 requests at t = 0" in text
    assert "measured throughput and goodput unknown (the file has no positive duration)" in text
    assert "every request sent at once (no finite rate)" in text
    assert "ITL per token (one token per streamed chunk" in text
    saved = (out / "fidelity.json").read_text(encoding="utf-8")
    assert "NaN" not in saved and "Infinity" not in saved


_NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6),
                     st.sampled_from(["inf", "Infinity"]))


@settings(max_examples=200, deadline=None)
@given(rate=_NUMBERS, duration=st.one_of(st.none(), _NUMBERS), burstiness=st.one_of(st.none(), _NUMBERS),
       drop=st.sets(st.sampled_from(["duration", "burstiness", "max_concurrency", "errors"])),
       c=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_the_header_and_table_never_print_nan_for_any_file(rate, duration, burstiness, drop, c, seed):
    """Whatever rate, duration or burstiness a file carries (or lacks), the lines printed
    either name what is known or refuse the file in one line: never a NaN."""
    rng = np.random.default_rng(seed)
    outs = [int(x) for x in rng.integers(1, 40, 6)]
    ttfts = rng.uniform(0.01, 0.2, 6).tolist()
    itls = [(rng.uniform(0.005, 0.05, len(sent_tokens(n, c, "first-alone")) - 1)).tolist() for n in outs]
    obj = {"request_rate": rate, "duration": duration, "burstiness": burstiness, "max_concurrency": None,
           "input_lens": [10] * 6, "output_lens": outs, "ttfts": ttfts, "itls": itls,
           "errors": ["", "", "", "", "", "boom"]}
    for k in drop:
        obj.pop(k)
    try:
        res = parse_result(json.loads(json.dumps(obj)), "file.json")  # NaN survives a JSON round trip
    except SpecplanError as exc:
        assert "nan" not in str(exc).split(": ", 1)[0].lower()
        return
    chunking = measured_chunking(res)
    measured = vllm_measured_values(res, {"ttft": 500.0})
    predicted = {k: (v * 1.1 if v is not None else None) for k, v in measured.items()}
    r = res.request_rate if math.isfinite(res.request_rate) else None
    table = comparison.error_table(comparison.error_rows(res.source, None, r, "baseline", predicted, measured))
    printed = "\n".join([*run_facts(res, chunking), comparison.format_table(table), comparison.format_bar(table)])
    assert "nan" not in printed.lower()
    assert not any(isinstance(v, float) and not math.isfinite(v) for row in table.to_dicts() for v in row.values())
    if res.duration_s is None:
        assert measured["request_throughput"] is None and "unknown (the file has no positive duration)" in printed


def test_a_missing_duration_is_unknown_not_refused():
    obj = {"request_rate": 2.0, "input_lens": [5], "output_lens": [3], "ttfts": [0.1], "itls": [[0.01, 0.02]]}
    res = parse_result(obj, "x.json")
    assert res.duration_s is None
    assert vllm_measured_values(res)["request_throughput"] is None
    assert parse_result({**obj, "duration": float("nan")}, "x.json").duration_s is None
    with pytest.raises(SpecplanError, match="duration: expected a number"):
        parse_result({**obj, "duration": "soon"}, "x.json")


def test_a_value_that_is_not_a_finite_number_is_absent_from_the_table():
    pred = {"ttft_ms_median": float("nan"), "ttft_ms_p95": 120.0, "tpot_ms_p95": float("inf")}
    meas = {"ttft_ms_median": 100.0, "ttft_ms_p95": float("nan"), "tpot_ms_p95": 5.0}
    table = comparison.error_table(comparison.error_rows("f.json", None, float("inf"), "b", pred, meas))
    by = {r["column"]: r for r in table.to_dicts()}
    assert by["ttft_ms_median"]["predicted"] is None and by["ttft_ms_median"]["rel_error"] is None
    assert by["ttft_ms_p95"]["measured"] is None and by["tpot_ms_p95"]["predicted"] is None
    assert by["tpot_ms_p95"]["rate"] is None
    text = comparison.format_table(table)
    assert "nan" not in text.lower() and "inf" not in text.lower()
