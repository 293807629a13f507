"""Throughput and goodput state their window: the summary's rates are per second of the measured
window it records (warm-up end to the last measured request's end), the decision's goodput per
second of arrivals; the screen says both and why they differ."""

from __future__ import annotations

import polars as pl
import pytest

from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.decisions.answer import answer_scenario
from sim.decisions.answer_text import lines
from sim.results import metric_names as mn
from sim.results.metrics import good_mask, with_latencies
from sim.results.summary_table import render
from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment, write_scenario

TEXT = scenario_toml(
    "window", run={"duration_s": 30, "warmup_s": 5, "seeds": [1, 2], "max_seeds": 2},
    workload={"arrival": "poisson", "rate": 6.0},
    segments=[segment("chat", 1.0, {"dist": "uniform", "min": 40, "max": 400},
                      {"dist": "uniform", "min": 20, "max": 300})],
    fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0},
    engine={"max_num_seqs": 16, "max_num_batched_tokens": 512},
    slo={"ttft_ms": 3000, "tpot_ms": 200}, candidates=[BASELINE, NGRAM_K3])


@pytest.fixture(scope="module")
def answered(tmp_path_factory: pytest.TempPathFactory):
    sc = load_scenario(write_scenario(tmp_path_factory.mktemp("w"), TEXT))
    result, answer = answer_scenario(sc, load_profile(sc.profile_path))
    return sc, result, answer


def test_summary_rates_are_per_second_of_the_window_it_states(answered) -> None:
    """goodput × (window_end − window_start) is the count of good measured answers, per run, and
    the window starts at warm-up's end and ends at the last measured request's end."""
    sc, result, _ = answered
    per_seed = result.per_seed.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    for row in per_seed.iter_rows(named=True):
        rq = result.requests.filter((pl.col(mn.CANDIDATE) == row[mn.CANDIDATE]) & (pl.col(mn.SEED) == row[mn.SEED]))
        measured = with_latencies(rq.filter(pl.col("in_window")))
        good = int(good_mask(measured, sc.slo.limits).sum())
        assert row[mn.WINDOW_START_S] == sc.run.warmup_s
        assert row[mn.WINDOW_END_S] == max(sc.run.duration_s, measured["finish_s"].max())
        span = row[mn.WINDOW_END_S] - row[mn.WINDOW_START_S]
        assert row[mn.REQUEST_GOODPUT] * span == pytest.approx(good, abs=1e-9)
        assert row[mn.REQUEST_THROUGHPUT] * span == pytest.approx((measured["outcome"] == "completed").sum())


def test_verdict_goodput_is_the_same_answers_per_second_of_arrivals(answered) -> None:
    """The decision counts the same good answers over the arrivals' window, so its goodput is the
    table's × (window length / arrival window length), seed by seed; the screen says so."""
    sc, result, answer = answered
    per_seed = result.per_seed.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    arrivals = sc.run.duration_s - sc.run.warmup_s
    facts = answer.whole.facts
    for name in result.candidates:
        rows = per_seed.filter(pl.col(mn.CANDIDATE) == name).sort(mn.SEED)
        want = [r[mn.REQUEST_GOODPUT] * (r[mn.WINDOW_END_S] - r[mn.WINDOW_START_S]) / arrivals
                for r in rows.iter_rows(named=True)]
        assert list(facts.candidate(name).goodput) == pytest.approx(want, rel=1e-12)
    text = render(result, verdict=lines(answer))
    latest = result.summary[mn.WINDOW_END_S].max()  # the mean over seeds, latest candidate
    assert f"rates per s of 5 s–last end (≤{latest:.4g} s)" in text  # on the cells line; --verbose gives the range
    assert "(warm-up to the last measured request's end)" in render(result, verbose=True, verdict=lines(answer))
    ends = per_seed[mn.WINDOW_END_S]
    if ends.max() > 1.01 * sc.run.duration_s:  # a drain after the arrivals: they differ; the screen says why
        assert "verdict goodput: the same good answers per s of arrivals (5–30 s), up to " in text
    assert max(len(line) for line in text.splitlines()) <= 100
