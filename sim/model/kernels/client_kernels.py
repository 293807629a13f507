"""Closed-loop clients inside the fleet kernel: arrivals made during the run, in SimPy's order.

Why: with the clients in Python (``sim.model.drivers.clients.ClientFleet``) every step of every
replica was a SimPy event followed by a scan of the clients, so a closed-loop run paid SimPy and
Python per step. Here the fleet kernel (``fleet_kernels.run_fleet``) runs them: after each step's
end, each expiry Python would have run and each restart, the clients whose request ended send
again (at its end + think time, or held until the next step when it was refused the instant it
arrived), and their timers are events of the emulated queue.

What keeps the records identical to ``ClientFleet`` (the reference semantics, SimPy):

- Every client timer is one of its processes' urgent timeouts (``_later``: the think time,
  ``_reaches``: the overhead outside the engine, ``_gives_up``: the client's timeout), always in
  the future. SimPy gives such a timeout its id when the process's start (an urgent event at the
  instant it was made) runs, and those starts run in the order they were made, so ids taken at
  creation order them the same; an urgent timeout is compared only with other urgent events (the
  run's stop, made first, wins a tie), never with a step's end or a wake-up.
- A timer's time is SimPy's ``now + delay`` (``now + (at - now)`` for a think time after an end).
- Row k is the k-th request sent; with one overhead for all, requests reach the engine in row
  order (later sends, same overhead; ties in the order sent), so the arrays of
  ``arrival_kernels.Arrivals`` are filled row by row as requests arrive and its deadline cursors
  work unchanged. Per-request overheads (per prompt token) and per-request timeouts stay on SimPy.
- ``poll`` is Python's ``ClientFleet.poll``: held clients first, then those whose request ended, in
  client order, then every due client sent. Python runs it only when a replica's deadline heap
  has a live deadline due (``live_due`` reads the cursors the same way).

A client has at most one of ``_later``/``_reaches`` pending (its slot); the timeouts are a FIFO
(made in time order, one timeout for all). Nothing here allocates: the state is ``Clients``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.arrival_kernels import Arrivals, arrivals
from sim.model.kernels.fleet_clock import (
    F_CLIENT_T,
    G_CLIENT_ID,
    G_RR,
    new_id,
    pick,
    wake,
)
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.kernel_state import replica_at
from sim.model.kernels.queue_kernels import admit

# Clients.g (int64)
(CG_N, CG_SENT, CG_HELD, CG_DUE_HEAD, CG_DUE_N, CG_GU_HEAD, CG_GU_TAIL, CG_NEXT, CG_POLL,
 CG_ROOM, CG_EXPIRING) = range(11)
"""``CG_POLL``: a poll is owed (a step ended, an expiry or a restart ran); ``CG_EXPIRING``: an
expiry with a live deadline is under way (its poll owed once it is done)."""
N_CG = 11
# Clients.f (float64)
CF_STOP, CF_OVER, CF_TIMEOUT, CF_OUT_T = range(4)
N_CF = 4
# a client's slot
NONE, LATER, REACHES = range(3)
NO = -1
"""No row, client or timer (``row_of``, ``slot_row``, ``CG_NEXT``)."""
OK = -1
"""What ``poll``, ``start`` and ``fire`` return when they did all they had to (``run_fleet``'s
"go on"; its stops are >= 0)."""
NO_CLIENTS = 0
"""``CG_N`` of an open-loop run."""
GIVES_UP, NO_TIMER = -1, -2
"""``next_timer``'s ``which`` for the oldest client timeout, and for none."""
POOL_OUT = 20
"""What ``run_fleet`` stops for when the clients sent every pooled request (``CF_OUT_T``: when)."""


class Clients(NamedTuple):
    """The clients' state; ``g[CG_N]`` 0: no clients (an open-loop run)."""

    g: np.ndarray
    f: np.ndarray
    think: np.ndarray
    """Per pool row: the think time after that request."""
    row_of: np.ndarray
    """Per client: its request in flight (``NO``: none)."""
    held: np.ndarray
    """Clients refused the instant they sent (no think time): they send after the next step."""
    due: np.ndarray
    """Clients to send now (a ring: ``CG_DUE_HEAD``, ``CG_DUE_N``)."""
    slot_kind: np.ndarray
    """Per client: its pending ``_later`` or ``_reaches`` timeout (NONE, LATER, REACHES)."""
    slot_t: np.ndarray
    slot_id: np.ndarray
    slot_row: np.ndarray
    owner: np.ndarray
    """Per pool row: the client that sent it."""
    gu_row: np.ndarray
    """The pending client timeouts, FIFO (``CG_GU_HEAD`` .. ``CG_GU_TAIL``): row, time, id."""
    gu_t: np.ndarray
    gu_id: np.ndarray


def new_clients(clients: int, think: np.ndarray, stop_s: float, overhead_s: float,
                timeout_s: float | None) -> Clients:
    """``clients`` clients over a pool of ``len(think)`` rows, none sent yet."""
    pool = len(think)
    g = np.zeros(N_CG, np.int64)
    g[CG_N] = clients
    g[CG_NEXT] = NO
    f = np.zeros(N_CF, np.float64)
    f[CF_STOP] = stop_s
    f[CF_OVER] = overhead_s
    f[CF_TIMEOUT] = -1.0 if timeout_s is None else timeout_s
    c = max(clients, 1)
    return Clients(g, f, np.ascontiguousarray(think, np.float64), np.full(c, NO, np.int64),
                   np.zeros(c, np.int64), np.zeros(c, np.int64), np.zeros(c, np.int64),
                   np.zeros(c), np.zeros(c, np.int64), np.zeros(c, np.int64), np.zeros(pool, np.int64),
                   np.zeros(pool, np.int64), np.zeros(pool), np.zeros(pool, np.int64))


def no_clients() -> Clients:
    """The state of a run without clients (every hook a no-op)."""
    return new_clients(NO_CLIENTS, np.zeros(NO_CLIENTS), 0.0, 0.0, None)


@njit
def next_timer(cl):
    """The earliest client timer ``(t, id, which)``: which >= 0 a client's slot, ``GIVES_UP`` the
    oldest timeout, ``NO_TIMER`` none."""
    g = cl.g
    bt, bid, which = np.inf, 0, NO_TIMER
    c = g[CG_NEXT]
    if c >= 0:
        bt, bid, which = cl.slot_t[c], cl.slot_id[c], c
    h = g[CG_GU_HEAD]
    if h < g[CG_GU_TAIL]:
        t = cl.gu_t[h]
        if which == NO_TIMER or t < bt or (t == bt and cl.gu_id[h] < bid):
            bt, bid, which = t, cl.gu_id[h], GIVES_UP
    return bt, bid, which


@njit
def _publish(cl, fc, why):
    """The clients' earliest timer into the fleet's queue (``F_CLIENT_T``, ``G_CLIENT_ID``),
    after ``poll``, ``start`` or ``fire`` changed them; returns ``why``."""
    t, i, which = next_timer(cl)
    fc.f[F_CLIENT_T] = np.inf if which == NO_TIMER else t
    fc.g[G_CLIENT_ID] = i
    return why


@njit
def _set_slot(cl, fc, c, kind, t, row):
    """Client ``c``'s process times out at ``t`` (its id taken now: see the module's note)."""
    cl.slot_kind[c] = kind
    cl.slot_t[c] = t
    cl.slot_id[c] = new_id(fc)
    cl.slot_row[c] = row
    b = cl.g[CG_NEXT]
    if b < 0 or t < cl.slot_t[b]:  # equal times: the older id stays first
        cl.g[CG_NEXT] = c


@njit
def _clear_slot(cl, c):
    cl.slot_kind[c] = NONE
    best = NO
    for i in range(cl.slot_kind.shape[0]):
        if cl.slot_kind[i] != NONE and (best < 0 or cl.slot_t[i] < cl.slot_t[best]
                                        or (cl.slot_t[i] == cl.slot_t[best] and cl.slot_id[i] < cl.slot_id[best])):
            best = i
    cl.g[CG_NEXT] = best


@njit
def _push_due(cl, c):
    g = cl.g
    cl.due[(g[CG_DUE_HEAD] + g[CG_DUE_N]) % cl.due.shape[0]] = c
    g[CG_DUE_N] += 1


@njit
def _ended(cl, rq, av, fc, c, now):
    """``ClientFleet._ended``: client ``c``'s request ended in the engine."""
    r = cl.row_of[c]
    cl.row_of[c] = NO
    fin = rq.floats[r, ks.FINISH]
    think = cl.think[r]
    at = fin + think
    if think == 0 and fin == av.arr_s[r] and not cl.f[CF_OVER] > 0:
        cl.held[cl.g[CG_HELD]] = c  # refused on arrival: resend after the next step
        cl.g[CG_HELD] += 1
    elif at <= now:
        _push_due(cl, c)
    else:
        _set_slot(cl, fc, c, LATER, now + (at - now), NO)


@njit
def _submit(st, rq, av, fc, cl, c, r, now):
    """``ClientFleet._submit``: row ``r`` to the router at ``now``; a refusal ends it now."""
    j = pick(st, fc)
    fc.g[G_RR] = (j + 1) % fc.kind.shape[0]
    av.routed[r] = j
    av.arrived[0] = r + 1  # rows arrive in row order (the module's note)
    tmo = cl.f[CF_TIMEOUT]
    if tmo > 0:
        av.t_dl[r] = av.arr_s[r] + tmo  # the replica's deadline (``Deadlines.add``)
    if admit(replica_at(st, j), rq, r, now):
        wake(fc, j, now)
        if tmo > 0:  # ``_gives_up``
            e = cl.g[CG_GU_TAIL]
            cl.gu_row[e] = r
            cl.gu_t[e] = now + tmo
            cl.gu_id[e] = new_id(fc)
            cl.g[CG_GU_TAIL] = e + 1
    else:
        _ended(cl, rq, av, fc, c, now)


@njit
def _send_due(st, rq, av, fc, cl, now):
    """``ClientFleet._send_due``: each due client sends its next request (the pool's next row);
    False when the pool ran out (``CF_OUT_T``: when)."""
    g = cl.g
    while g[CG_DUE_N]:
        c = cl.due[g[CG_DUE_HEAD]]
        g[CG_DUE_HEAD] = (g[CG_DUE_HEAD] + 1) % cl.due.shape[0]
        g[CG_DUE_N] -= 1
        if now >= cl.f[CF_STOP]:
            continue  # the client stops sending
        r = g[CG_SENT]
        if r >= cl.owner.shape[0]:
            cl.f[CF_OUT_T] = now
            return False
        g[CG_SENT] = r + 1
        cl.row_of[c] = r
        cl.owner[r] = c
        over = cl.f[CF_OVER]
        av.arr_s[r] = now + over  # the engine's arrival (records, deadlines)
        if over > 0:
            _set_slot(cl, fc, c, REACHES, now + over, r)
        else:
            _submit(st, rq, av, fc, cl, c, r, now)
    return True


@njit
def _room(st, cl):
    """Every replica's queue log has room for each client to arrive once (what one poll or timer
    can queue); else ``CG_ROOM`` entries are asked for."""
    need = 2 * (cl.g[CG_N] + 1)
    for j in range(st.meta.shape[0]):
        if st.meta[j, ks.M_QLOG] + need > st.qlog.shape[1]:
            cl.g[CG_ROOM] = cl.g[CG_N] + 1
            return False
    return True


@njit
def poll(st, rq, av, fc, cl, now):
    """``ClientFleet.poll`` at ``now``: ``OK``, or ``NEED_LOGS`` (nothing done: grow the queue
    logs by ``CG_ROOM``, call again) or ``POOL_OUT``."""
    if not _room(st, cl):
        return rk.NEED_LOGS
    g = cl.g
    g[CG_POLL] = 0
    for i in range(g[CG_HELD]):
        _push_due(cl, cl.held[i])
    g[CG_HELD] = 0
    ints = rq.ints
    for c in range(g[CG_N]):
        r = cl.row_of[c]
        if r >= 0 and ints[r, ks.STATUS] == ks.DONE:
            _ended(cl, rq, av, fc, c, now)
    return _publish(cl, fc, OK if _send_due(st, rq, av, fc, cl, now) else POOL_OUT)


@njit
def start(st, rq, av, fc, cl):
    """``ClientFleet._arrivals``: every client's first request at 0."""
    if not _room(st, cl):
        return rk.NEED_LOGS
    for c in range(cl.g[CG_N]):
        _push_due(cl, c)
    return _publish(cl, fc, OK if _send_due(st, rq, av, fc, cl, 0.0) else POOL_OUT)


@njit
def fire(st, rq, av, fc, cl, t):
    """The earliest client timer, at ``t``: a think time ends (``_later``), a request reaches the
    engine (``_reaches``) or a client's timeout falls (``_gives_up``)."""
    if not _room(st, cl):
        return rk.NEED_LOGS
    g = cl.g
    which = next_timer(cl)[2]
    if which == GIVES_UP:
        r = cl.gu_row[g[CG_GU_HEAD]]
        g[CG_GU_HEAD] += 1
        c = cl.owner[r]
        if cl.row_of[c] != r:
            return _publish(cl, fc, OK)  # its request ended before: nothing to do
        cl.row_of[c] = NO
        think = cl.think[r]
        if think > 0:
            _set_slot(cl, fc, c, LATER, t + think, NO)
            return _publish(cl, fc, OK)
        _push_due(cl, c)
    else:
        c = which
        kind = cl.slot_kind[c]
        r = cl.slot_row[c]
        _clear_slot(cl, c)
        if kind == REACHES:
            _submit(st, rq, av, fc, cl, c, r, t)
        else:
            _push_due(cl, c)
    return _publish(cl, fc, OK if _send_due(st, rq, av, fc, cl, t) else POOL_OUT)


@njit
def live_due(rp, rq, av, now):
    """Whether Python's deadline heaps of ``rp`` hold a live deadline at or before ``now``
    (``Deadlines.next``: a request not ended; for a queue-time limit, never scheduled either):
    the clients look at their requests after such an expiry."""
    m = rp.meta
    ints = rq.ints
    me = rp.cfg[ks.C_INDEX]
    lim = av.max_queue_s[0]
    if lim > 0:
        k = m[ks.M_QCUR]
        while k < av.arrived[0] and av.arr_s[k] + lim <= now:
            if av.routed[k] == me and ints[k, ks.EVER] == 0 and ints[k, ks.STATUS] != ks.DONE:
                return True
            k += 1
    k = m[ks.M_TCUR]
    while k < av.t_dl.shape[0] and av.t_dl[k] <= now and av.t_row[k] < av.arrived[0]:
        r = av.t_row[k]
        if av.routed[r] == me and ints[r, ks.STATUS] != ks.DONE:
            return True
        k += 1
    return False


def client_arrivals(pool: int, max_queue_time_s: float | None) -> Arrivals:
    """``arrival_kernels.Arrivals`` for a pool whose rows arrive during the run (times filled as
    they arrive; a row's timeout deadline at its own index, inf until then)."""
    none = arrivals([], max_queue_time_s)
    return none._replace(arr_s=np.zeros(pool), routed=np.full(pool, NO, np.int64), t_dl=np.full(pool, np.inf),
                         t_row=np.arange(pool, dtype=np.int64))
