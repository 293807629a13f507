"""Streamed chunks: the rule read from a `vllm bench serve` file, and the simulator's stream
timed through the same rule, so a prediction equal to the truth shows no error."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.vllm_results import parse_result
from sim.fidelity.stream_chunks import client_view, detect, itl_entries
from sim.fidelity.vllm_compare import client_values, measured_chunking, vllm_measured_values
from tests.helpers import sent_tokens

CLIENT_COLUMNS = ("ttft_ms_median", "ttft_ms_p95", "ttft_ms_p99", "tpot_ms_median", "tpot_ms_p95",
                  "tpot_ms_p99", "e2el_ms_median", "e2el_ms_p95", "e2el_ms_p99", "itl_ms_median",
                  "itl_ms_p95", "pause_ms_median", "pause_ms_p95", "pause_ms_p99")


def truth(lengths: list[int], gaps_per_token: list[np.ndarray], arrivals: np.ndarray, ttfts: np.ndarray):
    """A simulated run with one token per step: its requests and ITL frames."""
    first = arrivals + ttfts
    finish = [f + float(g.sum()) for f, g in zip(first, gaps_per_token, strict=True)]
    n = len(lengths)
    requests = pl.DataFrame({
        "id": list(range(n)), "arrival_s": arrivals, "first_token_s": first, "finish_s": finish,
        "generated_tokens": lengths, "num_bursts": lengths, "outcome": ["completed"] * n,
    })
    itl = pl.DataFrame({"id": [i for i, g in enumerate(gaps_per_token) for _ in g],
                        "gap_s": np.concatenate(gaps_per_token) if n else []},
                       schema={"id": pl.Int64, "gap_s": pl.Float64})
    return requests, itl


def streamed_file(lengths, gaps_per_token, ttfts, c, layout, rate=4.0):
    """What `vllm bench serve --save-detailed` writes for that run streamed in chunks of c."""
    out_ttfts, itls = [], []
    for n, g, t0 in zip(lengths, gaps_per_token, ttfts, strict=True):
        times = t0 + np.concatenate([[0.0], np.cumsum(g)])[sent_tokens(n, c, layout)]
        out_ttfts.append(float(times[0]))
        itls.append(np.diff(times).tolist())
    return {"request_rate": rate, "burstiness": 1.0, "duration": 100.0, "input_lens": [50] * len(lengths),
            "output_lens": list(lengths), "ttfts": out_ttfts, "itls": itls, "errors": [""] * len(lengths)}


def _anchored(c: int, lengths: list[int]) -> list[int]:
    """Lengths that pin the rule down (some files cannot: if every request is 5 tokens long,
    intervals 4, 5, 6 ... all give one gap): c+2 rules out a larger c, c*c+1 a smaller one,
    c*k and c*k+1 tell vLLM's first-alone chunks from fixed ones (checked by brute force over
    both layouts and c' < 400)."""
    pins = {c + 2, c * c + 1, *(c * k for k in range(1, 7)), *(c * k + 1 for k in range(1, 7))}
    return [n for n in sorted(pins) if n >= 2] + lengths


@settings(max_examples=150, deadline=None)
@given(c=st.integers(1, 16), layout=st.sampled_from(["first-alone", "fixed"]),
       lengths=st.lists(st.integers(2, 400), max_size=30))
def test_detection_recovers_the_chunk_rule_a_file_was_streamed_with(c, layout, lengths):
    lengths = _anchored(c, lengths)
    counts = [len(sent_tokens(n, c, layout)) - 1 for n in lengths]
    assert itl_entries(np.array(lengths), c, layout).tolist() == counts
    got = detect(lengths, counts)
    assert got.regular and got.matched == got.requests == len(lengths)
    assert got.tokens == c and got.layout == (layout if c > 1 else "first-alone")


@settings(max_examples=60, deadline=None)
@given(c=st.integers(1, 16), layout=st.sampled_from(["first-alone", "fixed"]),
       extra=st.lists(st.integers(2, 200), min_size=1, max_size=25), seed=st.integers(0, 2**32 - 1))
def test_a_prediction_equal_to_the_truth_shows_no_error_whatever_the_chunk_size(c, layout, extra, seed):
    rng = np.random.default_rng(seed)
    lengths = _anchored(c, extra)
    gaps = [rng.gamma(2.0, 0.01, n - 1) for n in lengths]
    arrivals = np.sort(rng.uniform(0, 20, len(lengths)))
    ttfts = rng.uniform(0.02, 0.3, len(lengths))
    requests, itl = truth(lengths, gaps, arrivals, ttfts)
    result = parse_result(streamed_file(lengths, gaps, ttfts, c, layout), "synthetic.json")
    measured = vllm_measured_values(result)
    chunking = measured_chunking(result)
    view = client_view(requests, itl, float(chunking.tokens), chunking.layout)
    assert view.approximate == 0
    predicted = client_values(view.requests, view.itl_s, 100.0, None)
    for col in CLIENT_COLUMNS:
        assert predicted[col] == pytest.approx(measured[col], rel=1e-9, abs=1e-9), col


def test_itl_of_chunks_against_one_token_steps_is_the_false_error_the_rule_removes():
    """Ten tokens a chunk: the simulator's own per-step ITL is ~1/10 of the measured one."""
    rng = np.random.default_rng(3)
    lengths = [int(x) for x in rng.integers(30, 200, 80)]
    gaps = [np.full(n - 1, 0.01) for n in lengths]
    requests, itl = truth(lengths, gaps, np.arange(80.0), np.full(80, 0.1))
    result = parse_result(streamed_file(lengths, gaps, np.full(80, 0.1), 10, "first-alone"), "x.json")
    measured = vllm_measured_values(result)
    per_step = client_values(*_one_token(requests, itl), 100.0, None)
    assert per_step["itl_ms_median"] / measured["itl_ms_median"] == pytest.approx(0.1)
    assert per_step["tpot_ms_p99"] == pytest.approx(measured["tpot_ms_p99"])  # vLLM's own rule keeps TPOT
    chunking = measured_chunking(result)
    assert (chunking.tokens, chunking.layout) == (10, "first-alone")
    assert "ITL per chunk of ~10 tokens" in chunking.basis() and "80 requests" in chunking.basis()
    grouped = client_view(requests, itl, 10.0, "first-alone")
    assert client_values(grouped.requests, grouped.itl_s, 100.0, None)["itl_ms_median"] == pytest.approx(100.0)


def _one_token(requests, itl):
    v = client_view(requests, itl, 1.0, "first-alone")
    return v.requests, v.itl_s


def test_a_proxy_that_buffers_from_the_start_moves_ttft_and_tpot_and_the_rule_follows():
    """Fixed chunks of 10: TTFT waits for ten tokens and TPOT loses nine gaps from its
    numerator, not its denominator; grouped the same way the prediction shows it too."""
    lengths = [12, 40, 100]
    gaps = [np.full(n - 1, 0.01) for n in lengths]
    requests, itl = truth(lengths, gaps, np.zeros(3), np.full(3, 0.1))
    result = parse_result(streamed_file(lengths, gaps, np.full(3, 0.1), 10, "fixed"), "x.json")
    frame = result.requests_frame()
    assert frame["ttft_s"].to_list() == pytest.approx([0.19] * 3)
    assert frame["tpot_s"].to_list() == pytest.approx([0.01 * (n - 10) / (n - 1) for n in lengths])
    chunking = measured_chunking(result)
    assert (chunking.tokens, chunking.layout) == (10, "fixed")
    view = client_view(requests, itl, 10.0, "fixed")
    assert view.requests["tpot_s"].to_list() == pytest.approx(frame["tpot_s"].to_list())


def test_irregular_chunks_are_grouped_by_their_mean_and_said_so():
    lengths = [41, 41, 41, 41]
    counts = [4, 5, 3, 4]  # deltas merged at random: no single interval explains them
    got = detect(lengths, counts)
    assert not got.regular and got.tokens == 10
    assert "irregular" in got.basis()


def test_files_without_multi_token_requests_are_compared_per_token():
    got = detect([1, 1, 0], [0, 0, 0])
    assert got.requests == 0 and got.one_token and "ITL per token" in got.basis()


def test_a_speculating_server_that_streams_every_step_is_compared_step_for_step():
    """Speculative steps carry ~2.5 tokens: chunks of ~2.5 tokens are the steps themselves,
    not groups of 2 or 3 tokens."""
    from sim.fidelity.vllm_compare import grouping_for

    gen, steps = [21, 31, 11], [9, 13, 5]
    rng = np.random.default_rng(0)
    gaps = [rng.uniform(0.01, 0.03, s - 1) for s in steps]
    requests = pl.DataFrame({"id": [0, 1, 2], "arrival_s": [0.0, 1.0, 2.0], "first_token_s": [0.1, 1.1, 2.1],
                             "finish_s": [0.1 + g.sum() for g in gaps], "generated_tokens": gen,
                             "num_bursts": steps, "outcome": ["completed"] * 3})
    itl = pl.DataFrame({"id": [i for i, g in enumerate(gaps) for _ in g], "gap_s": np.concatenate(gaps)})
    chunking = detect(gen, [s - 1 for s in steps])
    assert not chunking.regular and chunking.mean_tokens_per_gap == pytest.approx(2.5)
    size, layout, by_steps, how = grouping_for(chunking, requests)
    assert (size, layout, by_steps) == (1.0, "first-alone", True) and "1 step(s)" in how
    view = client_view(requests, itl, size, layout, by_steps)
    assert np.allclose(np.sort(view.itl_s), np.sort(np.concatenate(gaps)))
    four = client_view(requests, itl, 4.0, "first-alone", True)
    assert four.requests["num_chunks"].to_list() == [1 + -(-(s - 1) // 4) for s in steps]


def test_lengths_that_fit_several_intervals_say_so():
    """128-token outputs streamed every 16 give 8 gaps; intervals 17 and 18 give 8 too."""
    got = detect([128] * 20, [8] * 20)
    assert (got.tokens, got.tokens_max, got.layout) == (16, 18, "first-alone")
    assert "intervals 16–18 fit as many requests, the smallest is used" in got.basis()
    assert detect([128] * 20, [13] * 20).tokens_max == 0  # 127 / 13: only 10 fits
