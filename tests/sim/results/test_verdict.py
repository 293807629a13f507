"""The verdict block: a pure ranking of the summary that every surface prints the same way."""

from __future__ import annotations

import polars as pl
import pytest

from sim.results import metric_names as mn
from sim.results.verdict import verdict

E2EL50 = mn.latency_col(mn.E2EL, "median")
TTFT95 = mn.latency_col(mn.TTFT, "p95")


def summary(rows: list[dict]) -> pl.DataFrame:
    base = {mn.SEGMENT: mn.ALL_SEGMENTS, mn.SLO_ATTAINMENT: 0.9, mn.COST_PER_GOOD_ANSWER_USD: 1e-4,
            E2EL50: 1000.0, TTFT95: 200.0}
    out = []
    for r in rows:
        row = {**base, **r}
        for col in (mn.REQUEST_GOODPUT, mn.SLO_ATTAINMENT, E2EL50):
            row.setdefault(mn.ci_col(col), 0.0)
        out.append(row)
    return pl.DataFrame(out)


def test_a_candidate_that_clearly_beats_the_baseline_wins_and_is_never_told_to_keep_it():
    df = summary([
        {mn.CANDIDATE: "baseline", mn.REQUEST_GOODPUT: 10.0, mn.ci_col(mn.REQUEST_GOODPUT): 0.2,
         mn.COST_PER_GOOD_ANSWER_USD: 2e-4},
        {mn.CANDIDATE: "draft-k3", mn.REQUEST_GOODPUT: 12.0, mn.ci_col(mn.REQUEST_GOODPUT): 0.2,
         mn.COST_PER_GOOD_ANSWER_USD: 1.5e-4, E2EL50: 700.0},
    ])
    v = verdict(df, "baseline", has_slo=True, rate=12.0, n_seeds=3)
    assert v.winner == "draft-k3"
    assert v.headline.startswith("draft-k3 pays at 12 req/s")
    assert "keep" not in " ".join(v.lines())
    (best, base) = v.standings[1], v.standings[0]
    assert best.candidate == "draft-k3" and best.outcome == "winner"
    assert best.detail == "goodput 12 req/s, SLO met 90.0 %, $0.15/1k good, E2EL p50 700 ms"
    assert base.outcome == "worse" and base.detail.startswith("goodput -17 %, SLO met 90.0 %, $0.2/1k good")
    assert v.certainty == "(3 seed(s), 95 % CIs) clearly ahead of every other candidate"


def test_overlapping_intervals_tie_and_the_baseline_is_kept():
    df = summary([
        {mn.CANDIDATE: "baseline", mn.REQUEST_GOODPUT: 10.0, mn.ci_col(mn.REQUEST_GOODPUT): 0.5},
        {mn.CANDIDATE: "ngram-k3", mn.REQUEST_GOODPUT: 10.4, mn.ci_col(mn.REQUEST_GOODPUT): 0.5, E2EL50: 995.0},
        {mn.CANDIDATE: "eagle", mn.REQUEST_GOODPUT: 0.0, mn.SLO_ATTAINMENT: 0.0,
         mn.COST_PER_GOOD_ANSWER_USD: float("inf")},
    ])
    v = verdict(df, "baseline", has_slo=True, n_seeds=3)
    assert v.winner == "baseline" and v.headline.startswith("keep baseline: no candidate beats it")
    outcomes = {s.candidate: s.outcome for s in v.standings}
    assert outcomes == {"baseline": "winner", "ngram-k3": "tie", "eagle": "fails"}
    assert next(s.detail for s in v.standings if s.candidate == "eagle").startswith("goodput -100 %, SLO met 0.0 %")
    assert v.certainty == "(3 seed(s), 95 % CIs) clearly ahead of eagle; tie: ngram-k3"
    assert v.lines()[0] == "verdict: keep baseline: no candidate beats it on goodput"
    assert len(v.lines()) == 5  # headline, three candidates, certainty


def test_without_an_slo_candidates_rank_by_e2el_p50():
    df = summary([
        {mn.CANDIDATE: "baseline", mn.REQUEST_GOODPUT: None, E2EL50: 1000.0, mn.ci_col(E2EL50): 10.0},
        {mn.CANDIDATE: "ngram-k3", mn.REQUEST_GOODPUT: None, E2EL50: 600.0, mn.ci_col(E2EL50): 10.0},
    ])
    v = verdict(df, "baseline", has_slo=False)
    assert v.winner == "ngram-k3"
    assert v.headline == "ngram-k3 pays: it beats baseline on E2EL p50 (no SLO set)"
    assert v.standings[1].detail == "E2EL p50 600 ms"


def test_a_missing_baseline_is_refused():
    with pytest.raises(ValueError, match="baseline 'nope'"):
        verdict(summary([{mn.CANDIDATE: "a", mn.REQUEST_GOODPUT: 1.0}]), "nope", has_slo=True)


def test_why_compares_tokens_per_step_with_the_step_time_ratio_at_the_same_batch():
    from sim.results.verdict import why_lines

    rows = []
    for cand, k, dur, acc in (("baseline", 0, 0.10, 0), ("ngram-k3", 3, 0.15, 4)):
        for batch in (2, 2):  # two decode steps at batch 2; prefill steps are left out
            rows.append({mn.CANDIDATE: cand, "duration_s": dur, "decode_seqs": batch, "prefill_tokens": 0,
                         "accepted_tokens": acc, "k": k})
        rows.append({mn.CANDIDATE: cand, "duration_s": 9.0, "decode_seqs": 2, "prefill_tokens": 100,
                     "accepted_tokens": 0, "k": k})
    lines = why_lines(pl.DataFrame(rows), "baseline")
    # 8 accepted over 4 request-steps: 1 + 2 = 3.00 tokens per request per step, at 1.5x the time
    assert lines == ["  why ngram-k3: 3.00 tokens/request/step at 1.50× the baseline's step time → pays"]


def test_equal_goodput_at_a_fixed_fleet_is_decided_by_latency_and_points_to_capacity():
    df = summary([
        {mn.CANDIDATE: "baseline", mn.REQUEST_GOODPUT: 2.0, mn.ci_col(mn.REQUEST_GOODPUT): 0.05,
         E2EL50: 1000.0, mn.ci_col(E2EL50): 20.0},
        {mn.CANDIDATE: "draft-k3", mn.REQUEST_GOODPUT: 2.0, mn.ci_col(mn.REQUEST_GOODPUT): 0.05,
         E2EL50: 700.0, mn.ci_col(E2EL50): 20.0},
    ])
    v = verdict(df, "baseline", has_slo=True, rate=2.0, n_seeds=3)
    assert v.winner == "draft-k3"
    assert v.headline == "draft-k3 is faster at 2 req/s, equal goodput (E2EL p50 -30 %); cost: `specplan capacity`"
    (base,) = [s for s in v.standings if s.candidate == "baseline"]
    assert base.outcome == "tie" and base.detail.endswith("E2EL p50 +43 %")


def test_the_capacity_verdict_recommends_the_candidate_needing_fewer_replicas():
    from cli.capacity import format_report, to_json
    from sim.decisions.capacity import plan_capacity
    from tests.sim.decisions.test_capacity import dd1_profile, dd1_scenario

    rep = plan_capacity(dd1_scenario(), dd1_profile(), target_rate=10.0, rel_tol=0.05, max_evals=10,
                        load_fractions=())
    text = format_report(rep, [])
    assert text[0] == "verdict: sure-k2 pays for 10 req/s: 2 replica(s) instead of 3"
    assert text[1].startswith("  baseline: 3 replica(s), $") and "/1k good" in text[1]
    assert to_json(rep, [])["verdict"][0] == text[0]
    assert rep.dominant() == ["sure-k2"]  # decisions never tell it to keep the baseline


def test_a_sweep_names_the_winner_at_each_grid_point_with_seeds_pooled():
    from sim.results.verdict import sweep_verdict

    rows = []
    for rate, base_gp, spec_gp in ((1, 1.0, 1.0), (4, 3.0, 3.6)):
        for seed in (1, 2):
            rows += [{"workload.rate": rate, "seed": seed, mn.CANDIDATE: "baseline", mn.SEGMENT: "all",
                      mn.REQUEST_GOODPUT: base_gp},
                     {"workload.rate": rate, "seed": seed, mn.CANDIDATE: "ngram", mn.SEGMENT: "all",
                      mn.REQUEST_GOODPUT: spec_gp + (0.1 if seed == 1 else -0.1)}]
    lines = sweep_verdict(pl.DataFrame(rows), ["workload.rate", "seed"], "baseline", has_slo=True)
    assert lines == ["verdict per grid point (best on goodput, seeds pooled):",
                     "  workload.rate=1: keep baseline",
                     "  workload.rate=4: ngram (goodput +20 % vs baseline)"]


def test_why_lines_follow_the_candidate_order_every_time() -> None:
    """group_by returns groups in any order; the lines must not (same output on every run)."""
    import polars as pl

    from sim.results.verdict import why_lines

    names = ["baseline", "zeta-k3", "alpha-k2", "mid-k4"]
    rows = []
    for i, name in enumerate(names):
        for b in (1, 2, 4, 8):
            rows.append({"candidate": name, "duration_s": 0.01 * b * (1 + i / 10), "decode_seqs": b,
                         "prefill_tokens": 0, "accepted_tokens": b * i, "k": 0 if i == 0 else 3})
    steps = pl.DataFrame(rows)
    for _ in range(20):
        lines = why_lines(steps, "baseline")
        assert [ln.split(":")[0].split()[-1] for ln in lines] == names[1:]
