"""Replicas each candidate needs for the scenario's own rate, by the rule `specplan capacity` uses.

Why here and not from load points: a what-if sweep's levels are coarse, and reading a replica
count off them ("the highest level that passed, so ceil(rate / that)") once gave 1 replica where
one replica could not carry the load. There is one fleet answer: the fewest replicas whose run at
the target carries it across the seeds (``sim.decisions.carry``), found by ``fewest_replicas``
(here; `specplan capacity` calls it, seeds added while the count below is undetermined).
`specplan simulate --sizing` runs the same search at the scenario's rate (``fleet_sizes``);
every other fixed-fleet figure is labelled "at the scenario's fixed fleet".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.decisions.load_scaling import arrival_rate
from sim.results.plain_numbers import rate as plain_rate


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


@dataclass(frozen=True)
class FleetSize:
    """The fewest replicas that carry the target (``sim.decisions.carry``, across seeds) and
    how sure that is: ``low`` < ``n`` when ``n − 1`` is undetermined at these seeds."""

    n: int | None
    low: int | None
    status: str
    row: dict[str, Any] | None
    seed_rows: list[dict[str, Any]]
    below: str = ""
    """What ``n − 1`` replicas showed ("cannot carry: TTFT p95 1.3–1.5 × its limit over 2 seeds")."""

    @property
    def undetermined(self) -> bool:
        return self.n is not None and self.low is not None and self.low < self.n


def fewest_replicas(load: Any, name: str, target: float, cap: float,
                     seeds: Sequence[int], criteria: Any, max_replicas: int,
                     memo: dict[tuple[str, int, int], tuple[Any, dict[str, Any]]] | None = None) -> FleetSize:
    """Smallest n whose fleet carries ``target`` across ``seeds`` (every check's 95 % bound
    within the SLO: ``carry_of``, the rule ``simulate`` judges a fixed fleet by), its mean row
    and per-seed rows; and whether n − 1 is undetermined (then ``low`` = n − 1).

    Starts at ``ceil(target / capacity per replica)``, gallops (1, 2, 4, … away) to a count
    that carries and one that does not, then bisects: more replicas never serve a rate worse,
    so this is the same monotone search as the rate's, on integers. ``memo`` keeps each
    (candidate, replicas, seed) probe, so seeds added later cost only their own runs."""
    from sim.decisions.carry import carry_of, seed_ratios

    memo = {} if memo is None else memo

    def ok(n: int) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
        per: list[tuple[Any, dict[str, Any]]] = []
        for sd in seeds:
            if (name, n, sd) not in memo:
                probe = load.probe(name, target, sd, n)
                row = load.rows[-1]
                memo[(name, n, sd)] = (seed_ratios(criteria, probe, row), row)
            per.append(memo[(name, n, sd)])
        rows = [r for _, r in per]
        return carry_of([x for x, _ in per]), mean_row(rows), rows

    if not cap > 0:
        return FleetSize(None, None, "no capacity found: more replicas cannot help a per-request SLO", None, [])
    n = min(max(1, math.ceil(target / cap)), max_replicas)
    cache: dict[int, tuple[Any, dict[str, Any], list[dict[str, Any]]]] = {}

    def check(m: int) -> bool:
        if m not in cache:
            cache[m] = ok(m)
        return cache[m][0].verdict == "carries"

    # gallop to a carrying count, then bisect between the last one that does not and the first that does
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
                return FleetSize(None, None, f"does not carry the target with {max_replicas} replicas", None, [])
    while good - bad > 1:
        mid = (good + bad) // 2
        if check(mid):
            good = mid
        else:
            bad = mid
    below = cache.get(good - 1)
    low = good - 1 if below is not None and below[0].verdict == "undetermined" else good
    said = "" if below is None else f"{good - 1}: {below[0].verdict} ({below[0].words()})"
    at = cache[good][0]
    return FleetSize(good, low, f"carries across {len(seeds)} seed(s) ({at.words()})", cache[good][1],
                     cache[good][2], said)


def fleet_sizes(scenario: Any, profile: Any, *, candidates: Sequence[str] | None = None,
                seeds: Sequence[int] | None = None, max_seeds: int | None = None,
                max_replicas: int = 256, min_requests: int = 200,
                progress: Callable[[str], None] | None = None) -> tuple[dict[str, FleetSize], tuple[int, ...]]:
    """Each candidate's fewest replicas for the scenario's mean rate, and the seeds it rests on
    (more than ``seeds`` when a count below one was undetermined and ``max_seeds`` allowed)."""
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.decisions.sustain import criteria_from_scenario
    from sim.results.runner import candidate_profiles

    rate = arrival_rate(scenario)
    names = list(candidates) if candidates else scenario.candidate_names
    profiles = candidate_profiles(scenario, profile, [scenario.candidate(n) for n in names])
    base = next((profiles[n] for n in names if scenario.candidate(n).fleet is None), profiles[names[0]])
    if not scenario.run.drain:
        scenario = scenario.with_overrides({"run.drain": True})
    criteria = criteria_from_scenario(scenario)
    load = SimulatedLoad(scenario, base, criteria, min_requests,
                         profiles=profiles if scenario.has_named_fleets else None)
    seeds = tuple(int(s) for s in (seeds if seeds is not None else scenario.run.seeds))
    budget = max(len(seeds), int(max_seeds if max_seeds is not None else scenario.run.max_seeds))
    guess = rate / max(1, int(scenario.fleet.replicas))  # start the search at the scenario's fleet
    memo: dict[tuple[str, int, int], tuple[Any, dict[str, Any]]] = {}
    say = progress or (lambda _m: None)
    while True:
        out = {}
        for n in names:
            say(f"{n}: replicas for {plain_rate(rate)}, {len(seeds)} seed(s)")
            out[n] = fewest_replicas(load, n, rate, guess, seeds, criteria, max_replicas, memo)
        if not any(z.undetermined for z in out.values()) or len(seeds) >= budget:
            return out, seeds
        seeds = (*seeds, *range(max(seeds) + 1, max(seeds) + 1 + min(len(seeds), budget - len(seeds))))


def sizing_lines(rate: float, sizes: Mapping[str, FleetSize], seeds: Sequence[int]) -> list[str]:
    """The fleet answer in words, one line per candidate, as `specplan capacity` gives it."""
    out = [f"fleet for {plain_rate(rate)}, each candidate at its own replica count (the rule `specplan "
           f"capacity` uses: every SLO check's 95 % bound within its limit over {len(seeds)} seed(s)):"]
    for name, z in sizes.items():
        if z.n is None:
            out.append(f"  {name}: {z.status}")
        elif z.undetermined:
            out.append(f"  {name}: {z.low} or {z.n} replica(s) ({z.n} carry it; {z.below}, "
                       f"undetermined at the budget)")
        else:
            below = f"; {z.below}" if z.below else ""
            out.append(f"  {name}: {z.n} replica(s) ({z.status}{below})")
    return out


__all__ = ["FleetSize", "fewest_replicas", "fleet_sizes", "mean_row", "sizing_lines"]
