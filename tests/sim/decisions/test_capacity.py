"""Capacity search: the root finder on pure monotone functions, the 'sustains' rule, and the
search through the simulator against a closed-form capacity."""

from __future__ import annotations

import math

import polars as pl
import pytest

from sim.contracts.errors import SpecplanError
from sim.decisions.capacity_search import Probe, find_capacity
from sim.decisions.sustain import SustainCriteria, loss_fraction
from sim.results.intervals import ci95_halfwidth


def threshold_check(boundary: float, with_margin: bool = True):
    calls: list[float] = []

    def check(rate: float) -> Probe:
        calls.append(rate)
        m = rate / boundary if with_margin else None
        return Probe(rate, rate <= boundary, m)

    return check, calls


@pytest.mark.parametrize("boundary", [0.013, 0.7, 3.7, 55.0, 900.0])
@pytest.mark.parametrize("with_margin", [True, False])
def test_finds_boundary_of_monotone_function(boundary: float, with_margin: bool) -> None:
    check, calls = threshold_check(boundary, with_margin)
    res = find_capacity(check, start=2.0, rel_tol=0.02, max_evals=40)
    assert res.status == "bracketed"
    assert res.lower <= boundary < res.upper
    assert res.upper / res.lower - 1 <= 0.02
    assert res.rate == res.lower
    assert len(calls) == len(res.probes) <= 40


def test_interpolation_beats_bisection_on_smooth_margin() -> None:
    # margin = (rate/b)^2, smooth in log-log: the secant step lands next to the root
    b = 3.7

    def check(rate: float) -> Probe:
        return Probe(rate, rate <= b, (rate / b) ** 2)

    smart = find_capacity(check, start=1.0, rel_tol=0.01, max_evals=40)
    blind = find_capacity(lambda r: Probe(r, r <= b, None), start=1.0, rel_tol=0.01, max_evals=40)
    assert smart.lower <= b < smart.upper and blind.lower <= b < blind.upper
    assert len(smart.probes) < len(blind.probes)


def test_kinked_margin_still_converges() -> None:
    # a queue at saturation: margin flat then exploding; the clamp keeps shrinking the bracket
    b = 10.0

    def check(rate: float) -> Probe:
        m = 0.5 if rate <= b else 1e6
        return Probe(rate, rate <= b, m)

    res = find_capacity(check, start=1.0, rel_tol=0.05, max_evals=40)
    assert res.lower <= b < res.upper and res.relative_width <= 0.05


def test_limits_of_the_search() -> None:
    never = find_capacity(lambda r: Probe(r, False, 2.0), start=1.0, min_rate=0.1, max_evals=50)
    assert never.status == "below_min" and never.rate == 0.0
    always = find_capacity(lambda r: Probe(r, True, 0.1), start=1.0, max_rate=64, max_evals=50)
    assert always.status == "above_max" and always.rate == 64 and math.isinf(always.upper)
    budget = find_capacity(lambda r: Probe(r, r <= 1000, None), start=1.0, max_evals=3)
    assert budget.status == "above_probes" and len(budget.probes) == 3  # a lower bound
    assert budget.rate == 8.0  # steps accelerate: ×2, then ×4
    low = find_capacity(lambda r: Probe(r, r <= 1e-3, None), start=1.0, max_evals=3)
    assert low.status == "below_probes" and low.rate == 0.0 and low.upper == 1 / 8
    far = find_capacity(lambda r: Probe(r, r <= 0.02, None), start=1.0, rel_tol=0.1, max_evals=12)
    assert far.status == "bracketed" and far.lower <= 0.02 < far.upper  # 50× away, 12 probes
    with pytest.raises(SpecplanError):
        find_capacity(lambda r: Probe(r, True), start=0.0)


def test_too_small_runs_are_a_floor_not_a_failure() -> None:
    # below 0.05 req/s the runs hold too few requests to judge; the boundary is at 0.2
    def check(rate: float) -> Probe:
        if rate < 0.05:
            return Probe(rate, False, None, "too few", conclusive=False)
        return Probe(rate, rate <= 0.2, rate / 0.2)

    res = find_capacity(check, start=5.0, rel_tol=0.05, max_evals=20)
    assert res.status == "bracketed" and res.lower <= 0.2 < res.upper
    # all judgeable rates fail: stops above the floor instead of diving to min_rate
    never = find_capacity(lambda r: check(r) if r < 0.05 else Probe(r, False, 3.0), start=5.0,
                          rel_tol=0.1, max_evals=30)
    assert never.status == "below_probes" and never.rate == 0.0
    assert 0.05 <= never.upper <= 0.05 * 1.1 + 1e-9
    assert min(p.rate for p in never.probes) > 1e-3


def test_sustain_rule_reads_percentile_columns_and_losses() -> None:
    c = SustainCriteria({"ttft": 2000.0, "tpot": 100.0}, percentile=95, max_loss_fraction=0.01)
    row = {"ttft_ms_p95": 1500.0, "tpot_ms_p95": 90.0, "ttft_ms_p99": 9000.0,
           "completed": 995, "rejected": 3, "timed_out": 2}
    p = c.judge(row, 2.0)
    assert p.sustained and p.margin == pytest.approx(0.9) and "tpot_ms_p95" in p.reason
    assert not SustainCriteria({"ttft": 2000.0}, percentile=99).judge(row, 2.0).sustained
    lossy = {**row, "rejected": 30}
    q = c.judge(lossy, 2.0)
    assert not q.sustained and "lost" in q.reason
    assert loss_fraction(lossy) == pytest.approx(32 / 1027)
    assert loss_fraction({"completed": 0}) == 1.0  # nothing measured is not a pass
    few = c.judge({**row, "completed": 30, "rejected": 0, "timed_out": 0}, 2.0)
    assert not few.sustained and not few.conclusive and "needs ≥ 40" in few.reason  # 30 < 40
    assert SustainCriteria({"ttft": 1.0}, percentile=99).min_measured == 200
    with pytest.raises(SpecplanError, match="percentile"):
        SustainCriteria({"ttft": 1.0}, percentile=90)
    with pytest.raises(SpecplanError, match="at least one"):
        SustainCriteria({})


def test_ci95_student_t() -> None:
    assert ci95_halfwidth([5.0]) == 0.0
    # two values 1, 3: sd = sqrt(2), t(1) = 12.7062 → 12.7062 * sqrt(2)/sqrt(2) (the one t table,
    # sim/results/intervals.py; capacity's own 3-digit copy said 12.706)
    assert ci95_halfwidth([1.0, 3.0]) == pytest.approx(12.7062)


# ---------------------------------------------------------------------------------------------
# Through the simulator: D/D/1 has a closed-form capacity

PREFILL_S, STEP_S, OUT = 0.05, 0.010, 22


def dd1_profile():
    from sim.contracts.synthetic import synthetic_profile

    # every decode step costs STEP_S (no per-seq, per-token or context terms), a prefill PREFILL_S
    return synthetic_profile(base_step_s=STEP_S, per_seq_s=0.0, per_token_s=0.0,
                             per_context_token_s=0.0, prefill_base_s=PREFILL_S,
                             prefill_per_token_s=0.0, prefill_per_context_token_s=0.0)


def dd1_scenario(seeds=(1,), max_seeds=None):
    from sim.contracts.scenario import Scenario

    return Scenario.from_dict({
        "name": "dd1",
        # max_seeds = the seeds given: these tests check the search, not the sequential procedure
        "run": {"duration_s": 200, "warmup_s": 20, "seeds": list(seeds),
                "max_seeds": max_seeds or len(seeds)},
        # gamma with burstiness 1e6: gaps with a coefficient of variation of 0.001 (deterministic)
        "workload": {"arrival": "gamma", "rate": 1.0, "burstiness": 1e6, "segments": [
            {"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
             "output_tokens": {"dist": "fixed", "value": OUT},
             "acceptance": {"task": "chat", "language": "en"}}]},
        "slo": {"ttft_ms": 1000},
        "fleet": {"engine": {"max_num_seqs": 1}, "price_per_gpu_hour": 1.0},
        "candidates": [
            {"name": "baseline", "speculation": "off"},
            # every draft accepted: each decode step commits exactly k + 1 = 3 tokens
            {"name": "sure-k2", "proposer": "ngram", "k": 2, "assumed_acceptance": [1.0, 1.0]}],
    }, "<dd1>")


def test_capacity_matches_dd1_closed_form() -> None:
    from sim.decisions.capacity import plan_capacity

    # batch 1, deterministic service: a request takes S = prefill (first token) + decode steps;
    # D/D/1 keeps up iff rate < 1/S, above it the wait grows without bound and p95 TTFT breaks
    # the SLO. Speculative step: V(1, 3) + D(1, 2) + H(1, 2) with the synthetic formulas.
    s_base = PREFILL_S + (OUT - 1) * STEP_S
    spec_step = STEP_S + (0.0002 + 0.00005 * 2) + (0.0003 + 0.00002)
    s_spec = PREFILL_S + (OUT - 1) / 3 * spec_step
    rep = plan_capacity(dd1_scenario(), dd1_profile(), target_rate=10.0, rel_tol=0.01,
                        max_evals=20, load_fractions=(0.5, 0.9))
    got = {c.candidate: c for c in rep.candidates}
    assert got["baseline"].mean == pytest.approx(1 / s_base, rel=0.03)
    assert got["sure-k2"].mean == pytest.approx(1 / s_spec, rel=0.03)
    for c in rep.candidates:
        (search,) = c.per_seed
        assert search.status == "bracketed" and search.relative_width <= 0.01
        assert len(search.probes) <= 20
    # fewest replicas for 10 req/s: ceil(10 · S)
    assert got["baseline"].replicas == math.ceil(10 * s_base) == 3
    assert got["sure-k2"].replicas == math.ceil(10 * s_spec) == 2
    assert got["sure-k2"].operating_row["cost_per_good_answer_usd"] > 0
    # the candidates were also compared at equal load, with bottlenecks attributed
    assert sorted(set(rep.load_summary["load_fraction"].to_list())) == [0.5, 0.9]
    assert {a.candidate for a in rep.bottlenecks} == {"baseline", "sure-k2"}
    from sim.decisions.answer import capacity_answer

    # one seed decides nothing; the leader is the candidate with the most capacity
    d = capacity_answer(rep).whole
    assert d.outcome == "undetermined" and d.leaders[0] == "sure-k2"


def test_low_rate_probes_are_lengthened_to_enough_requests() -> None:
    from sim.decisions.load_scaling import at_load

    sc = dd1_scenario()
    slow = at_load(sc, 0.1, 1, min_requests=200)
    assert slow.run.duration_s == pytest.approx(20 + 200 / 0.1)
    assert at_load(sc, 10.0, 1, min_requests=200).run.duration_s == 200  # already enough
    assert at_load(sc, 0.1, 3).fleet.replicas == 3 and at_load(sc, 0.1, 3).run.duration_s == 200


def test_capacity_spread_over_seeds_and_bad_input() -> None:
    from sim.decisions.capacity import plan_capacity

    rep = plan_capacity(dd1_scenario(seeds=(1, 2)), dd1_profile(), candidates=["baseline"],
                        rel_tol=0.05, max_evals=10, load_fractions=())
    (c,) = rep.candidates
    assert len(c.capacities) == 2 and c.ci95 >= 0
    assert c.mean == pytest.approx(sum(c.capacities) / 2)
    with pytest.raises(SpecplanError, match="unknown candidate"):
        plan_capacity(dd1_scenario(), dd1_profile(), candidates=["nope"])
    with pytest.raises(SpecplanError, match="target-rate"):
        plan_capacity(dd1_scenario(), dd1_profile(), target_rate=-1.0)


def test_fewest_replicas_gallops_and_bisects() -> None:
    from sim.decisions.fleet_sizing import fewest_replicas

    class FakeLoad:
        """A fleet of n replicas sustains the target iff n ≥ 37 (each probe recorded)."""

        def __init__(self) -> None:
            self.rows: list[dict] = []
            self.asked: list[int] = []

        def probe(self, name: str, rate: float, seed: int, n: int) -> Probe:
            self.asked.append(n)
            self.rows.append({"replicas": n, "cost_per_good_answer_usd": float(n)})
            return Probe(rate, n >= 37)

    crit = SustainCriteria({"ttft": 1.0})
    for cap in (10.0 / 37, 10.0 / 5, 10.0 / 60):  # first guess right, far too low, too high
        fake = FakeLoad()
        size = fewest_replicas(fake, "c", 10.0, cap, [1], crit, 256)  # type: ignore[arg-type]
        assert size.n == 37 and size.row["replicas"] == 37 and "carries" in size.status
        assert size.low == 37 and size.below.startswith("36: cannot carry")
        assert len(set(fake.asked)) <= 12  # not a walk over every count
    none = fewest_replicas(FakeLoad(), "c", 10.0, 0.0, [1], crit, 256)  # type: ignore[arg-type]
    assert none.n is None and "no capacity" in none.status


def test_a_short_probe_that_passes_while_its_queue_diverges_is_rejected() -> None:
    from sim.decisions.capacity import plan_capacity
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.decisions.sustain import criteria_from_scenario

    # D/D/1 at 1.1x its capacity with a lax TTFT SLO (60 s): over the 200-s probe the wait grows
    # by ~0.1 s per second, so p95 TTFT stays under the limit although the queue never settles
    sc = dd1_scenario().with_overrides({"slo.ttft_ms": 60_000.0, "run.drain": True})
    s_base = PREFILL_S + (OUT - 1) * STEP_S
    over = 1.1 / s_base
    crit = criteria_from_scenario(sc)
    short = SimulatedLoad(sc, dd1_profile(), crit).result("baseline", over, 1, [1])
    row = short.summary.filter(pl.col("segment") == "all").row(0, named=True)
    assert crit.judge(row, over).sustained  # what a 200-s probe alone would say
    probe = SimulatedLoad(sc, dd1_profile(), crit).probe("baseline", over, 1, 1)
    assert not probe.sustained and probe.reason.startswith("runaway queue")
    steady = SimulatedLoad(sc, dd1_profile(), crit).probe("baseline", 0.9 / s_base, 1, 1)
    assert steady.sustained
    rep = plan_capacity(sc, dd1_profile(), candidates=["baseline"], rel_tol=0.02, max_evals=16,
                        load_fractions=())
    assert rep.candidates[0].mean <= 1.03 / s_base  # not the 1.1x a short probe passes


def test_the_profile_band_brackets_capacity_by_the_profiles_own_step_time_spread() -> None:
    import numpy as np

    from sim.contracts.profile import Profile
    from sim.contracts.synthetic import synthetic_profile_dict
    from sim.decisions.capacity import plan_capacity, timing_spread

    d = synthetic_profile_dict(base_step_s=STEP_S, per_seq_s=0.0, per_token_s=0.0,
                               per_context_token_s=0.0, prefill_base_s=PREFILL_S,
                               prefill_per_token_s=0.0, prefill_per_context_token_s=0.0)
    fwd = d["timing"]["target_forward"]
    fwd["p10"] = (np.asarray(fwd["median"]) * 0.9).tolist()
    fwd["p90"] = (np.asarray(fwd["median"]) * 1.2).tolist()
    prof = Profile.from_dict(d, "<dd1 with spread>")
    lo, hi = timing_spread(prof)
    assert (lo, hi) == pytest.approx((0.9, 1.2))
    assert timing_spread(dd1_profile()) is None  # medians only: no band to give
    rep = plan_capacity(dd1_scenario(), prof, candidates=["baseline"], rel_tol=0.02, max_evals=12,
                        load_fractions=())
    (c,) = rep.candidates
    slow, fast = c.profile_band
    # D/D/1: capacity is 1 / service time, and every step time is scaled by the factor
    s_base = PREFILL_S + (OUT - 1) * STEP_S
    assert slow == pytest.approx(1 / (s_base * hi), rel=0.04)
    assert fast == pytest.approx(1 / (s_base * lo), rel=0.04)
    assert slow < c.mean < fast
    off = plan_capacity(dd1_scenario(), prof, candidates=["baseline"], rel_tol=0.1, max_evals=6,
                        load_fractions=(), profile_band=False)
    assert off.candidates[0].profile_band is None


def test_load_levels_simulated_in_worker_processes_are_the_serial_ones_bit_for_bit() -> None:
    """``workers=2`` (``capacity --jobs 2``) runs the independent load levels side by side in
    spawned processes; the report must not change."""
    from polars.testing import assert_frame_equal

    from sim.decisions.capacity import plan_capacity
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.decisions.sustain import criteria_from_scenario

    sc, prof = dd1_scenario(seeds=(1, 2)), dd1_profile()
    kw = dict(candidates=["baseline"], rel_tol=0.1, max_evals=4, load_fractions=(0.5, 0.8),
              profile_band=False)
    serial = plan_capacity(sc, prof, workers=1, **kw)
    parallel = plan_capacity(sc, prof, workers=2, **kw)
    assert serial.load_summary.height >= 2  # two load levels (rows per seed or segment)
    assert_frame_equal(serial.load_summary, parallel.load_summary)
    assert serial.bottlenecks == parallel.bottlenecks
    assert [c.capacities for c in serial.candidates] == [c.capacities for c in parallel.candidates]

    load = SimulatedLoad(sc, prof, criteria_from_scenario(sc, None, 0.01))
    jobs = [("baseline", 3.0, 1, (1, 2)), ("baseline", 6.0, 1, (1, 2))]
    load.prefetch(jobs, 2)
    assert set(load._ready) == set(jobs)  # simulated in the workers, not on demand
    got = load.result("baseline", 6.0, 1, (1, 2))
    assert set(load._ready) == {jobs[0]}  # handed out once
    fresh = SimulatedLoad(sc, prof, load.criteria).result("baseline", 6.0, 1, (1, 2))
    assert_frame_equal(got.requests, fresh.requests)
    assert_frame_equal(got.summary, fresh.summary)
