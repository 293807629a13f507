"""One answer everywhere: the terminal, the JSON, the HTML report and the dashboard callback
render the one decision (sim.decisions.decision), over generated scenarios.

Each scenario is small (a synthetic profile: every decode step 10 ms, prefill 50 ms; 60 s of
arrivals) so a handful of examples stays within the test budget.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cli.main import main
from dashboard.files import Roots
from dashboard.html_report import render_report
from dashboard.page_run import run_view
from dashboard.view import compute_view, report_content, view_figures
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.acceptance_needed import DEFAULT_BUDGET
from sim.decisions.answer import answer_scenario
from sim.decisions.answer_text import headline
from tests.helpers import scenario_toml

FAST = ('\n[fleets.fast]\nprofile = "../profiles/dd2.json"\ntensor_parallel_size = 2\n'
        'price_per_gpu_hour = 1.5\n')
"""Other hardware (twice the GPUs per replica, steps 40 % shorter, another price) a candidate
may be drawn onto: surfaces must agree on hardware × speculation too."""


def scenario_text(rate: float, seqs: int, ttft_ms: float, acc: float, seeds=(1, 2), max_seeds: int = 4,
                  duration: float = 60.0, fast: bool = False) -> str:
    spec = {"proposer": "ngram", "k": 2, "assumed_acceptance": [acc, acc * acc]}
    more = [{"name": "spec-fast", **spec, "fleet": "fast"}] if fast else []
    return scenario_toml(
        "generated",
        run={"duration_s": duration, "warmup_s": 5, "seeds": list(seeds), "max_seeds": max_seeds},
        workload={"arrival": "poisson", "rate": rate},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
                   "output_tokens": {"dist": "uniform", "min": 12, "max": 30},
                   "acceptance": {"task": "chat", "language": "en"}}],
        slo={"ttft_ms": ttft_ms},
        fleet={"profile": "../profiles/dd1.json", "price_per_gpu_hour": 1.0},
        engine={"max_num_seqs": seqs},
        candidates=[{"name": "baseline", "speculation": "off"}, {"name": "spec-k2", **spec},
                    {"name": "spec-copy", **spec}, *more],
    ) + (FAST if fast else "")


def make_root(tmp: Path, text: str) -> Path:
    (tmp / "profiles").mkdir(exist_ok=True)
    (tmp / "scenarios").mkdir(exist_ok=True)
    prof = synthetic_profile_dict(name="dd1", base_step_s=0.010, per_seq_s=0.002, per_token_s=0.0,
                                  per_context_token_s=0.0, prefill_base_s=0.05, prefill_per_token_s=0.0,
                                  prefill_per_context_token_s=0.0)
    (tmp / "profiles" / "dd1.json").write_text(json.dumps(prof), encoding="utf-8")
    fast = synthetic_profile_dict(name="dd2", base_step_s=0.006, per_seq_s=0.0012, per_token_s=0.0,
                                  per_context_token_s=0.0, prefill_base_s=0.03, prefill_per_token_s=0.0,
                                  prefill_per_context_token_s=0.0)
    fast["replica"] = {"tensor_parallel_size": 2}
    (tmp / "profiles" / "dd2.json").write_text(json.dumps(fast), encoding="utf-8")
    (tmp / "scenarios" / "gen.toml").write_text(text, encoding="utf-8")
    return tmp / "scenarios" / "gen.toml"


def statuses(decision: dict) -> dict[str, str]:
    return {s["candidate"]: s["status"] for s in decision["standings"]}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(rate=st.sampled_from([3.0, 6.0, 12.0]), seqs=st.sampled_from([1, 4]),
       ttft_ms=st.sampled_from([300.0, 2000.0]), acc=st.sampled_from([0.2, 0.9]), fast=st.booleans())
@example(rate=6.0, seqs=4, ttft_ms=2000.0, acc=0.9, fast=True)  # hardware × speculation, always
def test_every_surface_renders_the_same_decision(tmp_path_factory, capsys, rate, seqs, ttft_ms, acc, fast):
    tmp = tmp_path_factory.mktemp("gen")
    path = make_root(tmp, scenario_text(rate, seqs, ttft_ms, acc, fast=fast))
    # terminal and JSON of `specplan simulate` (with the acceptance each candidate needs)
    assert main(["simulate", str(path), "--quiet", "--acceptance-needed"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert main(["simulate", str(path), "--quiet", "--json", "--acceptance-needed"]) == 0
    doc = json.loads(capsys.readouterr().out)
    decision = doc["decision"]
    verdict = f"verdict: {decision['headline']}"
    first = next(line for line in text if line.startswith("verdict: "))
    assert verdict.startswith(first.rstrip())  # the terminal wraps it at 100 columns
    # the library call every surface makes, and what it decided from
    sc = load_scenario(path)
    prof = load_profile(tmp / "profiles" / "dd1.json")
    res, ans = answer_scenario(sc, prof)
    d = ans.whole
    assert decision["winner"] == d.winner and decision["outcome"] == d.outcome
    assert statuses(decision) == {s.candidate: s.status for s in d.standings}
    # HTML report (specplan report) and the dashboard callback
    view = compute_view(sc, prof, load_factors=(1.0,), acceptance_budget=DEFAULT_BUDGET)
    assert view.verdict[0] == verdict
    figs = view_figures(view)
    html = render_report(report_content(view, figs))
    assert f"<li>{escape(verdict)}</li>" in html
    page = run_view(Roots.under(tmp, traces=()), scenario_value="gen.toml", uploaded_scenario=None,
                    profile_value=None, uploaded_profile=None, whatif={}, load_text="1", seeds=2)
    assert page.verdict[0] == verdict and page.report["verdict"] == page.verdict
    # the acceptance each speculative candidate needs: the same sentence and numbers everywhere
    needs = decision["acceptance_needed"]
    assert [n["candidate"] for n in needs] == [c for c in sc.candidate_names if c != "baseline"]
    flat = " ".join(" ".join(text).split())  # the terminal wraps at 100 columns
    pays = [t for t in figs["acc-needed"]["data"] if t.get("meta") == "pays"]
    for n, drawn in zip(needs, pays, strict=True):
        said = f"acceptance needed: {n['candidate']} (k={n['k']}): {n['said']}"
        assert " ".join(said.split()) in flat
        assert said in view.verdict and said in page.verdict and f"<li>{escape(said)}</li>" in html
        for p in n["points"]:
            assert p["needed"] is None or f"≥ {p['needed']:.2f} at {p['rate_rps']:g} req/s" in flat
        assert drawn["x"] == [p["rate_rps"] for p in n["points"]]
        assert figs["acc-needed"]["data"][figs["acc-needed"]["data"].index(drawn) - 1]["y"] == [
            n["family_top"] if p["needed"] is None else p["needed"] for p in n["points"]]
    same = {n["candidate"]: n["points"] for n in needs}
    assert same["spec-k2"] == same["spec-copy"]  # common random numbers: a copy needs the same
    # every decision row agrees with the standings, on every surface
    rows_cli = [(r["candidate"], r["decision"]) for r in doc["decision_rows"]]
    rows_view = [(r["candidate"], r["decision"]) for r in view.decisions.to_dicts()]
    rows_page = [(r["candidate"], r["decision"]) for r in page.report["decisions"]]
    assert rows_cli == rows_view == rows_page
    for name, said in [(r["candidate"], r["decision"]) for r in doc["decision_rows"]
                       if r["rule"] != "acceptance needed"]:  # its own rows: the sentence below
        if name == d.winner:
            assert said.startswith("use ")
        else:
            assert not said.startswith("use ")
            assert "keep" not in said or d.winner is None
    # a copy under another name ties bit for bit: metrics per seed and its standing
    ps = res.per_seed.drop("candidate")
    a = ps.filter(res.per_seed["candidate"] == "spec-k2")
    b = ps.filter(res.per_seed["candidate"] == "spec-copy")
    assert a.equals(b)
    assert d.standing("spec-k2").status == d.standing("spec-copy").status
    assert d.winner not in ("spec-k2", "spec-copy")  # two equal copies never make one winner
    if fast:  # its own hardware: its own profile and price, the same requests
        assert res.profiles is not None and res.profiles["spec-fast"].name == "dd2"
        assert d.facts.mixed_fleets and d.facts.candidate("spec-fast").hourly_usd == 2 * 1.5
        assert d.facts.candidate("spec-k2").hourly_usd == 1.0
    # goodput below the baseline's never wins; nothing that misses the SLO wins
    f = d.facts
    if d.winner is not None:
        w, base = f.candidate(d.winner), f.candidate(f.baseline)
        assert sum(w.goodput) >= sum(base.goodput) * (1 - f.indifference) - 1e-9
        assert w.carry.verdict == "carries"  # judged across seeds (sim/decisions/carry.py)
    if not any(c.carry.verdict == "carries" for c in f.candidates):
        assert d.winner is None and "no winner" in headline(d) or d.outcome == "undetermined"


def test_the_copy_searches_the_same_capacity_per_seed_and_capacity_text_and_json_agree(tmp_path, capsys):
    path = make_root(tmp_path, scenario_text(6.0, 4, 2000.0, 0.9, max_seeds=2, duration=40.0))
    args = ["capacity", str(path), "--target-rate", "12", "--max-evals", "4", "--rel-tol", "0.2",
            "--no-profile-band"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    caps = {c["candidate"]: [s["capacity_rps"] for s in c["per_seed"]] for c in doc["candidates"]}
    assert caps["spec-k2"] == caps["spec-copy"]  # common random numbers, capacity included
    assert main(args) == 0
    text = capsys.readouterr().out.splitlines()
    assert f"verdict: {doc['decision']['headline']}".startswith(text[0].rstrip())
    st_ = statuses(doc["decision"])
    assert st_["spec-k2"] == st_["spec-copy"]
    used = [r["candidate"] for r in doc["decisions"] if r["decision"].startswith("use ")]
    assert used == ([doc["decision"]["winner"]] if doc["decision"]["winner"] else [])
    assert f"1. [{doc['decisions'][0]['rule']}] {doc['decisions'][0]['candidate']}" in "\n".join(text)


def test_the_dominant_candidate_wins_everywhere(tmp_path, capsys):
    """Batch 1: the baseline serves a request in ~0.3 s and its queue runs away at 5 req/s;
    a sure draft commits 3 tokens a step and carries it."""
    text = scenario_text(5.0, 1, 1000.0, 1.0)
    path = make_root(tmp_path, text)
    assert main(["simulate", str(path), "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["decision"]["headline"] == "no winner: spec-k2 and spec-copy are equivalent (no difference that matters)"
    sc = load_scenario(path)
    one = sc.with_overrides({"candidates": [c for c in json.loads(json.dumps(sc.to_dict()["candidates"]))
                                            if c["name"] != "spec-copy"]})
    _, ans = answer_scenario(one, load_profile(tmp_path / "profiles" / "dd1.json"))
    assert ans.whole.winner == "spec-k2"
    assert headline(ans.whole).startswith("spec-k2: the only candidate that carries 5 req/s at the SLO")


def test_a_winners_load_limit_is_said_only_where_a_load_point_shows_it(tmp_path):
    """The draft costs as much again per hour: at 2 req/s both carry the load and the baseline is
    cheaper per good answer; at 5 req/s the baseline's queue runs away and the draft leads."""
    text = scenario_text(2.0, 1, 1000.0, 1.0, seeds=(1, 2, 3), max_seeds=3).replace(
        "price_per_gpu_hour = 1.0", "price_per_gpu_hour = 1.0\ndraft_price_per_hour = 1.0")
    path = make_root(tmp_path, text)
    sc, prof = load_scenario(path), load_profile(tmp_path / "profiles" / "dd1.json")
    view = compute_view(sc, prof, load_factors=(1.0, 2.5))
    assert view.answer.whole.winner == "baseline"
    limit = view.answer.load_limit
    assert limit is not None and limit.facts.rate == 5.0
    assert set(limit.leaders) == {"spec-k2", "spec-copy"}
    rows = view.decisions.filter(view.decisions["rule"] == "load limit").to_dicts()
    assert len(rows) == 1 and rows[0]["decision"].startswith("baseline's advantage is gone at 5 req/s")
    assert any(line.startswith("load limit: baseline's advantage is gone at 5 req/s") for line in view.verdict)
    # no higher load point: nothing is said
    assert compute_view(sc, prof, load_factors=(0.5, 1.0)).answer.load_limit is None
