"""A lone replica's arrivals and deadlines inside the compiled loop.

Why: with one replica there is nothing to route, so an arrival needs no SimPy event of its own.
At GPU-sized and CPU-sized batches alike the Python around each arrival (its event, the router,
``submit``, the client-timeout heaps) cost more than the steps between arrivals once those ran
compiled, and so did the fleet kernel's emulated event per arrival (10-20 % of the engine's
time). Here the replica's loop (``advance_alone``, run by ``fleet_kernels._alone``) takes every
arrival itself, in order, at the instant SimPy would have handed it over, and applies client
timeouts and queue-time limits from deadline arrays, so one call runs to an idle end or the stop.

What keeps the records identical to the one-event-per-arrival engine
(``sim.model.drivers.engine.Fleet._arrivals`` with ``CompiledReplica.submit`` and ``sim.model.deadlines``):

- An arrival's time is the arrival process's SimPy clock, ``c_i = c_{i-1} + (a_i - c_{i-1})``
  (only when positive), not ``a_i`` itself: the two can differ in the last bit.
- Arrival events are urgent, so an arrival at the instant a step ends is queued before the next
  step is planned; the kernel submits every arrival with ``c <= now`` before planning at ``now``.
- Arrivals during a step change nothing the step's end reads (``run_kernel.finish`` touches neither
  the waiting ring nor the queue log), so submitting them after it, at the next plan, is the same.
- Deadlines are popped in ``(deadline, request)`` order, as the heaps pop them; a deadline at or
  before ``now`` always belongs to a request that has arrived (timeouts and queue limits are > 0).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import keep_running
from sim.model.kernels.queue_kernels import admit, client_gone, queue_time_up


class Arrivals(NamedTuple):
    """A fleet's arrivals and deadlines (each replica's deadline cursors in its ``Replica.meta``)."""

    arr_s: np.ndarray
    clock: np.ndarray
    """The arrival process's SimPy clock (one value)."""
    arrived: np.ndarray
    """How many requests have been handed over (one value)."""
    routed: np.ndarray
    """The replica each handed-over request went to (-1: not yet)."""
    t_dl: np.ndarray
    """Client-timeout deadlines, sorted as the heap pops them (by deadline, then row)."""
    t_row: np.ndarray
    max_queue_s: np.ndarray
    """The queue-time limit (one value; <= 0: none)."""


@njit
def next_clock(av, i):
    """SimPy's clock when arrival ``i`` is handed over (``clock[0]``: the previous one's)."""
    t = av.clock[0]
    dt = av.arr_s[i] - t
    return t + dt if dt > 0 else t


@njit
def submit_until(rp, rq, av, upto, strict):
    """Submit the arrivals handed over at or before ``upto`` (before it, when ``strict``);
    False when the queue log is full (grow it, call again)."""
    m = rp.meta
    n = av.arr_s.shape[0]
    while av.arrived[0] < n:
        r = av.arrived[0]
        t = next_clock(av, r)
        if t > upto or (strict and t == upto):
            break
        if m[ks.M_QLOG] + 2 > rp.qlog.shape[0]:
            return False
        av.clock[0] = t
        av.arrived[0] = r + 1
        av.routed[r] = rp.cfg[ks.C_INDEX]
        admit(rp, rq, r, t)
    return True


@njit
def expire_due(rp, rq, av, now):
    """``sim.model.deadlines.Deadlines.expire`` over the deadline arrays, for the requests
    routed to ``rp``: queue-time limits (arrival order), then client timeouts; False when the
    queue log is full (what was done stays done; grow it, call again)."""
    m = rp.meta
    ints = rq.ints
    qfull = rp.qlog.shape[0]
    max_queue_s = av.max_queue_s[0]
    me = rp.cfg[ks.C_INDEX]
    if max_queue_s > 0:
        while m[ks.M_QCUR] < av.arrived[0]:
            r = m[ks.M_QCUR]
            d = av.arr_s[r] + max_queue_s
            if d > now:
                break
            mine = av.routed[r] == me
            if mine and ints[r, ks.STATUS] == ks.WAITING and m[ks.M_QLOG] + 2 > qfull:
                return False
            m[ks.M_QCUR] = r + 1
            if mine:
                queue_time_up(rp, rq, r, d)
    ok = True
    changed = False
    while m[ks.M_TCUR] < av.t_dl.shape[0]:
        d = av.t_dl[m[ks.M_TCUR]]
        r = av.t_row[m[ks.M_TCUR]]
        if d > now or r >= av.arrived[0]:
            break
        mine = av.routed[r] == me
        if mine and ints[r, ks.STATUS] == ks.WAITING and m[ks.M_QLOG] + 2 > qfull:
            ok = False
            break
        m[ks.M_TCUR] += 1
        if mine and client_gone(rp, rq, r, d):
            changed = True
    if changed:
        keep_running(rp, rq)
    return ok


@njit
def advance_alone(rp, rq, lg, pol, ta, av, now, horizon):
    """A lone replica's steps (``run_kernel.step_until``) that also takes its arrivals and
    deadlines: from ``now``, submit what has arrived, expire what is due, plan, price and apply each step
    that ends before ``horizon`` (the run's stop, or inf), and skip idle time to the next arrival.
    Returns ``(why, t, dt)`` with ``run_kernel``'s codes (never ``DEADLINE``): ``IDLE`` means no
    arrival is left before ``horizon``."""
    n = av.arr_s.shape[0]
    m = rp.meta
    woken = True
    while True:
        if not submit_until(rp, rq, av, now, False) or not expire_due(rp, rq, av, now):
            return rk.NEED_LOGS, now, 0.0
        if not woken and m[ks.M_NRUN] == 0 and m[ks.M_NWAIT] == 0:
            why, dt = rk.IDLE, 0.0  # every arrival was refused: SimPy wakes a replica only for one it queues
        else:
            why, dt = rk.step_until(rp, rq, lg, pol, ta, now, horizon)
        woken = True
        if why == rk.IDLE:
            if av.arrived[0] < n and m[ks.M_NRUN] == 0 and m[ks.M_NWAIT] == 0:
                t = next_clock(av, av.arrived[0])
                if t < horizon:  # idle until the next arrival wakes the replica
                    now = t
                    woken = False
                    continue
            return rk.IDLE, now, 0.0
        if why >= 0:
            return why, now, dt
        now = now + dt


def arrivals(requests, max_queue_time_s: float | None) -> Arrivals:
    """Arrival times, and client-timeout deadlines with their request rows sorted as the heap
    pops them (by deadline, then row)."""
    arr_s = np.array([r.arrival_s for r in requests], np.float64)
    rows = [i for i, r in enumerate(requests) if r.timeout_s is not None]
    dl = np.array([requests[i].arrival_s + requests[i].timeout_s for i in rows], np.float64)
    row_arr = np.array(rows, np.int64)
    order = np.lexsort((row_arr, dl))
    lim = -1.0 if max_queue_time_s is None else float(max_queue_time_s)
    return Arrivals(arr_s, np.zeros(1, np.float64), np.zeros(1, np.int64), np.full(len(arr_s), -1, np.int64),
                    dl[order], row_arr[order], np.array([lim]))
