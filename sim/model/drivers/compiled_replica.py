"""A replica of the simulated fleet: the compiled planner (``kernel_state.Replica``), clocked by SimPy.

The reference semantics of the simulator, one SimPy event per step: plan and price it (one
kernel call when the step timer is compiled, with the ``k`` of a policy Python runs here, the
adaptive one (its window in ``PolicyState``: the reference for the fleet kernel's), chosen before it; else planned compiled and priced by the Python
timer: a machine-speed timeline, a random or custom timer; a profile's timer prices through the
compiled kernel even then), ``yield env.timeout(dt)``, draw and apply (one kernel call).
Arrivals, deadlines (``sim.model.deadlines``) and a restart's clock are Python around the
kernels; what a restart takes down (``queue_kernels.go_down``) and where each request goes
(``router`` → ``route_kernels.pick``) are the compiled rules the fleet kernel runs. Built-in policies on a
profile's timer run in the fleet kernel instead (``routed_fleet``), whose records equal these
bit for bit (``tests/sim/model/test_properties.py``), closed-loop clients included
(``clients``); clients the kernel does not order step here.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np
import simpy

from sim.model.deadlines import Deadlines
from sim.model.fleet_arrays import FleetArrays
from sim.model.kernels import kernel_entry as ke
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import kv_blocks as kv
from sim.model.kernels import price_kernels as pk
from sim.model.kernels import queue_kernels as qk
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.policy_kernels import policy_array
from sim.model.speculation import PolicyState, after_restart
from sim.model.step_plan import Request
from sim.model.step_time import StepShape

_NO_SEAMS: tuple = (None, None, None, ())
"""``CompiledReplica.seams``'s cache when empty."""


class CompiledReplica:
    """One replica: its planner state, policy and SimPy process (``rp`` and ``up``, what the
    router reads; submit, adopt, run: what the fleet asks of a replica)."""

    takes_arrivals = False
    """True for a replica whose kernel takes the run's arrivals itself (no arrival process)."""

    def __init__(self, fleet, index: int, arrays: FleetArrays, timer: pk.PackedTimer | None,
                 track: bool) -> None:
        spec = fleet.spec
        self.fleet = fleet
        self.index = index
        self.arrays = arrays
        self.timer = timer
        self.rp = kv.open_ledger(ks.new_replica(spec.scheduler, index, len(arrays.ids), track=track,
                                                partial=fleet.partial_proposals, k_max=fleet.k_max,
                                                prefix_blocks=arrays.prefix_blocks))
        self.deadlines = Deadlines(spec.scheduler.max_queue_time_s)
        self.policy = spec.policy
        self.pol = _simpy_policy(spec.policy)
        self.state = PolicyState()
        self.up = True
        self.wake: simpy.Event | None = None
        self.proc: simpy.Process | None = None
        self._seams: tuple = _NO_SEAMS
        self._price = _pricer(fleet.step_timer)

    def seams(self) -> tuple[tuple, tuple, tuple, tuple]:
        """The replica, its requests, the logs and the timer's arrays as ``kernel_entry`` takes
        them (``ke.fields``), rebuilt only when an array was replaced (a log grown, uniforms
        refilled, a restart)."""
        rp, lg, pol = self.rp, self.arrays.lg, self.pol
        f = self._seams
        if f[0] is not rp or f[1] is not lg or f[2] is not pol:
            ta = ke.fields(self.timer.arrays) if self.timer is not None else ()
            f = self._seams = (rp, lg, pol, (ke.fields(rp), ke.fields(self.arrays.rq), ke.fields(lg), ta))
        return f[3]

    # ------------------------------------------------------------------ arrivals
    def submit(self, req: Request, now: float) -> None:
        """A new arrival routed here (``queue_kernels.admit``)."""
        req.replica = self.index
        if qk.admit(self._qlog_room(), self.arrays.rq, req.idx, float(now)):
            self.deadlines.add(req.idx, req.arrival_s, req.timeout_s, False)
            self._kick()

    def adopt(self, req: Request, now: float) -> None:
        """A request re-routed from a restarted replica (it keeps its deadlines)."""
        req.replica = self.index
        qk.enqueue(self._qlog_room(), self.arrays.rq, req.idx, float(now))
        ever = bool(self.arrays.rq.ints[req.idx, ks.EVER])
        self.deadlines.add(req.idx, req.arrival_s, req.timeout_s, ever)
        self._kick()

    def _kick(self) -> None:
        w = self.wake
        if w is not None and not w.triggered:
            w.succeed()

    def _qlog_room(self, entries: int = 1) -> ks.Replica:
        """The replica, with room in its queue log for ``entries`` more entries."""
        self.rp = ks.with_qlog_room(self.rp, entries)
        return self.rp

    def queue_log(self) -> array:
        return array("d", self.rp.qlog[: int(self.rp.meta[ks.M_QLOG])].tobytes())

    def mark_routed(self, requests: Sequence[Request]) -> None:
        """After the run: requests routed here without ``submit`` get their replica (none here)."""

    def expire(self, now: float) -> None:
        self.deadlines.expire(self.rp, self.arrays.rq, now, self._qlog_room)

    # ------------------------------------------------------------------ the process
    def run(self):
        """The replica's SimPy process; a restart interrupts it wherever it waits."""
        while True:
            try:
                yield from self._each_step()
            except simpy.Interrupt:
                self.wake = None
                yield from self._restart()

    def _grow_logs(self) -> None:
        """Room for a step's worst case in every log a kernel stopped for (``plan_step``: two
        entries a running and a scheduled request in the queue log, one ITL sample each)."""
        seqs = int(self.rp.cfg[ks.C_SEQS])
        self.arrays.grow_logs(2 * seqs)
        self._qlog_room(2 * seqs + 1)

    def _finish(self, start: float, dt: float, end: float) -> None:
        while True:
            rp, rq, lg, _ = self.seams()
            if ke.finish(rp, rq, lg, start, dt, end) >= 0:
                return
            self.arrays.refill()

    def _idle(self, t: float):
        """Nothing to run at ``t``: wait for an arrival (an error if work is stuck)."""
        m = self.rp.meta
        if m[ks.M_NRUN] or m[ks.M_NWAIT]:
            raise RuntimeError(f"replica {self.index}: work queued but nothing schedulable at t={t}")
        self.wake = self.fleet.env.event()
        yield self.wake
        self.wake = None

    def _each_step(self):
        """One SimPy event per step: expire what fell due, plan and price the step in one kernel
        call when the timer is compiled (``run_kernel.plan_and_price``; ``price_planned`` with the
        ``k`` the adaptive policy chose in Python, fed after each step), else planned compiled and
        priced by the Python timer (a timer only Python runs), let the clock run, apply what
        happened."""
        env = self.fleet.env
        while True:
            now = float(env.now)  # one compiled signature (SimPy's clock starts at int 0)
            if now >= self.deadlines.next(self.arrays.rq.ints):
                self.expire(now)
            rp, rq, lg, ta = self.seams()
            if self.timer is None:
                why, dt, nd = self._priced_in_python(rp, rq, lg, now)
            elif self.pol is not None:
                why, dt, nd = ke.plan_and_price(rp, rq, lg, self.pol, ta, now)
            else:
                k = self.policy.k_for(self.state, ke.decoding(rp, rq))
                why, dt, nd = ke.price_planned(rp, rq, lg, ta, now, k)
            rp = rq = lg = ta = None  # not held across a wait: the run may end there, its logs let go (``release``)
            if why == rk.NEED_LOGS:  # a log might overflow this step: grow it and plan again
                self._grow_logs()
                continue
            if why == rk.IDLE:
                yield from self._idle(now)
                continue
            yield env.timeout(dt)
            end = env.now
            self._finish(now, dt, end)
            if self.policy.name == "adaptive":
                self.policy.observe(self.state, end, dt, nd)

    def _priced_in_python(self, rp: tuple, rq: tuple, lg: tuple, now: float) -> tuple[int, float, int]:
        """The step at ``now`` planned compiled and priced by the Python step timer:
        ``(run_kernel``'s code, seconds, decoding requests)``."""
        if self.pol is not None:
            k = ke.choose_k(self.pol, rp, rq, now)
        else:
            k = self.policy.k_for(self.state, ke.decoding(rp, rq))
        nd, npf, k, ctx, cmax, pf_tokens, pfc, joined, left, drafting = ke.plan(rp, rq, lg, now, k)
        if nd < 0:
            return rk.NEED_LOGS, 0.0, 0
        if not nd and not npf:
            return rk.IDLE, 0.0, 0
        proposer = self.fleet.spec.proposer if k else None
        dt = self._price(nd, ctx, k, proposer, pf_tokens, pfc, cmax, now, joined, left,
                         None if drafting < 0 else drafting)
        return rk.PENDING, dt, nd

    def _restart(self):
        """Go down now, hand in-flight work on (or drop it), come back after the cold start."""
        fleet = self.fleet
        env = fleet.env
        plan = fleet.spec.restart
        assert plan is not None
        self.up = False
        now = float(env.now)
        m = self.rp.meta
        out = np.empty(int(m[ks.M_NRUN] + m[ks.M_NWAIT]), np.int64)
        rq = self.arrays.rq
        n = qk.go_down(self._qlog_room(len(out)), rq, out, plan.on_restart == "drop", now)
        self.deadlines.clear()
        for r in out[:n].tolist():
            fleet.replicas[fleet.router.pick()].adopt(fleet.requests[r], now)
        yield env.timeout(plan.cold_start_s)
        self.up = True
        self.policy = after_restart(self.policy, plan)
        self.pol = _simpy_policy(self.policy)  # started afresh: a kv_fallback's state too
        self.state = PolicyState()  # and an adaptive one's window (the fleet kernel's ``back`` row)


def _simpy_policy(policy):
    """The policy's kernel array, or None for the adaptive one: here it runs in Python
    (``PolicyState``, the reference the fleet kernel's ``policy_kernels.observe`` is held to)."""
    return None if policy.name == "adaptive" else policy_array(policy)


def _pricer(timer):
    """``timer.price(*StepShape fields)`` when the timer has it (no shape object per step),
    else the timer called with a ``StepShape``."""
    price = getattr(timer, "price", None)
    if price is not None:
        return price
    return lambda *fields: timer(StepShape(*fields))


def collect(replicas: list[CompiledReplica], requests: Sequence[Request],
            write_back: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, array, dict | None]:
    """End of a run: requests written back (or, without ``write_back``, their records' columns
    returned), the timer's counts added back; returns the flat step rows, the ITL samples
    (request index, gap; all three views of the logs: ``release`` when they are read), the
    replicas' queue logs and those columns."""
    arrays = replicas[0].arrays
    for rep in replicas:
        rep.mark_routed(requests)
    columns = None
    if write_back:
        arrays.store(requests)
    else:
        columns = arrays.record_columns()
        columns["replica"] = np.fromiter((r.replica for r in requests), np.int64, len(requests))
    if replicas[0].timer is not None:
        replicas[0].timer.unpack()
    qlog = array("d")
    for rep in replicas:
        qlog.extend(rep.queue_log())
    return (arrays.step_log(), *arrays.gaps(), qlog, columns)


def release(replicas: list[CompiledReplica]) -> None:
    """After ``collect``: the fleet lets go of its logs and every replica of its cached views of
    them, so the logs live exactly as long as what was read from them (~100 MB of steps and ITL
    samples on a GPU hour). The fleet is a reference cycle (replica <-> fleet, SimPy's env <->
    processes): left to the collector, the logs would wait for its next full pass, into the next
    run; a full collection costs ~0.1 s, and what the cycle keeps without its logs is small."""
    replicas[0].arrays.release_logs()
    for rep in replicas:
        rep._seams = _NO_SEAMS
