"""Replicas whose planner runs compiled (``sim.model.step_kernels``), clocked by SimPy as before.

One SimPy event per engine iteration, as in ``sim.model.engine.Replica``: plan (one kernel
call), price the step in Python (the profile's step timer), ``yield env.timeout(dt)``, apply it
(one kernel call: acceptance draws, commits, proposal draws, the step's log row). Arrivals,
routing, client timeouts and queue-time limits stay in Python; they touch the arrays only when
they happen. A run gives the records of the Python planner bit for bit; what the kernels do not
cover (trace replay, replica restarts) runs on the Python engine (``compiled_supported``).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence

import numpy as np
import simpy

from sim.model import step_kernels as sk
from sim.model.speculation import PolicyState, SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import StepShape

_UNIFORM_CHUNK = 4096  # as sim.model.engine._Uniforms: the same stream in the same chunks
_OUTCOMES = {sk.COMPLETED: "completed", sk.REJECTED: "rejected", sk.TIMED_OUT: "timed_out"}


def compiled_supported(spec, requests: Sequence[Request], replay: bool) -> bool:
    """Whether a fleet's run can use the compiled planner (else: the Python engine)."""
    return not replay and spec.restart is None and len({r.id for r in requests}) == len(requests)


class FleetArrays:
    """The run's requests as arrays (one column each) and the logs the kernels append to."""

    def __init__(self, requests: Sequence[Request], k_max: int, rng: np.random.Generator) -> None:
        n = len(requests)
        self.ints = np.zeros((sk.N_INTS, n), np.int64)
        self.floats = np.zeros((sk.N_FLOATS, n), np.float64)
        self.ints[sk.PROMPT] = [r.prompt_tokens for r in requests]
        self.ints[sk.OUTPUT] = [r.output_tokens for r in requests]
        self.ints[sk.PROPOSES] = [r.proposes for r in requests]
        self.floats[sk.PROPOSAL] = [r.proposal for r in requests]
        self.floats[sk.FIRST_TOKEN:sk.FINISH + 1] = np.nan  # None until set
        self.negrates = np.zeros((n, max(k_max, 1)), np.float64)
        if k_max:
            for i, r in enumerate(requests):
                if r.negrates is not None:
                    self.negrates[i, :k_max] = r.negrates[:k_max]
        self.ids = np.array([r.id for r in requests], dtype=np.int64)
        self.G = np.zeros(3, np.int64)
        self.gap_idx = np.zeros(1 << 14, np.int64)
        self.gap_s = np.zeros(1 << 14, np.float64)
        self.steps = np.zeros(sk.ROW * 4096, np.float64)
        self.rng = rng
        self.uni = np.empty(0)

    def grow_logs(self) -> None:
        """Double the fleet-wide logs (their used part kept)."""
        self.gap_idx = np.concatenate((self.gap_idx, np.zeros_like(self.gap_idx)))
        self.gap_s = np.concatenate((self.gap_s, np.zeros_like(self.gap_s)))
        self.steps = np.concatenate((self.steps, np.zeros_like(self.steps)))

    def refill(self) -> None:
        """More uniforms after the unused ones (``_Uniforms.refill_keep``: sequence unchanged)."""
        pos = int(self.G[sk.G_UNI])
        self.uni = np.concatenate((self.uni[pos:], self.rng.random(_UNIFORM_CHUNK)))
        self.G[sk.G_UNI] = 0

    def store(self, requests: Sequence[Request]) -> None:
        """Write every request's final state back into its object (the records read those)."""
        ints = self.ints.T.tolist()
        floats = self.floats.T.tolist()
        for req, iv, fv in zip(requests, ints, floats, strict=True):
            (_, _, req.computed, req.generated, req.blocks, req.num_bursts, req.num_spec_steps,
             req.num_drafts, req.accepted_tokens, proposes, req.status, outcome, req.preemptions,
             ever, _) = iv
            req.proposes = bool(proposes)
            req.ever_scheduled = bool(ever)
            req.outcome = _OUTCOMES.get(outcome)  # type: ignore[assignment]
            req.last_burst_s, req.max_pause_s, _, first, sched, fin = fv
            req.first_token_s = None if first != first else first
            req.scheduled_s = None if sched != sched else sched
            req.finish_s = None if fin != fin else fin

    def step_log(self) -> array:
        return array("d", self.steps[: int(self.G[sk.G_STEPS]) * sk.ROW].tobytes())

    def gaps(self) -> tuple[array, array]:
        g = int(self.G[sk.G_GAPS])
        return array("q", self.gap_idx[:g].tobytes()), array("d", self.gap_s[:g].tobytes())


class CompiledFleet:
    """Per-replica planner state (config, counters, running list, waiting ring, scratch)."""

    def __init__(self, arrays: FleetArrays, config: SchedulerConfig, replicas: int, track: bool) -> None:
        n = arrays.ints.shape[1]
        self.arrays = arrays
        self.cfg = np.zeros((replicas, sk.N_CFG), np.int64)
        self.cfg[:, sk.C_SEQS] = config.max_num_seqs
        self.cfg[:, sk.C_BUDGET] = config.max_num_batched_tokens
        self.cfg[:, sk.C_BS] = config.block_size
        self.cfg[:, sk.C_KV] = config.kv_blocks
        self.cfg[:, sk.C_CHUNKED] = config.chunked_prefill
        self.cfg[:, sk.C_TRACK] = track
        self.cfg[:, sk.C_RING] = n + 1
        self.meta = np.zeros((replicas, sk.N_META), np.int64)
        self.meta[:, sk.M_FREE] = config.kv_blocks


class CompiledReplica:
    """One replica over the compiled planner; the engine's ``Replica`` interface (submit,
    outstanding, up, run)."""

    def __init__(self, fleet, index: int, shared: CompiledFleet, policy: SpeculationPolicy,
                 proposer: str | None, partial: bool) -> None:
        cfg = fleet.spec.scheduler
        seqs = cfg.max_num_seqs
        self.fleet = fleet
        self.index = index
        self.shared = shared
        self.config = cfg
        self.policy = policy
        self.state = PolicyState()
        self.proposer = proposer
        self.partial = partial
        self.up = True
        self.wake: simpy.Event | None = None
        self.proc: simpy.Process | None = None
        n = shared.arrays.ints.shape[1]
        self.run_idx = np.zeros(seqs, np.int64)
        self.ring = np.zeros(n + 1, np.int64)
        self.qlog = np.zeros(1 << 12, np.float64)
        self.dec_rows = np.zeros(seqs, np.int64)
        self.dec_draft = np.zeros(seqs, np.int64)
        self.pf_rows = np.zeros(seqs, np.int64)
        self.pf_n = np.zeros(seqs, np.int64)
        self.prev_idx = np.zeros(seqs, np.int64)
        self.pre = np.zeros(seqs, np.int64)
        self._timeouts: list[tuple[float, int]] = []
        self._queue_deadlines: list[tuple[float, int]] = []

    # ------------------------------------------------------------------ routing and arrivals
    def outstanding(self) -> int:
        m = self.shared.meta[self.index]
        return int(m[sk.M_NRUN] + m[sk.M_NWAIT])

    def submit(self, req: Request, now: float) -> None:
        """A new arrival routed here (``Scheduler.add_request``)."""
        req.replica = self.index
        cfg = self.config
        fa = self.shared.arrays
        m = self.shared.meta[self.index]
        r = req.idx
        too_big = -(-(req.prompt_tokens + req.output_tokens + self.fleet.k_max) // cfg.block_size) > cfg.kv_blocks
        no_fit = not cfg.chunked_prefill and req.prompt_tokens > cfg.max_num_batched_tokens
        full = cfg.queue_limit is not None and m[sk.M_NWAIT] >= cfg.queue_limit
        if too_big or no_fit or full:
            self._end(r, sk.REJECTED, now)
            return
        fa.ints[sk.STATUS, r] = sk.WAITING
        ring_n = len(self.ring)
        self.ring[(m[sk.M_HEAD] + m[sk.M_NWAIT]) % ring_n] = r
        m[sk.M_NWAIT] += 1
        self._qlog(now, 1.0)
        if req.timeout_s is not None:
            heapq.heappush(self._timeouts, (req.arrival_s + req.timeout_s, r))
        if cfg.max_queue_time_s is not None:
            heapq.heappush(self._queue_deadlines, (req.arrival_s + cfg.max_queue_time_s, r))
        w = self.wake
        if w is not None and not w.triggered:
            w.succeed()

    def _qlog(self, t: float, sign: float) -> None:
        m = self.shared.meta[self.index]
        q = int(m[sk.M_QLOG])
        if q + 2 > len(self.qlog):
            self.qlog = np.concatenate((self.qlog, np.zeros_like(self.qlog)))
        self.qlog[q] = t
        self.qlog[q + 1] = sign
        m[sk.M_QLOG] = q + 2

    def queue_log(self) -> array:
        return array("d", self.qlog[: int(self.shared.meta[self.index, sk.M_QLOG])].tobytes())

    # ------------------------------------------------------------------ deadlines
    def _end(self, r: int, outcome: int, at: float) -> None:
        fa = self.shared.arrays
        m = self.shared.meta[self.index]
        m[sk.M_FREE] += fa.ints[sk.BLOCKS, r]
        fa.ints[sk.BLOCKS, r] = 0
        fa.ints[sk.STATUS, r] = sk.DONE
        fa.ints[sk.OUTCOME, r] = outcome
        fa.floats[sk.FINISH, r] = at

    def _unqueue(self, r: int, at: float) -> None:
        """Take request ``r`` out of the waiting ring (order of the others kept)."""
        m = self.shared.meta[self.index]
        ring_n = len(self.ring)
        head, nwait = int(m[sk.M_HEAD]), int(m[sk.M_NWAIT])
        order = self.ring[(head + np.arange(nwait)) % ring_n]
        order = order[order != r]
        self.ring[(head + np.arange(nwait - 1)) % ring_n] = order
        m[sk.M_NWAIT] = nwait - 1
        self._qlog(at, -1.0)

    def expire(self, now: float) -> None:
        """``Scheduler.expire``: queue-time limits first, then client timeouts."""
        ints = self.shared.arrays.ints
        q = self._queue_deadlines
        while q and q[0][0] <= now:
            deadline, r = heapq.heappop(q)
            if ints[sk.STATUS, r] == sk.WAITING and not ints[sk.EVER, r]:
                self._unqueue(r, deadline)
                self._end(r, sk.REJECTED, deadline)
        t = self._timeouts
        changed = False
        while t and t[0][0] <= now:
            deadline, r = heapq.heappop(t)
            status = ints[sk.STATUS, r]
            if status == sk.RUNNING:
                changed = True
                self._end(r, sk.TIMED_OUT, deadline)
            elif status == sk.WAITING:
                self._unqueue(r, deadline)
                self._end(r, sk.TIMED_OUT, deadline)
        if changed:
            m = self.shared.meta[self.index]
            run = self.run_idx[: m[sk.M_NRUN]]
            keep = run[ints[sk.STATUS, run] == sk.RUNNING]
            self.run_idx[: len(keep)] = keep
            m[sk.M_NRUN] = len(keep)

    # ------------------------------------------------------------------ the loop
    def _k(self) -> int:
        policy = self.policy
        name = policy.name
        if name == "fixed":
            return policy.k
        if name == "off":
            return 0
        sh = self.shared
        return policy.k_for(self.state, sk.num_decoding(self.index, sh.meta, sh.arrays.ints, self.run_idx))

    def run(self):
        """The replica's SimPy process: one event per engine iteration.

        Why one function of ~50 lines: the simulator's hot loop; the step itself is the two
        kernel calls, what stays here is the clock and the step timer.
        """
        fleet = self.fleet
        env = fleet.env
        sh = self.shared
        fa = sh.arrays
        cfg, meta, ints, floats, neg, ids, G = sh.cfg, sh.meta, fa.ints, fa.floats, fa.negrates, fa.ids, fa.G
        rep = self.index
        price = _pricer(fleet.step_timer)
        proposer = self.proposer
        partial = self.partial
        adaptive = self.policy.name == "adaptive"
        plan_step, finish_step = sk.plan_step, sk.finish_step
        while True:
            now = env.now
            if self._timeouts or self._queue_deadlines:
                self.expire(now)
            k = self._k()
            p = plan_step(rep, cfg, meta, ints, floats, self.run_idx, self.ring, self.qlog, self.dec_rows,
                          self.dec_draft, self.pf_rows, self.pf_n, self.prev_idx, self.pre, ids, G,
                          len(fa.gap_idx), len(fa.steps) // sk.ROW, now, k)
            nd, npf, pk = p[0], p[1], p[2]
            if nd < 0:  # a log might overflow this step: grow it and plan again
                fa.grow_logs()
                self.qlog = np.concatenate((self.qlog, np.zeros_like(self.qlog)))
                continue
            if not nd and not npf:
                if meta[rep, sk.M_NRUN] or meta[rep, sk.M_NWAIT]:
                    raise RuntimeError(f"replica {rep}: work queued but nothing schedulable at t={now}")
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            drafting = p[9]
            dt = price(nd, p[3], pk, proposer if pk else None, p[5], p[6], p[4], now, p[7], p[8],
                       None if drafting < 0 else drafting)
            yield env.timeout(dt)
            end = env.now
            while finish_step(rep, cfg, meta, ints, floats, neg, self.run_idx, self.dec_rows, self.dec_draft,
                              self.pf_rows, self.pf_n, fa.uni, G, fa.gap_idx, fa.gap_s, fa.steps,
                              partial, now, dt, end) < 0:
                fa.refill()
            if adaptive:
                self.policy.observe(self.state, end, dt, nd)


def _pricer(timer):
    """``timer.price(*StepShape fields)`` when the timer has it (no shape object per step),
    else the timer called with a ``StepShape``."""
    price = getattr(timer, "price", None)
    if price is not None:
        return price
    return lambda *fields: timer(StepShape(*fields))


def build(fleet, requests: Sequence[Request], track: bool) -> list[CompiledReplica]:
    """Compiled replicas for ``fleet`` over ``requests`` (see ``compiled_supported``)."""
    spec = fleet.spec
    arrays = FleetArrays(requests, fleet.k_max, fleet.uniforms.rng)
    shared = CompiledFleet(arrays, spec.scheduler, spec.replicas, track)
    return [CompiledReplica(fleet, i, shared, spec.policy, spec.proposer, fleet.partial_proposals)
            for i in range(spec.replicas)]
