"""The rules of ``sim.results.metrics`` and ``sim.results.cost`` against independent oracles:
percentiles are numpy's linear ones, an SLO limit is met at equality (ms limits, s samples), a
missing TPOT or pause meets its limit, levels are time-weighted over the window with idle time
counted (brute-force integration), and cost is replicas × hourly price × window hours."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.results.cost import cost_per_good_answer, describe_cost_per_good_answer, fleet_cost_usd
from sim.results.metrics import _latencies, good_array, linear_percentiles
from sim.results.time_weighted import (
    number_in_system_tw,
    queue_len_tw,
    time_weighted_levels,
    utilization,
)

samples = st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=60)
quantiles = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(values=samples, qs=quantiles)
def test_linear_percentiles_equal_numpy_linear_percentiles(values, qs) -> None:
    expected = np.percentile(np.asarray(values), [100 * q for q in qs], method="linear")
    got = linear_percentiles(np.asarray(values, dtype=np.float64), qs)
    assert got == pytest.approx(list(expected), rel=1e-12, abs=1e-12)


def test_slo_limit_is_met_at_equality_and_missing_tpot_or_pause_meets_it() -> None:
    lat = {"ttft_s": np.array([0.2, 0.2001, 0.1, 0.1]), "tpot_s": np.array([0.05, 0.01, np.nan, 0.0501]),
           "e2el_s": np.array([1.0, 1.0, 1.0, 1.0]), "max_pause_s": np.array([np.nan, 0.3, 0.3, 0.3])}
    done = np.array([True, True, True, True])
    good = good_array(done, lat, {"ttft": 200.0, "tpot": 50.0, "e2el": 1000.0, "pause": 300.0})
    assert good.tolist() == [True, False, True, False]
    assert good_array(np.array([False]), {k: v[:1] for k, v in lat.items()}, {"ttft": 1e9}).tolist() == [False]
    with pytest.raises(ValueError):
        good_array(done, lat, {"itl": 1.0})


def _level_oracle(log: list[tuple[float, float]], t0: float, t1: float, n: int = 20_000) -> float:
    ts = np.linspace(t0, t1, n, endpoint=False) + (t1 - t0) / (2 * n)
    return float(np.mean([sum(d for t, d in log if t <= x) for x in ts]))


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.tuples(st.floats(0, 10), st.floats(0, 5)), min_size=0, max_size=8),
       t0=st.floats(0, 4), span=st.floats(1, 10))
def test_queue_length_is_time_weighted_over_the_window_with_idle_time(arrivals, t0, span) -> None:
    log = [(a, 1.0) for a, _ in arrivals] + [(a + w, -1.0) for a, w in arrivals]
    flat = np.array([x for pair in log for x in pair], dtype=np.float64)
    got = queue_len_tw(flat, t0, t0 + span)
    assert got == pytest.approx(_level_oracle(log, t0, t0 + span), abs=len(arrivals) * 2e-3 + 1e-9)
    assert queue_len_tw(flat, t0, t0) is None


def _steps(rows: list[tuple[int, float, float, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["replica", "t_start_s", "duration_s", "queue_len", "kv_used_blocks"],
                        orient="row").with_columns(pl.lit(10).alias("kv_total_blocks"))


@settings(max_examples=60, deadline=None)
@given(durs=st.lists(st.tuples(st.floats(0.01, 2), st.floats(0, 1), st.integers(0, 5), st.integers(0, 10)),
                     min_size=1, max_size=6), t0=st.floats(0, 3), span=st.floats(0.5, 8))
def test_step_levels_and_busy_time_count_only_the_overlap_with_the_window(durs, t0, span) -> None:
    rows, t = [], 0.0
    for d, gap, q, kv in durs:  # one replica, back-to-back steps with idle gaps
        t += gap
        rows.append((0, t, d, q, kv))
        t += d
    t1 = t0 + span
    ov = [max(0.0, min(s + d, t1) - max(s, t0)) for _, s, d, _, _ in rows]
    q, kv = time_weighted_levels(_steps(rows), t0, t1, 1)
    assert q == pytest.approx(sum(o * r[3] for o, r in zip(ov, rows, strict=True)) / span, abs=1e-9)
    assert kv == pytest.approx(sum(o * r[4] / 10 for o, r in zip(ov, rows, strict=True)) / span, abs=1e-9)
    util = utilization(_steps(rows), t0, t1, 2)
    assert util == pytest.approx([sum(ov) / span, 0.0], abs=1e-9)
    assert 0.0 <= util[0] <= 1.0 + 1e-9


def test_time_weighted_levels_are_none_over_an_empty_window_and_zero_when_idle() -> None:
    assert time_weighted_levels(_steps([(0, 0.0, 1.0, 3, 5)]), 2.0, 2.0, 1) == (None, None)
    assert time_weighted_levels(_steps([(0, 0.0, 1.0, 3, 5)]).clear(), 0.0, 2.0, 1) == (0.0, 0.0)
    q, kv = time_weighted_levels(_steps([(0, 0.0, 1.0, 4, 5)]), 0.0, 2.0, 2)
    assert (q, kv) == pytest.approx((2.0, 0.125))  # KV averaged over both replicas


def test_number_in_system_counts_each_request_from_arrival_to_finish_inside_the_window() -> None:
    req = pl.DataFrame({"arrival_s": [0.0, 1.0, 3.0, 0.5], "finish_s": [2.0, 5.0, 3.5, None]})
    # window [1, 4]: 1 + 3 + 0.5 (the unfinished one is not counted)
    assert number_in_system_tw(req, 1.0, 4.0) == pytest.approx(4.5 / 3.0)


@settings(max_examples=100, deadline=None)
@given(window=st.floats(0, 1e5), replicas=st.integers(0, 16), price=st.floats(0, 20), draft=st.floats(0, 5),
       gpus=st.integers(1, 8), spec=st.booleans())
def test_fleet_cost_is_replicas_times_hourly_price_over_the_window_hours(window, replicas, price, draft,
                                                                         gpus, spec) -> None:
    expected = replicas * (price * gpus + (draft if spec else 0.0)) * window / 3600
    assert fleet_cost_usd(window, replicas, price, draft, speculative=spec, gpus_per_replica=gpus) == (
        pytest.approx(expected, rel=1e-12, abs=1e-12))


def test_cost_per_good_answer_is_infinite_without_good_answers_and_none_without_price() -> None:
    assert fleet_cost_usd(3600.0, 2, None) is None
    assert cost_per_good_answer(None, 5) is None
    assert cost_per_good_answer(10.0, 0) == math.inf
    assert cost_per_good_answer(10.0, 4) == pytest.approx(2.5)
    assert describe_cost_per_good_answer(math.inf).startswith("∞")
    assert describe_cost_per_good_answer(0.005) == "$0.005000"
    assert describe_cost_per_good_answer(0.01) == "$0.0100"
    with pytest.raises(ValueError):
        fleet_cost_usd(-1.0, 1, 1.0)
    with pytest.raises(ValueError):
        fleet_cost_usd(1.0, 1, 1.0, gpus_per_replica=0)


def test_a_one_token_answer_has_no_tpot_and_unfinished_requests_have_no_latencies() -> None:
    a = {"_done": np.array([True, True, False]), "arrival_s": np.array([0.0, 0.0, 0.0]),
         "first_token_s": np.array([1.0, 1.0, 1.0]), "finish_s": np.array([1.5, 3.0, 3.0]),
         "generated_tokens": np.array([1, 5, 5])}
    ttft, tpot, e2el = _latencies(a)
    assert math.isnan(tpot[0]) and tpot[1] == pytest.approx(0.5) and math.isnan(tpot[2])
    assert ttft[:2].tolist() == [1.0, 1.0] and e2el[:2].tolist() == [1.5, 3.0]
    assert math.isnan(ttft[2]) and math.isnan(e2el[2])


@pytest.mark.parametrize("window,replicas,gpus,ok", [
    (0.0, 1, 1, True), (0.5, 1, 1, True), (1.0, 0, 1, True), (1.0, 1, 1, True),  # the edges are valid
    (-1e-9, 1, 1, False), (1.0, -1, 1, False), (1.0, 1, 0, False)])  # each bound alone refuses
def test_fleet_cost_needs_a_window_and_replicas_at_least_zero_and_one_gpu_per_replica(window, replicas, gpus, ok) -> None:
    if ok:
        assert fleet_cost_usd(window, replicas, 2.0, gpus_per_replica=gpus) == pytest.approx(
            replicas * 2.0 * gpus * window / 3600.0)
        return
    with pytest.raises(ValueError, match="gpus_per_replica >= 1"):
        fleet_cost_usd(window, replicas, 2.0, gpus_per_replica=gpus)


@settings(max_examples=100, deadline=None)
@given(values=samples)
def test_the_0th_and_100th_percentiles_are_the_smallest_and_largest_sample(values) -> None:
    lo, hi = linear_percentiles(np.asarray(values, dtype=np.float64), (0.0, 1.0))
    assert (lo, hi) == (min(values), max(values))


def test_rates_hold_over_a_window_under_a_second_and_tokens_per_step_is_one_plus_accepted_per_speculative_step() -> None:
    from sim.results import metric_names as mn
    from sim.results.metrics import summarize
    from tests.sim.results.test_metrics import empty_itl, empty_steps, req_frame

    rows = [dict(arrival_s=0.0, first_token_s=0.1, finish_s=0.4, output_tokens=5, outcome="completed",
                 num_drafts=2, accepted_tokens=3, num_spec_steps=4),
            dict(arrival_s=0.1, first_token_s=0.2, finish_s=0.3, output_tokens=3, outcome="completed",
                 num_drafts=1, accepted_tokens=1, num_spec_steps=2)]
    s = summarize(req_frame(rows), empty_steps(), empty_itl(), segments=[], slo_ms={"ttft": 800}, warmup_s=0.0,
                  duration_s=0.5, replicas=1, cost_total_usd=None, keys={mn.CANDIDATE: "c", mn.SEED: 1})
    row = s.row(0, named=True)
    assert (row[mn.WINDOW_START_S], row[mn.WINDOW_END_S]) == (0.0, 0.5)
    assert row[mn.REQUEST_THROUGHPUT] == pytest.approx(2 / 0.5) and row[mn.OUTPUT_THROUGHPUT] == pytest.approx(8 / 0.5)
    assert row[mn.REQUEST_GOODPUT] == pytest.approx(2 / 0.5)
    assert row[mn.MEAN_ACCEPTANCE_LENGTH] == pytest.approx(1 + 4 / 3)  # vLLM: 1 + accepted / drafts
    assert row[mn.TOKENS_PER_STEP] == pytest.approx(1 + 4 / 6)  # the bonus token + accepted per speculative step


def test_a_two_token_answer_has_a_tpot_the_gap_after_its_first_token() -> None:
    a = {"_done": np.array([True]), "arrival_s": np.array([0.0]), "first_token_s": np.array([1.0]),
         "finish_s": np.array([1.25]), "generated_tokens": np.array([2])}
    assert _latencies(a)[1].tolist() == [0.25]  # (finish − first token) / (tokens − 1)


def test_summary_counts_and_preemptions_are_integers_and_rates_are_floats() -> None:
    from sim.results import metric_names as mn
    from sim.results.metrics import summarize
    from tests.sim.results.test_metrics import empty_itl, empty_steps, req_frame

    rows = [dict(arrival_s=0.0, first_token_s=0.1, finish_s=0.4, output_tokens=5, outcome="completed")]
    s = summarize(req_frame(rows), empty_steps(), empty_itl(), segments=[], slo_ms={"ttft": 800}, warmup_s=0.0,
                  duration_s=1.0, replicas=1, cost_total_usd=None, keys={mn.CANDIDATE: "c", mn.SEED: 1})
    for col in (*mn.COUNT_COLUMNS, mn.PREEMPTIONS):
        assert s.schema[col] == pl.Int64, col
    assert s.schema[mn.REQUEST_THROUGHPUT] == pl.Float64 and s.schema[mn.QUEUE_LEN_TW] == pl.Float64


def test_a_missing_count_reads_as_zero_and_a_missing_time_as_nan() -> None:
    from sim.results.metrics import _arrays

    got = _arrays(pl.DataFrame({"n": [3, None], "t": [1.5, None]}), floats=["t"], counts=["n"])
    assert got["n"].tolist() == [3, 0] and got["t"][0] == 1.5 and math.isnan(got["t"][1])
