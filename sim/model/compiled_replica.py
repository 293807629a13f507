"""Replicas whose planner runs compiled (``sim.model.step_kernels``), clocked by SimPy.

With a profile's step timer, every step that ends before the simulation's next event runs in
one kernel call (``run_kernel.advance``) and SimPy clocks the one that crosses it; otherwise
(the adaptive policy, a timer only Python can run) one SimPy event per step: plan (one kernel
call), price in Python, ``yield env.timeout(dt)``, apply (one kernel call). Arrivals, routing,
client timeouts and queue-time limits stay in Python and touch the arrays only when they happen,
except on a lone replica, whose kernel takes them itself (``sim.model.solo_replica``). A run
gives the records of the Python planner bit for bit; what the kernels do not cover (trace
replay, replica restarts) runs on the Python engine (``compiled_supported``).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from math import inf

import numpy as np
import simpy

from sim.model import arrival_kernels as ak
from sim.model import price_kernels as pk
from sim.model import run_kernel as rk
from sim.model import step_kernels as sk
from sim.model.fleet_arrays import FleetArrays, doubled
from sim.model.speculation import PolicyState, SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import StepShape


def compiled_supported(spec, requests: Sequence[Request], replay: bool) -> bool:
    """Whether a fleet's run can use the compiled planner (else: the Python engine)."""
    return not replay and spec.restart is None and len({r.id for r in requests}) == len(requests)


class CompiledFleet:
    """What the replicas share: the request arrays, per-replica config and counters, and the
    step timer and policy in compiled form (None: those are run in Python each step)."""

    def __init__(self, arrays: FleetArrays, config: SchedulerConfig, replicas: int, track: bool,
                 timer: pk.PackedTimer | None, pol: np.ndarray | None) -> None:
        n = arrays.ints.shape[0]
        self.arrays = arrays
        self.timer = timer
        self.pol = pol
        self.cfg = np.zeros((replicas, sk.N_CFG), np.int64)
        self.cfg[:, sk.C_SEQS] = config.max_num_seqs
        self.cfg[:, sk.C_BUDGET] = config.max_num_batched_tokens
        self.cfg[:, sk.C_BS] = config.block_size
        self.cfg[:, sk.C_KV] = config.kv_blocks
        self.cfg[:, sk.C_CHUNKED] = config.chunked_prefill
        self.cfg[:, sk.C_TRACK] = track
        self.cfg[:, sk.C_RING] = n + 1
        self.meta = np.zeros((replicas, ak.N_META), np.int64)  # a lone replica's cursors too
        self.meta[:, sk.M_FREE] = config.kv_blocks


class CompiledReplica:
    """One replica over the compiled planner; the engine's ``Replica`` interface (submit,
    outstanding, up, run)."""

    takes_arrivals = False
    """True for a replica whose kernel takes the run's arrivals itself (no arrival process)."""

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
        n = shared.arrays.ints.shape[0]
        self.run_idx = np.zeros(seqs, np.int64)
        self.ring = np.zeros(n + 1, np.int64)
        self.qlog = np.zeros(1 << 12, np.float64)
        self.dec_rows = np.zeros(seqs, np.int64)
        self.dec_draft = np.zeros(seqs, np.int64)
        self.pf_rows = np.zeros(seqs, np.int64)
        self.pf_n = np.zeros(seqs, np.int64)
        self.prev_idx = np.zeros(seqs, np.int64)
        self.pre = np.zeros(seqs, np.int64)
        self.queue_limit = -1 if cfg.queue_limit is None else int(cfg.queue_limit)
        self.max_queue_s = -1.0 if cfg.max_queue_time_s is None else float(cfg.max_queue_time_s)
        self._timeouts: list[tuple[float, int]] = []
        self._queue_deadlines: list[tuple[float, int]] = []

    # ------------------------------------------------------------------ routing and arrivals
    def outstanding(self) -> int:
        m = self.shared.meta[self.index]
        return int(m[sk.M_NRUN] + m[sk.M_NWAIT])

    def submit(self, req: Request, now: float) -> None:
        """A new arrival routed here (``Scheduler.add_request``, compiled: ``arrival_kernels.admit``)."""
        req.replica = self.index
        r = req.idx
        self._qlog_room()
        sh = self.shared
        if not ak.admit(self.index, sh.cfg, sh.meta, sh.arrays.ints, sh.arrays.floats, self.ring, self.qlog, r,
                        self.fleet.k_max, self.queue_limit, float(now)):
            return
        if req.timeout_s is not None:
            heapq.heappush(self._timeouts, (req.arrival_s + req.timeout_s, r))
        if self.config.max_queue_time_s is not None:
            heapq.heappush(self._queue_deadlines, (req.arrival_s + self.config.max_queue_time_s, r))
        w = self.wake
        if w is not None and not w.triggered:
            w.succeed()

    def _qlog_room(self) -> None:
        """Room for one more queue-log entry (a kernel writes it)."""
        q = int(self.shared.meta[self.index, sk.M_QLOG])
        if q + 2 > len(self.qlog):
            self.qlog = doubled(self.qlog, q)

    def queue_log(self) -> array:
        return array("d", self.qlog[: int(self.shared.meta[self.index, sk.M_QLOG])].tobytes())

    def mark_routed(self, requests: Sequence[Request]) -> None:
        """After the run: requests routed here without ``submit`` get their replica (none here)."""

    # ------------------------------------------------------------------ deadlines
    def _end(self, r: int, outcome: int, at: float) -> None:
        fa = self.shared.arrays
        ak.end_request(self.shared.meta, fa.ints, fa.floats, self.index, r, outcome, float(at))

    def _unqueue(self, r: int, at: float) -> None:
        self._qlog_room()
        ak.unqueue(self.shared.meta, self.index, self.ring, self.qlog, r, float(at))

    def expire(self, now: float) -> None:
        """``Scheduler.expire``: queue-time limits first, then client timeouts."""
        ints = self.shared.arrays.ints
        q = self._queue_deadlines
        while q and q[0][0] <= now:
            deadline, r = heapq.heappop(q)
            if ints[r, sk.STATUS] == sk.WAITING and not ints[r, sk.EVER]:
                self._unqueue(r, deadline)
                self._end(r, sk.REJECTED, deadline)
        t = self._timeouts
        changed = False
        while t and t[0][0] <= now:
            deadline, r = heapq.heappop(t)
            status = ints[r, sk.STATUS]
            if status == sk.RUNNING:
                changed = True
                self._end(r, sk.TIMED_OUT, deadline)
            elif status == sk.WAITING:
                self._unqueue(r, deadline)
                self._end(r, sk.TIMED_OUT, deadline)
        if changed:
            sk.keep_running(self.index, self.shared.meta, ints, self.run_idx)

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
        """The replica's SimPy process: every step that ends before the simulation's next event
        in one compiled call (``run_kernel.advance``), the one that does not on SimPy's clock."""
        if self.shared.timer is None or self.shared.pol is None:
            yield from self.run_each_step()
            return
        env = self.fleet.env
        while True:
            t = env.now
            while True:
                deadline = self._next_deadline()
                if t >= deadline:
                    self.expire(t)
                    deadline = self._next_deadline()
                why, t, dt = rk.advance(*self.kernel_state(), float(t), float(env.peek()), deadline)
                if why == rk.DEADLINE:
                    continue
                again = self.serviced(why, t, dt)
                if again is None:
                    break
                t = again
            if why == rk.IDLE:
                yield from self._idle(t)
                continue
            env._now = t  # the step starts here; no event of the simulation lies before it
            yield env.timeout(dt)
            self._finish(t, dt, env.now)

    def kernel_state(self) -> tuple:
        """The arrays ``run_kernel.advance`` (and ``arrival_kernels.advance_alone``) take before
        their times, as they are now (growing a log replaces its array)."""
        sh = self.shared
        fa = sh.arrays
        t_ = sh.timer
        assert t_ is not None
        return (self.index, sh.cfg, sh.meta, fa.ints, fa.floats, fa.negrates, self.run_idx, self.ring,
                self.qlog, self.dec_rows, self.dec_draft, self.pf_rows, self.pf_n, self.prev_idx,
                self.pre, fa.ids, fa.G, fa.gap_idx, fa.gap_s, fa.steps, fa.uni, self.partial,
                sh.pol, t_.tm, t_.slot, t_.gm, t_.ax, t_.val, t_.cnt, t_.tc)

    def serviced(self, why: int, t: float, dt: float) -> float | None:
        """After a kernel call that stopped for room: grow the logs, or refill the uniforms and
        apply the step that waited for them; the time to call again from. None: it stopped for
        SimPy (idle, or a step that crosses the next event)."""
        if why == rk.NEED_LOGS:
            self._grow_logs()
            return t
        if why == rk.NEED_UNIFORMS:
            self.shared.arrays.refill()
            self._finish(t, dt, t + dt)
            return t + dt
        return None

    def _next_deadline(self) -> float:
        """When ``expire`` next has something to do (inf: no deadline pending). Deadlines that
        can no longer act are dropped first: a finished request's timeout, the queue-time limit of
        one already scheduled (``expire`` would skip both), so the compiled loop stops only for
        live ones."""
        ints = self.shared.arrays.ints
        t, q = self._timeouts, self._queue_deadlines
        while t and ints[t[0][1], sk.STATUS] == sk.DONE:
            heapq.heappop(t)
        while q and (ints[q[0][1], sk.EVER] or ints[q[0][1], sk.STATUS] == sk.DONE):
            heapq.heappop(q)
        return min(t[0][0] if t else inf, q[0][0] if q else inf)

    def _grow_logs(self) -> None:
        """Room for a step's worst case in every log a kernel stopped for (``plan_step``: two
        entries a running and a scheduled request in the queue log, one ITL sample each)."""
        seqs = self.config.max_num_seqs
        self.shared.arrays.grow_logs(2 * seqs)
        used = int(self.shared.meta[self.index, sk.M_QLOG])
        while used + 4 * seqs + 2 > len(self.qlog):
            self.qlog = doubled(self.qlog, used)

    def _finish(self, start: float, dt: float, end: float) -> None:
        sh = self.shared
        fa = sh.arrays
        while sk.finish_step(self.index, sh.cfg, sh.meta, fa.ints, fa.floats, fa.negrates,
                             self.run_idx, self.dec_rows, self.dec_draft, self.pf_rows, self.pf_n,
                             fa.uni, fa.G, fa.gap_idx, fa.gap_s, fa.steps, self.partial, start, dt,
                             end) < 0:
            fa.refill()

    def _idle(self, t: float):
        """Nothing to run at ``t``: wait for an arrival (an error if work is stuck)."""
        m = self.shared.meta[self.index]
        if m[sk.M_NRUN] or m[sk.M_NWAIT]:
            raise RuntimeError(f"replica {self.index}: work queued but nothing schedulable at t={t}")
        self.wake = self.fleet.env.event()
        yield self.wake
        self.wake = None

    def run_each_step(self):
        """One kernel call per planned step, the step priced in Python: for the adaptive policy
        (fed after each step) and timers that only Python can run.

        Why one function of ~40 lines: the hot loop of those runs; the step itself is the two
        kernel calls, what stays here is the clock and the step timer.
        """
        fleet = self.fleet
        env = fleet.env
        sh = self.shared
        fa = sh.arrays
        cfg, meta, ints, floats, ids, G = sh.cfg, sh.meta, fa.ints, fa.floats, fa.ids, fa.G
        rep = self.index
        price = _pricer(fleet.step_timer)
        proposer = self.proposer
        adaptive = self.policy.name == "adaptive"
        plan_step = sk.plan_step
        while True:
            now = float(env.now)  # one compiled signature (SimPy's clock starts at int 0)
            if self._timeouts or self._queue_deadlines:
                self.expire(now)
            k = self._k()
            p = plan_step(rep, cfg, meta, ints, floats, self.run_idx, self.ring, self.qlog, self.dec_rows,
                          self.dec_draft, self.pf_rows, self.pf_n, self.prev_idx, self.pre, ids, G,
                          len(fa.gap_idx), len(fa.steps) // sk.ROW, now, k)
            nd, npf, pk_ = p[0], p[1], p[2]
            if nd < 0:  # a log might overflow this step: grow it and plan again
                self._grow_logs()
                continue
            if not nd and not npf:
                yield from self._idle(now)
                continue
            drafting = p[9]
            dt = price(nd, p[3], pk_, proposer if pk_ else None, p[5], p[6], p[4], now, p[7], p[8],
                       None if drafting < 0 else drafting)
            yield env.timeout(dt)
            end = env.now
            self._finish(now, dt, end)
            if adaptive:
                self.policy.observe(self.state, end, dt, nd)


def _pricer(timer):
    """``timer.price(*StepShape fields)`` when the timer has it (no shape object per step),
    else the timer called with a ``StepShape``."""
    price = getattr(timer, "price", None)
    if price is not None:
        return price
    return lambda *fields: timer(StepShape(*fields))


def policy_array(policy: SpeculationPolicy) -> np.ndarray | None:
    """The policy as ``run_kernel.policy_k`` reads it; None for the adaptive one (its window
    of past steps is kept in Python)."""
    kinds = {"off": rk.POL_OFF, "fixed": rk.POL_FIXED, "off_above_batch": rk.POL_OFF_ABOVE,
             "k_by_batch": rk.POL_BY_BATCH}
    if policy.name not in kinds:
        return None
    rows = [x for row in policy.k_by_batch for x in row]
    return np.array([kinds[policy.name], policy.k, policy.max_batch or 0, *rows], np.int64)


def build(fleet, requests: Sequence[Request], track: bool) -> list[CompiledReplica]:
    """Compiled replicas for ``fleet`` over ``requests`` (see ``compiled_supported``)."""
    spec = fleet.spec
    # a step may ask for room for two batches of ITL samples (``plan_step``'s worst case)
    arrays = FleetArrays(requests, fleet.k_max, fleet.uniforms.rng, slack=2 * spec.scheduler.max_num_seqs * spec.replicas)
    timer = pk.pack(fleet.step_timer, spec.proposer)
    shared = CompiledFleet(arrays, spec.scheduler, spec.replicas, track, timer,
                           policy_array(spec.policy))
    if spec.replicas == 1 and timer is not None and shared.pol is not None:
        from sim.model.solo_replica import SoloReplica  # nothing to route: arrivals in the kernel

        return [SoloReplica(fleet, shared, spec.policy, spec.proposer, fleet.partial_proposals, requests)]
    return [CompiledReplica(fleet, i, shared, spec.policy, spec.proposer, fleet.partial_proposals)
            for i in range(spec.replicas)]


def collect(replicas: list[CompiledReplica], requests: Sequence[Request],
            write_back: bool = True) -> tuple[array, array, array, array, dict[str, np.ndarray] | None]:
    """End of a run: requests written back (or, without ``write_back``, their records' columns
    returned), the timer's counts added back; returns the flat step rows, the ITL samples
    (request index, gap), the replicas' queue logs and those columns."""
    shared = replicas[0].shared
    for rep in replicas:
        rep.mark_routed(requests)
    columns = None
    if write_back:
        shared.arrays.store(requests)
    else:
        columns = shared.arrays.record_columns()
        columns["replica"] = np.fromiter((r.replica for r in requests), np.int64, len(requests))
    if shared.timer is not None:
        shared.timer.unpack()
    qlog = array("d")
    for rep in replicas:
        qlog.extend(rep.queue_log())
    return (shared.arrays.step_log(), *shared.arrays.gaps(), qlog, columns)


def warm() -> None:
    """Compile every kernel into the on-disk cache (``make setup`` runs this once, so the first
    simulation does not wait ~10 s for numba): tiny fleets, one each way of running (a lone
    replica, two replicas, and the adaptive policy's step by step)."""
    from sim.contracts.synthetic import synthetic_profile
    from sim.model.engine import Fleet, FleetSpec
    from sim.model.speculation import SpeculationPolicy
    from sim.model.step_time import ProfileStepTimer

    # short limits, so queue-time rejections and timeouts of waiting and running requests happen
    cfg = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, block_size=16, kv_blocks=64,
                          max_queue_time_s=0.05)
    fixed = SpeculationPolicy("off_above_batch", k=2, max_batch=2)
    adaptive = SpeculationPolicy("adaptive", k=2, on_below_batch=1.0, off_above_batch=3.0, window_s=1.0)
    for policy, replicas in ((fixed, 1), (fixed, 2), (adaptive, 1)):
        reqs = [Request(i, i, 0.02 * i, 40, 20, timeout_s=0.1, negrates=[-0.8, -0.6]) for i in range(8)]
        timer = ProfileStepTimer(synthetic_profile())
        spec = FleetSpec(cfg, policy, proposer="ngram", replicas=replicas)
        Fleet(spec, timer, np.random.default_rng(0)).run(reqs)


if __name__ == "__main__":
    warm()
