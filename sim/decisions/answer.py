"""Answering a fixed-fleet question: simulate, decide, and add seeds until the answer holds.

The sequential procedure (Law, *Simulation Modeling and Analysis*, comparing systems): run the
scenario's seeds; while the decision is undetermined and fewer than ``run.max_seeds`` ran, run
as many new seeds again (the next integers after the largest, so the same seeds are reused on a
rerun) and decide over all of them. It stops at a resolved answer or at the budget, and then
says "undetermined at N seeds" with how large the difference may be. Only the whole run drives
it; the windows are judged over the same seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.decisions.answer_text import Answer
from sim.decisions.decision import decide
from sim.decisions.facts import fleet_facts, replica_words
from sim.decisions.sustain import SustainCriteria, criteria_from_scenario
from sim.decisions.windows import windows


def criteria_or_none(scenario: Any) -> SustainCriteria | None:
    """The scenario's SLO as a sustain rule, or None when it sets no SLO."""
    try:
        return criteria_from_scenario(scenario)
    except SpecplanError:
        return None


def device_of(profile: Any, scenario: Any) -> str:
    """What one replica is, in words ("H200"), from the profile's timing provenance."""
    prov = getattr(getattr(profile, "timing", None), "provenance", None)
    dev = getattr(prov, "device", None)
    name = getattr(dev, "name", None)
    if isinstance(name, str) and "_" in name:  # aiconfigurator system names: h200_sxm
        name = name.split("_")[0].upper()
    return replica_words(name, scenario.fleet.gpus_per_replica)


def candidate_devices(scenario: Any, profiles: Any) -> dict[str, str] | None:
    """What one replica of each candidate's own fleet is ("4× H100"), by name; None when every
    candidate runs on [fleet] (the Facts' one device says it)."""
    if not profiles or not scenario.has_named_fleets:
        return None
    return {name: device_of(prof, scenario.for_candidate(name)) for name, prof in profiles.items()}


def with_devices(facts: Any, devices: dict[str, str] | None) -> Any:
    """``facts`` with each candidate's own device (unchanged without ``devices``)."""
    import dataclasses

    if not devices:
        return facts
    return dataclasses.replace(facts, candidates=tuple(
        dataclasses.replace(c, device=devices.get(c.name)) for c in facts.candidates))


def fleet_profile(result: Any) -> Any | None:
    """The profile of the candidates on [fleet] (the fleet a restart belongs to), if any ran."""
    sc, profiles = result.scenario, getattr(result, "profiles", None) or {}
    return next((p for name, p in profiles.items() if sc.candidate(name).fleet is None), None)


def offered(scenario: Any) -> float | None:
    w = scenario.workload
    rate = None if w.arrival == "trace" else w.mean_rate(scenario.run.duration_s)
    return None if rate is None else float(rate)  # closed-loop clients: no offered rate


def engines_of(result: Any) -> dict[str, Any]:
    """Which candidates of ``result`` the engine its fleet names can run
    (``engine_config.deployability``); {} for a result without its profiles."""
    from sim.decisions.engine_config import deployability

    profiles = getattr(result, "profiles", None)
    return deployability(result.scenario, profiles, result.candidates) if profiles else {}


def _size(z: Any) -> tuple[int | None, int | None]:
    """(replicas, lowest count not yet ruled out) from an int or such a pair."""
    if isinstance(z, tuple):
        return z[0], z[1]
    return z, z


def answer_of(result: Any, *, device: str = "replica", max_seeds: int = 0, budget_note: str = "",
              sizes: dict[str, Any] | None = None, engines: dict[str, Any] | None = None) -> Answer:
    """The decision of a finished result, whole run and windows (``sizes``: replicas each
    candidate needs, an int or (replicas, lowest undetermined count), from the capacity rule
    (``fleet_sizing.fleet_sizes``): said beside the fixed-fleet answer; ``engines``:
    ``engines_of(result)``, computed when not given)."""
    import dataclasses

    from sim.decisions.engine_config import with_engine

    sc = result.scenario
    crit = criteria_or_none(sc)
    dep = engines_of(result) if engines is None else engines
    facts = fleet_facts(result, crit, rate=offered(sc), max_seeds=max_seeds)
    if sizes:
        facts = dataclasses.replace(facts, candidates=tuple(
            dataclasses.replace(c, replicas=n, replicas_low=low)
            for c in facts.candidates for n, low in [_size(sizes.get(c.name))]))
    devices = candidate_devices(sc, getattr(result, "profiles", None))
    facts = with_engine(with_devices(dataclasses.replace(facts, device=device), devices), dep)
    whole = decide(facts)
    parts = []
    for w in windows(sc, fleet_profile(result)):
        f = fleet_facts(result, crit, t0=w.t0, t1=w.t1, window=w.label, rate=w.rate, max_seeds=max_seeds)
        parts.append(decide(with_engine(with_devices(dataclasses.replace(f, device=device), devices), dep)))
    return Answer(whole, tuple(parts), budget_note)


def with_load_limit(answer: Answer, points: Sequence[tuple[float, Any]], *, device: str = "replica") -> Answer:
    """``answer`` with the lowest load above the question's (``points``: offered fleet rate and
    result at each load point) where its winner falls out of the leaders while another candidate
    leads, judged by the same decision; unchanged when no load shows that (a load where nothing
    carries takes no advantage away)."""
    import dataclasses

    d = answer.whole
    if d.winner is None or d.facts.rate is None:
        return answer
    for rate, res in sorted(points, key=lambda p: p[0]):
        if rate <= d.facts.rate * (1 + 1e-9) or d.winner not in res.candidates:
            continue
        at = answer_of(res, device=device).whole
        if at.leaders and d.winner not in at.leaders and at.outcome != "undetermined":
            return dataclasses.replace(answer, load_limit=at)
    return answer


def with_acceptance_needed(answer: Answer, points: Sequence[tuple[float, Any]], profile: Any, *,
                           budget: int, **kw: Any) -> Answer:
    """``answer`` with the acceptance each speculative candidate needs at each load point
    (``points``: offered fleet rate and result; ``sim.decisions.acceptance_needed``)."""
    import dataclasses

    from sim.decisions.acceptance_needed import acceptance_needed

    return dataclasses.replace(answer, needs=acceptance_needed(points, profile, budget=budget, **kw))


def next_seeds(have: Sequence[int], n: int) -> list[int]:
    """``n`` new seeds: the integers after the largest one run."""
    top = max(have)
    return list(range(top + 1, top + 1 + n))


def answer_scenario(scenario: Any, profile: Any, *, candidates: Sequence[str] | None = None,
                    seeds: Sequence[int] | None = None, max_seeds: int | None = None,
                    progress: Callable[[int, int, str], None] | None = None,
                    result: Any = None, sizes: dict[str, Any] | None = None) -> tuple[Any, Answer]:
    """Simulate (or take ``result``), decide, and add seeds while undetermined (module doc)."""
    from sim.results.runner import resolve_profile, run_scenario

    prof = resolve_profile(scenario, profile)
    budget = int(max_seeds if max_seeds is not None else scenario.run.max_seeds)
    if budget < 1:
        raise SpecplanError(f"--max-seeds: must be ≥ 1, got {budget}")
    res = result if result is not None else run_scenario(scenario, prof, candidates, seeds, progress)
    start = len(res.seeds)
    device = device_of(prof, scenario)
    engines = engines_of(res)
    while True:
        ans = answer_of(res, device=device, max_seeds=max(budget, start), sizes=sizes, engines=engines)
        if ans.whole.resolved or len(res.seeds) >= budget or len(res.candidates) < 2:
            break
        more = next_seeds(res.seeds, min(len(res.seeds), budget - len(res.seeds)))
        res = res.merged(run_scenario(scenario, prof, list(res.candidates), more, progress))
    if len(res.seeds) > start:
        note = (f"seeds added until the answer was resolved: {start} → {len(res.seeds)}"
                if ans.whole.resolved else
                f"seeds added up to the budget (run.max_seeds = {budget}): {start} → {len(res.seeds)}")
    elif not ans.whole.resolved and len(res.candidates) > 1:
        note = f"the budget (run.max_seeds = {budget}) allows no more seeds"
    else:
        note = ""
    ans = with_acceptance_doubt(Answer(ans.whole, ans.windows, note), res, prof, device=device, progress=progress)
    return res, with_host_doubt(ans, res, prof, device=device, progress=progress)


def with_host_doubt(answer: Answer, result: Any, profile: Any, **kw: Any) -> Answer:
    """``answer`` with the verdict checked at the ends of each speculative candidate's assumed
    draft host time (``sim.decisions.host_doubt``); the decision itself is unchanged."""
    import dataclasses

    from sim.decisions.host_doubt import host_doubts

    return dataclasses.replace(answer, host_doubts=host_doubts(result, profile, answer.whole, **kw))


def with_acceptance_doubt(answer: Answer, result: Any, profile: Any, **kw: Any) -> Answer:
    """``answer`` with each speculative candidate's acceptance interval judged, undetermined when
    the verdict flips inside it (``sim.decisions.acceptance_doubt``)."""
    import dataclasses

    from sim.decisions.acceptance_doubt import acceptance_doubts, undetermined_by

    doubts = acceptance_doubts(result, profile, answer.whole, **kw)
    return dataclasses.replace(answer, whole=undetermined_by(answer.whole, doubts), doubts=doubts)


def with_capacity_acceptance_doubt(answer: Answer, report: Any, scenario: Any, profile: Any, **kw: Any) -> Answer:
    """``answer`` (``capacity_answer(report)``) with each speculative candidate's acceptance
    interval judged by searching its capacity again at the ends (``sim.decisions.capacity_doubt``),
    undetermined when the winner or its replica count changes inside it."""
    import dataclasses

    from sim.decisions.acceptance_doubt import undetermined_by
    from sim.decisions.capacity_doubt import capacity_doubts

    doubts = capacity_doubts(report, scenario, profile, answer.whole, **kw)
    return dataclasses.replace(answer, whole=undetermined_by(answer.whole, doubts), doubts=doubts)


def checked_capacity_answer(report: Any, scenario: Any, profile: Any, *, device: str = "replica",
                            engines: dict[str, Any] | None = None, **kw: Any) -> Answer:
    """``specplan capacity``'s answer: the plan's decision (``capacity_answer``), its acceptance
    interval judged, then its draft's assumed host time checked, as ``answer_scenario`` does for
    ``simulate`` (``kw``: ``progress``, ``cache_dir``, … of ``capacity_doubt.capacity_doubts``)."""
    kw = {"device": device, "engines": engines, **kw}
    answer = with_capacity_acceptance_doubt(capacity_answer(report, device=device, engines=engines), report,
                                            scenario, profile, **kw)
    return with_capacity_host_doubt(answer, report, scenario, profile, **kw)


def with_capacity_host_doubt(answer: Answer, report: Any, scenario: Any, profile: Any, **kw: Any) -> Answer:
    """``answer`` (capacity's) with each speculative candidate's assumed draft host time checked by
    searching its capacity again at the ends (``host_doubt.capacity_host_doubts``); the decision
    itself is unchanged."""
    import dataclasses

    from sim.decisions.host_doubt import capacity_host_doubts

    return dataclasses.replace(answer, host_doubts=capacity_host_doubts(report, scenario, profile, answer.whole,
                                                                        **kw))


def capacity_answer(report: Any, *, device: str = "replica", engines: dict[str, Any] | None = None) -> Answer:
    """The decision of a capacity plan (``sim.decisions.capacity.plan_capacity``; ``engines``:
    ``engine_config.deployability`` of its candidates)."""
    from sim.decisions.engine_config import with_engine
    from sim.decisions.facts import capacity_facts

    d = decide(with_engine(capacity_facts(report, max_seeds=report.max_seeds, device=device,
                                          devices=getattr(report, "devices", None)), engines or {}))
    n = len(d.facts.seeds)
    start = report.start_seeds or n
    open_ = [c for c in report.candidates if getattr(c, "replicas_undetermined", False)]
    if n > start:
        note = (f"seeds added until the capacities and replica counts were resolved: {start} → {n}"
                if d.resolved and not open_ else
                f"seeds added up to the budget (run.max_seeds = {report.max_seeds}): {start} → {n}")
    elif not d.resolved:
        note = f"the budget (run.max_seeds = {report.max_seeds}) allows no more seeds"
    else:
        note = ""
    if open_:
        note = "; ".join([*([note] if note else []), "replica count undetermined at the budget: " + ", ".join(
            f"{c.candidate} {c.replicas_low} or {c.replicas} ({c.replicas_below})" for c in open_)])
    return Answer(d, (), note)
