"""One replication: a scenario's workload for one seed, served by one candidate, as frames.

Random streams come from ``SeedSequence(seed).spawn(2)``: the first drives the workload
(arrivals, segments, lengths — identical for every candidate of a seed, so candidates are
compared on the same requests), the second acceptance (each request's survival rates, drawn
once at admission, and every step's accepted count).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from sim.contracts.candidate import Candidate
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.model.assembly import assemble, fly
from sim.model.drivers.engine import StepTimer
from sim.results import metric_names as mn
from sim.results.cost import fleet_cost_usd
from sim.results.metrics import measured_window, summarize, with_request_overhead
from sim.results.records import ITL_SCHEMA, itl_frame, itl_samples, requests_frame, steps_frame
from sim.results.run_notes import extrapolations, run_notes, too_long_notes
from sim.workload.workload import RequestSpec

COLLECT_REQUESTS = 100_000
"""A run of at least this many requests is collected as soon as its records are built, before
its summary: the simulated fleet is a reference cycle (replica <-> fleet, SimPy's env <->
processes), so its planner arrays and request objects otherwise wait for the collector's schedule
and live on into the summary and the next run (~700 MB at 10^6 requests; its logs, the largest
part on a GPU hour, are let go at the run's end without it: ``compiled_replica.release``). Not by ITL samples or
steps: a full collection costs ~60 ms in a loaded process, 10 % of a GPU hour's run, and
collecting its logs early lowered no measured peak (the peak there is the steps' concatenation)."""


@dataclass(frozen=True)
class RunResult:
    """Frames of one candidate × seed."""

    candidate: str
    seed: int
    requests: pl.DataFrame
    steps: pl.DataFrame
    itl: pl.DataFrame
    """Per-burst gaps (``id``, ``gap_s``): the ITL samples behind the summary."""
    summary: pl.DataFrame
    """One row for ``all`` and one per segment (columns: docs/architecture.md)."""
    notes: tuple[str, ...] = ()
    """Extrapolation and approximation notes."""
    sources: tuple[str, ...] = ()
    """Provenance lines of what this run used (acceptance sections, assumed rates)."""
    kv_blocks: int = 0
    window: tuple[float, float] = (0.0, 0.0)
    """Measured window ``[warmup_s, end]`` in simulated seconds."""
    extra: dict[str, Any] = field(default_factory=dict)


def _prefix_shared(scenario: Scenario, specs: Sequence[RequestSpec]) -> bool:
    """Whether the requests say which prompt tokens they share (once per run, after it): the
    specs' spans, or for closed-loop clients, which make theirs as they go, the segments."""
    if scenario.workload.arrival == "concurrency":
        return any(s.shared_prefix_tokens or s.documents or s.conversation for s in scenario.workload.segments)
    return any(s.prefix_spans for s in specs)


def _candidate(scenario: Scenario, candidate: Candidate | str) -> Candidate:
    return scenario.candidate(candidate) if isinstance(candidate, str) else candidate


def simulate_once(
    scenario: Scenario,
    profile: Profile,
    candidate: Candidate | str,
    seed: int,
    step_timer: StepTimer | None = None,
    *,
    requests: Sequence[RequestSpec] | None = None,
    acceptance_power: float = 1.0,
    acceptance_shift: Mapping[str, float] | None = None,
    keep_itl: bool = True,
) -> RunResult:
    """Simulate ``candidate`` on ``seed``'s workload; ``requests`` may be passed pre-generated
    (they must be ``generate_requests(scenario, rng=SeedSequence(seed).spawn(2)[0])``);
    ``acceptance_power``: survival rates raised to it (``AcceptanceModel.powered``), what the
    break-even acceptance search varies; ``acceptance_shift``: segment → mean acceptance length
    at the candidate's k (``acceptance_shift.shifted``), what the acceptance interval's ends
    are simulated at (``sim.decisions.acceptance_doubt``). ``keep_itl`` false: the result's ``itl`` is empty (the
    summary read the samples; a scenario run keeps none, and building the frame's constant
    columns cost memory)."""
    cand = _candidate(scenario, candidate)
    a = assemble(scenario, profile, cand, seed, step_timer, requests=requests,
                 acceptance_power=acceptance_power, acceptance_shift=acceptance_shift)
    policy, timer, model, engine, limits, length, kv, caching, specs = (
        a.policy, a.timer, a.model, a.engine, a.limits, a.length, a.kv, a.caching, a.specs)
    run = fly(a)
    req_df = with_request_overhead(requests_frame(run, cand.name, seed, scenario.run.warmup_s),
                                   scenario.fleet.request_overhead)
    step_df = steps_frame(run, cand.name, seed)
    itl_df = itl_frame(run, cand.name, seed) if keep_itl else itl_samples(run)
    queue_log = run.queue_log
    large = len(run.requests) >= COLLECT_REQUESTS
    run = a = None  # type: ignore[assignment]  # the frames hold what the summary reads
    if large:  # (COLLECT_REQUESTS: the fleet is a reference cycle)
        gc.collect()
    t0, t1 = measured_window(req_df, scenario.run.warmup_s, scenario.run.duration_s)
    fl = scenario.fleet
    # billed over the arrival window, as the decision bills it (sim/decisions/facts.py): at a
    # fixed fleet, equal good answers cost the same however long each backlog took to drain
    cost = fleet_cost_usd(
        scenario.run.duration_s - scenario.run.warmup_s, fl.replicas, fl.price_per_gpu_hour, fl.draft_price_per_hour,
        speculative=policy.speculates, gpus_per_replica=fl.gpus_per_replica,
    )
    summary = summarize(
        req_df,
        step_df,
        itl_df,
        segments=scenario.workload.segment_names,
        slo_ms=scenario.slo.limits,
        warmup_s=scenario.run.warmup_s,
        duration_s=scenario.run.duration_s,
        replicas=fl.replicas,
        cost_total_usd=cost,
        keys={mn.CANDIDATE: cand.name, mn.SEED: seed},
        queue_log=queue_log,
        speculates=policy.speculates,
    )
    extrap, timer_steps = extrapolations(timer)
    notes, sources = run_notes(scenario, cand, seed, timer, extrap, req_df, step_df, model,
                                policy.k_max, limits.source, profile.timing_flags,
                                _prefix_shared(scenario, specs) if caching else None)
    # the context length rides on the engine's line (a line of its own would not fit the screen)
    sources.append(engine.source_line if length.tokens is None else f"{engine.source_line}; {length.source}")
    notes.extend(too_long_notes(cand.name, seed, length, req_df))
    if not keep_itl:
        itl_df = pl.DataFrame(schema=ITL_SCHEMA)
    return RunResult(
        cand.name, seed, req_df, step_df, itl_df, summary, tuple(notes), tuple(sources),
        kv.kv_blocks, (t0, t1),
        {"extrapolations": extrap or {}, "timer_steps": timer_steps},
    )
