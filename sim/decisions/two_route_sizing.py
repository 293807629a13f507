"""Sizing two routes: the replicas of both pools and the router's threshold.

Why its own module: the threshold decides which requests each pool gets, so a search over the
pools' replicas alone can end on a threshold the load never falls below, and then one pool gets
no request at all (the ``rate`` rule with the threshold tied to a shrinking speculative pool:
issue 38 found a "two-route" option with 0 % of requests on its speculative pool reported as
carrying the load). Such an option is no two-route deployment, and is never chosen.

The search, from the capacity report's mean capacity per replica of each candidate, expressed
at the traffic's peak (capacity × peak ÷ mean rate for a piecewise profile, since the report's
rates are mean rates):

- **Thresholds tried.** Given (``threshold_rps``): that one. Unset: the speculative pool's
  capacity at the SLO (``S ×`` its capacity per replica, following ``S``), and the 25th, 50th
  and 75th percentiles of the load the router sees (arrivals of the last ``window_s`` seconds
  per second, at each measured arrival, over the seeds): thresholds at which the speculative
  pool gets about 25 %, 50 % and 75 % of the requests (the ``rate`` rule).
- **Replicas at each threshold.** ``S = ceil(lowest rate / its capacity)`` (the capacity
  family) or ``ceil(threshold / its capacity)``; ``B = ceil((peak − threshold) / its capacity)``
  (``overflow``) or ``ceil(peak / its capacity)`` (``rate``: above the threshold all traffic
  goes to it). Simulated on every seed and judged by the capacity search's rule
  (``SustainCriteria``) over all requests; while it fails, one replica goes to the pool whose
  own requests miss the SLO more; once it carries, each pool in turn loses a replica while it
  still carries and both pools still get requests. At most ``max_evals`` evaluations per
  threshold.
- **The answer.** Of the options that carry on every seed with traffic on both pools: the
  fewest GPUs, then the cheapest per hour, then the lowest E2EL p50 (all of them carry, so
  cost per good answer differs only by noise in goodput). When none routes
  to both pools, the option says so in the router's words ("the rate rule never routes to the
  speculative pool at this threshold") and is never called a two-route deployment.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sim.decisions.sustain import SustainCriteria
from sim.decisions.two_route import RouteOption, _seed_requests, evaluate
from sim.results.plain_numbers import plain

QUANTILES = (0.25, 0.5, 0.75)
"""Shares of the router's observed load below the thresholds tried beside the capacity one."""


def load_range(scenario: Any) -> tuple[float, float, float]:
    """(lowest, highest, mean) arrival rate over the run: a piecewise profile's trough and peak,
    a stationary stream's mean for all three."""
    from sim.decisions.load_scaling import arrival_rate

    mean = arrival_rate(scenario)
    pw = scenario.workload.piecewise
    if pw is None:
        return mean, mean, mean
    r = pw.rate_at(np.linspace(0.0, scenario.run.duration_s, 4001, endpoint=False))
    return float(np.min(r)), float(np.max(r)), mean


def router_thresholds(scenario: Any, seeds: Sequence[int], window_s: float) -> list[float]:
    """The ``QUANTILES`` of the load the router sees at each measured arrival (arrivals of the
    last ``window_s`` seconds, this one included, per second), over ``seeds``, rounded to three
    significant digits; distinct and above zero."""
    t0, t1 = scenario.run.warmup_s, scenario.run.duration_s
    seen = []
    for seed in seeds:
        t = np.sort(np.array([r.arrival_s for r in _seed_requests(scenario, seed)], dtype=float))
        count = np.arange(1, t.size + 1) - np.searchsorted(t, t - window_s, side="right")
        seen.append((count / window_s)[(t >= t0) & (t < t1)])
    rates = np.concatenate(seen) if seen else np.array([])
    if rates.size == 0:
        return []
    out = [float(plain(float(np.quantile(rates, q))).replace(",", "")) for q in QUANTILES]
    return sorted({x for x in out if x > 0})


def size_two_route(scenario: Any, profiles: Mapping[str, Any], criteria: SustainCriteria, cfg: Any,
                   capacity: Mapping[str, float], seeds: Sequence[int], *, max_evals: int = 8) -> RouteOption:
    """The fewest GPUs of both pools of ``cfg`` (a ``TwoRouteConfig``), over the router's
    thresholds, that carry the scenario on every seed with requests on both pools; from
    ``capacity`` (mean capacity per replica, req/s in the report's mean-rate terms, by
    candidate). See the module docstring."""
    low, peak, mean = load_range(scenario)
    c_s = capacity.get(cfg.speculative, 0.0) * peak / mean
    c_b = capacity.get(cfg.baseline, 0.0) * peak / mean
    tried: dict[tuple[float, int, int], tuple[RouteOption, dict[str, list[Any]]]] = {}
    head = (f"capacity at peak: {cfg.speculative} {plain(c_s)}, {cfg.baseline} {plain(c_b)} req/s per "
            f"replica; load {plain(low)}–{plain(peak)} req/s")
    if cfg.threshold_rps is not None:
        families: list[tuple[str, Callable[[int], float]]] = [("given", lambda n: cfg.threshold_rps)]
    else:
        families = [("the speculative pool's capacity", lambda n: max(n, 1) * c_s)]
        families += [(f"{plain(t)} req/s, a quantile of the load the router sees", lambda n, t=t: t)
                     for t in router_thresholds(scenario, seeds, cfg.window_s)]
    found = [_size_at(scenario, profiles, criteria, cfg, seeds, thr, c_s, c_b, low, peak, mean, tried, max_evals)
             for _, thr in families]
    ok = [i for i, (o, _) in enumerate(found) if o.carried and not o.unused_pool]
    if ok:
        pick = min(ok, key=lambda i: (found[i][0].gpus, _or_inf(found[i][0].hourly_usd),
                                      _or_inf(found[i][0].shown.get("e2el_ms_median"))))
    else:  # none carries with both pools used: the capacity family's, saying why
        pick = next((i for i, (o, _) in enumerate(found) if o.carried), 0)
    said = [f"threshold {name} → {text}" for (name, _), (_, text) in zip(families, found, strict=True)]
    opt = found[pick][0]
    return dataclasses.replace(opt, search=f"{head}; " + "; ".join(said) + (
        f" → threshold {plain(opt.threshold_rps)} req/s" if opt.threshold_rps is not None else "")
        + f", S={opt.speculative_replicas}, B={opt.baseline_replicas} ({len(tried)} evaluations)")


def _or_inf(v: float | None) -> float:
    return math.inf if v is None or math.isnan(v) else v


def _size_at(scenario: Any, profiles: Mapping[str, Any], criteria: SustainCriteria, cfg: Any,
             seeds: Sequence[int], thr: Callable[[int], float], c_s: float, c_b: float, low: float,
             peak: float, mean: float, tried: dict, max_evals: int) -> tuple[RouteOption, str]:
    """The fewest replicas at one threshold rule (``thr``: the threshold for ``S`` speculative
    replicas), and the search in words."""
    fixed_s, fixed_b = cfg.speculative_replicas, cfg.baseline_replicas
    follows = thr(1) != thr(2)  # the threshold grows with the speculative pool
    need = low if follows else min(thr(1), peak)
    s = fixed_s if fixed_s is not None else max(1, math.ceil(need / c_s - 1e-9)) if c_s > 0 else 1
    rest = peak - thr(s) if cfg.rule == "overflow" else peak  # "rate" sends all of a busy spell away
    b = fixed_b if fixed_b is not None else (max(0, math.ceil(rest / c_b - 1e-9)) if c_b > 0 else 1)
    if s == 0 and fixed_b is None:
        b = max(b, 1)  # no speculative pool: the baseline pool serves every request
    evals = 0

    def ev(n_s: int, n_b: int) -> tuple[RouteOption, dict[str, list[Any]]]:
        nonlocal evals
        key = (float(thr(n_s)), n_s, n_b)
        if key not in tried:
            evals += 1
            tried[key] = evaluate(
                scenario, profiles, criteria, name=cfg.name, speculative=cfg.speculative, s=n_s,
                baseline=cfg.baseline, b=n_b, threshold_rps=thr(n_s), window_s=cfg.window_s,
                seeds=seeds, rate=mean, rule=cfg.rule)
        return tried[key]

    steps = [f"S={s}, B={b}"]
    opt, pools = ev(s, b)
    while (not opt.carried and opt.unused_pool != "speculative" or follows and opt.unused_pool == "speculative") \
            and evals < max_evals and (fixed_s is None or fixed_b is None):
        worse = "speculative" if opt.unused_pool == "speculative" else _worse_pool(pools)
        if (worse == "baseline" or fixed_s is not None) and fixed_b is None:
            b += 1
        else:
            s += 1
        steps.append(f"S={s}, B={b}")
        opt, pools = ev(s, b)
    if opt.unused_pool == "speculative":
        steps.append(opt.unused_words())
    elif opt.carried:  # then fewer, one pool at a time, while it still carries with both pools used
        for pool in ("baseline", "speculative"):
            while evals < max_evals:
                n_s, n_b = (s, b - 1) if pool == "baseline" else (s - 1, b)
                if (pool == "baseline" and (fixed_b is not None or b <= (1 if s == 0 else 0))) or (
                        pool == "speculative" and (fixed_s is not None or s <= 1)):
                    break
                alt, _ = ev(n_s, n_b)
                if alt.unused_pool == "speculative":
                    steps.append(f"S={n_s}, B={n_b} routes nothing to the speculative pool: refused")
                    break
                steps.append(f"S={n_s}, B={n_b} {'carries' if alt.carried else 'misses'}")
                if not alt.carried:
                    break
                s, b, opt = n_s, n_b, alt
    verdict = ("carries" if opt.carried and not opt.unused_pool else "no two routes" if opt.unused_pool
               else "misses")
    said = f"S={s}, B={b} {verdict} ({opt.gpus} GPU(s), {evals} evaluation(s))"
    refused = [x for x in steps if "routes nothing" in x or "never routes" in x]
    return opt, said + (f"; {'; '.join(refused)}" if refused else "")


def _worse_pool(pools: Mapping[str, list[Any]]) -> str:
    """The pool whose own requests miss the SLO by more (largest margin over seeds)."""
    def worst(js: list[Any]) -> float:
        return max((j.margin if j is not None and j.margin is not None else 0.0 for j in js), default=0.0)
    return "baseline" if worst(pools["baseline"]) > worst(pools["speculative"]) else "speculative"
