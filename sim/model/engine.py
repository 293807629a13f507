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

from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.contracts.scenario import RestartConfig
from sim.model.router import Router, Routing
from sim.model.scheduler import DONE, Request, Scheduler, SchedulerConfig
from sim.model.speculation import OFF, PolicyState, SpeculationPolicy
from sim.model.step_time import DecodeBatchRows, StepShape

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


@dataclass
class StepLog:
    """Per-step columns as compact arrays (8 bytes a value), turned into a frame at the end."""

    replica: array = field(default_factory=lambda: array("q"))
    t_start_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    decode_seqs: array = field(default_factory=lambda: array("q"))
    prefill_tokens: array = field(default_factory=lambda: array("q"))
    k: array = field(default_factory=lambda: array("q"))
    draft_tokens: array = field(default_factory=lambda: array("q"))
    accepted_tokens: array = field(default_factory=lambda: array("q"))
    queue_len: array = field(default_factory=lambda: array("q"))
    kv_used_blocks: array = field(default_factory=lambda: array("q"))
    kv_total_blocks: array = field(default_factory=lambda: array("q"))
    preempted: array = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.t_start_s)

    @classmethod
    def from_flat(cls, flat: array) -> StepLog:
        """Columns from ``(replica, t_start_s, duration_s, decode_seqs, prefill_tokens, k,
        accepted_tokens, queue_len, kv_used_blocks, kv_total_blocks, preempted)`` rows stored
        back to back in one float array (one ``extend`` per step in the hot loop)."""
        m = np.frombuffer(flat, dtype=np.float64).reshape(-1, 11) if len(flat) else np.empty((0, 11))
        log = cls()
        ints = m[:, [0, 3, 4, 5, 6, 7, 8, 9, 10]].astype(np.int64)
        log.replica = array("q", ints[:, 0].tobytes())
        log.t_start_s = array("d", np.ascontiguousarray(m[:, 1]).tobytes())
        log.duration_s = array("d", np.ascontiguousarray(m[:, 2]).tobytes())
        log.decode_seqs = array("q", ints[:, 1].tobytes())
        log.prefill_tokens = array("q", ints[:, 2].tobytes())
        log.k = array("q", ints[:, 3].tobytes())
        log.draft_tokens = array("q", (ints[:, 1] * ints[:, 3]).tobytes())
        log.accepted_tokens = array("q", ints[:, 4].tobytes())
        log.queue_len = array("q", ints[:, 5].tobytes())
        log.kv_used_blocks = array("q", ints[:, 6].tobytes())
        log.kv_total_blocks = array("q", ints[:, 7].tobytes())
        log.preempted = array("q", ints[:, 8].tobytes())
        return log


@dataclass
class FleetRun:
    """Raw outcome of one fleet simulation (turned into frames by sim.results.records)."""

    requests: list[Request]
    steps: StepLog
    gap_idx: array
    """Request index of each inter-burst gap (ITL sample)."""
    gap_s: array
    """Seconds between a burst and the previous one of the same request."""
    end_s: float
    """Simulated time the run ended."""


class _Uniforms:
    """Uniforms from one generator, drawn in chunks (same sequence as one ``random()`` a time)."""

    __slots__ = ("rng", "buf", "pos")

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.buf: list[float] = []
        self.pos = 0

    def refill_keep(self, pos: int) -> None:
        """New buffer that starts with the unused tail ``buf[pos:]`` (sequence unchanged)."""
        self.buf = self.buf[pos:] + self.rng.random(_UNIFORM_CHUNK).tolist()
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
        self.policy = policy
        self.policy_state = PolicyState()
        self.batch_rows = DecodeBatchRows()
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
        self.scheduler.adopt(req)
        self._kick()

    def _kick(self) -> None:
        w = self.wake
        if w is not None and not w.triggered:
            w.succeed()

    def run(self):  # noqa: C901 - the hot loop, kept flat on purpose
        fleet = self.fleet
        env = fleet.env
        sched = self.scheduler
        timer = fleet.step_timer
        log_extend = fleet.step_rows.extend
        uni = fleet.uniforms
        gap_idx = fleet.gap_idx
        gap_s = fleet.gap_s
        proposer = fleet.spec.proposer
        kv_total = sched.config.kv_blocks
        idx = self.index
        while True:
            policy = self.policy
            if policy.name == "fixed":
                k = policy.k
            elif policy.name == "off":
                k = 0
            else:
                k = policy.k_for(self.policy_state, sched.num_decoding())
            now = env.now
            plan = sched.schedule(now, k)
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
            nd = len(plan.decode)
            pk = plan.k
            qlen = len(sched.waiting)
            kv_used = kv_total - sched.free_blocks
            joined, left = self.batch_rows.change([r.id for r in plan.decode])
            dt = timer(
                StepShape(
                    nd,
                    plan.decode_context,
                    pk,
                    proposer if pk else None,
                    plan.prefill_tokens,
                    plan.prefill_context,
                    plan.decode_context_max,
                    now,
                    joined,
                    left,
                )
            )
            try:
                yield env.timeout(dt)
            except simpy.Interrupt:
                yield from self._restart()
                continue
            end = env.now
            if pk:
                pos = uni.pos
                end_pos = pos + nd
                if end_pos > len(uni.buf):
                    uni.refill_keep(pos)
                    pos = 0
                    end_pos = nd
                uni.pos = end_pos
                accepted = [
                    bisect_left(r.negrates, -u, 0, pk)
                    for r, u in zip(plan.decode, uni.buf[pos:end_pos], strict=True)
                ]
                total_acc = sched.update(plan, accepted, end, gap_idx, gap_s)
            else:
                total_acc = sched.update(plan, None, end, gap_idx, gap_s)
            log_extend(
                (idx, now, dt, nd, plan.prefill_tokens, pk, total_acc, qlen, kv_used, kv_total,
                 len(plan.preempted))
            )
            if policy.name == "adaptive":
                policy.observe(self.policy_state, end, dt, nd)

    def _restart(self):
        """Go down now, hand in-flight work on (or drop it), come back after the cold start."""
        fleet = self.fleet
        env = fleet.env
        plan = fleet.spec.restart
        assert plan is not None
        self.up = False
        self.batch_rows = DecodeBatchRows()  # the batch's KV is gone with the process
        now = env.now
        if plan.on_restart == "drop":
            self.scheduler.drop_all(now)
        else:
            for req in self.scheduler.evacuate():
                target = fleet.replicas[fleet.router.pick()]
                if target is self:
                    self.scheduler.adopt(req)
                else:
                    target.adopt(req)
        yield env.timeout(plan.cold_start_s)
        self.up = True
        if plan.fallback == "baseline":
            self.policy = OFF


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
        self.replicas = [
            Replica(self, i, Scheduler(spec.scheduler), spec.policy) for i in range(spec.replicas)
        ]
        self.router = Router(spec.routing, self.replicas)

    def _arrivals(self, requests: Sequence[Request]):
        env = self.env
        router = self.router
        replicas = self.replicas
        for req in requests:
            dt = req.arrival_s - env.now
            if dt > 0:
                yield env.timeout(dt)
            replicas[router.pick()].submit(req, env.now)

    def _restart_at(self, plan: RestartConfig):
        yield self.env.timeout(plan.at_s)
        proc = self.replicas[plan.replica].proc
        assert proc is not None
        proc.interrupt("restart")

    def run(self, requests: Sequence[Request]) -> FleetRun:
        """Simulate ``requests`` (sorted by arrival) to the end; every one gets an outcome."""
        spec = self.spec
        if spec.policy.speculates:
            for req in requests:
                if req.negrates is None or len(req.negrates) < spec.policy.k_max:
                    raise ValueError(
                        f"request {req.id} has no acceptance rates for k={spec.policy.k_max}"
                    )
        for a, b in zip(requests, requests[1:], strict=False):
            if b.arrival_s < a.arrival_s:
                raise ValueError("requests must be sorted by arrival_s")
        env = self.env
        for rep in self.replicas:
            rep.proc = env.process(rep.run())
        env.process(self._arrivals(requests))
        if spec.restart is not None:
            env.process(self._restart_at(spec.restart))
        if spec.drain:
            env.run()
        else:
            env.run(until=spec.duration_s)
        end = env.now
        for req in requests:
            if req.status != DONE:
                req.outcome = "unfinished"
                req.finish_s = None
        steps = StepLog.from_flat(self.step_rows)
        self.step_rows = array("d")
        return FleetRun(list(requests), steps, self.gap_idx, self.gap_s, end)
