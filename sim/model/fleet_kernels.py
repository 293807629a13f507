"""Every replica of a fleet, its arrivals and their routing in one compiled loop.

Why: with two replicas or more each arrival and nearly every step (it crosses another replica's
step) was a SimPy event with Python around it, so a run cost ~2.7x the CPU per engine iteration
of a lone replica. Here the fleet's event queue is emulated inside compiled code, event for
event as SimPy orders it, so one call runs the whole simulation (back to Python only to grow a
log or refill the uniforms).

What keeps the records identical to the engine with one SimPy process per replica and an arrival
process (``sim.model.compiled_replica.CompiledReplica._advancing``, ``engine.Fleet._arrivals``):
events are ordered by ``(time, priority, id)`` with SimPy's ids, i.e. one counter advanced at
every event it would schedule, in the order it would schedule them: the processes' starts at 0
(replicas, then the arrival process), the run's stop (``until``), each arrival's urgent timeout
(scheduled when the previous arrival is handed over), a replica's wake-up (when an arrival is
queued at an idle replica), the step a replica starts that ends at or after the next event
(scheduled when the replica reaches it: the steps before it ran compiled), and the arrival
process's own end after its last arrival. A replica's process at an event: finish the step
that ended, then expire, plan, price and apply steps while each ends before the earliest other
event (``run_kernel.step_until``), the one that does not becomes its next event. Restarts are
emulated up to the instant one falls due (``RESTART``; ``routed_fleet`` hands the fleet over to
one SimPy process per replica there): the restart's timeout is a normal event scheduled at the
start, before any step's end or wake-up, so at its instant it comes after the urgent events
(arrivals, the run's stop) and before every other.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model import kernel_state as ks
from sim.model import run_kernel as rk
from sim.model.arrival_kernels import expire_due
from sim.model.kernel_cache import njit
from sim.model.queue_kernels import admit

# a replica's pending event (FleetClock.kind)
IDLE, STEP, WAKE, ACTIVE = range(4)
# the arrival process's pending event (g[G_ARR_KIND])
A_NONE, A_HAND, A_END = range(3)
# FleetClock.g (int64)
(G_COUNTER, G_ACTIVE, G_FINISHING, G_ARR_KIND, G_ARR_ID, G_STOP_ID, G_RR, G_LEAST) = range(8)
N_G = 8
# FleetClock.f (float64)
F_NOW, F_ACT_T, F_ARR_T, F_STOP_T, F_RESTART_T = range(5)
N_F = 5
# what ``run_fleet`` stopped for (besides run_kernel's NEED_LOGS and NEED_UNIFORMS)
DONE, STOPPED, STUCK, RESTART = 10, 11, 12, 13
_PRIO_URGENT, _PRIO_NORMAL = 0, 1


class FleetClock(NamedTuple):
    """The emulated event queue: each replica's pending event, the arrival process's, the stop."""

    kind: np.ndarray
    """Per replica: IDLE (waiting for an arrival), STEP (a step ends at ``ev_t``), WAKE
    (woken at ``ev_t``), ACTIVE (its process is running now)."""
    ev_t: np.ndarray
    ev_id: np.ndarray
    start: np.ndarray
    """Per replica: the pending step's start and duration."""
    dt: np.ndarray
    g: np.ndarray
    f: np.ndarray


def new_clock(replicas: int, least_outstanding: bool, stop_s: float | None,
              restart_s: float | None = None) -> FleetClock:
    """The queue as SimPy holds it after ``env.run`` is called: the processes' starts at 0 (the
    replicas', ids 0..n-1, each then waits for work; the arrival process's, id n), the stop, a
    restart's timeout (only its time is kept: it wins every tie with a normal event)."""
    g = np.zeros(N_G, np.int64)
    f = np.zeros(N_F, np.float64)
    g[G_ARR_KIND] = A_HAND
    g[G_ARR_ID] = replicas
    g[G_COUNTER] = replicas + 1
    g[G_ACTIVE] = -1
    g[G_LEAST] = least_outstanding
    g[G_STOP_ID] = -1
    f[F_STOP_T] = np.inf
    f[F_RESTART_T] = np.inf if restart_s is None else restart_s
    if stop_s is not None:
        g[G_STOP_ID] = g[G_COUNTER]
        g[G_COUNTER] += 1
        f[F_STOP_T] = stop_s
    f[F_ARR_T] = -1.0  # the arrival process's start: hands over nothing before its first arrival
    return FleetClock(np.full(replicas, IDLE, np.int64), np.zeros(replicas), np.zeros(replicas, np.int64),
                      np.zeros(replicas), np.zeros(replicas), g, f)


@njit
def replica_at(st, r):
    """Replica ``r`` of the fleet's stacked state (each field one row per replica), as views."""
    return ks.Replica(st.cfg[r], st.meta[r], st.run_idx[r], st.ring[r], st.qlog[r], st.dec_rows[r],
                      st.dec_draft[r], st.pf_rows[r], st.pf_n[r], st.prev_idx[r], st.pre[r], st.acc[r],
                      st.cache[r])


@njit
def _next_event(fc):
    """The event SimPy would pop next: ``(who, t)``, who a replica, -2 the arrival process, -3
    the stop, -4 a restart, -1 none. The active replica's own event is not in the queue."""
    g, f = fc.g, fc.f
    who, bt, bp, bid = -1, np.inf, 2, 0
    if g[G_ARR_KIND] != A_NONE:
        t = f[F_ARR_T] if f[F_ARR_T] >= 0 else 0.0
        who, bt, bp, bid = -2, t, _PRIO_URGENT if g[G_ARR_KIND] == A_HAND else _PRIO_NORMAL, g[G_ARR_ID]
    if g[G_STOP_ID] >= 0:
        t = f[F_STOP_T]
        if t < bt or (t == bt and (_PRIO_URGENT < bp or (_PRIO_URGENT == bp and g[G_STOP_ID] < bid))):
            who, bt, bp, bid = -3, t, _PRIO_URGENT, g[G_STOP_ID]
    t = f[F_RESTART_T]
    if t < bt or (t == bt and bp == _PRIO_NORMAL):  # scheduled before every normal event
        who, bt, bp, bid = -4, t, _PRIO_NORMAL, -1
    for r in range(fc.kind.shape[0]):
        k = fc.kind[r]
        if k == STEP or k == WAKE:
            t = fc.ev_t[r]
            if t < bt or (t == bt and (_PRIO_NORMAL < bp or (_PRIO_NORMAL == bp and fc.ev_id[r] < bid))):
                who, bt, bp, bid = r, t, _PRIO_NORMAL, fc.ev_id[r]
    return who, bt


@njit
def _pick(st, fc):
    """``router.Router.pick`` with every replica up: round robin, or the least outstanding
    requests (running and waiting), ties to the lowest index."""
    n = fc.kind.shape[0]
    if fc.g[G_LEAST] == 0:
        return fc.g[G_RR]
    best, low = 0, -1
    for r in range(n):
        out = st.meta[r, ks.M_NRUN] + st.meta[r, ks.M_NWAIT]
        if low < 0 or out < low:
            best, low = r, out
    return best


@njit
def _hand_over(st, rq, av, fc, t):
    """The arrival process at ``t``: hand over the request whose arrival fell due, and each next
    one due at the same instant, then wait for the next (or end). False: a queue log is full
    (nothing of the request in hand done; grow it, call again)."""
    g = fc.g
    n = av.arr_s.shape[0]
    first = fc.f[F_ARR_T] < 0  # the process's start: nothing in hand yet
    while True:
        i = av.arrived[0]
        if not first:
            r = _pick(st, fc)
            rp = replica_at(st, r)
            if rp.meta[ks.M_QLOG] + 2 > rp.qlog.shape[0]:
                return False
            g[G_RR] = (r + 1) % fc.kind.shape[0]
            av.arrived[0] = i + 1
            av.routed[i] = r
            if admit(rp, rq, i, t) and fc.kind[r] == IDLE:
                fc.kind[r] = WAKE
                fc.ev_t[r] = t
                fc.ev_id[r] = g[G_COUNTER]
                g[G_COUNTER] += 1
            i += 1
        first = False
        av.clock[0] = t
        if i >= n:  # the process ends: its own (normal) event at ``t``
            g[G_ARR_KIND] = A_END
        else:
            dt = av.arr_s[i] - t
            if not dt > 0:
                continue
            g[G_ARR_KIND] = A_HAND
            t = t + dt
        fc.f[F_ARR_T] = t
        g[G_ARR_ID] = g[G_COUNTER]
        g[G_COUNTER] += 1
        return True


@njit
def _process(st, rq, lg, pol, ta, av, fc, r):
    """Replica ``r``'s process from ``f[F_ACT_T]``: finish the step that ended there, then steps
    while each ends before the next event. Returns -1 when it waits again (a step pending, or
    idle), else run_kernel's NEED_LOGS or NEED_UNIFORMS (its place kept: call again), or
    STUCK (work queued but nothing schedulable: a bug)."""
    rp = replica_at(st, r)
    g, f = fc.g, fc.f
    t = f[F_ACT_T]
    if g[G_FINISHING]:
        if rk.finish(rp, rq, lg, fc.start[r], fc.dt[r], t) < 0:
            return rk.NEED_UNIFORMS
        g[G_FINISHING] = 0
    while True:
        if not expire_due(rp, rq, av, t):
            return rk.NEED_LOGS
        why, dt = rk.step_until(rp, rq, lg, pol[r], ta, t, _next_event(fc)[1])
        if why == -1:
            t = t + dt
            f[F_ACT_T] = t
            continue
        if why == rk.NEED_LOGS:
            return why
        if why == rk.NEED_UNIFORMS:  # planned and priced: refill, then finish it at t + dt
            fc.start[r] = t
            fc.dt[r] = dt
            f[F_ACT_T] = t + dt
            g[G_FINISHING] = 1
            return why
        if why == rk.IDLE:
            if rp.meta[ks.M_NRUN] or rp.meta[ks.M_NWAIT]:
                return STUCK
            fc.kind[r] = IDLE
            return -1
        fc.kind[r] = STEP  # PENDING: the step that ends at or after the next event
        fc.ev_t[r] = t + dt
        fc.ev_id[r] = g[G_COUNTER]
        g[G_COUNTER] += 1
        fc.start[r] = t
        fc.dt[r] = dt
        return -1


@njit
def run_fleet(st, rq, lg, pol, ta, av, fc):
    """Run the fleet from where it stands to the end: ``DONE`` (no event left; ``f[F_NOW]`` the
    last one's time), ``STOPPED`` (the run's stop), ``RESTART`` (a restart falls due next), or
    run_kernel's ``NEED_LOGS`` (grow every log and queue log, call again) or ``NEED_UNIFORMS``
    (refill, call again). ``pol`` has one row per replica: a kv_fallback's own state."""
    g, f = fc.g, fc.f
    while True:
        r = g[G_ACTIVE]
        if r >= 0:
            why = _process(st, rq, lg, pol, ta, av, fc, r)
            if why >= 0:
                return why
            g[G_ACTIVE] = -1
        who, t = _next_event(fc)
        if who == -1:
            return DONE
        f[F_NOW] = t
        if who == -3:
            return STOPPED
        if who == -4:
            return RESTART
        if who == -2:
            if g[G_ARR_KIND] == A_END:
                g[G_ARR_KIND] = A_NONE
            elif not _hand_over(st, rq, av, fc, t):
                return rk.NEED_LOGS
            continue
        g[G_FINISHING] = 1 if fc.kind[who] == STEP else 0
        fc.kind[who] = ACTIVE
        g[G_ACTIVE] = who
        f[F_ACT_T] = t
