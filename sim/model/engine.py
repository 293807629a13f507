"""The fleet clocked by SimPy: one process per replica, one event per engine iteration.

Each replica loops: ask its :class:`~sim.model.scheduler.Scheduler` for a plan, time it with the
step timer, ``yield env.timeout(dt)``, draw every speculating request's accepted count, apply
the outcome. Tokens never get events of their own: a step's accepted drafts plus the bonus
token reach the user as one burst at the step's end. Arrivals are their own process feeding a
:class:`~sim.model.router.Router`. An optional restart takes one replica down for a cold start; its
in-flight requests are re-routed (recomputed from scratch elsewhere, or on the same replica
after it comes back) or dropped (they end ``rejected``: the client got an error).
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import simpy
from simpy.events import URGENT

from sim.contracts.fleet_config import RestartConfig
from sim.model import batch_columns
from sim.model.batch_columns import PROPOSAL, PROPOSES
from sim.model.router import Router, Routing
from sim.model.scheduler import Scheduler
from sim.model.speculation import OFF, SpeculationPolicy
from sim.model.step_plan import DONE, Request, SchedulerConfig
from sim.model.step_protocol import DecodeBatchRows, FleetRun, StepCycle, StepLog
from sim.model.step_time import StepShape

StepTimer = Callable[[StepShape], float]

_UNIFORM_CHUNK = 4096


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


def replay_accepted(req: Request, k: int) -> int:
    """Accepted drafts of a replaying request's step at ``k``; moves its trace position on.

    ``positions`` layout: the step starts at the answer position ``replay_pos`` and commits
    ``min(commit, k + 1)`` tokens; ``steps`` layout: the next recorded step, capped at ``k``
    (no proposal: 0). Past the trace's end the sequence starts over (simulated answers may
    be longer than traced ones).
    """
    t = req.replay
    vals = t.values
    v = vals[req.replay_pos % len(vals)]
    if t.layout == "positions":
        a = (v if v <= k + 1 else k + 1) - 1
        req.replay_pos += a + 1
        return a
    req.replay_pos += 1
    return 0 if v < 0 else (v if v < k else k)


def replay_proposes(req: Request) -> bool:
    """Whether a replaying request's next step has a proposal (``steps`` layout: not null)."""
    t = req.replay
    return t.layout == "positions" or t.values[req.replay_pos % len(t.values)] >= 0


class _Uniforms:
    """Uniforms from one generator, drawn in chunks (same sequence as one ``random()`` a time)."""

    __slots__ = ("rng", "buf", "arr", "pos")

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.buf: list[float] = []
        self.arr = np.empty(0)
        """The same values as ``buf``, as an array (for steps planned over batch columns)."""
        self.pos = 0

    def refill_keep(self, pos: int) -> None:
        """New buffer that starts with the unused tail ``buf[pos:]`` (sequence unchanged)."""
        new = self.rng.random(_UNIFORM_CHUNK)
        self.buf = self.buf[pos:] + new.tolist()
        self.arr = np.concatenate((self.arr[pos:], new))
        self.pos = 0


class Replica:
    """One serving replica: its scheduler, speculation policy state and SimPy process."""

    def __init__(
        self,
        fleet: Fleet,
        index: int,
        scheduler: Scheduler,
        policy: SpeculationPolicy,
    ) -> None:
        self.fleet = fleet
        self.index = index
        self.scheduler = scheduler
        self.cycle = StepCycle(index, scheduler, policy, fleet.spec.proposer, fleet.step_rows)
        """The step protocol (choose k, shape, update, log) this replica drives on SimPy's clock."""
        self.up = True
        self.wake: simpy.Event | None = None
        self.proc: simpy.Process | None = None

    def outstanding(self) -> int:
        s = self.scheduler
        return len(s.running) + len(s.waiting)

    def submit(self, req: Request, now: float) -> None:
        """A new arrival routed here."""
        req.replica = self.index
        if self.scheduler.add_request(req, now, self.fleet.k_max):
            self._kick()

    def adopt(self, req: Request) -> None:
        """A request re-routed from a restarted replica."""
        req.replica = self.index
        self.scheduler.adopt(req, self.fleet.env.now)
        self._kick()

    def _kick(self) -> None:
        w = self.wake
        if w is not None and not w.triggered:
            w.succeed()

    def run(self):
        """The replica's SimPy process: one event per engine iteration (see StepCycle).

        Why one function of ~60 lines: this is the simulator's hot loop; the protocol's parts
        live in StepCycle, what stays here is the clock (timeout, interrupt) and the draws.
        """
        fleet = self.fleet
        env = fleet.env
        sched = self.scheduler
        cycle = self.cycle
        timer = fleet.step_timer
        uni = fleet.uniforms
        gap_idx = fleet.gap_idx
        gap_s = fleet.gap_s
        idx = self.index
        while True:
            now = env.now
            plan = cycle.plan(now)
            if not plan.decode and not plan.prefill:
                if plan.preempted:
                    continue  # everything running was preempted: admit from the queue now
                if sched.running or sched.waiting:
                    raise RuntimeError(
                        f"replica {idx}: work queued but nothing schedulable at t={now} "
                        f"(running={sched.running}, waiting={list(sched.waiting)[:3]})"
                    )
                self.wake = env.event()
                try:
                    yield self.wake
                except simpy.Interrupt:
                    self.wake = None
                    yield from self._restart()
                self.wake = None
                continue
            dt = timer(cycle.shape(plan, now))
            try:
                yield env.timeout(dt)
            except simpy.Interrupt:
                yield from self._restart()
                continue
            end = env.now
            accepted = None
            pk = plan.k
            if pk:
                nd = len(plan.decode)
                pos = uni.pos
                end_pos = pos + nd
                if end_pos > len(uni.buf):
                    uni.refill_keep(pos)
                    pos = 0
                    end_pos = nd
                uni.pos = end_pos
                if plan.rows is not None:  # planned over batch columns: draw for all rows at once
                    accepted = sched.columns.accepted(plan.rows, uni.arr[pos:end_pos], pk)  # type: ignore[union-attr]
                elif fleet.replay:
                    accepted = [
                        bisect_left(r.negrates, -u, 0, pk) if r.replay is None else replay_accepted(r, pk)
                        for r, u in zip(plan.decode, uni.buf[pos:end_pos], strict=True)
                    ]
                else:
                    accepted = [
                        bisect_left(r.negrates, -u, 0, pk)
                        for r, u in zip(plan.decode, uni.buf[pos:end_pos], strict=True)
                    ]
            elif fleet.replay:  # a plain step still moves a replayed answer on by one token
                for r in plan.decode:
                    if r.replay is not None and r.replay.layout == "positions":
                        r.replay_pos += 1
            if fleet.partial_proposals and plan.rows is not None:
                self._draw_column_proposals(plan)  # before finish: its rows are still in place
            cycle.finish(plan, accepted, now, dt, end, gap_idx, gap_s)
            if fleet.partial_proposals and plan.rows is None:
                self._draw_proposals(plan)

    def _draw_proposals(self, plan) -> None:
        """Whether each request of this step has a proposal for its next one (vLLM proposes
        after every step): one uniform per request whose proposal rate is below 1."""
        uni = self.fleet.uniforms
        for req in (*plan.decode, *(r for r, _ in plan.prefill)):
            if req.replay is not None:
                req.proposes = replay_proposes(req)
                continue
            p = req.proposal
            if p < 1.0:
                if uni.pos >= len(uni.buf):
                    uni.refill_keep(uni.pos)
                req.proposes = uni.buf[uni.pos] < p
                uni.pos += 1

    def _draw_column_proposals(self, plan) -> None:
        """``_draw_proposals`` for a step planned over batch columns: the same uniforms in the
        same order (decode rows, then prefill rows, one per request proposing below 1)."""
        cols = self.scheduler.columns
        assert cols is not None
        rows = plan.rows
        if isinstance(rows, slice):
            rows = np.arange(len(plan.decode))
        if plan.prefill_rows:
            rows = np.concatenate((rows, np.asarray(plan.prefill_rows, dtype=np.intp)))
        p = cols.floats[PROPOSAL, rows]
        need = p < 1.0
        m = int(need.sum())
        if not m:
            return
        uni = self.fleet.uniforms
        while uni.pos + m > len(uni.buf):
            uni.refill_keep(uni.pos)
        u = uni.arr[uni.pos:uni.pos + m]
        uni.pos += m
        cols.ints[PROPOSES, rows[need]] = u < p[need]

    def _restart(self):
        """Go down now, hand in-flight work on (or drop it), come back after the cold start."""
        fleet = self.fleet
        env = fleet.env
        plan = fleet.spec.restart
        assert plan is not None
        self.up = False
        self.cycle.batch_rows = DecodeBatchRows()  # the batch's KV is gone with the process
        now = env.now
        if plan.on_restart == "drop":
            self.scheduler.drop_all(now)
        else:
            for req in self.scheduler.evacuate(now):
                target = fleet.replicas[fleet.router.pick()]
                if target is self:
                    self.scheduler.adopt(req, now)
                else:
                    target.adopt(req)
        yield env.timeout(plan.cold_start_s)
        self.up = True
        if plan.fallback == "baseline":
            self.cycle.policy = OFF


def _compiled_engine(spec: FleetSpec, requests: Sequence[Request], replay: bool):
    """The compiled planner's module when this run can use it (numba installed, no trace
    replay or restart, ``SPECPLAN_ENGINE`` not ``python``), else None."""
    if os.environ.get("SPECPLAN_ENGINE", "compiled") == "python":
        return None
    try:
        from sim.model import compiled_replica
    except ImportError:  # numba missing: the Python engine gives the same records, slower
        return None
    return compiled_replica if compiled_replica.compiled_supported(spec, requests, replay) else None


def _urgent_timeout(env: simpy.Environment, delay: float) -> simpy.Event:
    """A timeout processed before the normal events due at the same time (steps' ends)."""
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    env.schedule(ev, URGENT, delay)
    return ev


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
        self.step_rows = array("d")
        self.gap_idx = array("q")
        self.gap_s = array("d")
        if spec.policy.speculates and accept_rng is None:
            raise ValueError("a speculating policy needs an acceptance random generator")
        self.uniforms = _Uniforms(accept_rng if accept_rng is not None else np.random.default_rng(0))
        self.partial_proposals = False
        """True when some request proposes on only part of its steps (n-gram without a match)."""
        self.replay = False
        """True when some request replays a traced acceptance sequence."""
        self.replicas = [
            Replica(self, i, Scheduler(spec.scheduler), spec.policy) for i in range(spec.replicas)
        ]
        self.router = Router(spec.routing, self.replicas)

    def _arrivals(self, requests: Sequence[Request]):
        """Each request to the router at its arrival time. An arrival at the instant a step ends
        is in the queue when the next step is planned (its event is urgent: SimPy orders events
        by time, then priority), so ties never depend on which event was scheduled first."""
        env = self.env
        router = self.router
        replicas = self.replicas
        for req in requests:
            dt = req.arrival_s - env.now
            if dt > 0:
                yield _urgent_timeout(env, dt)
            replicas[router.pick()].submit(req, env.now)

    def _restart_at(self, plan: RestartConfig):
        yield self.env.timeout(plan.at_s)
        proc = self.replicas[plan.replica].proc
        assert proc is not None
        proc.interrupt("restart")

    def run(self, requests: Sequence[Request], write_back: bool = True) -> FleetRun:
        """Simulate ``requests`` (sorted by arrival) to the end; every one gets an outcome, in
        its object, or (``write_back`` false, compiled engine) in ``FleetRun.columns`` only."""
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
        # only padded engines pay for decode-set changes: others need not count them
        track = bool(getattr(self.step_timer, "padded", True))
        compiled = _compiled_engine(spec, requests, self.replay)
        if compiled is not None:  # the planner compiled (same records); Python for the rest
            self.replicas = compiled.build(self, requests, track)  # type: ignore[assignment]
            self.router = Router(spec.routing, self.replicas)
        else:
            if batch_columns.DEFAULT_FROM is not None and not self.replay:
                for rep in self.replicas:  # GPU-sized batches planned as arrays (same records)
                    rep.scheduler.use_columns(batch_columns.DEFAULT_FROM, self.k_max)
            for rep in self.replicas:
                rep.cycle.track_rows = track
        self.engine = "compiled" if compiled is not None else "python"
        env = self.env
        for rep in self.replicas:
            rep.proc = env.process(rep.run())
        if not (compiled is not None and self.replicas[0].takes_arrivals):
            env.process(self._arrivals(requests))
        if spec.restart is not None:
            env.process(self._restart_at(spec.restart))
        if spec.drain:
            env.run()
        else:
            env.run(until=spec.duration_s)
        end = env.now
        qlog = array("d")
        columns = None
        if compiled is not None:
            self.step_rows, self.gap_idx, self.gap_s, qlog, columns = compiled.collect(
                self.replicas, requests, write_back)
        else:
            for rep in self.replicas:
                rep.scheduler.sync()
                qlog.extend(rep.scheduler.queue_log)
        if columns is None:
            for req in requests:
                if req.status != DONE:
                    req.outcome = "unfinished"
                    req.finish_s = None
        steps = StepLog.from_flat(self.step_rows)
        self.step_rows = array("d")
        return FleetRun(list(requests), steps, self.gap_idx, self.gap_s, end, qlog, columns)
