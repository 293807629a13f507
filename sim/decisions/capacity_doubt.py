"""Does capacity's decision survive the profile's acceptance interval?

Why: ``specplan capacity`` answers from the same acceptance sample as ``simulate``; a winner, or
a speculative candidate's replica count, that holds at the sample's estimate but changes inside
its interval is not an answer ("undetermined: the profile measured N prompts for segment S;
measure about M more").

The rule is ``acceptance_doubt``'s (one home: the ends of the mix, the bisection, M, the
reason's words, ``undetermined_by``); only what is re-run at an end differs: here each
speculative candidate's capacity search and replica count on the plan's own seeds, with its
segments moved to the end (``SimulatedLoad(acceptance_shift=…)``), and the decision taken again
by ``capacity_answer``. An end changes the answer when ``acceptance_doubt.changed`` says so, or
when the candidate's replica count for the target rate differs from the estimate's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from sim.decisions.acceptance_doubt import AcceptanceDoubt, candidate_samples, changed, judge, moved
from sim.decisions.decision import Decision


def replicas_of(d: Decision, name: str) -> int | None:
    """The replicas the decision's facts give ``name`` for the target rate; None when there is no
    settled count (none carries, or the seeds leave n − 1 open: more seeds, not prompts, tell)."""
    c = next((c for c in d.facts.candidates if c.name == name), None)
    return None if c is None or c.replicas is None or c.replicas_undetermined else c.replicas


def differs(estimate: Decision, end: Decision, name: str) -> bool:
    """Whether the capacity answer at an interval's end is another: the decision changed
    (``acceptance_doubt.changed``), or ``name``'s settled replica count did (both settled)."""
    a, b = replicas_of(estimate, name), replicas_of(end, name)
    return changed(estimate, end) or (a is not None and b is not None and a != b)


def capacity_doubts(report: Any, scenario: Any, profile: Any, estimate: Decision, *, device: str = "replica",
                    engines: Mapping[str, Any] | None = None, min_requests: int = 200,
                    max_replicas: int = 256, progress: Callable[[str], None] | None = None,
                    bisect: int = 1, cache_dir: Any = None) -> tuple[AcceptanceDoubt, ...]:
    """One :class:`AcceptanceDoubt` per speculative candidate of ``report`` whose acceptance is the
    profile's; ``estimate``: ``capacity_answer(report).whole``; ``min_requests`` and
    ``max_replicas`` as ``plan_capacity`` ran (its defaults); ``cache_dir``: the plan's probe
    folder (``--out DIR/probes``), where each end's probes are kept beside the estimate's, keyed
    by the acceptance they ran at, and read back by a rerun instead of simulated again."""
    from sim.decisions.simulated_load import SimulatedLoad

    sc, names, profiles, named = searched_again_setup(report, scenario, profile, estimate)
    say = progress or (lambda _m: None)
    out = []
    for name in names:
        got = candidate_samples(sc, profiles, name)
        if got is None:
            continue
        _cand, prof, k, segs = got
        runs = [0]

        def verdict(u: float, below: bool, name: str = name, prof: Any = prof, segs: Any = segs, k: int = k,
                    runs: list[int] = runs) -> Decision:
            """The capacity decision with ``name`` searched again, its segments ``u`` of the way to
            the interval's low (``below``) or high end."""
            load = SimulatedLoad(sc, prof, report.criteria, min_requests, cache_dir, profiles=named,
                                 acceptance_shift={name: moved(segs, u, below, k)})
            say(f"{name}: capacity at {'low' if below else 'high'} end of its acceptance interval "
                f"({u:.0%} of the way)")
            return searched_again(report, sc, name, load, say, runs, device=device, engines=engines,
                                  max_replicas=max_replicas)

        out.append(judge(name, k, segs, estimate, verdict, bisect=bisect,
                         differs=lambda est, end, name=name: differs(est, end, name),
                         runs=lambda runs=runs: runs[0]))
    return tuple(out)


def searched_again_setup(report: Any, scenario: Any, profile: Any,
                         estimate: Decision) -> tuple[Any, list[str], dict[str, Any], dict[str, Any] | None]:
    """What a capacity check re-searches on: the scenario as the plan searched it, the speculative
    candidates it may search again (none when there is nothing to compare, or when the plan's
    answer is undetermined already: no estimate to hold against), every candidate's profile, and
    those profiles as ``SimulatedLoad(profiles=…)`` takes them (None without named fleets)."""
    from sim.decisions.capacity import searched_scenario
    from sim.results.runner import candidate_profiles

    sc = searched_scenario(scenario)
    if len(report.candidates) < 2 or estimate.outcome == "undetermined":
        return sc, [], {}, None
    names = [r.candidate for r in report.candidates
             if r.candidate != report.baseline and sc.candidate(r.candidate).speculates]
    profiles = candidate_profiles(sc, profile, [sc.candidate(r.candidate) for r in report.candidates]) if names else {}
    return sc, names, profiles, profiles if sc.has_named_fleets else None


def searched_again(report: Any, sc: Any, name: str, load: Any, say: Callable[[str], None], runs: list[int], *,
                   device: str, engines: Mapping[str, Any] | None, max_replicas: int) -> Decision:
    """The plan's decision with ``name``'s capacity searched, and its replicas counted, again on
    ``load`` (the candidate changed at a doubt's end; the plan's seeds, warm-started from its
    searches); the other candidates as planned. ``runs[0]`` counts the probes judged."""
    from sim.decisions.answer import capacity_answer
    from sim.decisions.capacity import _Search
    from sim.decisions.capacity_report import CandidateCapacity
    from sim.decisions.fleet_sizing import fewest_replicas
    from sim.decisions.load_scaling import arrival_rate

    r = next(c for c in report.candidates if c.candidate == name)
    search = _Search(load, r.seeds, r.fleet_replicas, report.rel_tol, report.max_evals, say)
    per = search.per_seed(name, r.seeds, arrival_rate(sc), r.per_seed)  # warm start: the estimate's
    cap = float(np.mean([s.rate for s in per])) / r.fleet_replicas
    trace = sc.workload.arrival == "trace"
    size = fewest_replicas(load, name, r.target_rate, cap if cap > 0 or not trace else r.target_rate,
                           r.seeds, report.criteria, max_replicas, {})
    runs[0] += len(load.rows)
    again = CandidateCapacity(name, per, r.seeds, r.target_rate, size.n, size.status, size.row,
                              fleet_replicas=r.fleet_replicas, operating_seeds=tuple(size.seed_rows),
                              replicas_low=size.low, replicas_below=size.below)
    at_end = dataclasses.replace(report, candidates=tuple(
        again if c.candidate == name else c for c in report.candidates))
    return capacity_answer(at_end, device=device, engines=dict(engines or {})).whole
