"""The self-contained HTML report: charts inlined, text escaped, and `specplan report` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest

from cli.main import main
from dashboard.html_report import (
    ReportContent,
    decision_rows,
    format_numbers,
    render_report,
    write_report,
)
from sim.contracts.synthetic import synthetic_profile_dict
from tests.helpers import NGRAM_K3, scenario_toml, segment, write_scenario


def _content() -> ReportContent:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4], name="baseline"))
    fig.update_layout(title_text="Time to first token vs offered load")
    return ReportContent(
        title="specplan decision report: <tiny>",
        figures=[("Latency", "lat-ttft", fig), ("Latency", "lat-tpot", fig.to_plotly_json())],
        decisions=[{"rule": "canary", "candidate": "ngram-k3", "segment": "all", "load": "1 req/s",
                    "observation": "TPOT 40% lower <script>alert(1)</script>", "decision": "canary it",
                    "risk": "acceptance drift", "numbers": json.dumps({"tpot_gain": 0.4, "rate": None})}],
        key_numbers=[{"candidate": "baseline", "p95 TTFT (ms)": "120"}],
        scenario_toml='name = "tiny"\n[run]\nduration_s = 30\n',
        sources=["timing: assumed [synthetic]"],
        notes=["one seed per load point"],
        generated="2026-11-29 18:00 UTC",
    )


def test_report_is_self_contained_and_escaped():
    text = render_report(_content())
    assert text.count("* plotly.js v") == 1 and "<script src" not in text
    assert 'id="fig-lat-ttft"' in text and 'id="fig-lat-tpot"' in text
    assert "Time to first token vs offered load" in text
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)" in text
    assert "&lt;tiny&gt;" in text
    assert "TPOT gain 0.4 · rate –" in text  # keys in words (dashboard.labels)
    assert "duration_s = 30" in text and "timing: assumed [synthetic]" in text
    assert "p95 TTFT (ms)" in text and "one seed per load point" in text


def test_report_without_decisions_says_so():
    c = _content()
    text = render_report(ReportContent(c.title, c.figures, [], [], c.scenario_toml, c.sources))
    assert "No decision: one candidate only" in text


def test_decision_rows_and_numbers():
    rows = decision_rows([{"rule": "segment-baseline", "candidate": "x", "segment": "code", "load": "peak",
                           "observation": "o", "decision": "d", "risk": "r", "numbers": {"k": 3.0}}])
    assert rows[0]["finding"] == "[segment-baseline] x / code @ peak" and rows[0]["numbers"] == "k 3"
    assert format_numbers("not json") == "not json"


def test_write_report_atomic(tmp_path: Path):
    out = write_report(tmp_path / "r.html", "<html></html>")
    assert out.read_text() == "<html></html>"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    from sim.contracts.errors import SpecplanError

    with pytest.raises(SpecplanError, match="does not exist"):
        write_report(tmp_path / "missing" / "r.html", "x")


SCENARIO = scenario_toml(
    'tiny',
    description='report test',
    run={'duration_s': 40, 'warmup_s': 5, 'seeds': [1, 2]},
    workload={'arrival': 'poisson', 'rate': 1.5},
    segments=[segment(prompt=120, output=30)],
    slo={'ttft_ms': 800, 'tpot_ms': 50},
    fleet={'profile': 'syn.json', 'price_per_gpu_hour': 1.0},
    candidates=[NGRAM_K3],
)


def test_cli_report_end_to_end(tmp_path: Path, capsys):
    scen = write_scenario(tmp_path, SCENARIO, profile_file="syn.json", scenario_file="tiny.toml", name="syn")
    out = tmp_path / "report.html"
    rc = main(["report", str(scen), "-o", str(out), "--load", "0.5,1", "--seeds", "1", "--max-seeds", "1",
               "--set", "candidates[ngram-k3].k=2"])
    assert rc == 0, capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    for fid in ("lat-ttft", "lat-pause", "goodput", "cost", "cdf-e2el", "acc-position", "breakeven", "levels"):
        assert f'id="fig-{fid}"' in text
    assert "k = 2" in text  # the override is in the scenario TOML
    assert "assumed" in text  # the synthetic profile's provenance is shown
    assert "wrote" in capsys.readouterr().out

    bad = tmp_path / "bad.toml"
    bad.write_text(SCENARIO.replace("rate = 1.5", "rate = 0"), encoding="utf-8")
    assert main(["report", str(bad), "-o", str(tmp_path / "x.html")]) == 2
    assert "workload.rate" in capsys.readouterr().err
    assert main(["report", str(scen), "-o", str(tmp_path / "y.html"), "--set", "fleet.replicas"]) == 2


def test_view_reuses_cached_runs_exactly(tmp_path: Path):
    """A what-if through the run cache gives the same frames as simulating everything again."""
    import tomllib

    from polars.testing import assert_frame_equal

    from dashboard.view import compute_view
    from sim.contracts.profile import Profile
    from sim.contracts.scenario import Scenario

    prof = Profile.from_dict(synthetic_profile_dict(name="syn"), "syn")
    scen = Scenario.from_dict(tomllib.loads(SCENARIO.replace('profile = "syn.json"\n', "")), "tiny.toml", tmp_path)
    scen = scen.with_overrides({"run.seeds": [1]})
    cache: dict = {}
    first = compute_view(scen, prof, load_factors=(0.5, 1.0), cache=cache, profile_key="syn")

    def bracketing(view, cand: str) -> int:
        return view.bracket.filter((pl.col("segment") == "all") & (pl.col("candidate") == cand)).height

    assert bracketing(first, "baseline") and bracketing(first, "ngram-k3")  # points around each capacity
    # 2 candidates x 2 load points, and each candidate's points around its capacity
    assert len(cache) == 4 + bracketing(first, "baseline") + bracketing(first, "ngram-k3")
    changed = scen.with_overrides({"candidates[ngram-k3].k": 2})
    warm = compute_view(changed, prof, load_factors=(0.5, 1.0), cache=cache, profile_key="syn")
    assert warm.seconds["runs_simulated"] == 2 + bracketing(warm, "ngram-k3")
    assert warm.seconds["runs_reused"] == 2 + bracketing(warm, "baseline")
    cold = compute_view(changed, prof, load_factors=(0.5, 1.0))
    assert_frame_equal(warm.sweep, cold.sweep)
    assert_frame_equal(warm.bracket, cold.bracket)
    assert warm.capacity == cold.capacity and warm.bottlenecks == cold.bottlenecks
    assert_frame_equal(warm.result.requests, cold.result.requests)
    assert_frame_equal(warm.result.steps, cold.result.steps)
    assert_frame_equal(warm.decisions, cold.decisions)
    assert warm.sources == cold.sources
