"""Building one simulated run from a scenario, a profile and a candidate: the workload's
requests, the acceptance model, the engine limits, the KV capacity, the step timer and the fleet.

Why here: results only collects what a run did (frames, summary, notes); what a run *is* —
which engine, which limits, which acceptance, which requests — is the model's business, so
``simulate_once`` calls :func:`assemble` and :func:`fly` and never reaches into the rooms it
would otherwise have to re-enter one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.candidate import Candidate
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.model import serving_engine
from sim.model.acceptance import AcceptanceModel
from sim.model.cold_start import resolved as resolved_restart
from sim.model.drivers.engine import Fleet, FleetSpec, StepTimer
from sim.model.engine_defaults import EngineLimits, engine_limits, model_length
from sim.model.kv_capacity import check_replica_shape, kv_capacity
from sim.model.speculation import SpeculationPolicy, policy_from_candidate
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_protocol import FleetRun
from sim.model.step_time import ProfileStepTimer
from sim.workload.prefix_blocks import block_ids
from sim.workload.workload import RequestSpec, generate_requests


def prefix_caching(scenario: Scenario, candidate: Candidate) -> bool:
    """Whether ``candidate`` caches prompt prefixes: its own setting, else the fleet engine's."""
    return candidate.prefix_caching_on(scenario.fleet.engine.prefix_caching)


def scheduler_config(
    scenario: Scenario, kv_blocks: int, limits: EngineLimits | None = None,
    caching: bool = False, full_width: bool = False,
) -> SchedulerConfig:
    """One replica's planner settings: ``limits`` (the engine's, built once by
    ``engine_limits``; without, specplan's profile-less defaults) passed on as they are, plus
    the scenario's admission, the KV capacity, ``caching`` (prefix caching on) and
    ``full_width`` (rows without a proposal verify ``k`` filled slots, ``sim.model.serving_engine``)."""
    adm = scenario.fleet.admission
    lim = limits if limits is not None else engine_limits(scenario, None)
    return SchedulerConfig(lim, kv_blocks, queue_limit=adm.queue_limit,
                           max_queue_time_s=adm.max_queue_time_s, prefix_caching=caching,
                           full_width_drafts=full_width)


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


def with_blocks(reqs: list, specs: Sequence[RequestSpec], block_size: int | None) -> list:
    """``reqs`` with the ids of their prompts' shareable blocks (prefix caching on: a block size).
    (Closed-loop clients name theirs over their whole pool: ``sim.model.drivers.clients.run_clients``.)"""
    if block_size is not None:
        for req, ids in zip(reqs, block_ids(specs, block_size), strict=True):
            req.prefix = ids
    return reqs


@dataclass(eq=False)
class Assembled:
    """Everything one run is made of, before it runs (``fly`` runs it)."""

    scenario: Scenario
    candidate: Candidate
    specs: list[RequestSpec]
    policy: SpeculationPolicy
    timer: Any
    model: AcceptanceModel | None
    engine: Any
    limits: EngineLimits
    length: Any
    kv: Any
    caching: bool
    spec: FleetSpec
    work_ss: np.random.SeedSequence
    rates_ss: np.random.SeedSequence
    draw_ss: np.random.SeedSequence


def assemble(
    scenario: Scenario,
    profile: Profile,
    cand: Candidate,
    seed: int,
    step_timer: StepTimer | None = None,
    *,
    requests: Sequence[RequestSpec] | None = None,
    acceptance_power: float = 1.0,
    acceptance_shift: Mapping[str, float] | None = None,
) -> Assembled:
    """One run of ``cand`` on ``seed``'s workload, built (``sim.results.simulation.simulate_once``
    documents the arguments)."""
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
    length = model_length(scenario, profile, cand)
    limits = engine_limits(scenario, profile, max_model_len=length.tokens)
    engine = serving_engine.resolve(eng, profile)
    try:
        kv = kv_capacity(profile, eng.memory_utilization, limits.block_size, proposer)
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
        scheduler=scheduler_config(scenario, kv.kv_blocks, limits, caching, engine.full_width_drafts),
        policy=policy,
        proposer=proposer,
        replicas=scenario.fleet.replicas,
        routing=scenario.fleet.routing,
        restart=restart,
        drain=scenario.run.drain,
        duration_s=scenario.run.duration_s,
    )
    return Assembled(scenario, cand, specs, policy, timer, model, engine, limits, length, kv, caching, spec,
                     work_ss, rates_ss, draw_ss)


def fly(a: Assembled) -> FleetRun:
    """Run what ``assemble`` built: closed-loop clients make their requests as they send them;
    otherwise the workload's requests, with their prompts' block ids where prefix caching is on."""
    sc, bs = a.scenario, a.limits.block_size
    model = a.model
    if sc.workload.arrival == "concurrency":
        from sim.model.drivers.clients import run_clients

        return run_clients(sc, a.spec, a.timer, a.work_ss, a.rates_ss, a.draw_ss,
                           lambda specs, rng: build_requests(specs, model, rng),
                           bs if a.caching else None)
    reqs = with_blocks(build_requests(a.specs, model, np.random.default_rng(a.rates_ss)), a.specs,
                       bs if a.caching else None)
    # records straight from the arrays
    return Fleet(a.spec, a.timer, np.random.default_rng(a.draw_ss)).run(reqs, write_back=False)


def build_requests(
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
