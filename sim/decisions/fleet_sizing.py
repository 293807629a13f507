"""Replicas each candidate needs for the scenario's own rate, by the rule `specplan capacity` uses.

Why here and not from load points: a what-if sweep's levels are coarse, and reading a replica
count off them ("the highest level that passed, so ceil(rate / that)") once gave 1 replica where
one replica could not carry the load. There is one fleet answer: the fewest replicas whose run at
the target carries it across the seeds (``sim.decisions.carry``), found by
``capacity._fewest_replicas`` and, with seeds added while the count below it is undetermined,
the same number `specplan capacity` prints. `specplan simulate --sizing` calls this;
every other fixed-fleet figure is labelled "at the scenario's fixed fleet".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sim.decisions.capacity import FleetSize, _fewest_replicas
from sim.decisions.load_scaling import arrival_rate


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
            say(f"{n}: replicas for {rate:g} req/s, {len(seeds)} seed(s)")
            out[n] = _fewest_replicas(load, n, rate, guess, seeds, criteria, max_replicas, memo)
        if not any(z.undetermined for z in out.values()) or len(seeds) >= budget:
            return out, seeds
        seeds = (*seeds, *range(max(seeds) + 1, max(seeds) + 1 + min(len(seeds), budget - len(seeds))))


def sizing_lines(rate: float, sizes: Mapping[str, FleetSize], seeds: Sequence[int]) -> list[str]:
    """The fleet answer in words, one line per candidate, as `specplan capacity` gives it."""
    out = [f"fleet for {rate:g} req/s, each candidate at its own replica count (the rule `specplan "
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


__all__ = ["fleet_sizes", "sizing_lines"]
