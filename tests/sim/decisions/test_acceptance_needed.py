"""The acceptance the decision needs (sim/decisions/acceptance_needed.py): the family it scales,
the search's answer against the simulator, and the words and chart every surface renders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.acceptance_figure import acceptance_needed_chart, shaded_bounds
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.acceptance_needed import (
    GAMMA_TOP,
    AcceptanceNeeded,
    NeedPoint,
    acceptance_needed,
    gamma_for,
    length_of,
    search_point,
)
from sim.decisions.acceptance_needed_text import need_frame, point_words, sentence
from sim.model.acceptance import AcceptanceModel
from sim.model.assembly import acceptance_model
from sim.results.runner import run_scenario
from sim.results.simulation import simulate_once
from tests.helpers import scenario_toml

LATENCY_INDIFFERENCE = 0.05
"""The decision's latency indifference amount (docs/decisions.md)."""


def rates_strategy(k: int = 4):
    """Non-increasing survival rates in (0, 1)."""
    return st.lists(st.floats(0.02, 0.98), min_size=k, max_size=k).map(lambda v: sorted(v, reverse=True))


@settings(max_examples=40, deadline=None)
@given(rates=rates_strategy(), k=st.integers(1, 4), g1=st.floats(0.01, 50), g2=st.floats(0.01, 50))
def test_the_family_accepts_less_as_gamma_rises_and_gamma_for_inverts_it(rates, k, g1, g2):
    model = AcceptanceModel.from_assumed(rates)
    shares = [("chat", 1.0)]
    lo, hi = sorted((g1, g2))
    assert length_of(model, shares, k, lo) >= length_of(model, shares, k, hi) - 1e-12
    target = length_of(model, shares, k, g1)
    assert length_of(model, shares, k, gamma_for(model, shares, k, target)) == np.float64(target).round(6) or \
        abs(length_of(model, shares, k, gamma_for(model, shares, k, target)) - target) < 1e-6
    powered = model.powered(g1).segment("chat").aggregate
    assert all(a >= b for a, b in zip(powered, powered[1:], strict=False))  # still a survival curve


def make_root(tmp: Path, *, per_token_s: float, base_step_s: float, first: float, k: int) -> Path:
    (tmp / "profiles").mkdir(exist_ok=True)
    (tmp / "scenarios").mkdir(exist_ok=True)
    acc = [first * 0.8**i for i in range(5)]
    prof = synthetic_profile_dict(name="p", base_step_s=base_step_s, per_seq_s=0.0005, per_token_s=per_token_s,
                                  acceptance_rates=acc, k_max=5)
    (tmp / "profiles" / "p.json").write_text(json.dumps(prof), encoding="utf-8")
    return tmp


def scenario_at(tmp: Path, rate: float, k: int, seeds=(1, 2)):
    text = scenario_toml(
        "needs", run={"duration_s": 60.0, "warmup_s": 5, "seeds": list(seeds)},
        workload={"arrival": "poisson", "rate": rate},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 64},
                   "output_tokens": {"dist": "uniform", "min": 40, "max": 80},
                   "acceptance": {"task": "chat", "language": "en"}}],
        fleet={"profile": "../profiles/p.json"}, engine={"max_num_seqs": 64},
        candidates=[{"name": "baseline", "speculation": "off"}, {"name": "spec", "proposer": "ngram", "k": k}])
    path = tmp / "scenarios" / f"s{rate:g}.toml"
    path.write_text(text, encoding="utf-8")
    return load_scenario(path)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(per_token_ms=st.sampled_from([0.2, 0.4, 0.8]), base_ms=st.sampled_from([8.0, 15.0]),
       first=st.sampled_from([0.5, 0.8]), k=st.sampled_from([2, 4]))
def test_break_even_acceptance_never_falls_as_load_rises(tmp_path_factory, per_token_ms, base_ms, first, k):
    """Over generated synthetic profiles, at loads from light to heavy: the acceptance needed is
    non-decreasing in load (a load where it never pays is followed by no load where it does),
    within the bisection's resolution; where it pays at the assumed acceptance it needs no more
    than that; and at the acceptance found the candidate and the baseline are within the
    latency indifference amount."""
    tmp = make_root(tmp_path_factory.mktemp("needs"), per_token_s=per_token_ms / 1e3, base_step_s=base_ms / 1e3,
                    first=first, k=k)
    prof = load_profile(tmp / "profiles" / "p.json")
    points = [(r, run_scenario(scenario_at(tmp, r, k), prof)) for r in (2.0, 8.0, 20.0)]
    (n,) = acceptance_needed(points, prof, budget=8)
    assert n.runs <= 8 * 2 * 3
    prev = None
    for p in n.points:
        if p.needed is None:
            assert p.status == "never"
        else:
            assert prev is None or prev.needed is not None  # never, then pays again: not monotone
            if prev is not None:
                assert p.needed >= prev.below - 1e-9, (prev, p)
            assert p.resolved, p
            assert (p.needed <= n.assumed) == p.pays_at_assumed
            # simulated again, apart from the search: within the indifference amount there
            res = dict(points)[p.rate]
            model = acceptance_model(res.scenario, prof, res.scenario.candidate("spec"))
            g = gamma_for(model, [("chat", 1.0)], k, p.needed)
            ratios = [e2el(simulate_once(res.scenario, prof, "spec", s, acceptance_power=g).summary, s)
                      / e2el(res.per_seed, s, "baseline") for s in res.seeds]
            assert abs(float(np.mean(ratios)) - 1.0) <= LATENCY_INDIFFERENCE, (p, ratios)
        prev = p


def e2el(frame: pl.DataFrame, seed: int, name: str = "spec") -> float:
    row = frame.filter((pl.col("candidate") == name) & (pl.col("seed") == seed) & (pl.col("segment") == "all"))
    return float(row["e2el_ms_median"][0])


def test_evaluations_are_cached_and_the_budget_holds(tmp_path):
    tmp = make_root(tmp_path, per_token_s=0.0004, base_step_s=0.01, first=0.7, k=3)
    prof = load_profile(tmp / "profiles" / "p.json")
    points = [(8.0, run_scenario(scenario_at(tmp, 8.0, 3), prof))]
    cache: dict[str, float] = {}
    (first,) = acceptance_needed(points, prof, budget=4, cache=cache)
    assert 0 < first.runs <= 4 * 2 and len(cache) == first.runs
    (again,) = acceptance_needed(points, prof, budget=4, cache=cache)
    assert again.runs == 0 and again.points == first.points


def need(points, assumed=2.5, top=4.0, spread=None, floor=1.0) -> AcceptanceNeeded:
    return AcceptanceNeeded("spec", "baseline", 3, assumed, spread, "measured", top, floor=floor,
                            points=tuple(points), runs=10, budget=5, seeds=(1, 2))


def test_where_the_slo_binds_the_search_brackets_the_slo_not_the_latency():
    """A candidate faster than the baseline at every acceptance that misses the SLO below 2.0:
    the break-even is where it starts to carry the load, said as the SLO's."""
    (p,) = [search_point(8.0, 1.8, (0.6, False), 3.0, 8, lambda length: (0.5, length >= 2.0))]
    assert p.status == "needs" and p.slo_bound and p.resolved and not p.pays_at_assumed
    assert p.below < 2.0 <= p.needed < 2.0 + 1.2 / 2**6
    (q,) = [search_point(8.0, 1.8, (1.2, True), 3.0, 8, lambda length: (2.0 - length / 2, True))]
    assert q.needed is not None and 2.0 <= q.needed and abs((2.0 - q.needed / 2) - 1.0) <= LATENCY_INDIFFERENCE + 1e-9
    assert not q.slo_bound and q.evaluations < 8  # stopped once within the indifference amount


def test_the_sentence_reads_the_highest_paying_load_and_the_need_there():
    n = need([NeedPoint(2.0, "needs", 1.4, 1.35, 0.98, 0.5, False, 5, True),
              NeedPoint(8.0, "needs", 2.1, 2.05, 0.99, 0.8, False, 5, True),
              NeedPoint(20.0, "needs", 2.9, 2.85, 0.97, 1.1, False, 5),
              NeedPoint(40.0, "never", None, 4.0, 1.2, 1.3, False, 1)])
    assert sentence(n) == ("pays up to 20 req/s if acceptance length ≥ 2.90; at your measured 2.50 it pays up "
                           "to 8 req/s")
    assert n.pays_up_to(2.2) == 8.0 and n.pays_up_to(1.0) is None
    # a search that never found a length that does not pay says so, with the family's floor
    low = need([NeedPoint(2.0, "needs", 1.64, 1.5, 0.9, 0.7, False, 6, True)], floor=1.5)
    assert point_words(low) == "needs ≥ 1.64 at 2 req/s (paid at every length tried; the family reaches down to 1.50)"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 100), st.one_of(st.none(), st.floats(1.0, 4.0))), min_size=1,
                max_size=6, unique_by=lambda t: t[0]))
def test_the_shaded_region_is_the_frame_between_break_even_and_the_top(rows):
    pts = [NeedPoint(r, "never" if v is None else "needs", v, 1.0, None, 1.1, False, 1) for r, v in rows]
    frame = need_frame([need(pts, top=4.0, spread=(2.3, 2.7))])
    fig = acceptance_needed_chart(frame, {"spec": "#1f77b4"})
    pays = [t for t in fig["data"] if t.get("meta") == "pays"]
    assert len(pays) == 1
    i = fig["data"].index(pays[0])
    x, low, top = shaded_bounds(frame, "spec")
    ordered = sorted(rows)
    assert pays[0]["x"] == x == [r for r, _ in ordered]
    assert pays[0]["y"] == top == [4.0] * len(rows) and pays[0]["fill"] == "tonexty"
    assert fig["data"][i - 1]["y"] == low == [4.0 if v is None else v for _, v in ordered]
    band = next(t for t in fig["data"] if t.get("meta") == "band")
    assert band["y"] == [2.7, 2.7] and fig["data"][fig["data"].index(band) - 1]["y"] == [2.3, 2.3]
    assert "measured acceptance 2.50" in band["name"]


def test_an_empty_frame_says_why():
    fig = acceptance_needed_chart(need_frame([]), {})
    assert "not computed" in json.dumps(fig["layout"])
    assert need_frame([]).schema == pl.Schema({"candidate": pl.String, "rate": pl.Float64, "needed": pl.Float64,
                                                "top": pl.Float64, "assumed": pl.Float64, "spread_low": pl.Float64,
                                                "spread_high": pl.Float64, "provenance": pl.String})
    assert math.isclose(GAMMA_TOP, 1e-3)
