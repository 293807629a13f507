"""Figure builders on small hand-made frames: traces, SLO lines, colours and axis units.

The builders return Plotly JSON; each test reads it through ``go.Figure``, which validates
every property (a misspelt or misplaced one raises).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
import pytest

from dashboard import figure_style, figures, level_figures
from dashboard.chart_frames import levels_over_time
from dashboard.colors import BASELINE_COLOR, PALETTE, SLO_COLOR, candidate_colors

CANDS = ["baseline", "ngram-k3", "ngram-k5"]
COLORS = candidate_colors(CANDS)


def _sweep() -> pl.DataFrame:
    rows = []
    # speculation helps at low load and hurts at high load: ngram-k3 crosses baseline between 2 and 3
    p95 = {"baseline": [100, 120, 200, 400], "ngram-k3": [60, 90, 260, 700], "ngram-k5": [50, 80, 180, 390]}
    for cand in CANDS:
        for i, rate in enumerate([1.0, 2.0, 3.0, 4.0]):
            rows.append({
                "candidate": cand, "offered_rate": rate,
                "ttft_ms_median": p95[cand][i] * 0.5, "ttft_ms_p95": float(p95[cand][i]),
                "ttft_ms_p99": p95[cand][i] * 1.5,
                "pause_ms_p95": 10.0 * (i + 1), "pause_ms_p99": 20.0 * (i + 1), "pause_ms_max": 50.0,
                "request_goodput": rate * (0.9 if cand == "baseline" else 0.8),
                "cost_per_good_answer_usd": None if (cand == "ngram-k5" and rate == 4.0) else 0.001 * rate,
            })
    return pl.DataFrame(rows)


def _colors_of(fig) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for tr in fig.data:
        if tr.legendgroup:
            color = tr.line.color if tr.type == "scatter" else tr.marker.color
            out.setdefault(tr.legendgroup, set()).add(color)
    return out


def _hlines(fig) -> list[float]:
    return [s.y0 for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1 and s.xref.endswith("domain")]


def test_colors_stable_and_baseline_first():
    a = candidate_colors(["baseline", "x", "y"])
    b = candidate_colors(["baseline", "x", "y", "z"])
    assert a["baseline"] == BASELINE_COLOR
    assert a["x"] == PALETTE[0] and a["y"] == PALETTE[1]
    assert all(b[k] == v for k, v in a.items()), "adding a candidate must not recolour earlier ones"
    assert len(set(b.values())) == 4


def test_latency_vs_load_traces_slo_units_and_colors():
    fig = go.Figure(figures.latency_vs_load(_sweep(), "ttft", COLORS, slo_ms=250.0))
    names = [t.name for t in fig.data if t.x != (None,)]
    assert len(names) == 9  # 3 candidates x p50/p95/p99
    assert [t.name for t in fig.data if t.showlegend is not False] == CANDS  # one legend entry each
    assert "ngram-k3 p95" in names and "baseline p50" in names and "ngram-k5 p99" in names
    assert 250.0 in _hlines(fig)
    assert any("SLO TTFT 250 ms" in (a.text or "") for a in fig.layout.annotations)
    assert "(ms)" in fig.layout.yaxis.title.text
    assert "requests/s" in fig.layout.xaxis.title.text
    assert fig.layout.title.text
    assert _colors_of(fig) == {c: {COLORS[c]} for c in CANDS}
    p95 = next(t for t in fig.data if t.name == "ngram-k3 p95")
    assert list(p95.y) == [60.0, 90.0, 260.0, 700.0]


def test_latency_vs_load_marks_where_speculation_stops_paying():
    cross = figures.crossover_rates(_sweep(), "ttft_ms_p95")
    # ngram-k3: diff -30 at 2.0, +60 at 3.0 -> crosses at 2 + 30/90
    assert cross["ngram-k3"] == pytest.approx(2.0 + 30 / 90)
    assert cross["ngram-k5"] is None  # stays below the baseline
    fig = go.Figure(figures.latency_vs_load(_sweep(), "ttft", COLORS, slo_ms=None))
    assert _hlines(fig) == []  # no SLO given, no SLO line
    vlines = [s.x0 for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1]
    assert vlines == [pytest.approx(2.0 + 30 / 90)]
    assert "ngram-k3 2.33" in fig.layout.title.text


def test_latency_is_on_a_log_scale_with_the_slo_label_at_its_line():
    fig = go.Figure(figures.latency_vs_load(_sweep(), "ttft", COLORS, slo_ms=250.0))
    assert fig.layout.yaxis.type == "log"
    # plotly.js places shapes by value on a log axis but annotations by log10(value)
    (label,) = [a for a in fig.layout.annotations if "SLO TTFT" in (a.text or "")]
    assert label.y == pytest.approx(math.log10(250.0)) and 250.0 in _hlines(fig)
    # ticks at 1-2-5 steps in plain numbers across the data and the SLO (25 ms .. 1,050 ms)
    assert list(fig.layout.yaxis.tickvals) == [50.0, 100.0, 200.0, 500.0, 1000.0]
    assert list(fig.layout.yaxis.ticktext) == ["50", "100", "200", "500", "1,000"]
    linear = go.Figure(figures.latency_vs_load(_sweep(), "ttft", COLORS, slo_ms=250.0, log=False))
    assert linear.layout.yaxis.type is None


def test_each_candidates_capacity_is_marked_on_latency_and_goodput():
    caps = {"baseline": 2.5, "ngram-k3": 3.25, "ngram-k5": None}
    for fig in (go.Figure(figures.latency_vs_load(_sweep(), "ttft", COLORS, capacities=caps, mark_crossover=None)),
                go.Figure(figures.goodput_vs_load(_sweep(), COLORS, capacities=caps))):
        marks = [(s.x0, s.line.color) for s in fig.layout.shapes if s.x0 == s.x1 and s.line.dash == "solid"]
        assert marks == [(2.5, COLORS["baseline"]), (3.25, COLORS["ngram-k3"])]
        assert f"{figure_style.CAPACITY_KEY} (req/s): baseline 2.5, ngram-k3 3.25" in fig.layout.title.text
    long = figure_style.capacity_note({f"candidate-{i}": 10.0 + i for i in range(4)})
    assert long is not None and "<br>candidate-0 10, candidate-1 11" in long  # a long list on its own line


def test_pause_uses_pause_columns():
    fig = go.Figure(figures.latency_vs_load(_sweep(), "pause", COLORS, slo_ms=1000))
    assert {t.name for t in fig.data} >= {"baseline max", "ngram-k3 p99"}
    assert 1000.0 in _hlines(fig)


def test_empty_sweep_gives_labelled_empty_chart():
    fig = go.Figure(figures.latency_vs_load(_sweep().clear(), "e2el", COLORS, slo_ms=5000))
    assert len(fig.data) == 0
    assert any("no load points" in a.text for a in fig.layout.annotations)


def test_goodput_and_cost():
    g = go.Figure(figures.goodput_vs_load(_sweep(), COLORS))
    assert [t.name for t in g.data] == ["offered load", *CANDS]
    assert "requests/s" in g.layout.yaxis.title.text
    c = go.Figure(figures.cost_vs_load(_sweep(), COLORS))
    k5 = next(t for t in c.data if t.name == "ngram-k5")
    assert len(k5.x) == 3  # the load point without good answers is dropped, not drawn as inf
    assert next(t for t in c.data if t.name == "baseline").y[0] == pytest.approx(1.0)  # per 1000
    assert "USD" in c.layout.yaxis.title.text
    assert _colors_of(c) == {cn: {COLORS[cn]} for cn in CANDS}


def test_latency_cdf_reaches_one_and_is_downsampled():
    vals = pl.DataFrame({"candidate": ["baseline"] * 1000 + ["ngram-k3"] * 10,
                         "value_ms": [float(i) for i in range(1000)] + [float(i) for i in range(10)]})
    fig = go.Figure(figures.latency_cdf(vals, "e2el", COLORS, slo_ms=500.0, max_points=100))
    base = next(t for t in fig.data if t.name == "baseline")
    assert len(base.x) == 100 and base.y[-1] == pytest.approx(1.0) and base.x[-1] == 999.0
    small = next(t for t in fig.data if t.name == "ngram-k3")
    assert list(small.y) == pytest.approx([(i + 1) / 10 for i in range(10)])
    vl = [s for s in fig.layout.shapes if s.x0 == s.x1]
    assert vl and vl[0].x0 == 500.0 and vl[0].line.color == SLO_COLOR
    assert "(ms)" in fig.layout.xaxis.title.text


def test_acceptance_figures_label_assumed():
    acc = pl.DataFrame({
        "candidate": ["ngram-k3"] * 3 + ["ngram-k5"] * 3,
        "segment": ["chat"] * 6,
        "position": [1, 2, 3, 1, 2, 3],
        "rate": [0.7, 0.5, 0.3, 0.6, 0.4, 0.2],
        "method": ["measured"] * 3 + ["assumed"] * 3,
    })
    fig = go.Figure(figures.acceptance_by_position(acc, COLORS))
    names = [t.name for t in fig.data]
    assert "ngram-k5 · chat (assumed)" in names and "ngram-k3 · chat (measured)" in names
    assert [t.name for t in fig.data if t.showlegend is not False] == ["ngram-k3 (measured)", "ngram-k5 (assumed)"]
    assert all(t.line.dash == "dash" for t in fig.data if "assumed" in t.name)
    assert _colors_of(fig) == {"ngram-k3": {COLORS["ngram-k3"]}, "ngram-k5": {COLORS["ngram-k5"]}}
    assert "● chat" in fig.layout.title.text
    summ = pl.DataFrame({"candidate": ["baseline", "ngram-k3", "ngram-k3"], "segment": ["all", "chat", "code"],
                         "mean_acceptance_length": [None, 2.1, 1.6]})
    bars = go.Figure(figures.acceptance_by_segment(summ, COLORS))
    assert [t.name for t in bars.data] == ["ngram-k3"]
    assert list(bars.data[0].x) == ["chat", "code"] and bars.data[0].marker.color == COLORS["ngram-k3"]


def test_breakeven_chart_has_parts_and_breakeven_line():
    be = pl.DataFrame({"candidate": ["ngram-k3"] * 3, "k": [1, 2, 3],
                       "draft_ms": [0.1, 0.2, 0.3], "verify_ms": [10.0, 10.5, 11.0],
                       "overhead_ms": [0.3, 0.3, 0.3], "per_token_ms": [7.0, 6.0, 6.5],
                       "baseline_ms": [9.5] * 3})
    fig = go.Figure(figures.breakeven_chart(be, COLORS))
    assert {t.name for t in fig.data if t.x != (None,)} == {"ngram-k3 D(k)", "ngram-k3 V(k)", "ngram-k3 H(k)",
                                                             "ngram-k3 per token"}
    assert [t.name for t in fig.data if t.showlegend is not False] == ["ngram-k3"]
    assert 9.5 in [s.y0 for s in fig.layout.shapes]
    assert fig.layout.yaxis2.title.text == "time per committed token (ms)"


def test_levels_over_time_is_time_weighted_and_fleet_wide():
    steps = pl.DataFrame({
        "candidate": ["baseline"] * 3,
        "replica": [0, 0, 1],
        "t_start_s": [0.0, 0.5, 0.2],
        "duration_s": [0.1, 0.3, 0.5],
        "queue_len": [4, 0, 2],
        "kv_used_blocks": [10, 30, 50],
        "kv_total_blocks": [100, 100, 100],
    })
    lv = levels_over_time(steps, bin_s=1.0)
    assert lv.height == 1
    row = lv.row(0, named=True)
    # replica 0: queue (4*.1 + 0*.3)/.4 = 1.0, kv (10*.1+30*.3)/.4 = 25; replica 1: queue 2, kv 50
    assert row["queue_len"] == pytest.approx(3.0)
    assert row["kv_use"] == pytest.approx(75 / 200)
    fig = go.Figure(level_figures.kv_queue_over_time(lv, COLORS))
    assert len(fig.data) == 2 and fig.data[0].line.color == BASELINE_COLOR
    assert "fraction" in fig.layout.yaxis.title.text and "(s)" in fig.layout.xaxis2.title.text
    assert not math.isnan(fig.data[1].y[0])


def test_builders_return_plain_json_with_the_shared_template():
    import json

    from plotly.utils import PlotlyJSONEncoder

    raw = figures.goodput_vs_load(_sweep(), COLORS)
    other = figures.cost_vs_load(_sweep(), COLORS)
    assert isinstance(raw, dict) and set(raw) == {"data", "layout"}
    assert raw["layout"]["template"]["layout"]["plot_bgcolor"] == "white"  # plotly_white, spelled out
    assert raw["layout"]["template"] is other["layout"]["template"]  # built once, not copied per chart
    assert json.loads(json.dumps(raw, cls=PlotlyJSONEncoder))["data"][1]["name"] == "baseline"


def test_breakeven_notes_name_each_candidates_own_k_against_the_assumed_draft_host_time():
    """The shipped GPU scenario's H is an import's assumption: the dashboard's break-even notes say
    at which H each candidate's own k stops paying (not the best k of its proposer)."""
    from pathlib import Path

    from dashboard.chart_frames import breakeven_frame
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario

    root = Path(__file__).resolve().parents[2]
    scenario = load_scenario(root / "scenarios" / "gpu-chat-h200.toml")
    frame, _, notes = breakeven_frame(scenario, load_profile(root / "profiles" / "llama-3.1-8b-h200-vllm.json"))
    for c in scenario.speculative:
        said = [n for n in notes if n.startswith(f"break-even {c.name}: H is assumed")]
        assert len(said) == 1 and f": k={c.k} pays while H <= " in said[0], (c.name, said)
        row = frame.filter((pl.col("candidate") == c.name) & (pl.col("k") == c.k)).row(0, named=True)
        hmax = float(said[0].split("H <= ")[1].split(" ms")[0])
        # at that H the candidate's k commits a token as fast as plain decoding: (D + V + H max) / M = T
        tokens = (row["draft_ms"] + row["verify_ms"] + row["overhead_ms"]) / row["per_token_ms"]
        assert (row["draft_ms"] + row["verify_ms"] + hmax) / tokens == pytest.approx(row["baseline_ms"], abs=2e-3)
