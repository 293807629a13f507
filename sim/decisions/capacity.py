"""Capacity search: the highest arrival rate one replica sustains, and the fewest replicas for a rate.

Capacity is a root of "does the fleet still meet its SLOs at this load?" over the arrival rate.
The check is monotone in practice (more load never makes a queue shorter) but each evaluation
is a whole simulation, so the search brackets the boundary by doubling/halving and then narrows
it on log-rate with a safeguarded secant step (interpolating the SLO margin, clamped inside the
bracket so it never does worse than bisection by much) instead of a blind grid.

**Sustains**: at a given rate, over the measured
window (after warm-up), for every metric the scenario puts an SLO on (ttft, tpot, e2el, pause)
the chosen percentile (default the scenario's ``slo.percentile``) is at most its limit, *and*
requests lost to admission rejection or client timeout are at most ``max_loss_fraction``
(default 1 %) of the requests that arrived in the window; a probe with fewer than two measured
requests above the percentile (40 for p95) cannot show it and fails. The margin of a probe is the largest
of ``observed/limit`` over those checks (``loss/max_loss`` for losses), so margin ≤ 1 ⇔ sustained.
Searches run with ``run.drain = true`` so an overloaded run's backlog is measured, not cut off,
and (stationary arrivals) long enough for ``min_requests`` measured requests.

The parts: ``load_scaling`` (a scenario at a rate), ``simulated_load`` (a probe by
simulation), ``capacity_search`` (the root finder), ``capacity_report`` (what was found),
``trace_sizing`` (a recorded trace: capacity searched where it is carried, windows sized).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.decisions.answer import candidate_devices
from sim.decisions.capacity_report import CandidateCapacity, CapacityReport
from sim.decisions.capacity_search import CapacitySearch, find_capacity
from sim.decisions.fleet_sizing import fewest_replicas
from sim.decisions.load_scaling import arrival_rate, trace_probe_note
from sim.decisions.simulated_load import SimulatedLoad
from sim.decisions.sustain import criteria_from_scenario
from sim.decisions.trace_sizing import trace_fleet
from sim.results.plain_numbers import rate as plain_rate


def plan_capacity(
    scenario: Any,
    profile: Any = None,
    *,
    percentile: float | None = None,
    target_rate: float | None = None,
    seeds: Sequence[int] | None = None,
    candidates: Sequence[str] | None = None,
    rel_tol: float = 0.1,
    max_evals: int = 8,
    max_loss_fraction: float = 0.01,
    load_fractions: Sequence[float] = (0.25, 0.5, 0.8, 1.0),
    max_replicas: int = 256,
    min_requests: int = 200,
    progress: Callable[[str], None] | None = None,
    profile_band: bool = True,
    cache_dir: Any = None,
    workers: int = 1,
    max_seeds: int | None = None,
) -> CapacityReport:
    """Capacity of every candidate of ``scenario`` (see module docstring for "sustains").

    Per seed: ``find_capacity`` starting at the scenario's rate. Then the fewest replicas that
    carry ``target_rate`` (default: the scenario's rate) across the seeds (``sim.decisions.carry``:
    every check's 95 % bound within the SLO, the rule ``simulate`` judges a fixed fleet by),
    starting from ``ceil(target / mean capacity)``. Seeds are added (up to ``max_seeds``) while
    the decision or any replica count is undetermined (n − 1 straddles the SLO). Finally every candidate is
    simulated at ``load_fractions`` × the baseline's mean capacity so decisions can compare
    candidates at equal load. Searches and load levels use the scenario's replica count (a
    restart scenario needs its second replica to reroute to); capacity is reported per replica
    (the fleet's divided by its replicas). ``workers`` > 1 simulates the independent load
    levels in that many processes (same results).
    """
    import polars as pl

    from sim.results.acceptance_basis import acceptance_basis, draft_host_basis
    from sim.results.runner import candidate_profiles

    chosen = _chosen(scenario, candidates)
    profiles = candidate_profiles(scenario, profile, [scenario.candidate(n) for n in chosen])
    profile = next((profiles[n] for n in chosen if scenario.candidate(n).fleet is None), profiles[chosen[0]])
    named = profiles if scenario.has_named_fleets else None
    criteria = criteria_from_scenario(scenario, percentile, max_loss_fraction)
    base_rate = arrival_rate(scenario)
    target = float(target_rate if target_rate is not None else base_rate)
    if not target > 0:
        raise SpecplanError(f"--target-rate: must be > 0 req/s, got {target}")
    seeds_asked = seeds
    seeds = tuple(int(s) for s in (seeds if seeds is not None else scenario.run.seeds))
    scenario = searched_scenario(scenario)
    load = SimulatedLoad(scenario, profile, criteria, min_requests, cache_dir, profiles=named)
    say = progress or (lambda _msg: None)
    pw = scenario.workload.piecewise
    if pw is not None:
        load.notes.add(f"rates are mean arrival rates over the run; the piecewise profile peaks at "
                       f"{pw.max_rate() / base_rate:.2g}× its mean")
    trace = scenario.workload.arrival == "trace"
    if trace:
        load.notes.add(trace_probe_note(scenario, target))
    fleet = int(scenario.fleet.replicas)  # searched as configured (a restart needs a 2nd replica)
    memo: dict[tuple[str, int, int], tuple[Any, dict[str, Any]]] = {}  # (candidate, replicas, seed) probes
    if trace:  # a burst lands on one replica whatever the rate: search where the trace is carried
        fleet = trace_fleet(load, scenario, chosen, target, seeds, criteria, max_replicas, say, memo)
    search = _Search(load, seeds, fleet, rel_tol, max_evals, say)

    budget = max(len(seeds), int(max_seeds if max_seeds is not None else scenario.run.max_seeds))
    devices = candidate_devices(scenario, named)
    gpus = {n: scenario.fleet_for(n).gpus_per_replica for n in chosen} if named else None
    per_cand = {name: search.per_seed(name, seeds, base_rate) for name in chosen}
    unit = _capacity_unit(scenario, gpus, devices)
    start_seeds = len(tuple(seeds_asked if seeds_asked is not None else scenario.run.seeds))

    def report_at(results: Sequence[CandidateCapacity], load_summary: Any = None, bottlenecks: Sequence[Any] = (),
                  operating: Any = None) -> CapacityReport:
        return CapacityReport(
            scenario_name=scenario.name, criteria=criteria, candidates=tuple(results),
            load_summary=pl.DataFrame() if load_summary is None else load_summary,
            operating_summary=pl.DataFrame() if operating is None else operating,
            sources=tuple(sorted(load.sources)), rel_tol=rel_tol, max_evals=max_evals,
            duration_s=float(scenario.run.duration_s), bottlenecks=tuple(bottlenecks),
            notes=tuple(sorted(load.notes)), baseline=scenario.baseline.name,
            price_source=_price_source(scenario, chosen), gpus_per_replica=scenario.fleet.gpus_per_replica,
            replica_hourly=_replica_hourly(scenario), devices=devices, candidate_gpus=gpus,
            start_seeds=start_seeds, max_seeds=budget,
            acceptance={n: acceptance_basis(scenario.candidate(n), profiles[n]) or "" for n in chosen},
            draft_host={n: draft_host_basis(scenario.candidate(n), profiles[n]) or "" for n in chosen},
            searched_fleet="a" if fleet != int(scenario.fleet.replicas) else "the scenario's")

    while True:
        # one sequential rule: the winner, every replica count and whether it carries are
        # settled on the same seeds; seeds are added while any of them is undetermined
        results: list[CandidateCapacity] = []
        for name in chosen:
            cap = float(np.mean([s.rate for s in per_cand[name]])) / fleet
            say(f"{name}: replicas for {plain_rate(target)}, {len(seeds)} seed(s)")
            guess = cap if cap > 0 or not trace else target  # a trace: no rate on one replica ≠ no fleet
            size = fewest_replicas(load, name, target, guess, seeds, criteria, max_replicas, memo)
            results.append(CandidateCapacity(name, per_cand[name], seeds, target, size.n, size.status, size.row,
                                             fleet_replicas=fleet, operating_seeds=tuple(size.seed_rows),
                                             replicas_low=size.low, replicas_below=size.below))
        open_ = [r.candidate for r in results if r.replicas_undetermined]
        resolved = (len(chosen) < 2 or _capacity_resolved(per_cand, scenario.baseline.name, seeds, fleet, rel_tol, unit)
                    and _decided(report_at(results), devices))
        if (resolved and not open_) or len(seeds) >= budget:
            break
        more = tuple(range(max(seeds) + 1, max(seeds) + 1 + min(len(seeds), budget - len(seeds))))
        why = ", ".join(f"{n}'s replica count" for n in open_) or "the comparison"
        say(f"undetermined at {len(seeds)} seeds ({why}): adding seeds {', '.join(map(str, more))}")
        for name in chosen:
            per_cand[name] = (*per_cand[name], *search.per_seed(name, more, base_rate, per_cand[name]))
        seeds = (*seeds, *more)
    search = _Search(load, seeds, fleet, rel_tol, max_evals, say)
    op_rows = [{**r.operating_row, "replicas": r.replicas, "rate": target} for r in results
               if r.operating_row is not None]
    if profile_band:
        results = [dataclasses.replace(r, profile_band=search.profile_band(r.candidate, r.mean)) for r in results]

    load_summary, bottlenecks = _load_levels(load, results, chosen, base_rate, load_fractions, say,
                                              search, workers)
    operating = pl.from_dicts(op_rows, infer_schema_length=None) if op_rows else pl.DataFrame()
    return report_at(results, load_summary, bottlenecks, operating)


def searched_scenario(scenario: Any) -> Any:
    """The scenario as every capacity probe runs it: drained (an undrained run drops its backlog
    unseen; capacity must see it)."""
    return scenario if scenario.run.drain else scenario.with_overrides({"run.drain": True})


def _decided(report: CapacityReport, devices: Mapping[str, str] | None) -> bool:
    """Whether the capacity decision (capacities, GPUs, cost at each one's replica count,
    latency there) is resolved at the report's seeds."""
    from sim.decisions.decision import decide
    from sim.decisions.facts import capacity_facts

    return decide(capacity_facts(report, devices=devices)).resolved


def _chosen(scenario: Any, candidates: Sequence[str] | None) -> list[str]:
    """The candidates to plan (all by default), each checked against the scenario's."""
    names = [c.name for c in scenario.candidates]
    chosen = list(candidates) if candidates else names
    for c in chosen:
        if c not in names:
            raise SpecplanError(f"--candidates: unknown candidate {c!r}; the scenario has "
                                f"{', '.join(names)}")
    return chosen


@dataclass(frozen=True)
class _Search:
    """The settings every capacity search of one plan shares."""

    load: SimulatedLoad
    seeds: tuple[int, ...]
    fleet: int
    rel_tol: float
    max_evals: int
    say: Callable[[str], None]

    def per_seed(self, name: str, seeds: Sequence[int], base_rate: float,
                 before: Sequence[CapacitySearch] = ()) -> tuple[CapacitySearch, ...]:
        """``find_capacity`` of one candidate on each of ``seeds`` (``before``: its searches on
        earlier seeds, which warm-start these)."""
        per_seed: list[CapacitySearch] = []
        for seed in seeds:
            # warm start: this candidate's earlier seeds (close: small steps), else the scenario's
            # rate; never another candidate's result, so equal settings search the same path
            mine = [x.rate for x in (*before, *per_seed) if x.rate > 0]
            start, growth = (float(np.mean(mine)), 1.25) if mine else (base_rate, 2.0)
            self.say(f"{name}: searching capacity, seed {seed}")
            per_seed.append(find_capacity(lambda r, n=name, s=seed: self.load.probe(n, r, s, self.fleet),
                                          start, rel_tol=self.rel_tol, max_evals=self.max_evals,
                                          growth=growth))
        return tuple(per_seed)

    def profile_band(self, name: str, cap: float) -> tuple[float, float] | None:
        """Capacity per replica (first seed) at the profile's p90 and p10 step times."""
        load, fleet = self.load, self.fleet
        spread = timing_spread(load.profile_of(name))
        if spread is None or not cap > 0:
            return None
        self.say(f"{name}: capacity at the profile's p90 and p10 step times, seed {self.seeds[0]}")
        band_rates = []
        for scale in (spread[1], spread[0]):  # slow (p90), then fast (p10)
            alt = SimulatedLoad(load.scenario, load.profile, load.criteria, load.min_requests,
                                load.cache_dir, timer_scale=scale, profiles=load.profiles,
                                resolved=load.resolved)
            found_at = find_capacity(lambda r, a=alt, n=name: a.probe(n, r, self.seeds[0], fleet),
                                     cap * fleet / scale, rel_tol=self.rel_tol,
                                     max_evals=self.max_evals, growth=1.25)
            band_rates.append(found_at.rate / fleet)
        return (band_rates[0], band_rates[1])


def _load_levels(load: SimulatedLoad, results: Sequence[CandidateCapacity], chosen: Sequence[str],
                 base_rate: float, load_fractions: Sequence[float], say: Callable[[str], None],
                 search: _Search, workers: int = 1) -> tuple[Any, list[Any]]:
    """Every candidate at ``load_fractions`` × the baseline's capacity (equal load for the
    decision table), and what limits each one at its own capacity point (``bottleneck``)."""
    import polars as pl

    from sim.decisions.bottleneck import attribute_result

    scenario, fleet = load.scenario, search.fleet
    base = next((r for r in results if r.candidate == scenario.baseline.name), None)
    ref = base.fleet_mean if base is not None and base.mean > 0 else max(r.fleet_mean for r in results)
    if not ref > 0:
        # nothing sustains the SLOs at any probed rate: still compare the candidates, at
        # fractions of the scenario's own rate, so the decision table can say why
        ref = base_rate
        load.notes.add(f"no candidate sustains the SLOs at any probed rate; load levels are "
                       f"fractions of the scenario's rate ({plain_rate(base_rate)}) instead")
    load_frames = []
    points = _capacity_points(results)
    if ref > 0:
        load.prefetch([(name, frac * ref, fleet, search.seeds) for frac in load_fractions for name in chosen]
                      + [(name, rate, fleet, search.seeds) for name, rate, _ in points], workers)
        for frac in load_fractions:
            rate = frac * ref
            for name in chosen:
                say(f"{name}: load level {frac:g} × capacity")
                res = load.result(name, rate, fleet, search.seeds)
                ks = {c.name: c.max_k for c in scenario.candidates}
                load_frames.append(res.summary.with_columns(
                    pl.lit(rate / fleet).alias("rate"), pl.lit(rate).alias("fleet_rate"),
                    pl.lit(frac).alias("load_fraction"),
                    pl.lit(fleet).alias("replicas"), pl.lit(ks.get(name, 0)).alias("k")))
    load_summary = pl.concat(load_frames, how="diagonal_relaxed") if load_frames else pl.DataFrame()
    bottlenecks: list[Any] = []
    for name, rate, cap in points:  # what limits each candidate, at its own capacity point
        say(f"{name}: what limits capacity, at {rate:.3g} req/s")
        res = load.result(name, rate, fleet, search.seeds)
        bottlenecks += attribute_result(res, load.profile_of(name), criteria=load.criteria, rate=rate / fleet,
                                        capacities=None if cap is None else {name: cap})
    return load_summary, bottlenecks


def _capacity_points(results: Sequence[CandidateCapacity]) -> list[tuple[str, float, float | None]]:
    """(candidate, fleet rate, capacity per replica) where each one's bottleneck is judged: its
    mean capacity, or with none found, the lowest rate its search judged (capacity unknown)."""
    out: list[tuple[str, float, float | None]] = []
    for r in results:
        if r.mean > 0:
            out.append((r.candidate, r.fleet_mean, r.mean))
            continue
        judged = [p.rate for s in r.per_seed for p in s.probes if p.conclusive]
        if judged:
            out.append((r.candidate, min(judged), None))
    return out


def timing_spread(profile: Any) -> tuple[float, float] | None:
    """The profile's own step-time spread as two factors on the median: the median over the
    measured ``target_forward`` cells of p10/median and of p90/median; None when the profile
    records no spread (imported and estimated profiles often carry medians only)."""
    g = profile.timing.target_forward
    if g.p10 is None or g.p90 is None:
        return None
    med = np.asarray(g.median, dtype=float)
    ok = np.isfinite(med) & (med > 0) & np.isfinite(g.p10) & np.isfinite(g.p90)
    if not ok.any():
        return None
    lo = float(np.median(np.asarray(g.p10, dtype=float)[ok] / med[ok]))
    hi = float(np.median(np.asarray(g.p90, dtype=float)[ok] / med[ok]))
    return (lo, hi) if hi > lo > 0 else None


def _capacity_unit(scenario: Any, gpus: Mapping[str, int] | None,
                   devices: Mapping[str, str] | None) -> dict[str, float] | None:
    """What each candidate's capacity per replica is divided by to be compared as the decision
    compares it: nothing on one fleet; GPUs per replica on one kind of GPU; the replica's price
    per hour across kinds of GPU (priced), since the decision's cost step then decides."""
    if gpus is None:
        return None
    hourly = _replica_hourly(scenario)
    if devices and len(set(devices.values())) > 1 and hourly is not None and min(hourly.values()) > 0:
        return {n: hourly[n] for n in gpus}
    return {n: float(g) for n, g in gpus.items()}


def _capacity_resolved(per_cand: Mapping[str, Sequence[CapacitySearch]], baseline: str,
                       seeds: Sequence[int], fleet: int, rel_tol: float,
                       unit: Mapping[str, float] | None = None) -> bool:
    """Whether the decision on capacities alone is resolved at these seeds (capacities divided
    by ``unit``, see ``_capacity_unit``)."""
    from sim.decisions.decision import decide
    from sim.decisions.facts import CandidateFacts, Facts

    cands = tuple(CandidateFacts(name, name == baseline,
                                 capacity=tuple(s.rate / fleet / (unit or {}).get(name, 1.0) for s in per))
                  for name, per in per_cand.items())
    if len(cands) < 2:
        return True
    facts = Facts("capacity", cands, tuple(seeds), baseline, True, None, fleet,
                  indifference=max(0.02, rel_tol / 2.0))
    return decide(facts).resolved


def _replica_hourly(scenario: Any) -> dict[str, float] | None:
    """$ per hour of one replica of each candidate (GPUs, plus draft hardware when it drafts)."""
    out: dict[str, float] = {}
    for c in scenario.candidates:
        fl = scenario.fleet_for(c)
        if fl.price_per_gpu_hour is None:
            return None
        gpu = fl.price_per_gpu_hour * fl.gpus_per_replica
        out[c.name] = gpu + (fl.draft_price_per_hour if c.speculates else 0.0)
    return out


def _price_source(scenario: Any, chosen: Sequence[str] = ()) -> str:
    """Where the prices come from: [fleet]'s, and each [fleets.NAME] a chosen candidate runs on."""
    used = dict.fromkeys(scenario.candidate(n).fleet for n in chosen) if chosen else {None: None}
    lines = []
    for name in used:
        fleet = scenario.fleet if name is None else scenario.fleet_for(next(
            n for n in chosen if scenario.candidate(n).fleet == name))
        g = fleet.gpus_per_replica
        per = "per replica" if g == 1 else f"per GPU × {g} GPUs per replica (tensor_parallel_size {g})"
        where = "fleet" if name is None else f"fleets.{name}"
        lines.append(f"{where}.price_per_gpu_hour = {fleet.price_per_gpu_hour} $/h {per}, "
                     f"draft_price_per_hour = {fleet.draft_price_per_hour} $/h per replica")
    return f"cost: scenario {'; '.join(lines)} (prices as the scenario states them)"
