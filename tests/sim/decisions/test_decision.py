"""The one decision on hand-built facts: paired statistics, the planner's order, its renderings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.decisions.answer_export import rows_frame, to_json
from sim.decisions.answer_rows import rows
from sim.decisions.answer_text import Answer, headline, lines
from sim.decisions.decision import decide
from sim.decisions.facts import CandidateFacts, Facts
from sim.decisions.paired import mean_interval, paired
from sim.decisions.vllm_config import vllm_method


def cand(name: str, goodput, *, carries=None, latency=None, hourly=4.0, baseline=None) -> CandidateFacts:
    n = len(goodput)
    return CandidateFacts(
        name=name, baseline=name == "baseline" if baseline is None else baseline,
        goodput=tuple(goodput), attainment=tuple(min(1.0, g / 10.0) for g in goodput),
        carries=tuple(carries if carries is not None else [True] * n),
        carry_reason=tuple("ttft_ms_p95=1200ms vs 1000" for _ in range(n)),
        latency_ms=tuple(latency if latency is not None else [1000.0] * n), hourly_usd=hourly)


def fleet(*cands: CandidateFacts, rate: float = 10.0) -> Facts:
    n = len(cands[0].goodput)
    return Facts("fleet", tuple(cands), tuple(range(1, n + 1)), "baseline", True, rate, 1, device="H200")


def test_paired_differences_see_what_overlapping_intervals_hide():
    # seed-to-seed spread is large, but b is 5 % above a on every seed: paired-t resolves it
    a = [10.0, 20.0, 30.0, 15.0]
    b = [x * 1.05 for x in a]
    assert paired(b, a, higher_better=True, rel_delta=0.02).verdict == "better"
    ma, ha, _ = mean_interval(a)
    mb, hb, _ = mean_interval(b)
    assert abs(mb - ma) < ha + hb  # the marginal intervals overlap
    assert paired(a, a, higher_better=True, rel_delta=0.02).verdict == "equivalent"
    assert paired([1.0], [2.0], higher_better=True, rel_delta=0.02).verdict == "undetermined"


def test_intervals_are_clipped_to_the_metrics_range_and_zero_only_when_seeds_agree():
    m, h, txt = mean_interval([0.1, 0.9], 0.0, 1.0)
    assert "clipped" in txt and "0–1" in txt
    assert mean_interval([0.5, 0.5])[2] == "± 0 (all 2 seeds agree)"
    assert mean_interval([3.0])[2] == "one seed: no interval"


def test_a_clear_winner_is_named_and_never_told_to_keep_the_baseline():
    d = decide(fleet(cand("baseline", [8.0, 8.1, 7.9]), cand("draft", [9.5, 9.6, 9.4])))
    assert d.outcome == "winner" and d.winner == "draft"
    text = "\n".join(lines(Answer(d)))
    assert "keep baseline" not in text
    assert [r.decision for r in rows(Answer(d)) if r.candidate == "draft"] == ["use draft instead of baseline"]
    assert next(r for r in rows(Answer(d)) if r.candidate == "baseline").decision == "replace baseline by draft"


def test_equal_cost_goes_on_to_latency_in_the_planners_order():
    d = decide(fleet(cand("baseline", [10.0, 10.0, 10.0], latency=[900, 1000, 1100]),
                     cand("eagle", [10.0, 10.0, 10.0], latency=[500, 560, 610])))
    assert d.winner == "eagle" and [s for s, _ in d.steps] == ["load", "cost", "latency"]
    assert "same cost per good answer" in headline(d)


def test_nothing_carries_the_load_names_no_winner_and_each_ones_fleet():
    no = [False, False]
    f = fleet(cand("baseline", [0.0, 0.0], carries=no), cand("eagle", [0.5, 0.4], carries=no), rate=30.0)
    d = decide(f)
    assert d.outcome == "no winner" and d.winner is None
    assert headline(d) == ("no winner: 1 H200 cannot carry 30 req/s at the SLO with any candidate; "
                           "`specplan capacity --target-rate 30` gives each one's fleet")
    sized = Facts(**{**f.__dict__, "candidates": tuple(
        CandidateFacts(**{**c.__dict__, "replicas": r}) for c, r in zip(f.candidates, (3, 2), strict=True))})
    assert headline(decide(sized)).endswith("each needs: baseline 3 replica(s), eagle 2 replica(s)")
    assert all(s.status == "cannot carry" for s in d.standings)


def test_one_seed_never_claims_certainty_and_undetermined_is_not_a_tie():
    d = decide(fleet(cand("baseline", [8.0]), cand("draft", [9.5])))
    assert d.outcome == "undetermined" and d.winner is None
    assert "tie" not in "\n".join(lines(Answer(d)))
    noisy = decide(fleet(cand("baseline", [8.0, 10.0]), cand("draft", [9.0, 9.2])))
    assert noisy.outcome == "undetermined"
    assert headline(noisy).startswith("undetermined at 2 seed(s): ")
    assert "the difference is within ±" in headline(noisy)


def test_a_candidate_with_fewer_good_answers_than_the_baseline_never_wins():
    # the baseline misses the percentiles; draft meets them but serves far fewer good answers
    d = decide(fleet(cand("baseline", [9.0, 9.1, 9.0], carries=[False] * 3), cand("draft", [5.0, 5.1, 5.0])))
    assert d.winner is None and d.standing("draft").status == "behind"


def test_copies_under_other_names_stand_equal():
    a = cand("eagle", [9.5, 9.6, 9.4], latency=[600, 650, 610])
    b = CandidateFacts(**{**a.__dict__, "name": "eagle-copy"})
    d = decide(fleet(cand("baseline", [8.0, 8.1, 7.9]), a, b))
    assert d.outcome == "no winner" and set(d.leaders) == {"eagle", "eagle-copy"}
    assert d.standing("eagle").status == d.standing("eagle-copy").status == "equivalent"


def test_capacity_replicas_are_the_simulated_count_and_an_undetermined_one_says_both():
    from sim.decisions.answer import capacity_answer
    from sim.decisions.capacity_report import CandidateCapacity, CapacityReport
    from sim.decisions.capacity_search import CapacitySearch
    from sim.decisions.sustain import SustainCriteria

    def cc(name, caps, sim_n, low=None):
        per = tuple(CapacitySearch(x, x * 0.99, x * 1.01, "bracketed", ()) for x in caps)
        return CandidateCapacity(name, per, tuple(range(1, len(caps) + 1)), 20.0, sim_n, "ok",
                                 replicas_low=low, replicas_below="" if low is None else
                                 f"{low}: undetermined (TTFT p95 0.90–1.10 × its limit over 2 seeds)")

    rep = CapacityReport("s", SustainCriteria({"ttft": 1000.0}), (cc("baseline", [19.0, 22.4], 2, low=1),
                         cc("eagle", [25.2, 26.0], 1)), None, None, (), 0.1, 8, 60.0,
                         replica_hourly={"baseline": 4.0, "eagle": 4.0}, start_seeds=2, max_seeds=2)
    ans = capacity_answer(rep)
    d = ans.whole
    base, eagle = d.facts.candidate("baseline"), d.facts.candidate("eagle")
    # the banked count is the one simulated to carry the target, never a capacity bound's guess
    assert base.replicas == 2 and base.replicas_undetermined and base.replicas_low == 1
    assert eagle.replicas == 1 and not eagle.replicas_undetermined
    text = "\n".join(lines(ans, wrap=False))
    assert "1 or 2 replica(s)" in text and "replica count undetermined at the budget: baseline 1 or 2" in text
    assert d.outcome == "undetermined"  # 2 seeds cannot separate their capacities: no "tie"
    assert to_json(Answer(d))["outcome"] == "undetermined"


@pytest.mark.parametrize("kind,name,model,want", [
    ("eagle3", "eagle3", None, "eagle3"), ("eagle", "eagle-head", None, "eagle"), ("mtp", "mtp", None, "mtp"),
    ("ngram", "ngram", None, "ngram"), ("draft_model", "llama-3.2-1b", "meta-llama/Llama-3.2-1B", "draft_model"),
    ("draft_model", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3"),
    ("draft_model", "head", "yuhuili/EAGLE-LLaMA3-Instruct-8B", "eagle"),
    ("draft_model", "mtp-layers", None, "mtp"), ("self_draft", "selfdraft-l6", None, None),
    ("draft_model", "ngram", "meta-llama/Llama-3.2-1B", "draft_model"),  # a model's weights: never lookup
])
def test_vllm_method_per_proposer_kind(kind, name, model, want):
    assert vllm_method(kind, name, model) == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.5, 20.0), min_size=2, max_size=6), st.floats(0.5, 2.0), st.integers(0, 3))
def test_decisions_hold_everywhere(base, scale, who):
    """For any facts: the winner and every row agree; a copy stands with its original; no
    winner has goodput below the baseline's beyond the indifference amount; nothing that cannot
    carry the load wins."""
    rng = np.random.default_rng(len(base) + who)
    other = [g * scale * (1 + 0.01 * rng.standard_normal()) for g in base]
    carries = [bool(rng.random() > 0.3) for _ in base]
    cands = [cand("baseline", base), cand("spec", other, carries=carries if who == 1 else None)]
    cands.append(CandidateFacts(**{**cands[1].__dict__, "name": "spec-copy"}))
    d = decide(fleet(*cands))
    table = rows(Answer(d))
    if d.winner is not None:
        assert [r.candidate for r in table if r.decision.startswith("use ")] == [d.winner]
        w = d.facts.candidate(d.winner)
        assert all(w.carries)
        assert np.mean(w.goodput) >= np.mean(cands[0].goodput) * (1 - d.facts.indifference) - 1e-9
    else:
        assert not any(r.decision.startswith("use ") for r in table)
    assert d.standing("spec").status == d.standing("spec-copy").status
    assert d.winner not in ("spec", "spec-copy")  # two equal copies: never a single winner
    assert rows_frame(table).height == len(table)
    assert all(math.isfinite(x) or x is None for c in to_json(Answer(d))["comparisons"]
               for x in [c["mean_difference"]] if x is not None)


def test_windows_of_the_shipped_peak_and_restart_scenarios():
    from pathlib import Path

    from sim.contracts.scenario import load_scenario
    from sim.decisions.windows import windows

    repo = Path(__file__).resolve().parents[3]
    (peak,) = windows(load_scenario(repo / "scenarios" / "decision-grid-peak.toml"))
    assert (peak.t0, peak.t1) == (600.0, 900.0) and abs(peak.rate - 0.9) < 1e-9 and peak.label.startswith("peak 600–900 s")
    restart, after = windows(load_scenario(repo / "scenarios" / "decision-grid-restart.toml"))
    assert (restart.t0, restart.t1) == (600.0, 660.0) and "replica 0 down" in restart.label
    assert (after.t0, after.t1) == (660.0, 1800.0) and "without speculation" in after.label
    assert windows(load_scenario(repo / "scenarios" / "gpu-chat-h200.toml")) == []


def test_sustain_checks_are_said_in_words():
    from sim.decisions.answer_text import plain

    assert plain("ttft_ms_p95=1210ms vs 1000") == "TTFT p95 1,210 ms > 1,000 ms"
    assert plain("lost=44.0% vs 1.0%") == "44.0% of requests lost > 1.0%"


def test_a_fleet_below_every_capacity_says_so_with_each_ones_replicas():
    from sim.decisions.answer import capacity_answer
    from sim.decisions.capacity_report import CandidateCapacity, CapacityReport
    from sim.decisions.capacity_search import CapacitySearch
    from sim.decisions.sustain import SustainCriteria

    def cc(name, caps, sim_n):
        per = tuple(CapacitySearch(x, x * 0.99, x * 1.01, "bracketed", ()) for x in caps)
        return CandidateCapacity(name, per, (1, 2, 3), 30.0, sim_n, "ok")

    rep = CapacityReport("s", SustainCriteria({"ttft": 1000.0}), (cc("baseline", [12.0, 12.2, 12.1], 3),
                         cc("eagle", [20.0, 20.3, 20.1], 2)), None, None, (), 0.1, 8, 60.0,
                         replica_hourly={"baseline": 4.0, "eagle": 4.0}, start_seeds=3, max_seeds=3)
    d = capacity_answer(rep, device="H200").whole
    assert d.winner == "eagle"
    assert headline(d).startswith("1 H200 cannot carry 30 req/s at the SLO with any candidate; replicas "
                                  "each needs: baseline 3, eagle 2. eagle: the most req/s per replica")


def test_candidates_chosen_without_the_baseline_are_still_decided():
    d = decide(fleet(cand("draft", [8.0, 8.1, 7.9], baseline=False), cand("eagle", [9.5, 9.6, 9.4])))
    assert d.winner == "eagle" and d.facts.baseline == "baseline"


def test_a_carry_that_straddles_the_slo_leaves_the_answer_undetermined_only_when_it_matters():
    import dataclasses

    from sim.decisions.answer_export import to_json

    def ratios(*r):
        return tuple({"tpot_ms_p95": x} for x in r)

    base = dataclasses.replace(cand("baseline", [8.0, 8.1]), slo_ratios=ratios(0.50, 0.55))
    # cheaper per good answer if it carries; its TPOT p95 bound (0.90, 1.05 over 2 seeds) straddles the SLO
    near = dataclasses.replace(cand("eagle", [9.5, 9.6]), slo_ratios=ratios(0.90, 1.05))
    d = decide(fleet(base, near))
    assert d.outcome == "undetermined" and set(d.leaders) == {"eagle", "baseline"}
    assert headline(d).startswith("undetermined at 2 seed(s): whether eagle (TPOT p95 ")
    assert "the answer depends on it" in headline(d)
    doc = to_json(Answer(d))
    carry = {s["candidate"]: s["carries"] for s in doc["standings"]}
    assert carry["eagle"]["verdict"] == "undetermined" and carry["baseline"]["verdict"] == "carries"
    assert carry["eagle"]["ci95"][0] < 1.0 < carry["eagle"]["ci95"][1]
    # the same straddle on a candidate that loses either way (fewer good answers): the answer stands
    worse = dataclasses.replace(cand("eagle", [5.0, 5.1]), slo_ratios=ratios(0.90, 1.05))
    d2 = decide(fleet(base, worse))
    assert d2.outcome == "winner" and d2.winner == "baseline"
    assert d2.standing("eagle").status == "at risk" and "same either way" in d2.standing("eagle").why
    # more seeds at the same mean narrow the bound: the straddler is then judged, and wins
    many = dataclasses.replace(cand("eagle", [9.5, 9.6] * 10), slo_ratios=ratios(0.90, 0.97) * 10)
    base10 = dataclasses.replace(cand("baseline", [8.0, 8.1] * 10), slo_ratios=ratios(0.50, 0.55) * 10)
    d3 = decide(fleet(base10, many))
    assert d3.winner == "eagle"
