"""One answer everywhere: a candidate that dominates is recommended by the terminal, the JSON,
the HTML report and the dashboard callback alike (they all read sim.results.verdict)."""

from __future__ import annotations

import json
from pathlib import Path

from cli.main import main
from dashboard.files import Roots
from dashboard.html_report import render_report
from dashboard.page_run import run_view
from dashboard.view import compute_view, report_content, view_figures
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.results.runner import run_scenario
from tests.helpers import scenario_toml

# batch 1, every decode step 10 ms, prefill 50 ms, 22 output tokens: the baseline serves a
# request in 0.26 s (3.8 req/s at most); sure-k2 commits 3 tokens a step (≈8 req/s). At 5 req/s
# the baseline's queue runs away while sure-k2 meets the SLO: it dominates.
SCENARIO = scenario_toml(
    'dominant',
    run={'duration_s': 120, 'warmup_s': 10, 'seeds': [1, 2]},
    workload={'arrival': 'poisson', 'rate': 5.0},
    segments=[
        {'name': 'chat', 'share': 1.0, 'prompt_tokens': {'dist': 'fixed', 'value': 32}, 'output_tokens': {'dist': 'fixed', 'value': 22}, 'acceptance': {'task': 'chat', 'language': 'en'}},
    ],
    slo={'ttft_ms': 1000},
    fleet={'profile': '../profiles/dd1.json', 'price_per_gpu_hour': 1.0},
    engine={'max_num_seqs': 1},
    candidates=[
        {'name': 'baseline', 'speculation': 'off'},
        {'name': 'sure-k2', 'proposer': 'ngram', 'k': 2, 'assumed_acceptance': [1.0, 1.0]},
    ],
)


def make_root(tmp: Path) -> Path:
    (tmp / "profiles").mkdir()
    (tmp / "scenarios").mkdir()
    prof = synthetic_profile_dict(name="dd1", base_step_s=0.010, per_seq_s=0.0, per_token_s=0.0,
                                  per_context_token_s=0.0, prefill_base_s=0.05, prefill_per_token_s=0.0,
                                  prefill_per_context_token_s=0.0)
    (tmp / "profiles" / "dd1.json").write_text(json.dumps(prof), encoding="utf-8")
    (tmp / "scenarios" / "dominant.toml").write_text(SCENARIO, encoding="utf-8")
    return tmp


def test_every_surface_recommends_the_dominant_candidate(tmp_path, capsys):
    root = make_root(tmp_path)
    path = root / "scenarios" / "dominant.toml"
    # terminal
    assert main(["simulate", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3] == "verdict: sure-k2 pays at 5 req/s: it beats baseline on goodput"
    # JSON
    res = run_scenario(load_scenario(path))
    assert res.to_json()["verdict"]["winner"] == "sure-k2"
    # HTML report (specplan report / export) and the dashboard callback
    view = compute_view(res.scenario, res_profile(root), load_factors=[0.5, 1.0])
    assert view.verdict[0] == out[3]
    assert any(line.strip().startswith("sure-k2: ≤ 1 replica(s) for 5 req/s") for line in view.verdict)
    assert any(line.strip().startswith("baseline: ≤ 2 replica(s) for 5 req/s") for line in view.verdict)
    html = render_report(report_content(view, view_figures(view)))
    assert '<section id="verdict">' in html and "sure-k2 pays at 5 req/s" in html
    assert html.index('id="verdict"') < html.index('id="decisions"')
    page = run_view(Roots.under(root, traces=()), scenario_value="dominant.toml", uploaded_scenario=None,
                    profile_value=None, uploaded_profile=None, whatif={}, load_text="0.5, 1", seeds=1)
    assert page.verdict[0] == "verdict: sure-k2 pays at 5 req/s: it beats baseline on goodput"
    assert page.report["verdict"] == page.verdict
    assert all("keep baseline" not in d["decision"] for d in page.decisions)


def res_profile(root: Path):
    from sim.contracts.profile import load_profile

    return load_profile(root / "profiles" / "dd1.json")


def test_simulate_sizing_gives_the_replicas_each_candidate_needs(tmp_path, capsys):
    root = make_root(tmp_path)
    path = root / "scenarios" / "dominant.toml"
    assert main(["simulate", str(path), "--quiet", "--seeds", "1", "--sizing", "0.5,1"]) == 0
    out = capsys.readouterr().out.splitlines()
    i = out.index("fleet for 5 req/s from load points ×0.5, 1 (upper bounds; `specplan capacity` searches exactly):")
    assert out[i + 1].startswith("  baseline: ≤ 2 replica(s) for 5 req/s")
    assert out[i + 2].startswith("  sure-k2: ≤ 1 replica(s) for 5 req/s")
    assert out[i - 1].startswith("  certainty") or out[i - 1].startswith("  why")  # under the verdict
    assert main(["simulate", str(path), "--sizing", "0,x"]) == 2
