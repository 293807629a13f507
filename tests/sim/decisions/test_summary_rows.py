"""The rules' row lookups: the first matching row, load levels within rounding, and a frame's
index never answering for another frame."""

from __future__ import annotations

import math

import polars as pl

from sim.decisions.summary_rows import ci_of, load_rates, row_at, value_of


def _summary(tpot: float) -> pl.DataFrame:
    return pl.DataFrame({
        "candidate": ["baseline", "k3", "k3", "k3"],
        "segment": ["all", "all", "all", "code"],
        "rate": [1.0, 1.0, 2.0, 2.0],
        "tpot_ms_mean": [10.0, tpot, tpot + 1, 5.0],
        "tpot_ms_mean_ci95": [None, 0.5, None, None],
    })


def test_rows_by_candidate_segment_and_rate() -> None:
    df = _summary(8.0)
    assert load_rates(df) == [1.0, 2.0]
    assert row_at(df, "k3")["rate"] == 1.0  # first in frame order without a rate
    assert row_at(df, "k3", rate=2.0 + 1e-12)["tpot_ms_mean"] == 9.0  # within rounding
    assert row_at(df, "k3", "code", 2.0)["tpot_ms_mean"] == 5.0
    assert row_at(df, "k3", rate=3.0) is None and row_at(df, "nobody") is None
    assert value_of(row_at(df, "k3"), "tpot_ms_mean") == 8.0 and math.isnan(value_of(None, "x"))
    assert ci_of(row_at(df, "k3"), "tpot_ms_mean") == 0.5 and ci_of(row_at(df, "baseline"), "tpot_ms_mean") == 0.0


def test_each_frame_answers_with_its_own_rows() -> None:
    a, b = _summary(8.0), _summary(7.0)
    assert row_at(a, "k3")["tpot_ms_mean"] == 8.0
    assert row_at(b, "k3")["tpot_ms_mean"] == 7.0
    assert row_at(a, "k3")["tpot_ms_mean"] == 8.0
    no_rate = a.drop("rate")
    assert load_rates(no_rate) == [None] and row_at(no_rate, "k3", rate=2.0)["tpot_ms_mean"] == 8.0
