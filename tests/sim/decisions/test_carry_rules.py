"""The rules of ``sim.decisions.carry`` and ``sim.decisions.fleet_sizing`` against independent
statements of them: each check's interval over seeds is scipy's Student t 95 % interval of the
mean (``stats.sem``: the sample standard deviation), a seed too short to judge counts as ``CAP``
× the limit, the verdict reads every interval against 1, the binding check is the worst one, and
the fewest replicas that carry equal a brute-force scan over replica counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from sim.decisions.capacity_search import Probe
from sim.decisions.carry import CAP, TOO_SHORT, Carry, carry_of, carry_of_flags, seed_ratios
from sim.decisions.fleet_sizing import FleetSize, fewest_replicas, mean_row, sizing_lines

CHECKS = ("ttft_ms_p95", "tpot_ms_p99", "lost")
ratio = st.one_of(st.floats(0.0, 3.0), st.just(math.nan), st.just(math.inf), st.floats(5.0, 30.0))
seed = st.one_of(st.none(), st.dictionaries(st.sampled_from(CHECKS), ratio, min_size=1))


def oracle(per_seed: list[dict[str, float] | None]) -> dict[str, tuple[float, float | None, float | None]]:
    """Each check's (mean, low, high) over seeds by scipy; a missing, NaN or too-short seed is CAP."""
    checks = {k for r in per_seed if r for k in r}
    out = {}
    for k in checks:
        v = np.array([CAP if not r or k not in r or math.isnan(r[k]) else min(r[k], CAP) for r in per_seed])
        if len(v) < 2:
            out[k] = (float(v.mean()), None, None)
        elif np.ptp(v) == 0:
            out[k] = (float(v.mean()), float(v.mean()), float(v.mean()))
        else:
            lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
            out[k] = (float(v.mean()), float(lo), float(hi))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(per_seed=st.lists(seed, min_size=2, max_size=8))
def test_each_checks_interval_is_scipys_student_t_and_the_verdict_reads_every_bound_against_one(per_seed) -> None:
    want = oracle(per_seed)
    assume(want)
    got = carry_of(per_seed)
    # bounds within the t table's rounding of 1 could go either way: not this rule's question
    assume(all(abs(b - 1.0) > 1e-3 * (1 + hi - lo) for _, lo, hi in want.values() for b in (lo, hi)))
    if any(lo > 1.0 for _, lo, _ in want.values()):
        verdict, key = "cannot carry", lambda k: want[k][1]
    elif any(hi > 1.0 for _, _, hi in want.values()):
        verdict, key = "undetermined", lambda k: want[k][2]
    else:
        verdict, key = "carries", lambda k: want[k][2]
    assert got.verdict == verdict and got.n == len(per_seed)
    # the t table is scipy's quantile to 4 decimals: bounds agree to 1e-3 of the interval's width
    tol = max(1e-3 * (1 + w[2] - w[1]) for w in want.values())
    worst = max(want, key=key)  # the binding check: the lowest bound above 1, else the highest upper bound
    assert key(got.check) == pytest.approx(key(worst), abs=tol)
    mean, lo, hi = want[got.check]
    assert got.mean == pytest.approx(mean, rel=1e-9, abs=1e-12)
    assert (got.low, got.high) == (pytest.approx(lo, abs=tol), pytest.approx(hi, abs=tol))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=seed)
def test_one_seed_has_no_interval_and_its_point_decides_the_label(r) -> None:
    got = carry_of([r])
    if not r:
        assert (got.verdict, got.check, got.mean, got.low, got.high) == ("cannot carry", TOO_SHORT, CAP, None, None)
        return
    want = oracle([r])
    worst = max(want, key=lambda k: want[k][0])
    assert got.low is None and got.high is None and got.n == 1
    assert got.verdict == ("carries" if want[worst][0] <= 1.0 else "cannot carry")
    assert got.mean == want[worst][0]


def test_a_point_exactly_at_the_limit_carries_and_a_bound_exactly_at_it_too() -> None:
    assert carry_of([{"lost": 1.0}]).verdict == "carries"
    assert carry_of([{"lost": 1.0}, {"lost": 1.0}]).verdict == "carries"  # no spread: high = 1
    assert carry_of([{"lost": 1.5}, {"lost": 1.5}]).verdict == "cannot carry"


def test_no_seeds_cannot_carry_and_all_too_short_seeds_count_as_cap() -> None:
    none = carry_of([])
    assert (none.verdict, none.check, none.n) == ("cannot carry", "", 0) and math.isnan(none.mean)
    short = carry_of([None, None, None])
    assert (short.verdict, short.check, short.mean, short.low, short.high) == ("cannot carry", TOO_SHORT, CAP, CAP, CAP)
    assert short.words() == "too few requests to judge the percentile on any of 3 seed(s)"


def test_carry_words_name_the_binding_check_and_its_interval_clipped_at_zero() -> None:
    assert Carry("undetermined", "tpot_ms_p95", 0.9, -0.2, 1.07, 4).words() == \
        "TPOT p95 0.00–1.07 × its limit over 4 seeds"
    assert Carry("carries", "ttft_ms_median", 0.5, None, None, 1).words() == "TTFT p50 0.50 × its limit (one seed)"
    for low, high in ((None, 0.7), (0.3, None)):  # an interval needs both ends: else the point alone
        assert Carry("carries", "lost", 0.5, low, high, 2).words() == "requests lost 0.50 × its limit (one seed)"
    assert Carry("cannot carry", "lost", 2.0, 1.5, 2.5, 3).words() == "requests lost 1.50–2.50 × its limit over 3 seeds"
    assert Carry("cannot carry", "queue", 10.0, 9.0, 11.0, 2).words().startswith("the queue (runaway: growing) 9.00")
    assert Carry("undetermined", "", 0.5, None, None, 4).words() == "passes on 2 of 4 seeds"
    assert Carry("cannot carry", "", math.nan, None, None, 0).words() == "no seeds"


@pytest.mark.parametrize("flags,verdict", [([True, True], "carries"), ([False, False], "cannot carry"),
                                           ([True, False, True], "undetermined"), ([], "cannot carry")])
def test_pass_fail_flags_carry_only_when_every_seed_passes(flags, verdict) -> None:
    got = carry_of_flags(flags)
    assert got.verdict == verdict and got.n == len(flags)
    assert got.mean == sum(flags) / len(flags) if flags else math.isnan(got.mean)


class Criteria:
    def ratios(self, row):
        return dict(row["ratios"])


@pytest.mark.parametrize("probe,expected", [
    (Probe(1.0, False, None, conclusive=False), None),            # too short to judge
    (Probe(1.0, True, None), {"queue": 0.0}),                     # no margin: the queue alone
    (Probe(1.0, False, None), {"queue": CAP}),
    (Probe(1.0, False, 0.8), {"queue": CAP}),                     # failed within its margin: a runaway
    (Probe(1.0, False, 1.0), {"queue": CAP}),
    (Probe(1.0, False, 1.2), {"lost": 1.2}),                      # failed on a check: its ratios
    (Probe(1.0, True, 0.7), {"lost": 1.2}),
])
def test_a_probes_seed_ratios_are_its_checks_or_one_queue_check(probe, expected) -> None:
    assert seed_ratios(Criteria(), probe, {"ratios": {"lost": 1.2}}) == expected


class FakeLoad:
    """Replica count n on seed s serves at ``need / n × spread[s]`` of every limit (more
    replicas never worse); records each probe as a row."""

    def __init__(self, need: float, spread: dict[int, float]) -> None:
        self.need, self.spread, self.rows, self.calls = need, spread, [], 0

    def ratio(self, n: int, sd: int) -> float:
        return self.need / n * self.spread[sd]

    def probe(self, name, target, sd, n):
        self.calls += 1
        r = self.ratio(n, sd)
        self.rows.append({"ratios": {"ttft_ms_p95": r}, "replicas": n, "seed": sd, "tpot": float(n)})
        return Probe(target, r <= 1.0, r)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(need=st.floats(0.3, 40.0), spread=st.lists(st.floats(0.7, 1.3), min_size=1, max_size=5),
       cap=st.floats(0.05, 50.0), max_replicas=st.integers(1, 64))
def test_fewest_replicas_is_the_smallest_count_that_carries_by_brute_force(need, spread, cap, max_replicas) -> None:
    seeds = list(range(len(spread)))
    load = FakeLoad(need, dict(zip(seeds, spread, strict=True)))

    def verdict(n: int) -> str:
        return carry_of([{"ttft_ms_p95": load.ratio(n, s)} for s in seeds]).verdict

    got = fewest_replicas(load, "c", 1.0, cap, seeds, Criteria(), max_replicas)
    carrying = [n for n in range(1, max_replicas + 1) if verdict(n) == "carries"]
    if not carrying:
        assert got.n is None and got.status == f"does not carry the target with {max_replicas} replicas"
        return
    n = carrying[0]
    assert got.n == n
    assert got.low == (n - 1 if n > 1 and verdict(n - 1) == "undetermined" else n)
    assert got.undetermined == (got.low < n)
    assert got.row["n_seeds"] == len(seeds) and got.row["tpot"] == float(n)
    assert [r["seed"] for r in got.seed_rows] == seeds and all(r["replicas"] == n for r in got.seed_rows)
    if n > 1 and (n - 1) in {r["replicas"] for r in load.rows}:
        assert got.below.startswith(f"{n - 1}: {verdict(n - 1)} (")
    else:
        assert got.below == ""


def test_fewest_replicas_without_a_capacity_says_more_replicas_cannot_help() -> None:
    got = fewest_replicas(FakeLoad(1.0, {0: 1.0}), "c", 1.0, 0.0, [0], Criteria(), 8)
    assert got == FleetSize(None, None, "no capacity found: more replicas cannot help a per-request SLO", None, [])


def test_fewest_replicas_starts_at_target_over_capacity_and_reuses_memoised_probes() -> None:
    load = FakeLoad(5.0, {0: 1.0, 1: 1.0})
    memo: dict = {}
    got = fewest_replicas(load, "c", 10.0, 2.0, [0, 1], Criteria(), 64, memo)
    assert got.n == 5 and load.rows[0]["replicas"] == 5  # ceil(10 / 2) first
    calls = load.calls
    again = fewest_replicas(load, "c", 10.0, 2.0, [0, 1], Criteria(), 64, memo)
    assert again.n == 5 and load.calls == calls


def test_mean_row_averages_numbers_over_seeds_skipping_missing_ones() -> None:
    rows = [{"a": 1.0, "b": 2, "name": "x", "flag": True, "seed": 0, "m": None},
            {"a": 3.0, "b": 4, "name": "y", "flag": False, "seed": 1, "m": 5.0}]
    assert mean_row(rows) == {"a": 2.0, "b": 3.0, "name": "x", "flag": True, "m": None, "n_seeds": 2}
    assert mean_row([{"m": 1.0}, {"m": None}, {"m": 4.0}])["m"] == 2.5


def test_sizing_lines_say_each_candidates_count_and_whether_it_is_undetermined() -> None:
    sizes = {"a": FleetSize(3, 3, "carries across 2 seed(s) (x)", {}, [], "2: cannot carry (y)"),
             "b": FleetSize(4, 3, "carries", {}, [], "3: undetermined (z)"),
             "c": FleetSize(None, None, "does not carry the target with 8 replicas", None, []),
             "d": FleetSize(1, 1, "carries across 2 seed(s) (w)", {}, [])}
    lines = sizing_lines(2.0, sizes, [0, 1])
    assert "over 2 seed(s)" in lines[0]
    assert lines[1:] == ["  a: 3 replica(s) (carries across 2 seed(s) (x); 2: cannot carry (y))",
                         "  b: 3 or 4 replica(s) (4 carry it; 3: undetermined (z), undetermined at the budget)",
                         "  c: does not carry the target with 8 replicas",
                         "  d: 1 replica(s) (carries across 2 seed(s) (w))"]


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("undetermined,max_seeds,seeds,grown", [
    (False, None, None, (1, 2)),                # settled at the scenario's seeds: no more
    (True, None, None, (1, 2, 3, 4, 5, 6)),     # doubled up to the scenario's max_seeds (6)
    (True, 3, None, (1, 2, 3)),                 # the caller's budget: one more seed only
    (True, None, (7, 8), (7, 8, 9, 10, 11, 12)),  # the caller's seeds, doubled from their largest
])
def test_fleet_sizes_start_at_the_scenarios_fleet_and_add_seeds_while_a_count_is_undetermined(
        monkeypatch, replicas, undetermined, max_seeds, seeds, grown) -> None:
    import sim.decisions.simulated_load as simulated_load
    import sim.decisions.sustain as sustain
    from sim.decisions.fleet_sizing import fleet_sizes
    from tests.sim.decisions.test_capacity import dd1_profile
    from tests.sim.decisions.test_fleet_sizing import _scenario

    made = []

    class Load(FakeLoad):
        def __init__(self, scenario, profile, criteria, min_requests, profiles=None) -> None:
            super().__init__(1.0, {})
            made.append(self)
            self.scenario = scenario

        def ratio(self, n, sd):  # one replica: 0.9 and 1.05 × the limit on alternate seeds, or 2×
            return 0.5 if n > 1 else (0.9 if sd % 2 else 1.05) if undetermined else 2.0

    monkeypatch.setattr(simulated_load, "SimulatedLoad", Load)
    monkeypatch.setattr(sustain, "criteria_from_scenario", lambda sc: Criteria())
    sc = _scenario(4.0, 800.0, 2, "round_robin").with_overrides({"fleet.replicas": replicas, "run.drain": False})
    said: list[str] = []

    def say(line: str) -> None:  # one line per candidate and round of seeds: a loop that adds none never ends
        said.append(line)
        assert len(said) < 50, "the seeds stopped growing below the budget"

    sizes, used = fleet_sizes(sc, dd1_profile(), candidates=["baseline"], seeds=seeds, max_seeds=max_seeds,
                              progress=say)
    assert used == grown and sizes["baseline"].n == 2
    assert sizes["baseline"].undetermined == undetermined
    assert made[0].rows[0]["replicas"] == replicas  # the search starts at the scenario's own fleet
    assert made[0].scenario.run.drain  # a fleet is sized on drained runs: every request counted
    assert said[0] == f"baseline: replicas for 4 req/s, {len(seeds or (1, 2))} seed(s)"
    assert fleet_sizes(sc, dd1_profile(), candidates=["baseline"], seeds=seeds, max_seeds=max_seeds)[1] == grown
