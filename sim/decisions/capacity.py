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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.decisions.capacity_search import CapacitySearch, Probe, find_capacity
from sim.decisions.sustain import SustainCriteria, criteria_from_scenario
from sim.results.intervals import ci95_halfwidth

# ---------------------------------------------------------------------------------------------
# Simulator glue


@dataclass(frozen=True)
class CandidateCapacity:
    """Capacity of one candidate: per seed, mean ± CI, replicas for the target, and its cost."""

    candidate: str
    per_seed: tuple[CapacitySearch, ...]
    seeds: tuple[int, ...]
    target_rate: float
    replicas: int | None
    replicas_status: str
    operating_row: Mapping[str, Any] | None = field(default=None, compare=False)

    fleet_replicas: int = 1
    """Replicas of the fleet the search ran on (the scenario's); capacities are per replica."""
    profile_band: tuple[float, float] | None = None
    """Capacity per replica (first seed) with every step at the profile's p90 and p10 step
    times (``timing_spread``): the model's own uncertainty, next to the seeds' interval."""

    @property
    def capacities(self) -> list[float]:
        """Capacity per replica, one per seed (the fleet's divided by its replicas)."""
        return [s.rate / self.fleet_replicas for s in self.per_seed]

    @property
    def fleet_mean(self) -> float:
        return float(np.mean([s.rate for s in self.per_seed]))

    @property
    def mean(self) -> float:
        return float(np.mean(self.capacities))

    @property
    def ci95(self) -> float:
        return ci95_halfwidth(self.capacities)

    @property
    def evaluations(self) -> int:
        return sum(len(s.probes) for s in self.per_seed)

    @property
    def bounded(self) -> str:
        """'' when every seed bracketed; else which seeds hit a search limit."""
        odd = []
        for sd, s in zip(self.seeds, self.per_seed, strict=True):
            if s.status in ("below_min", "below_probes"):
                judged = [p for p in s.probes if p.conclusive]
                unjudged = [p for p in s.probes if not p.conclusive]
                msg = f"seed {sd}: not sustained at any rate probed"
                if judged:
                    low = min(judged, key=lambda p: p.rate)
                    msg += f", down to {low.rate:.3g} req/s ({low.reason})"
                if unjudged:
                    msg += (f"; at {max(p.rate for p in unjudged):.3g} req/s and below a run holds "
                            f"too few requests to judge")
                odd.append(msg)
            elif s.status == "above_max":
                odd.append(f"seed {sd}: sustained up to the search limit {s.rate:.3g} req/s")
            elif s.status == "above_probes":
                odd.append(f"seed {sd}: at least {s.rate:.3g} req/s (probe budget spent)")
        return "; ".join(odd)


@dataclass(frozen=True)
class CapacityReport:
    """Everything `specplan capacity` prints: per-candidate capacity plus frames for decisions."""

    scenario_name: str
    criteria: SustainCriteria
    candidates: tuple[CandidateCapacity, ...]
    load_summary: Any  # pl.DataFrame: candidate, segment, rate (per replica), fleet_rate, replicas, k, metrics
    operating_summary: Any  # pl.DataFrame at the target rate with each candidate's replicas
    sources: tuple[str, ...]
    rel_tol: float
    max_evals: int
    duration_s: float
    bottlenecks: tuple[Any, ...] = ()
    notes: tuple[str, ...] = ()
    baseline: str = "baseline"
    price_source: str = ""
    gpus_per_replica: int = 1
    """GPUs one replica spans (fleet.tensor_parallel_size): replicas count instances, cost GPUs."""

    def decisions(self, thresholds: Any = None) -> list[Any]:
        """The decision table over the load levels (and the operating point's replicas)."""
        from sim.decisions.rules import Thresholds, decision_table

        th = thresholds or Thresholds(min_slo_attainment=self.criteria.percentile / 100.0)
        if self.load_summary.height == 0:
            return []
        return decision_table(self.load_summary, self.baseline, thresholds=th, dominant=self.dominant())

    def dominant(self) -> list[str]:
        """Candidates with more capacity than the baseline (beyond both 95 % CIs) and a cost per
        good answer at their operating point no higher than the baseline's."""
        base = next((c for c in self.candidates if c.candidate == self.baseline), None)
        if base is None:
            return []

        def cost(c: CandidateCapacity) -> float:
            v = (c.operating_row or {}).get("cost_per_good_answer_usd")
            return math.inf if v is None or v != v else float(v)

        return [c.candidate for c in self.candidates if c is not base
                and c.mean - c.ci95 > base.mean + base.ci95 and cost(c) <= cost(base)]


def arrival_rate(scenario: Any) -> float:
    """Mean arrival rate of the scenario (req/s): what capacity is expressed in."""
    w = scenario.workload
    rate = w.mean_rate(scenario.run.duration_s)
    if rate is None or not rate > 0:
        raise SpecplanError(f"{scenario.origin or 'scenario'}: workload.arrival: capacity scales the "
                            f"arrival rate, so it needs poisson, gamma or piecewise arrivals with a "
                            f"rate > 0, got {w.arrival!r}")
    return float(rate)


def with_duration(scenario: Any, duration_s: float) -> Any:
    """The scenario with a shorter (or longer) run, warm-up scaled alike — refused when the
    scenario's time structure (piecewise points, a restart) would fall outside the new run."""
    if not duration_s > 0:
        raise SpecplanError(f"--duration: must be > 0 s, got {duration_s}")
    w, f = scenario.workload, scenario.fleet
    if w.piecewise is not None and w.piecewise.shape != "daily":
        last = max(t for t, _ in w.piecewise.points)
        if duration_s < last:
            raise SpecplanError(f"--duration: {duration_s:g} s would cut the piecewise arrival "
                                f"profile (last point at {last:g} s); give ≥ {last:g} s")
    if f.restart is not None and duration_s <= f.restart.at_s + f.restart.cold_start_s:
        end = f.restart.at_s + f.restart.cold_start_s
        raise SpecplanError(f"--duration: {duration_s:g} s would cut the restart (at {f.restart.at_s:g} s, "
                            f"serving again at {end:g} s); give > {end:g} s")
    run = scenario.run
    warm = run.warmup_s * duration_s / run.duration_s
    return scenario.with_overrides({"run.duration_s": float(duration_s), "run.warmup_s": warm})


def at_load(scenario: Any, rate: float, replicas: int, min_requests: int = 0) -> Any:
    """The scenario with its mean arrival rate scaled to ``rate`` and ``replicas`` replicas.

    The traffic's shape (burstiness, piecewise profile, segment mix) is kept; only its level
    changes (``Scenario.with_load_scale``). With stationary arrivals (poisson, gamma) and no
    restart, the run is lengthened so that at least ``min_requests`` arrive after warm-up: a
    percentile judged on a handful of requests is noise, and simulation cost grows with the
    number of requests, not with simulated time, so this keeps every probe equally cheap.
    """
    sc = scenario.with_load_scale(rate / arrival_rate(scenario))
    over: dict[str, Any] = {}
    if int(replicas) != int(scenario.fleet.replicas):
        over["fleet.replicas"] = int(replicas)
    run = scenario.run
    if (min_requests > 0 and scenario.workload.arrival in ("poisson", "gamma")
            and scenario.fleet.restart is None):
        need = run.warmup_s + min_requests / rate
        if need > run.duration_s:
            over["run.duration_s"] = float(need)
    return sc.with_overrides(over) if over else sc


PROBE_STRETCHES = (1.0, 2.0, 4.0)
"""How much longer a passing probe whose queue grows is run again before it counts as a runaway."""


class SimulatedLoad:
    """Evaluates one candidate of a scenario at a rate (and replica count) by simulation.

    Keeps every summary it computed so the decision table and bottleneck attribution can reuse
    them without simulating again.
    """

    def __init__(self, scenario: Any, profile: Any, criteria: SustainCriteria,
                 min_requests: int = 0, cache_dir: Any = None, timer_scale: float = 1.0) -> None:
        from sim.results.runner import (
            run_scenario,  # the simulator; imported late to keep this testable
        )

        self._run = run_scenario
        self.timer_scale = timer_scale
        """Every step time × this (``timing_spread``'s factors for the profile band); 1 normally."""
        self.scenario = scenario
        self.profile = profile
        self.criteria = criteria
        self.min_requests = min_requests
        self.rows: list[dict[str, Any]] = []
        self.work = 0.0
        self.cache_dir = cache_dir
        """Folder of finished probes' summaries (``--out DIR/probes``): a rerun after Ctrl-C or
        kill -9 reads them instead of simulating again."""
        self.reused = 0
        self.sources: set[str] = set()
        self.notes: set[str] = set()

    def result(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int],
               stretch: float = 1.0) -> Any:
        """The full ``run_scenario`` result of one candidate at one load (``stretch`` × as long)."""
        sc = at_load(self.scenario, rate, replicas, self.min_requests)
        if stretch != 1.0:
            sc = with_duration(sc, sc.run.duration_s * stretch)
        self._spend(sc, len(seeds))
        factory = None
        if self.timer_scale != 1.0:
            from sim.model.step_time import ProfileStepTimer

            layout, scale = sc.fleet.engine.kv_layout, self.timer_scale
            factory = lambda p: ProfileStepTimer(p, kv_layout=layout, scale=scale)  # noqa: E731
        res = self._run(sc, profile=self.profile, candidates=[candidate], seeds=list(seeds),
                        step_timer_factory=factory)
        self.sources.update(res.sources)
        self.notes.update(res.notes)
        return res

    def _spend(self, sc: Any, runs: int) -> None:
        """The search's simulated request-steps so far stay under the work limit (one line
        naming the scenario and the total when they would not), so no search runs for hours."""
        from sim.contracts.input_limits import max_request_steps, workload_size

        n, steps = workload_size(sc.workload, sc.run)
        self.work += n * steps * runs
        if self.work > max_request_steps():
            raise SpecplanError(
                f"{self.scenario.origin or 'scenario'}: the capacity search would simulate about "
                f"{self.work:.3g} request-steps, over the limit of {max_request_steps():,} "
                "(SPECPLAN_MAX_REQUEST_STEPS); lower --target-rate, --duration or --max-evals"
            )

    def summary(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int]) -> Any:
        return self._judged(candidate, rate, replicas, seeds)[0]

    def _judged(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int],
                stretch: float = 1.0) -> tuple[Any, Any]:
        """The summary and queue trend of one load, from ``cache_dir`` when that probe finished
        before (a rerun after Ctrl-C or kill -9 redoes nothing finished)."""
        import json
        from pathlib import Path

        import polars as pl

        from sim.decisions.steady_state import QueueTrend, queue_trend
        from sim.results.atomic_io import ensure_dir, write_parquet_atomic, write_text_atomic

        if self.cache_dir is None:
            res = self.result(candidate, rate, replicas, seeds, stretch)
            return res.summary, queue_trend(res.requests)
        sc = at_load(self.scenario, rate, replicas, self.min_requests)
        if stretch != 1.0:
            sc = with_duration(sc, sc.run.duration_s * stretch)
        key = _probe_key(sc, self.profile, candidate, seeds, self.timer_scale)
        base = Path(self.cache_dir) / key
        done = base.with_suffix(".json")
        if done.is_file() and base.with_suffix(".parquet").is_file():
            meta = json.loads(done.read_text(encoding="utf-8"))
            self.sources.update(meta["sources"])
            self.notes.update(meta["notes"])
            self.reused += 1
            return pl.read_parquet(base.with_suffix(".parquet")), QueueTrend(*meta["trend"])
        res = self.result(candidate, rate, replicas, seeds, stretch)
        trend = queue_trend(res.requests)
        ensure_dir(self.cache_dir, "probe folder")
        write_parquet_atomic(res.summary, base.with_suffix(".parquet"))
        # the .json marks the probe finished; written last, so a torn probe is redone
        write_text_atomic(done, json.dumps({"sources": sorted(res.sources), "notes": sorted(res.notes),
                                            "trend": [trend.state, trend.growth_s, trend.first_half_wait_s,
                                                      trend.requests]}))
        return res.summary, trend

    def probe(self, candidate: str, rate: float, seed: int, replicas: int) -> Probe:
        """Judge one seed at ``rate``; a probe that passes while its queue grows
        (``sim.decisions.steady_state``) is run again ×2, ×4 as long, and fails as a runaway queue if it
        still grows at the longest. A failing probe whose queue grows says so first."""
        import polars as pl

        for stretch in PROBE_STRETCHES:
            summary, trend = self._judged(candidate, rate, replicas, [seed], stretch)
            rows = summary.filter((pl.col("candidate") == candidate) & (pl.col("segment") == "all"))
            if rows.height != 1:
                raise RuntimeError(f"run_scenario summary has {rows.height} 'all' rows for {candidate}")
            row = rows.row(0, named=True)
            verdict = self.criteria.judge(row, rate)
            if not trend.growing or not verdict.conclusive:
                break
            if not verdict.sustained:
                verdict = Probe(rate, False, verdict.margin, f"runaway queue ({trend.describe()}); {verdict.reason}")
                break
        else:
            verdict = Probe(rate, False, None, f"runaway queue: still growing at {stretch:g}× the probe's "
                                                f"length ({trend.describe()})")
        self.rows.append({**row, "rate": rate, "replicas": replicas, "seed": seed})
        return verdict


def _probe_key(sc: Any, profile: Any, candidate: str, seeds: Sequence[int], timer_scale: float = 1.0) -> str:
    """What a probe's result depends on: the probed scenario, the profile's bytes, candidate,
    seeds and the step-time scale of a profile-band search (sim.decisions.sweep's digest, so both resume
    the same way)."""
    import hashlib
    from pathlib import Path

    from sim.decisions.sweep import content_digest

    origin = getattr(profile, "origin", None) if profile is not None else None
    if origin is None and sc.profile_path is not None:
        origin = str(sc.profile_path)
    prof = getattr(profile, "name", "")
    if origin and Path(origin).is_file():
        prof = hashlib.sha256(Path(origin).read_bytes()).hexdigest()
    extra = [] if timer_scale == 1.0 else [timer_scale]
    return content_digest(sc.to_dict(), prof, candidate, list(seeds), *extra)[:24]


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
) -> CapacityReport:
    """Capacity of every candidate of ``scenario`` (see module docstring for "sustains").

    Per seed: ``find_capacity`` starting at the scenario's rate. Then the fewest replicas that
    sustain ``target_rate`` (default: the scenario's rate) on every seed, starting from
    ``ceil(target / mean capacity)`` and walking up/down by one. Finally every candidate is
    simulated at ``load_fractions`` × the baseline's mean capacity so decisions can compare
    candidates at equal load. Searches and load levels use the scenario's replica count (a
    restart scenario needs its second replica to reroute to); capacity is reported per replica
    (the fleet's divided by its replicas).
    """
    import polars as pl

    from sim.results.runner import resolve_profile

    profile = resolve_profile(scenario, profile)
    criteria = criteria_from_scenario(scenario, percentile, max_loss_fraction)
    base_rate = arrival_rate(scenario)
    target = float(target_rate if target_rate is not None else base_rate)
    if not target > 0:
        raise SpecplanError(f"--target-rate: must be > 0 req/s, got {target}")
    seeds = tuple(int(s) for s in (seeds if seeds is not None else scenario.run.seeds))
    names = [c.name for c in scenario.candidates]
    chosen = list(candidates) if candidates else names
    for c in chosen:
        if c not in names:
            raise SpecplanError(f"--candidates: unknown candidate {c!r}; the scenario has "
                                f"{', '.join(names)}")
    if not scenario.run.drain:
        # an undrained run drops its backlog unseen; capacity must see it
        scenario = scenario.with_overrides({"run.drain": True})
    load = SimulatedLoad(scenario, profile, criteria, min_requests, cache_dir)
    say = progress or (lambda _msg: None)
    pw = scenario.workload.piecewise
    if pw is not None:
        load.notes.add(f"rates are mean arrival rates over the run; the piecewise profile peaks at "
                       f"{pw.max_rate() / base_rate:.2g}× its mean")
    fleet = int(scenario.fleet.replicas)  # searched as configured (a restart needs a 2nd replica)

    results: list[CandidateCapacity] = []
    op_rows: list[dict[str, Any]] = []
    found: list[float] = []
    for name in chosen:
        per_seed: list[CapacitySearch] = []
        for seed in seeds:
            # warm start: this candidate's earlier seeds (close: small steps), else the other
            # candidates' capacities (same order of magnitude), else the scenario's rate
            mine = [x.rate for x in per_seed if x.rate > 0]
            start, growth = ((float(np.mean(mine)), 1.25) if mine else
                             (float(np.mean(found)), 1.5) if found else (base_rate, 2.0))
            say(f"{name}: searching capacity, seed {seed}")
            per_seed.append(find_capacity(lambda r, n=name, s=seed: load.probe(n, r, s, fleet), start,
                                          rel_tol=rel_tol, max_evals=max_evals, growth=growth))
        found += [x.rate for x in per_seed if x.rate > 0]
        cap = float(np.mean([s.rate for s in per_seed])) / fleet
        say(f"{name}: replicas for {target:g} req/s")
        n, status, row = _fewest_replicas(load, name, target, cap, seeds, criteria, max_replicas)
        if row is not None:
            op_rows.append({**row, "replicas": n, "rate": target})
        band = None
        spread = timing_spread(profile) if profile_band else None
        if spread is not None and cap > 0:
            say(f"{name}: capacity at the profile's p90 and p10 step times, seed {seeds[0]}")
            band_rates = []
            for scale in (spread[1], spread[0]):  # slow (p90), then fast (p10)
                alt = SimulatedLoad(scenario, profile, criteria, min_requests, cache_dir, timer_scale=scale)
                found_at = find_capacity(lambda r, a=alt, n=name: a.probe(n, r, seeds[0], fleet),
                                         cap * fleet / scale, rel_tol=rel_tol, max_evals=max_evals,
                                         growth=1.25)
                band_rates.append(found_at.rate / fleet)
            band = (band_rates[0], band_rates[1])
        results.append(CandidateCapacity(name, tuple(per_seed), seeds, target, n, status, row,
                                         fleet_replicas=fleet, profile_band=band))

    base = next((r for r in results if r.candidate == scenario.baseline.name), None)
    ref = base.fleet_mean if base is not None and base.mean > 0 else max(r.fleet_mean for r in results)
    if not ref > 0:
        # nothing sustains the SLOs at any probed rate: still compare the candidates, at
        # fractions of the scenario's own rate, so the decision table can say why
        ref = base_rate
        load.notes.add(f"no candidate sustains the SLOs at any probed rate; load levels are "
                       f"fractions of the scenario's rate ({base_rate:g} req/s) instead")
    from sim.decisions.bottleneck import attribute_result

    load_frames = []
    attributions = []
    if ref > 0:
        for frac in load_fractions:
            rate = frac * ref
            for name in chosen:
                say(f"{name}: load level {frac:g} × capacity")
                res = load.result(name, rate, fleet, seeds)
                attributions += attribute_result(res, profile, rate / fleet)
                ks = {c.name: c.max_k for c in scenario.candidates}
                load_frames.append(res.summary.with_columns(
                    pl.lit(rate / fleet).alias("rate"), pl.lit(rate).alias("fleet_rate"),
                    pl.lit(frac).alias("load_fraction"),
                    pl.lit(fleet).alias("replicas"), pl.lit(ks.get(name, 0)).alias("k")))
    load_summary = pl.concat(load_frames, how="diagonal_relaxed") if load_frames else pl.DataFrame()
    operating = pl.from_dicts(op_rows, infer_schema_length=None) if op_rows else pl.DataFrame()
    return CapacityReport(
        scenario_name=scenario.name, criteria=criteria, candidates=tuple(results),
        load_summary=load_summary, operating_summary=operating,
        sources=tuple(sorted(load.sources)), rel_tol=rel_tol, max_evals=max_evals,
        duration_s=float(scenario.run.duration_s), bottlenecks=tuple(attributions),
        notes=tuple(sorted(load.notes)), baseline=scenario.baseline.name,
        price_source=_price_source(scenario.fleet),
        gpus_per_replica=scenario.fleet.gpus_per_replica,
    )


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


def _price_source(fleet: Any) -> str:
    g = fleet.gpus_per_replica
    per = "per replica" if g == 1 else f"per GPU × {g} GPUs per replica (tensor_parallel_size {g})"
    return (f"cost: scenario fleet.price_per_gpu_hour = {fleet.price_per_gpu_hour} $/h {per}, "
            f"draft_price_per_hour = {fleet.draft_price_per_hour} $/h per replica "
            "(prices as the scenario states them)")


def mean_row(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean over seeds of numeric columns (others from the first row); adds ``n_seeds``."""
    out: dict[str, Any] = dict(rows[0])
    for k, v in rows[0].items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            vals = [float(r[k]) for r in rows if r.get(k) is not None]
            out[k] = float(np.mean(vals)) if vals else None
    out["n_seeds"] = len(rows)
    out.pop("seed", None)
    return out


def _fewest_replicas(load: SimulatedLoad, name: str, target: float, cap: float,
                     seeds: Sequence[int], criteria: SustainCriteria,
                     max_replicas: int) -> tuple[int | None, str, dict[str, Any] | None]:
    """Smallest n whose fleet sustains ``target`` on every seed; (None, why, None) if > max.

    Starts at ``ceil(target / capacity per replica)``, gallops (1, 2, 4, … away) to a count
    that passes and one that fails, then bisects: more replicas never serve a rate worse, so
    this is the same monotone search as the rate's, on integers."""

    def ok(n: int) -> tuple[bool, dict[str, Any]]:
        start = len(load.rows)
        probes = [load.probe(name, target, sd, n) for sd in seeds]
        return all(p.sustained for p in probes), mean_row(load.rows[start:])

    if not cap > 0:
        return None, "no capacity found: more replicas cannot help a per-request SLO", None
    n = min(max(1, math.ceil(target / cap)), max_replicas)
    cache: dict[int, tuple[bool, dict[str, Any]]] = {}

    def check(m: int) -> bool:
        if m not in cache:
            cache[m] = ok(m)
        return cache[m][0]

    # gallop to a passing count, then bisect between the last failing and the first passing
    if check(n):
        good, bad = n, 0
        step = 1
        while good - step >= 1 and check(good - step):
            good, step = good - step, step * 2
        bad = max(bad, good - step) if good - step >= 1 else 0
    else:
        bad, step = n, 1
        good = 0
        while bad + step <= max_replicas:
            if check(bad + step):
                good = bad + step
                break
            bad, step = bad + step, step * 2
        if not good:
            if bad < max_replicas and check(max_replicas):
                good = max_replicas
            else:
                return None, f"not sustained with {max_replicas} replicas", None
    while good - bad > 1:
        mid = (good + bad) // 2
        if check(mid):
            good = mid
        else:
            bad = mid
    return good, "sustained on every seed", cache[good][1]
