"""A fleet run in the kernel (``routed_fleet``) handed over to one SimPy process per replica at a
restart's instant.

Why: a restart re-routes requests through Python (``CompiledReplica._restart``), so a run with one
took one SimPy event per step from the start. Here the kernel runs the fleet up to the restart
(``fleet_kernels.RESTART``: the first event it would pop is the restart's timeout) and only the
rest of the run takes the per-step path.

What keeps the records those of the per-step path from the start: SimPy's state at that instant is
rebuilt as it would stand. Each replica's process waits where it waited (its step's end, with the
step's start and duration; a wake-up already due; or work), the arrival process for the next
arrival at its own clock's time, and every pending event is queued at its exact time in the order
SimPy had scheduled them, after the restart's timeout (scheduled at the start, it precedes them
all). Requests get the replica they were routed to, the router its round-robin turn, and each
replica the deadlines (``sim.model.deadlines``) its kernel cursors had not passed.
"""

from __future__ import annotations

import heapq

from simpy.events import NORMAL, URGENT

from sim.model import fleet_kernels as fk
from sim.model import kernel_state as ks
from sim.model.sim_clock import due_at


def hand_over(loop) -> None:
    """Rebuild SimPy's processes and events from ``loop`` (a ``routed_fleet.FleetLoop`` whose
    kernel stopped for a restart; SimPy's clock already at the restart's instant)."""
    fleet, fc, av = loop.fleet, loop.fc, loop.av
    env = fleet.env
    plan = fleet.spec.restart
    requests = fleet.requests
    arrived = int(av.arrived[0])
    for req, r in zip(requests, av.routed[:arrived].tolist(), strict=False):
        req.replica = r
    fleet.router.resume(int(fc.g[fk.G_RR]))
    for rep in loop.replicas:
        _deadlines(rep, av, requests)
        rep.handed = True
    pending = [(int(fc.ev_id[r]), r) for r in range(len(loop.replicas))
               if fc.kind[r] in (fk.STEP, fk.WAKE)]
    if fc.g[fk.G_ARR_KIND] == fk.A_HAND:
        pending.append((int(fc.g[fk.G_ARR_ID]), -2))
    restart = due_at(env, float(fc.f[fk.F_RESTART_T]), NORMAL)
    due = {}
    for _, who in sorted(pending):
        t = fc.f[fk.F_ARR_T] if who == -2 else fc.ev_t[who]
        due[who] = due_at(env, float(t), URGENT if who == -2 else NORMAL)
    for r, rep in enumerate(loop.replicas):
        step = (float(fc.start[r]), float(fc.dt[r])) if fc.kind[r] == fk.STEP else None
        rep.proc = env.process(rep.resume(due.get(r), step))
    if -2 in due:
        env.process(fleet._arrivals(requests, arrived, due[-2]))
    env.process(fleet.restart_at(plan, restart))


def _deadlines(rep, av, requests) -> None:
    """The client timeouts and queue-time limits of requests routed to ``rep`` that its kernel
    cursors (``arrival_kernels.expire_due``) have not passed, as ``Deadlines`` heaps."""
    d = rep.deadlines
    me, m = rep.index, rep.rp.meta
    arrived = int(av.arrived[0])
    routed = av.routed
    if d.max_queue_s is not None:
        for r in range(int(m[ks.M_QCUR]), arrived):
            if routed[r] == me:
                d.queue.append((requests[r].arrival_s + d.max_queue_s, r))
    for j in range(int(m[ks.M_TCUR]), len(av.t_dl)):
        r = int(av.t_row[j])
        if r < arrived and routed[r] == me:
            d.timeouts.append((float(av.t_dl[j]), r))
    heapq.heapify(d.queue)
    heapq.heapify(d.timeouts)
