"""A restart run wholly in the kernel (``fleet_kernels._restart``) gives the frames of one SimPy
event per step with a SimPy process interrupting the replica, bit for bit, also when it falls on
the instant of another event. Random restart times (``test_properties.test_drivers_agree``) almost
never tie; here the restart is put on an arrival or on a step's end of the same fleet, where SimPy's
order (urgent arrivals, then the restart, its interrupt, then steps' ends and wake-ups, the
restarting process's own end among them) decides what happens."""

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
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer
from sim.results.records import itl_frame, requests_frame, steps_frame
from tests.sim.model.test_properties import _PROFILE, _copy, fleets


def _frames(spec, reqs, python: bool):
    fleet = Fleet(spec, ProfileStepTimer(_PROFILE), np.random.default_rng(0))
    with pytest.MonkeyPatch.context() as mp:
        if python:  # each step priced in Python: one SimPy event per step from the start
            mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
        run = fleet.run(_copy(reqs))
    kinds = {type(rep).__name__ for rep in fleet.replicas}
    return kinds, (requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0), itl_frame(run, "c", 0),
                   run.queue_log)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.sampled_from(["arrival", "step end"]), st.integers(0, 10**6), st.data())
def test_a_restart_tied_with_an_arrival_or_a_step_end(case, on, pick, data) -> None:
    spec, reqs = case
    spec = replace(spec, proposer="ngram" if spec.proposer else None, restart=None)
    if on == "arrival":
        times = [r.arrival_s for r in reqs]
    else:
        steps = _frames(spec, reqs, python=True)[1][1]
        times = (steps["t_start_s"] + steps["duration_s"]).to_list()
    times = [t for t in times if t > 0]
    if not times:
        return
    restart = RestartConfig(at_s=times[pick % len(times)],
                            replica=data.draw(st.integers(0, spec.replicas - 1)),
                            cold_start_s=data.draw(st.sampled_from([0.0, 0.05, 0.5])),
                            on_restart=data.draw(st.sampled_from(["reroute", "drop"])),
                            fallback=data.draw(st.sampled_from(["baseline", "same"])))
    spec = replace(spec, restart=restart)
    kinds, compiled = _frames(spec, reqs, python=False)
    assert kinds == {"RoutedReplica"}, "a restart no longer runs compiled"
    _, python = _frames(spec, reqs, python=True)
    for a, b in zip(compiled, python, strict=True):
        if isinstance(a, pl.DataFrame):
            assert a.equals(b), (a, b)
        else:
            assert a == b



@pytest.mark.parametrize("routing", ["round_robin", "least_outstanding"])
def test_steps_ending_together_after_a_restart_keep_simpy_order(routing: str) -> None:
    """Identical requests in threes on three replicas: their steps end at the same instants, so
    the order in which the two replicas left running draw their accepted drafts (one stream of
    uniforms) after the restart is the order their pending steps were queued in SimPy."""
    reqs = []
    for j in range(30):
        for _ in range(3):
            reqs.append(Request(len(reqs), len(reqs), 0.37 * j, 24 + j % 5, 12 + j % 7, "s", None, [-0.6, -0.3]))
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=200)
    restart = RestartConfig(at_s=0.37 * 10 + 0.001, replica=2, cold_start_s=0.5, on_restart="reroute",
                            fallback="same")
    spec = FleetSpec(cfg, SpeculationPolicy("fixed", k=2), proposer="ngram", replicas=3, routing=routing,
                     restart=restart)
    kinds, compiled = _frames(spec, reqs, python=False)
    assert kinds == {"RoutedReplica"}
    _, python = _frames(spec, reqs, python=True)
    steps = compiled[1]
    later = steps.filter(pl.col("t_start_s") > restart.at_s)
    assert (later["t_start_s"] + later["duration_s"]).is_duplicated().any()  # the ties happen
    for a, b in zip(compiled, python, strict=True):
        assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_restart_at_0_s_comes_after_the_wake_ups_queued_before_it(replicas: int) -> None:
    """At 0 s the restart's timeout ties with the wake-ups that the arrivals at 0 queued when the
    arrival process started, before the restart's own process started: SimPy runs those first
    (each woken replica schedules its requests; the restarted one's step is left queued), then
    the restart. So the re-routed requests were scheduled once and the queue-time limit (for
    requests never scheduled) spares them through the cold start. The fleet kernel emulates that
    order: it runs the case, with SimPy's records."""
    reqs = [Request(i, i, 0.0 if i < 3 else 0.05 * i, 20 + i, 10 + i % 4, "s", None, [-0.6, -0.3])
            for i in range(12)]
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=200,
                             max_queue_time_s=0.5)
    restart = RestartConfig(at_s=0.0, replica=0, cold_start_s=1.0, on_restart="reroute", fallback="same")
    spec = FleetSpec(cfg, SpeculationPolicy("fixed", k=2), proposer="ngram", replicas=replicas,
                     restart=restart)
    kinds, compiled = _frames(spec, reqs, python=False)
    assert kinds == {"RoutedReplica"}, "a restart at 0 s no longer runs in the fleet kernel"
    _, python = _frames(spec, reqs, python=True)
    for a, b in zip(compiled, python, strict=True):
        assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b
