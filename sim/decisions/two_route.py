"""Two routes: a speculative pool and a baseline pool behind a router by load, sized and priced
together — the deployable form of a load-dependent speculation policy.

Why: vLLM fixes ``speculative_config`` at start-up, so "speculate while load is low" cannot run
inside one engine; it can run as two pools and a router. The router is modelled without
touching the engine: the scenario's own requests per seed (the same arrivals and lengths every
candidate is served: common random numbers) are split by a rule a real router can run, each
pool is simulated as its own fleet on its share (``simulate_once``), and the per-request
records are joined, so goodput, SLO attainment and percentiles are over *all* requests and the
cost counts both pools' GPU-hours (each on its candidate's own fleet and price).

Rule ``rate``: at each arrival the router counts the arrivals of the last ``window_s`` seconds,
this one included; while that count ÷ ``window_s`` is at most the threshold (by default the
speculative pool's capacity at the SLO) the request goes to the speculative pool, else to the
baseline pool. Rule ``overflow``: the same, counting only the requests it sent to the
speculative pool, so that pool is kept full up to the threshold and the rest spills over. Left out: router overhead, a load signal better than the arrival count (in-flight
requests per pool), and moving a request between pools once routed.

Sizing (the pools' replicas and the router's threshold) is ``sim.decisions.two_route_sizing``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from sim.decisions.facts import window_rows
from sim.decisions.sustain import SustainCriteria
from sim.results import metric_names as mn
from sim.results.plain_numbers import plain


def route_by_rate(arrival_s: np.ndarray, threshold_rps: float, window_s: float) -> np.ndarray:
    """True where a request goes to the speculative pool: the arrivals in ``(t − window_s, t]``
    (this one included) ÷ ``window_s`` ≤ ``threshold_rps``. ``arrival_s`` is sorted."""
    t = np.asarray(arrival_s, dtype=float)
    seen = np.arange(1, t.size + 1) - np.searchsorted(t, t - window_s, side="right")
    return seen / window_s <= threshold_rps


def route_by_overflow(arrival_s: np.ndarray, threshold_rps: float, window_s: float) -> np.ndarray:
    """True where a request goes to the speculative pool: the requests sent there in
    ``(t − window_s, t]`` (this one included) ÷ ``window_s`` ≤ ``threshold_rps``."""
    from collections import deque

    sent: deque[float] = deque()
    out = np.zeros(len(arrival_s), bool)
    for i, t in enumerate(np.asarray(arrival_s, dtype=float).tolist()):
        while sent and sent[0] <= t - window_s:
            sent.popleft()
        if (len(sent) + 1) / window_s <= threshold_rps:
            sent.append(t)
            out[i] = True
    return out


ROUTERS = {"rate": route_by_rate, "overflow": route_by_overflow}
"""The router's rules by their scenario name (``TwoRouteConfig.rule``)."""


@dataclass(frozen=True)
class RouteOption:
    """One deployment on the scenario's requests: two pools, or one candidate's fleet alone
    (the other pool empty), judged and priced by the same code."""

    name: str
    speculative: str | None
    speculative_replicas: int
    baseline: str | None
    baseline_replicas: int
    threshold_rps: float | None
    window_s: float
    gpus: int
    hourly_usd: float | None
    seeds: tuple[int, ...]
    goodput: tuple[float, ...]
    """SLO-conformant answers per second of arrivals in the measured window, per seed."""
    attainment: tuple[float, ...]
    carries: tuple[bool, ...]
    carry_reason: tuple[str, ...]
    speculative_share: tuple[float, ...]
    """Share of the measured requests the router sent to the speculative pool, per seed."""
    shown: Mapping[str, float] = field(default_factory=dict)
    search: str = ""
    """How the pools were sized (empty: sizes given)."""
    rule: str = "rate"
    """The router's rule (``ROUTERS``)."""

    @property
    def label(self) -> str:
        parts = [f"{n} ×{r}" for n, r in ((self.speculative, self.speculative_replicas),
                                          (self.baseline, self.baseline_replicas)) if n and r]
        return ("two routes: " if len(parts) == 2 else "") + " + ".join(parts)

    @property
    def carried(self) -> bool:
        return bool(self.carries) and all(self.carries)

    @property
    def unused_pool(self) -> str | None:
        """The pool the router sends no request to on any seed ("speculative", "baseline"), when
        both pools have replicas: then this is no two-route deployment, only the other pool with
        idle GPUs beside it, and no surface may call it one."""
        if not (self.speculative and self.speculative_replicas and self.baseline and self.baseline_replicas):
            return None
        if not self.speculative_share:
            return None
        if max(self.speculative_share) == 0.0:
            return "speculative"
        if min(self.speculative_share) == 1.0:
            return "baseline"
        return None

    def unused_words(self) -> str:
        """Why the option is no two-route deployment, in the router's terms."""
        thr = "" if self.threshold_rps is None else f" ({plain(self.threshold_rps)} req/s)"
        if self.unused_pool == "speculative":
            return (f"the {self.rule} rule never routes to the speculative pool at this threshold{thr}: "
                    f"{self.speculative_replicas} replica(s) of {self.speculative} would stand idle")
        return (f"the {self.rule} rule routes every request to the speculative pool at this threshold{thr}: "
                f"{self.baseline_replicas} replica(s) of {self.baseline} would stand idle")

    @property
    def cost_per_1k(self) -> float:
        """$ per 1,000 SLO-conformant answers, mean goodput over seeds (nan: no price)."""
        g = float(np.mean(self.goodput)) if self.goodput else 0.0
        if self.hourly_usd is None:
            return math.nan
        return math.inf if g <= 0 else 1000.0 * self.hourly_usd / 3600.0 / g

    def line(self) -> str:
        if not self.seeds:
            return f"{self.name}: not sized"
        if self.unused_pool:
            return f"{self.label}: not a two-route deployment: {self.unused_words()}"
        cost = self.cost_per_1k
        money = "n/a" if math.isnan(cost) else ("∞" if math.isinf(cost) else f"${cost:.3g}")
        verdict = "carries the load" if self.carried else "misses: " + next(
            (r for r, ok in zip(self.carry_reason, self.carries, strict=True) if not ok), "")
        what = "all arrivals" if self.rule == "rate" else "requests sent to the speculative pool"
        route = (f"; router ({self.rule}): {what} over {self.window_s:g} s ≤ {plain(self.threshold_rps)} req/s → speculative "
                 f"({np.mean(self.speculative_share):.0%} of requests)" if self.threshold_rps is not None else "")
        lat = ", ".join(f"{k} {self.shown[c] / 1000:.2g} s" if c.startswith("e2el") else f"{k} {self.shown[c]:.0f} ms"
                        for k, c in (("E2EL p50", "e2el_ms_median"), ("TPOT p95", "tpot_ms_p95"))
                        if c in self.shown)
        return (f"{self.label}: {self.gpus} GPU(s), {money}/1k good answers, SLO attainment "
                f"{np.mean(self.attainment):.1%}{', ' + lat if lat else ''}, {verdict}{route}")

    def to_json(self) -> dict[str, Any]:
        cost = self.cost_per_1k
        return {"name": self.name, "label": self.label, "speculative": self.speculative,
                "speculative_replicas": self.speculative_replicas, "baseline": self.baseline,
                "baseline_replicas": self.baseline_replicas, "threshold_rps": self.threshold_rps,
                "rule": self.rule, "window_s": self.window_s, "gpus": self.gpus, "hourly_usd": self.hourly_usd,
                "usd_per_1k_good_answers": cost if math.isfinite(cost) else None,
                "slo_attainment": float(np.mean(self.attainment)) if self.attainment else None,
                "carries": self.carried and not self.unused_pool, "unused_pool": self.unused_pool,
                "unused": self.unused_words() if self.unused_pool else None, "per_seed": [
                    {"seed": s, "goodput_rps": g, "slo_attainment": a, "carries": c, "reason": r,
                     "speculative_share": p}
                    for s, g, a, c, r, p in zip(self.seeds, self.goodput, self.attainment, self.carries,
                                                self.carry_reason, self.speculative_share, strict=True)],
                "shown": dict(self.shown), "search": self.search}


def _seed_requests(scenario: Any, seed: int) -> list[Any]:
    """The requests every candidate of ``seed`` is served (as ``run_scenario`` makes them)."""
    from sim.contracts.trace import read_trace
    from sim.workload.workload import generate_requests

    trace = read_trace(scenario.workload.trace) if scenario.workload.arrival == "trace" else None
    return generate_requests(scenario, rng=np.random.SeedSequence(seed).spawn(2)[0], trace=trace)


def pool_records(scenario: Any, profiles: Mapping[str, Any], candidate: str, replicas: int,
                 seed: int, requests: Sequence[Any]) -> pl.DataFrame:
    """Per-request records of ``replicas`` of ``candidate``'s fleet serving ``requests``."""
    from sim.results.simulation import simulate_once

    sc = scenario.with_overrides({"fleet.replicas": int(replicas)})
    cand = sc.candidate(candidate)
    return simulate_once(sc.for_candidate(cand), profiles[candidate], cand, seed, requests=requests).requests


def hourly_of(scenario: Any, speculative: str | None, s: int, baseline: str | None, b: int) -> tuple[int, float | None]:
    """GPUs and $ per hour of both pools, each on its candidate's fleet and price."""
    gpus, usd = 0, 0.0
    priced = True
    for name, n in ((speculative, s), (baseline, b)):
        if not name or not n:
            continue
        fl = scenario.fleet_for(name)
        gpus += n * fl.gpus_per_replica
        if fl.price_per_gpu_hour is None:
            priced = False
            continue
        spec = not scenario.candidate(name).is_baseline
        usd += n * (fl.price_per_gpu_hour * fl.gpus_per_replica + (fl.draft_price_per_hour if spec else 0.0))
    return gpus, (usd if priced else None)


def route_records(scenario: Any, profiles: Mapping[str, Any], *, name: str, speculative: str | None, s: int,
                  baseline: str | None, b: int, threshold_rps: float | None, window_s: float,
                  seed: int, rule: str = "rate") -> tuple[pl.DataFrame, dict[str, pl.DataFrame], float]:
    """One seed: the scenario's requests split by the router, each pool simulated on its share,
    and the records joined (labelled ``name``); also each pool's own records, and the share
    of the measured requests sent to the speculative pool."""
    t0, t1 = scenario.run.warmup_s, scenario.run.duration_s
    specs = _seed_requests(scenario, seed)
    arr = np.array([r.arrival_s for r in specs])
    if not (speculative and s):
        to_spec = np.zeros(len(specs), bool)
    elif not (baseline and b) or threshold_rps is None:
        to_spec = np.ones(len(specs), bool)
    else:
        to_spec = ROUTERS[rule](arr, threshold_rps, window_s)
    measured = (arr >= t0) & (arr < t1)
    share = float(to_spec[measured].mean()) if measured.any() else 0.0
    pools: dict[str, pl.DataFrame] = {}
    for pool, cand, n, mask in (("speculative", speculative, s, to_spec), ("baseline", baseline, b, ~to_spec)):
        part = [r for r, m in zip(specs, mask, strict=True) if m]
        if part:
            assert cand is not None and n > 0
            pools[pool] = pool_records(scenario, profiles, cand, n, seed, part).with_columns(
                pl.lit(name).alias(mn.CANDIDATE))
    return pl.concat(list(pools.values()), how="vertical_relaxed"), pools, share


def evaluate(scenario: Any, profiles: Mapping[str, Any], criteria: SustainCriteria, *, name: str,
             speculative: str | None, s: int, baseline: str | None, b: int,
             threshold_rps: float | None, window_s: float, seeds: Sequence[int],
             rate: float, rule: str = "rate") -> tuple[RouteOption, dict[str, list[Any]]]:
    """Simulate the option on every seed (``route_records``) and judge all its requests; also
    each pool judged on its own requests (``{"speculative": [...], "baseline": [...]}``)."""
    t0, t1 = scenario.run.warmup_s, scenario.run.duration_s
    limits = dict(scenario.slo.limits)
    frames, shares = [], []
    judged_pools: dict[str, list[Any]] = {"speculative": [], "baseline": []}
    for seed in seeds:
        req, pools, share = route_records(scenario, profiles, name=name, speculative=speculative, s=s,
                                          baseline=baseline, b=b, threshold_rps=threshold_rps,
                                          window_s=window_s, seed=seed, rule=rule)
        frames.append(req)
        shares.append(share)
        for pool, df in pools.items():
            row = window_rows(df, limits, t0, t1).get((name, seed))
            judged_pools[pool].append(criteria.judge(row, rate) if row else None)
    rows = window_rows(pl.concat(frames, how="vertical_relaxed"), limits, t0, t1)
    per = [rows.get((name, sd)) or {"good": 0, "requests": 0} for sd in seeds]
    judged = [criteria.judge(r, rate) for r in per]
    span = max(t1 - t0, 1e-9)
    shown = {c: float(np.mean(v)) for c in ("ttft_ms_p95", "tpot_ms_p95", "e2el_ms_median")
             if (v := [float(r[c]) for r in per if r.get(c) is not None])}
    gpus, hourly = hourly_of(scenario, speculative, s, baseline, b)
    opt = RouteOption(
        name, speculative, s, baseline, b, threshold_rps if (speculative and s and baseline and b) else None,
        window_s, gpus, hourly, tuple(int(x) for x in seeds),
        tuple(r["good"] / span for r in per),
        tuple(r["good"] / r["requests"] if r["requests"] else 0.0 for r in per),
        tuple(j.sustained for j in judged), tuple(j.reason for j in judged), tuple(shares), shown, rule=rule)
    return opt, judged_pools


@dataclass(frozen=True)
class TwoRoutePlan:
    """A sized two-route option and, on the same seeds' requests, each candidate it is built
    from (and the idealised in-engine policy, when named) alone at the replicas the capacity
    decision gave it."""

    option: RouteOption
    beside: tuple[RouteOption, ...]
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """Terminal lines (the JSON renders the same objects)."""
        o = self.option
        out = [f"deployable two routes {o.name} (a speculative and a baseline pool behind a router by load; "
               f"cost counts both pools' GPU-hours; simulated on the scenario's requests):",
               f"  {o.line()}", f"  sized: {o.search}"]
        out += [f"  beside: {b.line()}" for b in self.beside]
        out += [f"  note: {n}" for n in self.notes]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"option": self.option.to_json(), "beside": [b.to_json() for b in self.beside],
                "notes": list(self.notes)}


def plan_two_routes(scenario: Any, profile: Any, report: Any, replicas: Mapping[str, int | None],
                    *, max_evals: int = 8) -> list[TwoRoutePlan]:
    """Every [[two_routes]] of ``scenario``, sized from the capacity ``report`` (mean capacity per
    replica) and compared with its candidates alone at ``replicas`` (the decision's fleet size
    per candidate) on the report's seeds."""
    from sim.decisions.two_route_sizing import load_range, size_two_route
    from sim.results.runner import candidate_profiles

    if not scenario.two_routes:
        return []
    if not scenario.run.drain:  # as the capacity search judges: an overloaded pool's backlog is seen
        scenario = scenario.with_overrides({"run.drain": True})
    caps = {c.candidate: c.mean for c in report.candidates}
    seeds = tuple(report.candidates[0].seeds) if report.candidates else tuple(scenario.run.seeds)
    _, _, mean = load_range(scenario)
    out = []
    for cfg in scenario.two_routes:
        names = [n for n in (cfg.speculative, cfg.baseline, cfg.idealised) if n]
        missing = [n for n in names if n not in caps]
        if missing:
            out.append(TwoRoutePlan(_unsized(cfg), (), (f"not sized: no capacity for {', '.join(missing)} "
                                                        f"(run capacity with those candidates)",)))
            continue
        profs = candidate_profiles(scenario, profile, [scenario.candidate(n) for n in names])
        criteria = report.criteria
        opt = size_two_route(scenario, profs, criteria, cfg, caps, seeds, max_evals=max_evals)
        beside = []
        notes = [opt.unused_words()] if opt.unused_pool else []
        if opt.seeds and not opt.unused_pool and not (opt.speculative_replicas and opt.baseline_replicas):
            notes.append(f"{opt.label} alone carries the load with the fewest GPUs found: no router needed")
        for n in dict.fromkeys(names):
            reps = replicas.get(n)
            if not reps:
                notes.append(f"{n}: no fleet size from the capacity decision; not shown alone")
                continue
            spec = not scenario.candidate(n).is_baseline
            alone, _ = evaluate(scenario, profs, criteria, name=n, speculative=n if spec else None,
                                s=reps if spec else 0, baseline=None if spec else n, b=0 if spec else reps,
                                threshold_rps=None, window_s=cfg.window_s, seeds=seeds, rate=mean)
            beside.append(alone)
        if cfg.idealised:
            notes.append(f"{cfg.idealised} is the idealised in-engine policy (vLLM cannot switch "
                         f"speculation at run time); the two routes are what runs today")
        notes.append("not modelled: router overhead, a load signal better than the arrival count, "
                     "moving a request between pools once routed")
        out.append(TwoRoutePlan(opt, tuple(beside), tuple(notes)))
    return out


def _unsized(cfg: Any) -> RouteOption:
    return RouteOption(cfg.name, cfg.speculative, 0, cfg.baseline, 0, cfg.threshold_rps, cfg.window_s,
                       0, None, (), (), (), (), (), (), {}, "not sized")
