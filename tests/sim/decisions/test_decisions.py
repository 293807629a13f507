"""Decision rules, table-tested on hand-built summary frames: each fires when it should only."""

from __future__ import annotations

import json

import polars as pl
import pytest

from sim.contracts.errors import SpecplanError
from sim.decisions.rules import (
    Thresholds,
    decision_table,
    decisions_frame,
    format_decisions,
    rule_canary,
    rule_cheaper,
    rule_restrict_load,
    rule_segment_baseline,
    rule_ttft_dominates,
)

TH = Thresholds()
BASE = dict(tpot_ms_mean=50.0, ttft_ms_p95=800.0, ttft_ms_mean=300.0, e2el_ms_mean=5000.0,
            request_goodput=2.0, slo_attainment=0.99, mean_acceptance_length=1.0,
            cost_per_good_answer_usd=0.010)


def row(candidate: str, segment: str = "all", rate: float | None = None, **kw) -> dict:
    r = {"candidate": candidate, "segment": segment, **BASE, **kw}
    if rate is not None:
        r["rate"] = rate
    return r


def frame(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame(list(rows))


SPEC_GOOD = dict(tpot_ms_mean=35.0, mean_acceptance_length=2.4, cost_per_good_answer_usd=0.008)


@pytest.mark.parametrize(
    ("spec", "fires"),
    [
        (SPEC_GOOD, True),
        ({**SPEC_GOOD, "tpot_ms_mean": 49.0}, False),          # decode barely faster (2 %)
        ({**SPEC_GOOD, "request_goodput": 1.8}, False),         # goodput 10 % lower
        ({**SPEC_GOOD, "slo_attainment": 0.90}, False),         # quality below the limit
        ({**SPEC_GOOD, "request_goodput": 1.97}, True),         # within the 2 % tolerance
    ],
)
def test_canary(spec: dict, fires: bool) -> None:
    got = rule_canary(frame(row("baseline"), row("ngram", **spec)), "baseline", TH)
    assert (len(got) == 1) is fires
    if fires:
        d = got[0]
        assert d.candidate == "ngram" and "canary" in d.decision
        assert d.numbers["tpot_gain"] == pytest.approx(1 - spec["tpot_ms_mean"] / 50.0)
        assert "30%" in d.observation or "%" in d.observation


def test_canary_needs_every_load_level() -> None:
    f = frame(row("baseline", rate=1.0), row("ngram", rate=1.0, **SPEC_GOOD),
              row("baseline", rate=4.0), row("ngram", rate=4.0, **SPEC_GOOD, slo_attainment=0.5))
    assert rule_canary(f, "baseline", TH) == []
    f2 = f.with_columns(pl.lit(0.99).alias("slo_attainment"))
    assert len(rule_canary(f2, "baseline", TH)) == 1


@pytest.mark.parametrize(
    ("rows", "fires", "prefer"),
    [
        # draft model accepts more but costs more than ngram → prefer ngram
        ([row("baseline", cost_per_good_answer_usd=0.012),
          row("ngram", mean_acceptance_length=1.8, cost_per_good_answer_usd=0.008),
          row("draft", mean_acceptance_length=3.0, cost_per_good_answer_usd=0.011)], True, "ngram"),
        # accepts more and costs more than the baseline → prefer the baseline
        ([row("baseline", cost_per_good_answer_usd=0.010),
          row("draft", mean_acceptance_length=3.0, cost_per_good_answer_usd=0.013)], True, "baseline"),
        # accepts more and is cheaper → nothing to say
        ([row("baseline"), row("draft", mean_acceptance_length=3.0, cost_per_good_answer_usd=0.009)],
         False, None),
        # within the 2 % cost tolerance → nothing to say
        ([row("baseline"), row("draft", mean_acceptance_length=3.0, cost_per_good_answer_usd=0.0101)],
         False, None),
    ],
)
def test_cheaper(rows: list[dict], fires: bool, prefer: str | None) -> None:
    got = [d for d in rule_cheaper(frame(*rows), "baseline", TH) if d.candidate == "draft"]
    assert (len(got) == 1) is fires
    if fires:
        assert prefer in got[0].decision
        assert got[0].numbers["cost_usd"] > got[0].numbers["cost_usd_alt"]


def _load_frame(spec_ttft: list[float], spec_tpot: list[float]) -> pl.DataFrame:
    rates = [1.0, 2.0, 3.0, 4.0]
    rows = []
    for r, t, p in zip(rates, spec_ttft, spec_tpot, strict=True):
        rows.append(row("baseline", rate=r, ttft_ms_p95=800.0))
        rows.append(row("ngram", rate=r, ttft_ms_p95=t, tpot_ms_mean=p))
    return frame(*rows)


def test_restrict_load_fires_with_cutoff() -> None:
    f = _load_frame([700, 780, 1000, 3000], [30, 35, 45, 60])
    (d,) = rule_restrict_load(f, "baseline", TH)
    assert d.numbers["cutoff_rate"] == 2.0 and d.numbers["first_bad_rate"] == 3.0
    assert d.numbers["ttft_p95_excess_peak"] == pytest.approx(3000 / 800 - 1)
    assert "2 req/s" in d.decision


@pytest.mark.parametrize(
    ("ttft", "tpot"),
    [
        ([700, 700, 700, 700], [30, 30, 30, 30]),      # better everywhere: canary, not restrict
        ([900, 1000, 1500, 3000], [49, 49, 49, 49]),   # no gain even at low load
    ],
)
def test_restrict_load_silent(ttft: list[float], tpot: list[float]) -> None:
    assert rule_restrict_load(_load_frame(ttft, tpot), "baseline", TH) == []


def test_restrict_load_needs_several_levels() -> None:
    assert rule_restrict_load(frame(row("baseline"), row("ngram", ttft_ms_p95=5000)), "baseline", TH) == []


def test_segment_baseline() -> None:
    f = frame(row("baseline"), row("baseline", "code-en"), row("baseline", "chat-sv"),
              row("ngram", mean_acceptance_length=2.5),
              row("ngram", "code-en", mean_acceptance_length=3.4),
              row("ngram", "chat-sv", mean_acceptance_length=1.4, tpot_ms_mean=55.0))
    got = rule_segment_baseline(f, "baseline", TH, ks={"ngram": 4})
    assert [(d.candidate, d.segment) for d in got] == [("ngram", "chat-sv")]
    assert got[0].numbers["chat-sv.acceptance_rate"] == pytest.approx(0.1)
    assert got[0].numbers["chat-sv.tpot_ratio"] == pytest.approx(1.1)
    assert "keep baseline for chat-sv" in got[0].decision
    # two bad segments: one finding naming both ...
    two = f.with_columns(pl.when((pl.col("segment") == "code-en") & (pl.col("candidate") == "ngram"))
                         .then(pl.lit(1.2)).otherwise(pl.col("mean_acceptance_length"))
                         .alias("mean_acceptance_length"))
    # ... when every segment is bad it is a whole-candidate finding (other rules), not a segment one
    assert rule_segment_baseline(two, "baseline", TH, ks={"ngram": 4}) == []
    three = pl.concat([two, frame(row("baseline", "math-en"),
                                  row("ngram", "math-en", mean_acceptance_length=3.5))],
                      how="diagonal_relaxed")
    (d,) = rule_segment_baseline(three, "baseline", TH, ks={"ngram": 4})
    assert d.segment == "code-en, chat-sv" and "code-en.acceptance_length" in d.numbers
    # k from a column works too; without any k the rule cannot judge and stays silent
    assert len(rule_segment_baseline(f.with_columns(pl.lit(4).alias("k")), "baseline", TH)) == 1
    assert rule_segment_baseline(f, "baseline", TH) == []
    # few accepted, yet still faster than the baseline there: speculation stays
    faster = f.with_columns(pl.when((pl.col("segment") == "chat-sv") & (pl.col("candidate") == "ngram"))
                            .then(pl.lit(40.0))
                            .otherwise(pl.col("tpot_ms_mean")).alias("tpot_ms_mean"))
    assert rule_segment_baseline(faster, "baseline", TH, ks={"ngram": 4}) == []


def test_ttft_dominates() -> None:
    f = frame(row("baseline", "short-answers", ttft_ms_mean=900.0, e2el_ms_mean=1200.0),
              row("baseline", "long-answers", ttft_ms_mean=300.0, e2el_ms_mean=9000.0),
              row("ngram", "short-answers", ttft_ms_mean=900.0, e2el_ms_mean=1100.0))
    got = rule_ttft_dominates(f, "baseline", TH)
    assert [d.segment for d in got] == ["short-answers"]
    assert got[0].numbers["ttft_share"] == pytest.approx(0.75)
    assert "prefill" in got[0].decision and "25%" in got[0].decision


def test_table_frame_and_text() -> None:
    f = frame(row("baseline"), row("ngram", **SPEC_GOOD))
    ds = decision_table(f, "baseline")
    assert [d.rule for d in ds] == ["canary"]
    df = decisions_frame(ds)
    assert df.columns == ["rule", "candidate", "segment", "load", "observation", "decision", "risk", "numbers"]
    assert json.loads(df["numbers"][0])["tpot_gain"] == pytest.approx(0.3)
    text = format_decisions(ds)
    assert "observed:" in text and "decision:" in text and "risk:" in text
    assert "No decision rule fired" in format_decisions([])
    with pytest.raises(SpecplanError, match="baseline"):
        decision_table(f, "nope")
    with pytest.raises(SpecplanError, match="must be in"):
        Thresholds(ttft_share=2.0)


def test_restrict_load_without_a_clean_level_keeps_baseline() -> None:
    f = _load_frame([900, 1000, 1500, 3000], [30, 35, 45, 60])
    (d,) = rule_restrict_load(f, "baseline", TH)
    assert d.decision.startswith("keep baseline") and d.numbers["first_bad_rate"] == 1.0


def test_canary_and_restrict_are_exclusive() -> None:
    f = _load_frame([700, 780, 1000, 3000], [30, 35, 45, 45])
    assert rule_canary(f, "baseline", TH) == []  # goodput fine, but waiting grows at peak
    assert len(rule_restrict_load(f, "baseline", TH)) == 1


def test_a_candidate_that_beats_the_baseline_on_capacity_and_cost_is_never_told_to_keep_it() -> None:
    f = _load_frame([900, 1000, 1500, 3000], [30, 35, 45, 60])
    (d,) = rule_restrict_load(f, "baseline", TH, dominant=["ngram"])
    assert d.decision.startswith("prefer ngram: it sustains more load than baseline")
    assert all(not x.decision.startswith("keep") for x in decision_table(f, "baseline", dominant=["ngram"]))
