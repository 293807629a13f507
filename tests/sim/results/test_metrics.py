"""Metrics as pure functions over hand-built frames (vLLM semantics)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from sim.results import metric_names as mn
from sim.results.metrics import (
    good_mask,
    linear_percentiles,
    measured_window,
    summarize,
    with_latencies,
)
from sim.results.records import ITL_SCHEMA, REQUEST_SCHEMA, STEP_SCHEMA
from sim.results.time_weighted import number_in_system_tw, time_weighted_levels, utilization


def req_frame(rows: list[dict]) -> pl.DataFrame:
    base = {
        "candidate": "c", "seed": 1, "replica": 0, "segment": "a", "scheduled_s": 0.0,
        "prompt_tokens": 10, "preemptions": 0, "in_window": True, "num_drafts": 0,
        "accepted_tokens": 0, "num_bursts": 2, "max_pause_s": 0.1,
    }
    full = []
    for i, r in enumerate(rows):
        d = dict(base, id=i)
        d.update(r)
        d.setdefault("generated_tokens", d.get("output_tokens"))
        full.append(d)
    return pl.DataFrame(full, schema=REQUEST_SCHEMA)


# id 0: ttft 0.5, e2el 2.5 over 11 tokens -> tpot 0.2
# id 1: ttft 1.0, e2el 1.5 over 6 tokens -> tpot 0.1
# id 2: one token: tpot undefined
# id 3: rejected; id 4: timed out; id 5: completed but arrived during warm-up
ROWS = [
    dict(arrival_s=10.0, first_token_s=10.5, finish_s=12.5, output_tokens=11, outcome="completed"),
    dict(arrival_s=11.0, first_token_s=12.0, finish_s=12.5, output_tokens=6, outcome="completed",
         segment="b", max_pause_s=0.6, num_drafts=4, accepted_tokens=6),
    dict(arrival_s=12.0, first_token_s=12.2, finish_s=12.2, output_tokens=1, outcome="completed",
         num_bursts=1, max_pause_s=0.0),
    dict(arrival_s=13.0, first_token_s=None, finish_s=13.0, output_tokens=5, generated_tokens=0,
         outcome="rejected", num_bursts=0, max_pause_s=None),
    dict(arrival_s=14.0, first_token_s=15.0, finish_s=20.0, output_tokens=50, generated_tokens=9,
         outcome="timed_out", num_drafts=2, accepted_tokens=0),
    dict(arrival_s=1.0, first_token_s=9.0, finish_s=9.5, output_tokens=3, outcome="completed",
         in_window=False),
]


def test_latencies_follow_vllm_definitions() -> None:
    df = with_latencies(req_frame(ROWS))
    assert df["ttft_s"].to_list()[:3] == pytest.approx([0.5, 1.0, 0.2])
    assert df["tpot_s"].to_list()[:2] == pytest.approx([0.2, 0.1])
    assert df["tpot_s"][2] is None  # one output token: no TPOT
    assert df["e2el_s"][3] is None and df["ttft_s"][4] is None  # only completed requests


def test_goodput_needs_every_slo() -> None:
    df = with_latencies(req_frame(ROWS))
    assert good_mask(df, {"ttft": 800}).to_list() == [True, False, True, False, False, False]
    assert good_mask(df, {"ttft": 2000, "tpot": 150}).to_list() == [
        False, True, True, False, False, False,
    ]
    assert good_mask(df, {"pause": 500}).to_list()[:3] == [True, False, True]
    assert good_mask(df, {"e2el": 2000, "ttft": 2000}).to_list()[:3] == [False, True, True]
    with pytest.raises(ValueError, match="unknown SLO"):
        good_mask(df, {"speed": 1.0})


def empty_steps() -> pl.DataFrame:
    return pl.DataFrame(schema=STEP_SCHEMA)


def empty_itl() -> pl.DataFrame:
    return pl.DataFrame(schema=ITL_SCHEMA)


def test_summary_counts_rates_and_warmup() -> None:
    req = req_frame(ROWS)
    itl = pl.DataFrame(
        {"candidate": "c", "seed": 1, "id": [0, 0, 1, 4, 5], "gap_s": [0.1, 0.3, 0.6, 9.0, 9.0]},
        schema=ITL_SCHEMA,
    )
    s = summarize(
        req, empty_steps(), itl, segments=["a", "b"], slo_ms={"ttft": 800}, warmup_s=5.0,
        duration_s=20.0, replicas=2, cost_total_usd=3.0,
        keys={mn.CANDIDATE: "c", mn.SEED: 1},
    )
    assert s[mn.SEGMENT].to_list() == ["all", "a", "b"]
    row = s.row(0, named=True)
    window = 20.0 - 5.0
    assert row[mn.COMPLETED] == 3 and row[mn.REJECTED] == 1 and row[mn.TIMED_OUT] == 1
    assert row[mn.REQUEST_THROUGHPUT] == pytest.approx(3 / window)
    assert row[mn.OUTPUT_THROUGHPUT] == pytest.approx((11 + 6 + 1) / window)
    # good: ids 0 and 2 (ttft <= 0.8 s); the warm-up request 5 is not counted
    assert row[mn.REQUEST_GOODPUT] == pytest.approx(2 / window)
    assert row[mn.SLO_ATTAINMENT] == pytest.approx(2 / 5)
    assert row[mn.COST_PER_GOOD_ANSWER_USD] == pytest.approx(1.5)
    assert row[mn.MEAN_ACCEPTANCE_LENGTH] == pytest.approx(1 + 6 / 6)
    # ITL only over completed measured requests: gaps of ids 0 and 1
    gaps_ms = np.array([100.0, 300.0, 600.0])
    assert row[mn.latency_col(mn.ITL, "mean")] == pytest.approx(gaps_ms.mean())
    assert row[mn.latency_col(mn.ITL, "p99")] == pytest.approx(np.percentile(gaps_ms, 99))
    assert row[mn.latency_col(mn.TTFT, "median")] == pytest.approx(500.0)
    assert row[mn.latency_col(mn.TPOT, "mean")] == pytest.approx(150.0)
    assert row[mn.pause_col("max")] == pytest.approx(600.0)
    seg_b = s.row(2, named=True)
    assert seg_b[mn.COMPLETED] == 1 and seg_b[mn.SLO_ATTAINMENT] == 0.0
    assert seg_b[mn.COST_PER_GOOD_ANSWER_USD] is None  # fleet cost is not split by segment
    assert list(s.columns[3:]) == list(mn.METRIC_COLUMNS)


def test_zero_good_answers_cost_is_infinite() -> None:
    s = summarize(
        req_frame(ROWS), empty_steps(), empty_itl(), segments=[], slo_ms={"ttft": 1},
        warmup_s=0.0, duration_s=20.0, replicas=1, cost_total_usd=1.0, keys={mn.CANDIDATE: "c"},
    )
    assert math.isinf(s[mn.COST_PER_GOOD_ANSWER_USD][0])
    assert s[mn.REQUEST_GOODPUT][0] == 0.0


def test_without_slo_goodput_is_undefined() -> None:
    s = summarize(
        req_frame(ROWS), empty_steps(), empty_itl(), segments=[], slo_ms={}, warmup_s=0.0,
        duration_s=20.0, replicas=1, cost_total_usd=1.0, keys={mn.CANDIDATE: "c"},
    )
    assert s[mn.REQUEST_GOODPUT][0] is None and s[mn.SLO_ATTAINMENT][0] is None


def test_measured_window_extends_to_last_finish() -> None:
    assert measured_window(req_frame(ROWS), 5.0, 15.0) == (5.0, 20.0)
    assert measured_window(req_frame(ROWS), 5.0, 30.0) == (5.0, 30.0)


def steps(rows: list[tuple]) -> pl.DataFrame:
    cols = ["replica", "t_start_s", "duration_s", "queue_len", "kv_used_blocks"]
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    n = len(rows)
    data.update(
        candidate=["c"] * n, seed=[1] * n, decode_seqs=[1] * n, prefill_tokens=[0] * n, k=[0] * n,
        draft_tokens=[0] * n, accepted_tokens=[0] * n, kv_total_blocks=[10] * n,
        preempted=[0] * n, drafting_seqs=[0] * n,
    )
    return pl.DataFrame(data, schema=STEP_SCHEMA).select(list(STEP_SCHEMA))


def test_time_weighted_levels_count_idle_as_zero() -> None:
    s = steps([(0, 0.0, 2.0, 4, 5), (0, 2.0, 1.0, 0, 10), (1, 5.0, 5.0, 2, 2)])
    q, kv = time_weighted_levels(s, 0.0, 10.0, replicas=2)
    assert q == pytest.approx((4 * 2 + 0 * 1 + 2 * 5) / 10)
    assert kv == pytest.approx((0.5 * 2 + 1.0 * 1 + 0.2 * 5) / (10 * 2))
    # window clipping: only [1, 3] of replica 0 and nothing of replica 1
    q, _ = time_weighted_levels(s, 1.0, 3.0, replicas=2)
    assert q == pytest.approx((4 * 1 + 0 * 1) / 2)
    assert utilization(s, 0.0, 10.0, 2) == pytest.approx([0.3, 0.5])


def test_number_in_system() -> None:
    req = req_frame(ROWS[:2])  # [10, 12.5] and [11, 12.5]
    assert number_in_system_tw(req, 10.0, 12.5) == pytest.approx((2.5 + 1.5) / 2.5)


def test_ci95_is_student_t_over_seeds() -> None:
    from sim.results.intervals import mean_ci95, t_quantile_975

    mean, ci = mean_ci95([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert ci == pytest.approx(4.3027 * 1.0 / math.sqrt(3))
    assert mean_ci95([5.0]) == (5.0, None)
    assert mean_ci95([None, None]) == (None, None)
    m, c = mean_ci95([1.0, math.inf])
    assert math.isinf(m) and c is None
    assert t_quantile_975(40) == pytest.approx(2.0211, abs=2e-4)
    assert t_quantile_975(120) == pytest.approx(1.9799, abs=2e-4)


def test_aggregate_keeps_candidate_order_and_adds_ci_columns() -> None:
    from sim.results.runner import aggregate

    rows = []
    for cand in ("baseline", "spec"):
        for seed, v in ((1, 10.0), (2, 14.0)):
            rows.append({mn.CANDIDATE: cand, mn.SEED: seed, mn.SEGMENT: "all", mn.COMPLETED: v})
    agg = aggregate(pl.DataFrame(rows))
    assert agg[mn.CANDIDATE].to_list() == ["baseline", "spec"]
    assert agg[mn.N_SEEDS].to_list() == [2, 2]
    assert agg[mn.COMPLETED].to_list() == [12.0, 12.0]
    assert agg[mn.ci_col(mn.COMPLETED)][0] == pytest.approx(12.7062 * math.sqrt(8) / math.sqrt(2))


@pytest.mark.parametrize("kind", ["uniform", "ties", "heavy-tail", "tiny"])
def test_linear_percentiles_are_numpys_bit_for_bit(kind: str) -> None:
    """The summary's own percentiles give np.percentile's 'linear' values exactly, at every size
    from one sample up (a last-bit difference would change golden summaries)."""
    rng = np.random.default_rng(7)
    draw = {"uniform": lambda n: rng.random(n) * 1000, "ties": lambda n: rng.integers(0, 4, n).astype(float),
            "heavy-tail": lambda n: rng.lognormal(0, 3, n), "tiny": lambda n: rng.normal(size=n) * 1e-3}[kind]
    for n in [*range(1, 60), 101, 999, 4096, 50_001]:
        x = draw(n)
        want = np.percentile(x, [50, 95, 99])
        got = linear_percentiles(x.copy(), (0.5, 0.95, 0.99))
        assert [float(w) for w in want] == got, n


def test_rates_over_an_empty_measured_window_are_undefined_not_an_error() -> None:
    """A run whose measured window has zero length (warm-up = duration, nothing measured
    finishing later) has no throughput or goodput: None, never a division by zero."""
    req = req_frame(ROWS).with_columns(pl.lit(False).alias("in_window"))
    s = summarize(req, empty_steps(), pl.DataFrame(schema=ITL_SCHEMA), segments=[], slo_ms={"ttft": 800},
                  warmup_s=20.0, duration_s=20.0, replicas=1, cost_total_usd=None,
                  keys={mn.CANDIDATE: "c", mn.SEED: 1})
    row = s.row(0, named=True)
    assert row[mn.REQUEST_THROUGHPUT] is None and row[mn.OUTPUT_THROUGHPUT] is None
    assert row[mn.REQUEST_GOODPUT] is None
