"""The fleet clocked by SimPy: one process per replica, at most one event per engine iteration.

Each replica (``sim.model.drivers.compiled_replica``) loops: plan a step with the compiled planner, time
it with the step timer, let the clock run, draw every speculating request's accepted count,
apply the outcome (steps that end before the simulation's next event run back to back in one
kernel call). Tokens never get events of their own: a step's accepted drafts plus the bonus
token reach the user as one burst at the step's end. Arrivals are their own process feeding a
:class:`~sim.model.router.Router` (the compiled routing rule; unless the kernels take them:
``solo_replica``, ``routed_fleet``). An optional restart
takes one replica down for a cold start; its in-flight requests are re-routed (recomputed from
scratch elsewhere, or on the same replica after it comes back) or dropped (they end
``rejected``: the client got an error).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from sim.contracts.fleet_config import RestartConfig
from sim.model import timer_packing
from sim.model.drivers import compiled_replica
from sim.model.fleet_arrays import FleetArrays
from sim.model.kernels.policy_kernels import policy_array
from sim.model.router import Router, Routing
from sim.model.sim_clock import urgent_timeout
from sim.model.speculation import OFF, SpeculationPolicy
from sim.model.step_plan import DONE, Request, SchedulerConfig
from sim.model.step_protocol import FleetRun, StepLog
from sim.model.step_time import StepShape

StepTimer = Callable[[StepShape], float]


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """Everything the engine needs besides requests, the step timer and random streams."""

    scheduler: SchedulerConfig
    policy: SpeculationPolicy = OFF
    proposer: str | None = None
    """Proposer named in step shapes when ``k > 0``."""
    replicas: int = 1
    routing: Routing = "least_outstanding"
    restart: RestartConfig | None = None
    drain: bool = True
    """True: run until every request ends; False: stop at ``duration_s``."""
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.policy.speculates and self.proposer is None:
            raise ValueError("a speculating policy needs a proposer")
        if not self.drain and self.duration_s is None:
            raise ValueError("drain=False needs duration_s (when to stop)")
        if self.restart is not None and not 0 <= self.restart.replica < self.replicas:
            raise ValueError(
                f"restart.replica {self.restart.replica} out of range 0..{self.replicas - 1}"
            )


class Fleet:
    """Replicas, router and arrival process of one simulation."""

    def __init__(
        self,
        spec: FleetSpec,
        step_timer: StepTimer,
        accept_rng: np.random.Generator | None = None,
    ) -> None:
        self.spec = spec
        self.env = simpy.Environment()
        self.step_timer = step_timer
        self.k_max = spec.policy.k_max
        if spec.policy.speculates and accept_rng is None:
            raise ValueError("a speculating policy needs an acceptance random generator")
        self.accept_rng = accept_rng if accept_rng is not None else np.random.default_rng(0)
        self.partial_proposals = False
        """True when some request proposes on only part of its steps (n-gram without a match)."""
        self.replay = False
        """True when some request replays a traced acceptance sequence."""
        self.requests: Sequence[Request] = ()
        self.replicas: list[compiled_replica.CompiledReplica] = []
        self.router: Router | None = None

    def _arrivals(self, requests: Sequence[Request]):
        """Each request to the router at its arrival time. An arrival at the instant a step ends
        is in the queue when the next step is planned (its event is urgent: SimPy orders events
        by time, then priority), so ties never depend on which event was scheduled first."""
        env = self.env
        router = self.router
        assert router is not None
        replicas = self.replicas
        for req in requests:
            dt = req.arrival_s - env.now
            if dt > 0:
                yield urgent_timeout(env, dt)
            replicas[router.pick()].submit(req, env.now)

    def _replicas(self, requests: Sequence[Request], track: bool) -> list:
        """The replicas of this run (closed-loop clients build their own: ``sim.model.drivers.clients``)."""
        return build_replicas(self, requests, track)

    def restart_at(self, plan: RestartConfig):
        """Interrupt the restarting replica at ``plan.at_s``."""
        yield self.env.timeout(plan.at_s)
        proc = self.replicas[plan.replica].proc
        assert proc is not None
        proc.interrupt("restart")

    def run(self, requests: Sequence[Request], write_back: bool = True) -> FleetRun:
        """Simulate ``requests`` (sorted by arrival, ``idx`` their positions) to the end; every
        one gets an outcome, in its object, or (``write_back`` false) in ``FleetRun.columns``."""
        spec = self.spec
        if spec.policy.speculates:
            for req in requests:
                if req.negrates is None or len(req.negrates) < spec.policy.k_max:
                    raise ValueError(
                        f"request {req.id} has no acceptance rates for k={spec.policy.k_max}"
                    )
        self.replay = spec.policy.speculates and any(r.replay is not None for r in requests)
        self.partial_proposals = spec.policy.speculates and (
            self.replay or any(r.proposal < 1.0 for r in requests))
        for a, b in zip(requests, requests[1:], strict=False):
            if b.arrival_s < a.arrival_s:
                raise ValueError("requests must be sorted by arrival_s")
        self.requests = requests
        # only padded engines pay for decode-set changes: others need not count them
        track = bool(getattr(self.step_timer, "padded", True))
        self.replicas = self._replicas(requests, track)
        self.router = Router(spec.routing, self.replicas)
        env = self.env
        for rep in self.replicas:
            rep.proc = env.process(rep.run())
        if not self.replicas[0].takes_arrivals:
            env.process(self._arrivals(requests))
        if spec.restart is not None and not self.replicas[0].takes_arrivals:
            env.process(self.restart_at(spec.restart))  # else the fleet kernel runs it
        if spec.drain:
            env.run()
        else:
            env.run(until=spec.duration_s)
        end = env.now
        step_rows, gap_idx, gap_s, qlog, columns = compiled_replica.collect(
            self.replicas, requests, write_back)
        steps = StepLog.from_flat(step_rows)
        del step_rows
        compiled_replica.release(self.replicas)  # the steps are read; the ITL samples stay as views
        if columns is None:
            for req in requests:
                if req.status != DONE:
                    req.outcome = "unfinished"
                    req.finish_s = None
        return FleetRun(list(requests), steps, gap_idx, gap_s, end, qlog, columns)


def build_replicas(fleet, requests: Sequence[Request], track: bool) -> list[compiled_replica.CompiledReplica]:
    """The replicas of ``fleet`` over ``requests``: the kernels take the arrivals (a lone
    replica's: ``sim.model.drivers.solo_replica``; or the whole fleet's, routed there, a restart
    included: ``sim.model.drivers.routed_fleet``) unless Python chooses k or prices the steps, a
    restart falls at 0 (its timeout ties with the first wake-ups, scheduled before it: not
    emulated); then one SimPy process per replica, the reference semantics."""
    spec = fleet.spec
    # a step may ask for room for two batches of ITL samples (``plan_step``'s worst case)
    arrays = FleetArrays(requests, fleet.k_max, fleet.accept_rng,
                         slack=2 * spec.scheduler.max_num_seqs * spec.replicas, replay=fleet.replay)
    timer = timer_packing.pack(fleet.step_timer, spec.proposer)
    restart = spec.restart
    if timer is not None and policy_array(spec.policy) is not None and (restart is None or restart.at_s > 0):
        if spec.replicas == 1 and restart is None:  # nothing to route: arrivals in the kernel
            from sim.model.drivers.solo_replica import SoloReplica

            return [SoloReplica(fleet, arrays, timer, track, requests)]
        from sim.model.drivers import routed_fleet

        return routed_fleet.build(fleet, arrays, timer, track, requests)
    return [compiled_replica.CompiledReplica(fleet, i, arrays, timer, track) for i in range(spec.replicas)]
