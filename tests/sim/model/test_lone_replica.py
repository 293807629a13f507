"""A lone replica runs in the fleet kernel (``fleet_kernels._alone``): with nothing to route, its
arrivals are taken inline (``arrival_kernels.advance_alone``), not as one emulated event each, and
the records, the queue log and the run's end are those of one SimPy event per step (the reference
semantics, each step priced in Python), bit for bit. The corners named here: an arrival at the
very instant the run stops (SimPy pops the stop first: it was scheduled first), and a replica
back from a restart, which runs alone only once the events its restart left queued have passed
(they still move SimPy's clock)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.fleet_config import RestartConfig
from sim.model import timer_packing
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.speculation import OFF, SpeculationPolicy
from sim.model.step_plan import EngineLimits, Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer
from sim.results.records import itl_frame, requests_frame, steps_frame
from tests.sim.model.test_properties import _PROFILE, _copy, fleets


def _run(spec: FleetSpec, reqs: list[Request], python: bool):
    """``(replica kinds, run)``: compiled (a profile's timer packed) or each step priced in Python
    (one SimPy event per step, the reference)."""
    fleet = Fleet(spec, ProfileStepTimer(_PROFILE), np.random.default_rng(0))
    with pytest.MonkeyPatch.context() as mp:
        if python:
            mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
        run = fleet.run(_copy(reqs))
    return {type(rep).__name__ for rep in fleet.replicas}, run


def _records(run) -> tuple:
    return (requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0), itl_frame(run, "c", 0),
            run.queue_log, run.end_s)


def _same(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.equals(y) if isinstance(x, pl.DataFrame) else x == y, (x, y)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.sampled_from(["drain", "at an arrival", "random"]), st.integers(0, 10**6),
       st.floats(0.1, 4.0))
def test_a_lone_replica_in_the_fleet_kernel_gives_simpys_records(case, stop, pick, stop_s) -> None:
    """One replica, restarted or not, drained or stopped (also at the instant of an arrival):
    the fleet kernel's records, queue log and end equal SimPy's."""
    spec, reqs = case
    restart = spec.restart and replace(spec.restart, replica=0)
    spec = replace(spec, replicas=1, restart=restart, proposer="ngram" if spec.proposer else None)
    if stop != "drain":
        times = [r.arrival_s for r in reqs if r.arrival_s > 0]
        at = times[pick % len(times)] if stop == "at an arrival" and times else stop_s
        spec = replace(spec, drain=False, duration_s=at)
    kinds, compiled = _run(spec, reqs, python=False)
    assert kinds == {"RoutedReplica"}, "a lone replica no longer runs in the fleet kernel"
    _same(_records(compiled), _records(_run(spec, reqs, python=True)[1]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_a_fleet_run_ends_at_simpys_last_event(case) -> None:
    """A run's end (``FleetRun.end_s``) is SimPy's clock after its last event, also when the last
    thing to happen is a replica's step that ran compiled, between two emulated events."""
    spec, reqs = case
    spec = replace(spec, proposer="ngram" if spec.proposer else None)
    assert _run(spec, reqs, python=False)[1].end_s == _run(spec, reqs, python=True)[1].end_s


def _one(arrivals: list[float], restart: RestartConfig | None = None, stop_s: float | None = None):
    reqs = [Request(i, i, float(t), 16, 40, "s", None, [-0.5, -0.2]) for i, t in enumerate(arrivals)]
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=200)
    spec = FleetSpec(cfg, OFF, replicas=1, restart=restart, drain=stop_s is None, duration_s=stop_s)
    return spec, reqs


def test_an_arrival_at_the_stop_instant_is_never_handed_over() -> None:
    """The stop is scheduled when the run starts, before any arrival's timeout, so at a tie SimPy
    pops it first: a request arriving at the stop never reaches the queue (its log has no entry
    then), while one arriving just before it does, and starts the step the stop cuts."""
    stop = 0.5
    before = float(np.nextafter(stop, 0.0))
    spec, reqs = _one([0.0, before, stop], stop_s=stop)
    kinds, compiled = _run(spec, reqs, python=False)
    assert kinds == {"RoutedReplica"}
    log = np.frombuffer(compiled.queue_log, np.float64).reshape(-1, 2)
    assert log[log[:, 1] > 0, 0].tolist() == [0.0, before]  # entered the queue
    assert log[log[:, 1] < 0, 0].tolist() == [0.0, before]  # and left it for a step
    assert [r.outcome for r in compiled.requests] == ["completed", "unfinished", "unfinished"]
    _same(_records(compiled), _records(_run(spec, reqs, python=True)[1]))


@pytest.mark.parametrize("later", [False, True])
def test_after_a_restart_a_lone_replica_ends_when_the_step_it_dropped_would_have(later: bool) -> None:
    """Restarted mid-step with nothing to carry on (its work dropped, no cold start): the step's
    end stays queued in SimPy with nobody waiting, so the clock still reaches it (the run's end,
    when nothing arrives later); a later arrival is then served alone. End and records as SimPy's."""
    spec, reqs = _one([0.0])
    steps = steps_frame(_run(spec, reqs, python=True)[1], "c", 0)
    start, dt = steps["t_start_s"][3], steps["duration_s"][3]
    restart = RestartConfig(at_s=start + dt / 2, replica=0, cold_start_s=0.0, on_restart="drop",
                            fallback="same")
    spec, reqs = _one([0.0, start + 3 * dt] if later else [0.0], restart=restart)
    kinds, compiled = _run(spec, reqs, python=False)
    assert kinds == {"RoutedReplica"}
    python = _run(spec, reqs, python=True)[1]
    assert [r.outcome for r in python.requests] == ["rejected", "completed"][: len(reqs)]
    if not later:
        assert python.end_s == start + dt
    _same(_records(compiled), _records(python))


def test_an_arrival_refused_while_the_replica_idles_does_not_wake_its_planner() -> None:
    """A lone replica idles; a prompt longer than the token budget (no chunked prefill) arrives
    and is refused. SimPy wakes a replica only for a request it queues, so the KV-pressure policy
    is not consulted then; the kernel used to plan at that arrival and switch speculation back
    on 0.13 s early (found by the property above in a fresh clone's `make test`)."""
    limits = EngineLimits(max_num_seqs=1, max_num_batched_tokens=4, block_size=1, chunked_prefill=False)
    spec = FleetSpec(scheduler=SchedulerConfig(limits=limits, kv_blocks=7),
                     policy=SpeculationPolicy(name="kv_fallback", k=1, window_s=0.1, kv_off_above=0.5, kv_on_below=0.2),
                     proposer="ngram", replicas=1, routing="round_robin", drain=True)
    lengths = [(0.0, 1, 1)] * 8 + [(0.125, 2, 2), (0.25, 5, 1)] + [(0.375, 1, 4 if i == 2 else 1) for i in range(13)]
    reqs = [Request(i, i, t, p, o, "s", None, [-0.0, -0.0, -0.0]) for i, (t, p, o) in enumerate(lengths)]
    _, compiled = _run(spec, reqs, python=False)
    _same(_records(compiled), _records(_run(spec, reqs, python=True)[1]))


def test_a_lone_replica_plans_once_at_the_run_start_with_nothing_to_run() -> None:
    """The other half of that rule: SimPy starts every replica's process at 0, and it plans then,
    idle or not, so the run's start is the KV-pressure policy's first plan and its window counts
    from 0. Here the step at 0.0212 s is the first after one window (0.02 s) from the start: it
    sees the 12 of 16 blocks the step before left (above 0.7) and runs at k = 0. A kernel that
    skipped the plan at 0 would count the window from the first arrival (0.003 s) and keep k = 1
    (found by reversing the refused-arrival check above)."""
    limits = EngineLimits(max_num_seqs=3, max_num_batched_tokens=64, block_size=1, chunked_prefill=True)
    spec = FleetSpec(scheduler=SchedulerConfig(limits=limits, kv_blocks=16),
                     policy=SpeculationPolicy(name="kv_fallback", k=1, window_s=0.02, kv_off_above=0.7, kv_on_below=0.2),
                     proposer="ngram", replicas=1, routing="round_robin", drain=True)
    reqs = [Request(i, i, 0.003, p, o, "s", None, [-0.9, -0.5, -0.2]) for i, (p, o) in enumerate([(3, 4), (5, 2)])]
    _, compiled = _run(spec, reqs, python=False)
    python = _run(spec, reqs, python=True)[1]
    assert steps_frame(python, "c", 0)["k"].to_list() == [0, 1, 0]
    _same(_records(compiled), _records(python))
