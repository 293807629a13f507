"""Every replica of a fleet, its arrivals and their routing in one compiled loop.

Why: with SimPy, each arrival and nearly every step (it crosses another replica's) was an event
with Python around it (~2.7x the CPU per engine iteration). Here its queue is emulated compiled:
one call runs the whole simulation (back to Python only to grow a log or refill the uniforms).

What keeps the records identical to one SimPy process per replica and an arrival process
(``CompiledReplica._each_step``, ``engine.Fleet._arrivals``): events are ordered by ``(time,
priority, id)`` with SimPy's ids, one counter advanced at every event it would schedule, in its
order: the processes' starts at 0 (replicas, each planning once and finding nothing, then the
arrival process), the run's stop (``until``), each arrival's urgent timeout (scheduled when the
previous one is handed over), a replica's wake-up (an arrival queued at an idle replica), the step
a replica starts that ends at or after the next event (the steps before it ran compiled), and the
arrival process's own end. A replica's process at an event: finish the step that ended, then
expire, plan, price and apply steps while each ends before the next event (``run_kernel.step_until``).

A restart (``CompiledReplica._restart``) is emulated the same way (``_restart``). Its timeout is
a normal event queued right after the arrival process's start: at its instant it comes after the
urgent events and the wake-ups queued then (a restart at 0 s), before every other. It interrupts
the replica (urgent: handled at once) and ends its own process (a normal event doing nothing). The replica's pending step end or
wake-up stays queued with nobody waiting (a "ghost": it only moves the clock). The replica goes
down (the router skips it), its work is evacuated and re-routed (or dropped), idle replicas that
get some are woken, its cold start's end is its next event; then it serves with the fallback's
fresh row. A lone replica with no restart ahead has nothing to route: ``_alone`` takes its arrivals.

Closed-loop clients (``client_kernels``, ``ClientFleet`` in SimPy) replace the arrival process:
their first requests at its start, then their timers (urgent timeouts) in this queue, and a
poll after each step's end, each expiry SimPy would run and a restart. The queue's state and
the router are ``fleet_clock``'s.
"""

from __future__ import annotations

import numpy as np

from sim.model.kernels import client_kernels as ck
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.arrival_kernels import advance_alone, expire_due, submit_until
from sim.model.kernels.fleet_clock import (
    A_END,
    A_HAND,
    A_NONE,
    A_START,
    ACTIVE,
    DOWN,
    F_ACT_T,
    F_ARR_T,
    F_CLIENT_T,
    F_COLD,
    F_GHOST,
    F_NOW,
    F_RESTART_T,
    F_STOP_T,
    G_ACTIVE,
    G_ARR_ID,
    G_ARR_KIND,
    G_CLIENT_ID,
    G_COUNTER,
    G_DROP,
    G_EXTRA,
    G_FINISHING,
    G_GHOST,
    G_RESTART_ID,
    G_RESTART_REP,
    G_ROOM,
    G_RR,
    G_STARTED,
    G_STOP_ID,
    IDLE,
    N_GHOSTS,
    STEP,
    WAKE,
    pick,
)
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.kernel_state import replica_at
from sim.model.kernels.queue_kernels import admit, enqueue, go_down

# what ``run_fleet`` stopped for (besides run_kernel's NEED_LOGS and NEED_UNIFORMS)
DONE, STOPPED, STUCK = 10, 11, 12
CLIENT = -100
"""``_next_event``'s ``who`` for a client's timer (``client_kernels``)."""
_PRIO_URGENT, _PRIO_NORMAL = 0, 1


@njit
def _next_event(fc):
    """The event SimPy would pop next: ``(who, t)``, who a replica, -2 the arrival process, -3
    the stop, -4 a restart, -5 - i ghost ``i``, ``CLIENT`` a client's timer, -1 none. The active
    replica's own event is not in the queue."""
    g, f = fc.g, fc.f
    who, bt, bp, bid = -1, np.inf, 2, 0
    if g[G_ARR_KIND] != A_NONE:
        urgent = g[G_ARR_KIND] != A_END  # a process's start and an arrival's timeout are urgent
        who, bt, bp, bid = -2, f[F_ARR_T], _PRIO_URGENT if urgent else _PRIO_NORMAL, g[G_ARR_ID]
    if g[G_STOP_ID] >= 0:
        t = f[F_STOP_T]
        if t < bt or (t == bt and (_PRIO_URGENT < bp or (_PRIO_URGENT == bp and g[G_STOP_ID] < bid))):
            who, bt, bp, bid = -3, t, _PRIO_URGENT, g[G_STOP_ID]
    t = f[F_CLIENT_T]  # closed-loop clients' earliest timer: an urgent timeout
    if t != np.inf and (t < bt or (t == bt and (_PRIO_URGENT < bp or (_PRIO_URGENT == bp and g[G_CLIENT_ID] < bid)))):
        who, bt, bp, bid = CLIENT, t, _PRIO_URGENT, g[G_CLIENT_ID]
    t = f[F_RESTART_T]
    if t < bt or (t == bt and bp == _PRIO_NORMAL):  # before the arrivals' end (which does nothing)
        who, bt, bp, bid = -4, t, _PRIO_NORMAL, g[G_RESTART_ID]
    for r in range(fc.kind.shape[0]):
        k = fc.kind[r]
        if k == STEP or k == WAKE or k == DOWN:
            t = fc.ev_t[r]
            if t < bt or (t == bt and (_PRIO_NORMAL < bp or (_PRIO_NORMAL == bp and fc.ev_id[r] < bid))):
                who, bt, bp, bid = r, t, _PRIO_NORMAL, fc.ev_id[r]
    for i in range(N_GHOSTS if g[G_EXTRA] else 0):
        t = f[F_GHOST + i]
        if t == np.inf:
            continue
        if t < bt or (t == bt and (_PRIO_NORMAL < bp or (_PRIO_NORMAL == bp and g[G_GHOST + i] < bid))):
            who, bt, bp, bid = -5 - i, t, _PRIO_NORMAL, g[G_GHOST + i]
    return who, bt


@njit
def _hand_over(st, rq, av, fc, t):
    """The arrival process at ``t``: hand over the request whose arrival fell due, and each next
    one due at the same instant, then wait for the next (or end). False: a queue log is full
    (nothing of the request in hand done; grow it, call again)."""
    g = fc.g
    n = av.arr_s.shape[0]
    first = start = g[G_ARR_KIND] == A_START  # nothing in hand yet
    while True:
        i = av.arrived[0]
        if not first:
            r = pick(st, fc)
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
        if start:  # a restart's process starts next: its timeout queued after what this one did
            g[G_RESTART_ID] = g[G_COUNTER]
            g[G_COUNTER] += 1
        return True


@njit
def _ghost(fc, t, eid):
    """An event left queued with nobody waiting on it (it only moves the clock when popped)."""
    for i in range(N_GHOSTS):
        if fc.f[F_GHOST + i] == np.inf:
            fc.f[F_GHOST + i] = t
            fc.g[G_GHOST + i] = eid
            fc.g[G_EXTRA] += 1
            return


@njit
def _restart(st, rq, av, fc, t):
    """The restart's timeout at ``t`` (``CompiledReplica._restart``): the replica goes down, its
    requests are evacuated, then each re-routed (adopted, keeping its deadlines) or dropped; idle
    replicas that adopt one are woken; the replica's cold start is its next event. False: a queue
    log lacks room (nothing done; ``g[G_ROOM]`` entries needed: grow, call again)."""
    g, f = fc.g, fc.f
    r = g[G_RESTART_REP]
    rp = replica_at(st, r)
    m = rp.meta
    n = m[ks.M_NRUN] + m[ks.M_NWAIT]
    room = n + m[ks.M_NWAIT] + 2
    for j in range(fc.kind.shape[0]):
        if st.meta[j, ks.M_QLOG] + 2 * room > st.qlog.shape[1]:
            g[G_ROOM] = room
            return False
    f[F_RESTART_T] = np.inf
    g[G_COUNTER] += 1  # the interrupt (urgent: it runs now)
    _ghost(fc, t, g[G_COUNTER])  # the restart's process ends (a normal event)
    g[G_COUNTER] += 1
    if fc.kind[r] == STEP or fc.kind[r] == WAKE:  # its process stops waiting for it
        _ghost(fc, fc.ev_t[r], fc.ev_id[r])
    fc.kind[r] = DOWN
    g[G_EXTRA] += 1
    out = fc.out
    n = go_down(rp, rq, out, g[G_DROP] != 0, t)
    for i in range(n):
        q = out[i]
        j = pick(st, fc)
        g[G_RR] = (j + 1) % fc.kind.shape[0]
        av.routed[q] = j
        enqueue(replica_at(st, j), rq, q, t)
        # its deadlines join j's (``arrival_kernels.expire_due``): they lie at or after the
        # restarted replica's cursors, and what j's cursors pass again is ended or not its own
        mj = st.meta[j]
        mj[ks.M_QCUR] = min(mj[ks.M_QCUR], m[ks.M_QCUR])
        mj[ks.M_TCUR] = min(mj[ks.M_TCUR], m[ks.M_TCUR])
        if fc.kind[j] == IDLE:
            fc.kind[j] = WAKE
            fc.ev_t[j] = t
            fc.ev_id[j] = g[G_COUNTER]
            g[G_COUNTER] += 1
    fc.ev_t[r] = t + f[F_COLD]
    fc.ev_id[r] = g[G_COUNTER]
    g[G_COUNTER] += 1
    return True


@njit
def _process(st, rq, lg, pol, ta, av, fc, cl):
    """Replica ``g[G_ACTIVE]``'s process from ``f[F_ACT_T]``: finish the step that ended there,
    then steps while each ends before the next event (with clients: their poll after each step's
    end and each expiry Python would run, ``ClientReplica``). Returns -1 when it waits again (a
    step pending, or idle), else run_kernel's NEED_LOGS or NEED_UNIFORMS (its place kept: call
    again), ``client_kernels.POOL_OUT``, or STUCK (work queued but nothing schedulable: a bug)."""
    g, f = fc.g, fc.f
    r = g[G_ACTIVE]
    rp = replica_at(st, r)
    t = f[F_ACT_T]
    clients = cl.g[ck.CG_N] > 0
    if g[G_FINISHING]:
        if rk.finish_observed(rp, rq, lg, pol[r], fc.start[r], fc.dt[r], t) < 0:
            return rk.NEED_UNIFORMS
        g[G_FINISHING] = 0
        cl.g[ck.CG_POLL] = clients
    while True:
        if cl.g[ck.CG_POLL]:
            why = ck.poll(st, rq, av, fc, cl, t)
            if why >= 0:
                return why
        if clients and not cl.g[ck.CG_EXPIRING] and ck.live_due(rp, rq, av, t):
            cl.g[ck.CG_EXPIRING] = 1
        if not expire_due(rp, rq, av, t):
            return rk.NEED_LOGS
        if cl.g[ck.CG_EXPIRING]:  # the clients look after an expiry (expiring again is a no-op)
            cl.g[ck.CG_EXPIRING] = 0
            cl.g[ck.CG_POLL] = 1
            continue
        why, dt = rk.step_until(rp, rq, lg, pol[r], ta, t, _next_event(fc)[1])
        if why == -1:
            t = t + dt
            f[F_ACT_T] = t
            cl.g[ck.CG_POLL] = clients
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
            f[F_NOW] = t  # SimPy's clock after its last step (no event left: the run's end)
            return -1
        fc.kind[r] = STEP  # PENDING: the step that ends at or after the next event
        fc.ev_t[r] = t + dt
        fc.ev_id[r] = g[G_COUNTER]
        g[G_COUNTER] += 1
        fc.start[r] = t
        fc.dt[r] = dt
        return -1


@njit
def _alone(st, rq, lg, pol, ta, av, fc):
    """The only replica from ``f[F_ACT_T]``, arrivals inline (an event each cost 10-20 %:
    ``docs/architecture.md``). Kind ``STEP``: the step across the stop planned, arrivals next."""
    rp = replica_at(st, 0)
    g, f = fc.g, fc.f
    t, stop = f[F_ACT_T], f[F_STOP_T]
    if fc.kind[0] == ACTIVE:
        if g[G_FINISHING]:
            if rk.finish_observed(rp, rq, lg, pol[0], fc.start[0], fc.dt[0], t) < 0:
                return rk.NEED_UNIFORMS
        g[G_FINISHING] = 0
        why, t, dt = advance_alone(rp, rq, lg, pol[0], ta, av, t, stop)
        f[F_ACT_T] = t
        if why == rk.NEED_UNIFORMS:  # planned and priced: refill, then finish it at t + dt
            fc.start[0], fc.dt[0], f[F_ACT_T], g[G_FINISHING] = t, dt, t + dt, 1
        if why == rk.NEED_LOGS or why == rk.NEED_UNIFORMS:
            return why
        if why == rk.IDLE:  # no arrival left before the stop (or stuck: work queued, none fits)
            f[F_NOW] = t
            stuck = rp.meta[ks.M_NRUN] or rp.meta[ks.M_NWAIT]
            return STUCK if stuck else DONE if stop == np.inf else STOPPED
        fc.kind[0] = STEP
    return STOPPED if submit_until(rp, rq, av, stop, True) else rk.NEED_LOGS


@njit
def run_fleet(st, rq, lg, pol, ta, av, fc, cl):
    """Run the fleet from where it stands to the end: ``DONE`` (no event left; ``f[F_NOW]`` the
    last one's time), ``STOPPED`` (the run's stop), ``client_kernels.POOL_OUT``, or
    run_kernel's ``NEED_LOGS`` (grow every log and queue log, call again) or ``NEED_UNIFORMS``
    (refill, call again). ``pol`` has one row per replica: a kv_fallback's own state; ``cl``:
    the closed-loop clients (``client_kernels.no_clients()`` when the arrivals are ``av``'s)."""
    g, f = fc.g, fc.f
    clients = cl.g[ck.CG_N] > 0
    alone = fc.kind.shape[0] == 1 and not clients  # clients make arrivals during the run
    if alone and g[G_STARTED] == 0 and f[F_RESTART_T] == np.inf:  # alone from the start
        g[G_STARTED], g[G_ACTIVE], fc.kind[0] = 1, 0, ACTIVE
    while g[G_STARTED] < fc.kind.shape[0]:  # each replica's process starts at 0: it plans, idle
        g[G_ACTIVE] = g[G_STARTED]
        f[F_ACT_T] = 0.0
        g[G_FINISHING] = 0
        why = _process(st, rq, lg, pol, ta, av, fc, cl)
        if why >= 0:
            return why
        g[G_STARTED] += 1
        g[G_ACTIVE] = -1
    while True:
        if g[G_ACTIVE] >= 0:
            if alone and f[F_RESTART_T] == np.inf and g[G_EXTRA] == 0:  # nothing left to route
                return _alone(st, rq, lg, pol, ta, av, fc)
            why = _process(st, rq, lg, pol, ta, av, fc, cl)
            if why >= 0:
                return why
            g[G_ACTIVE] = -1
        elif cl.g[ck.CG_POLL]:  # after a restart (``ClientReplica._restart``)
            why = ck.poll(st, rq, av, fc, cl, f[F_NOW])
            if why >= 0:
                return why
        who, t = _next_event(fc)
        if who == -1:
            return DONE
        f[F_NOW] = t
        if who == -3:
            return STOPPED
        if who == CLIENT:
            why = ck.fire(st, rq, av, fc, cl, t)
            if why >= 0:
                return why
            continue
        if who == -4:
            if not _restart(st, rq, av, fc, t):
                return rk.NEED_LOGS
            cl.g[ck.CG_POLL] = clients
            continue
        if who <= -5:
            f[F_GHOST - 5 - who] = np.inf
            g[G_EXTRA] -= 1
            continue
        if who == -2:
            if g[G_ARR_KIND] == A_END:
                g[G_ARR_KIND] = A_NONE
            elif clients:  # the clients' first requests at 0 (``ClientFleet._arrivals``)
                why = ck.start(st, rq, av, fc, cl)
                if why >= 0:
                    return why
                g[G_ARR_KIND] = A_NONE
            elif not _hand_over(st, rq, av, fc, t):
                return rk.NEED_LOGS
            continue
        g[G_FINISHING] = 1 if fc.kind[who] == STEP else 0
        if fc.kind[who] == DOWN:  # back from a restart: its fallback policy, afresh
            g[G_EXTRA] -= 1
            for i in range(fc.back.shape[0]):
                pol[who, i] = fc.back[i]
        fc.kind[who] = ACTIVE
        g[G_ACTIVE] = who
        f[F_ACT_T] = t
