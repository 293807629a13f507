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

import numpy as np
import polars as pl

from sim.contracts.candidate import Candidate
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.model import serving_engine
from sim.model.acceptance import AcceptanceModel
from sim.model.cold_start import resolved as resolved_restart
from sim.model.engine import Fleet, FleetSpec, StepTimer
from sim.model.engine_defaults import EngineLimits, engine_limits, model_length
from sim.model.kv_capacity import check_replica_shape, kv_capacity
from sim.model.prefix_blocks import block_ids
from sim.model.speculation import SpeculationPolicy, policy_from_candidate
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer
from sim.model.workload import RequestSpec, generate_requests
from sim.results import metric_names as mn
from sim.results.cost import fleet_cost_usd
from sim.results.metrics import measured_window, summarize, with_request_overhead
from sim.results.records import ITL_SCHEMA, itl_frame, itl_samples, requests_frame, steps_frame
from sim.results.run_notes import extrapolations, run_notes, too_long_notes

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


def prefix_caching(scenario: Scenario, candidate: Candidate) -> bool:
    """Whether ``candidate`` caches prompt prefixes: its own setting, else the fleet engine's."""
    return candidate.prefix_caching_on(scenario.fleet.engine.prefix_caching)


def scheduler_config(
    scenario: Scenario, kv_blocks: int, limits: EngineLimits | None = None,
    caching: bool = False, full_width: bool = False, max_model_len: int | None = None,
) -> SchedulerConfig:
    """The per-replica engine limits of a scenario (``limits``: unset ones already defaulted
    for the profile's device; without, specplan's profile-less defaults; ``caching``: prefix
    caching on; ``full_width``: rows without a proposal verify ``k`` filled slots,
    ``sim.model.serving_engine``; ``max_model_len``: longer requests rejected on arrival)."""
    eng = scenario.fleet.engine
    adm = scenario.fleet.admission
    lim = limits if limits is not None else engine_limits(scenario, None)
    return SchedulerConfig(
        max_num_seqs=lim.max_num_seqs,
        max_num_batched_tokens=lim.max_num_batched_tokens,
        block_size=eng.block_size,
        kv_blocks=kv_blocks,
        chunked_prefill=eng.chunked_prefill,
        queue_limit=adm.queue_limit,
        max_queue_time_s=adm.max_queue_time_s,
        prefix_caching=caching,
        full_width_drafts=full_width,
        max_model_len=max_model_len,
    )


def acceptance_model(
    scenario: Scenario, profile: Profile, candidate: Candidate
) -> AcceptanceModel | None:
    """The candidate's acceptance (assumed rates win over the profile); None for the baseline."""
    if not candidate.speculates:
        return None
    assert candidate.proposer is not None
    if candidate.assumed_acceptance is not None:
        model = AcceptanceModel.from_assumed(
            candidate.assumed_acceptance, proposer=candidate.proposer
        )
    elif candidate.acceptance_trace is not None:
        model = _trace_model(scenario, candidate)
    else:
        keys = {}
        fallbacks = {}
        for seg in scenario.workload.segments:
            if seg.acceptance is None:
                raise SpecplanError(
                    f"{scenario.origin or 'scenario'}: workload.segments: segment {seg.name!r} "
                    f"has no acceptance key, needed by candidate {candidate.name!r}"
                )
            keys[seg.name] = (seg.acceptance.task, seg.acceptance.language, seg.temperature)
            if seg.acceptance.fallback is not None:
                fallbacks[seg.name] = seg.acceptance.fallback
        try:
            model = AcceptanceModel.from_profile(profile, candidate.proposer, keys, fallbacks)
        except SpecplanError as exc:  # the scenario's segments ask; the profile lacks the match
            raise SpecplanError(f"{scenario.origin or 'scenario'}: candidate {candidate.name!r}: {exc}") from None
    try:
        model.check_k(candidate.max_k)
    except SpecplanError as exc:  # name the file that asks for that k, and the one that limits it
        raise SpecplanError(
            f"{scenario.origin or 'scenario'}: candidates[{candidate.name}]: {exc} in "
            f"{profile.origin if not candidate.assumed_acceptance else 'assumed_acceptance'}"
        ) from None
    return model


def _trace_model(scenario: Scenario, candidate: Candidate) -> AcceptanceModel:
    """Acceptance from the candidate's per-request trace (replayed, or drawn independently)."""
    from sim.contracts.input_limits import check_file
    from sim.contracts.scenario_fields import resolve_path
    from sim.model.trace_acceptance import load_trace, trace_acceptance

    path = str(resolve_path(str(candidate.acceptance_trace), scenario.base_dir))
    try:
        check_file(path, "acceptance trace")
    except SpecplanError as exc:  # a file that is missing or no file: name the field that points at it
        raise SpecplanError(f"{scenario.origin or 'scenario'}: candidates[{candidate.name}].acceptance_trace: "
                            f"{exc}") from None
    records = load_trace(path, candidate.trace_format)
    keys = None
    if candidate.trace_format == "specplan":
        keys = {}
        for seg in scenario.workload.segments:
            if seg.acceptance is None:
                raise SpecplanError(f"{scenario.origin or 'scenario'}: workload.segments: segment {seg.name!r} "
                                    f"has no acceptance key, needed by candidate {candidate.name!r}")
            keys[seg.name] = (seg.acceptance.task, seg.acceptance.language, seg.temperature)
    assert candidate.proposer is not None
    model, chosen = trace_acceptance(records, candidate.max_k, keys, proposer=candidate.proposer, source=path)
    if candidate.trace_replay:
        model.traces = chosen
        model.source += ", replayed per request"
    else:
        model.source += ", independent draws at each traced request's rates"
    return model


def _with_blocks(reqs: list, specs: Sequence[RequestSpec], block_size: int | None) -> list:
    """``reqs`` with the ids of their prompts' shareable blocks (prefix caching on: a block size).
    (Closed-loop clients name theirs over their whole pool: ``sim.model.clients.run_clients``.)"""
    if block_size is not None:
        for req, ids in zip(reqs, block_ids(specs, block_size), strict=True):
            req.prefix = ids
    return reqs


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
    work_ss, accept_ss = np.random.SeedSequence(seed).spawn(2)
    if scenario.workload.arrival == "concurrency":
        if requests is not None:
            raise ValueError("closed-loop clients make their own requests; pass none")
        specs: list[RequestSpec] = []
    else:
        specs = list(requests) if requests is not None else generate_requests(scenario, rng=work_ss)
    policy: SpeculationPolicy = policy_from_candidate(cand)
    proposer = cand.proposer if policy.speculates else None
    eng = scenario.fleet.engine
    check_replica_shape(scenario.fleet.tensor_parallel_size, profile, scenario.origin)
    limits = engine_limits(scenario, profile)
    length = model_length(scenario, profile, cand)
    engine = serving_engine.resolve(eng, profile)
    try:
        kv = kv_capacity(profile, eng.memory_utilization, eng.block_size, proposer)
    except SpecplanError as exc:  # the scenario's engine settings ask for what the profile lacks
        raise SpecplanError(
            f"{scenario.origin or 'scenario'}: fleet.engine (memory_utilization "
            f"{eng.memory_utilization:g}, block_size {eng.block_size}), candidate {cand.name!r}: {exc}"
        ) from None
    timer = step_timer
    if timer is None:
        timer = ProfileStepTimer(profile, kv_layout=eng.kv_layout)
    if proposer is not None and isinstance(timer, ProfileStepTimer):
        timer.check_proposer(proposer, policy.k_max)
    if isinstance(timer, ProfileStepTimer):  # the drafter's pass over prompt tokens, every step
        timer.attach_proposer(proposer)
    model = acceptance_model(scenario, profile, cand) if policy.speculates else None
    if model is not None and acceptance_power != 1.0:
        model = model.powered(acceptance_power)
    if model is not None and acceptance_shift:
        from sim.model.acceptance_shift import shifted

        model = shifted(model, acceptance_shift, cand.max_k)
    rates_ss, draw_ss = accept_ss.spawn(2)
    caching = prefix_caching(scenario, cand)
    restart = resolved_restart(scenario.fleet.restart, profile)  # seconds: the scenario's, the profile's, assumed
    spec = FleetSpec(
        scheduler=scheduler_config(scenario, kv.kv_blocks, limits, caching, engine.full_width_drafts,
                                   length.tokens),
        policy=policy,
        proposer=proposer,
        replicas=scenario.fleet.replicas,
        routing=scenario.fleet.routing,
        restart=restart,
        drain=scenario.run.drain,
        duration_s=scenario.run.duration_s,
    )
    if scenario.workload.arrival == "concurrency":  # closed loop: requests made as clients send
        from sim.model.clients import run_clients

        run = run_clients(scenario, spec, timer, work_ss, rates_ss, draw_ss,
                          lambda specs, rng: _build_requests(specs, model, rng),
                          eng.block_size if caching else None)
    else:
        reqs = _with_blocks(_build_requests(specs, model, np.random.default_rng(rates_ss)), specs,
                            eng.block_size if caching else None)
        # records straight from the arrays
        run = Fleet(spec, timer, np.random.default_rng(draw_ss)).run(reqs, write_back=False)
    req_df = with_request_overhead(requests_frame(run, cand.name, seed, scenario.run.warmup_s),
                                   scenario.fleet.request_overhead)
    step_df = steps_frame(run, cand.name, seed)
    itl_df = itl_frame(run, cand.name, seed) if keep_itl else itl_samples(run)
    queue_log = run.queue_log
    large = len(run.requests) >= COLLECT_REQUESTS
    run = reqs = None  # type: ignore[assignment]  # the frames hold what the summary reads
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


def _build_requests(
    specs: Sequence[RequestSpec], model: AcceptanceModel | None, rng: np.random.Generator
) -> list[Request]:
    out = []
    drawn = (model.draw_requests([s.segment for s in specs], rng) if model is not None and model.traces is None
             else None)
    for i, s in enumerate(specs):
        neg = None
        proposal = 1.0
        trace = None
        if drawn is not None:
            neg, proposal = drawn[i]
        elif model is not None:
            from sim.model.trace_acceptance import draw_trace_request

            rates, proposal, trace = draw_trace_request(model, model.traces, s.segment, rng, s.output_tokens)
            neg = [-r for r in rates.tolist()]
        req = Request(i, s.id, s.arrival_s, s.prompt_tokens, s.output_tokens, s.segment, s.timeout_s, neg)
        req.proposal = proposal
        if trace is not None:
            req.replay = trace
            req.proposes = trace.layout == "positions" or trace.values[0] >= 0
        out.append(req)
    return out
