"""Admission and deadlines compiled, and a lone replica's arrivals inside the compiled loop.

``admit``, ``end_request`` and ``unqueue`` are ``Scheduler.add_request`` and the queue-time and
timeout ends over the arrays, for every compiled replica (``CompiledReplica`` calls them from
Python on its arrivals and deadlines); the rest runs a fleet's only replica.

Why: with one replica there is nothing to route, so an arrival needs no SimPy event of its own.
At GPU-sized and CPU-sized batches alike the Python around each arrival (its event, the router,
``submit``, the client-timeout heaps) cost more than the steps between arrivals once those ran
compiled. Here the replica's kernel takes every arrival itself, in order, at the instant SimPy
would have handed it over, and applies client timeouts and queue-time limits from deadline
arrays, so one call runs from one idle period or stop to the next.

What keeps the records identical to the one-event-per-arrival engine
(``sim.model.engine.Fleet._arrivals`` with ``CompiledReplica.submit`` and ``expire``):

- An arrival's time is the arrival process's SimPy clock, ``c_i = c_{i-1} + (a_i - c_{i-1})``
  (only when positive), not ``a_i`` itself: the two can differ in the last bit.
- Arrival events are urgent, so an arrival at the instant a step ends is queued before the next
  step is planned; the kernel submits every arrival with ``c <= now`` before planning at ``now``.
- Arrivals during a step change nothing the step's end reads (``finish_step`` touches neither
  the waiting ring nor the queue log), so submitting them after it, at the next plan, is the same.
- Deadlines are popped in ``(deadline, request)`` order, as the heaps pop them; a deadline at or
  before ``now`` always belongs to a request that has arrived (timeouts and queue limits are > 0).
"""

from __future__ import annotations

import numpy as np

from sim.model import price_kernels as pk
from sim.model import run_kernel as rk
from sim.model import step_kernels as sk
from sim.model.kernel_cache import njit

# meta columns of the lone replica beyond step_kernels' (arrival, queue-limit, timeout cursors)
M_ARRIVED, M_QCUR, M_TCUR = sk.N_META, sk.N_META + 1, sk.N_META + 2
N_META = sk.N_META + 3


@njit
def next_clock(arr_s, clock, i):
    """SimPy's clock when arrival ``i`` is handed over (``clock[0]``: the previous one's)."""
    t = clock[0]
    dt = arr_s[i] - t
    return t + dt if dt > 0 else t


@njit
def submit_until(rep, cfg, meta, ints, floats, ring, qlog, arr_s, clock, k_max, queue_limit,
                 upto, strict):
    """Submit the arrivals handed over at or before ``upto`` (before it, when ``strict``);
    False when the queue log is full (grow it, call again)."""
    m = meta[rep]
    n = arr_s.shape[0]
    while m[M_ARRIVED] < n:
        r = m[M_ARRIVED]
        t = next_clock(arr_s, clock, r)
        if t > upto or (strict and t == upto):
            break
        if m[sk.M_QLOG] + 2 > qlog.shape[0]:
            return False
        clock[0] = t
        m[M_ARRIVED] = r + 1
        admit(rep, cfg, meta, ints, floats, ring, qlog, r, k_max, queue_limit, t)
    return True


@njit
def admit(rep, cfg, meta, ints, floats, ring, qlog, r, k_max, queue_limit, t):
    """Request ``r`` arrives at replica ``rep`` at ``t`` (``Scheduler.add_request``): rejected if
    it could never fit, or the queue is full (``queue_limit`` -1: none), else queued. True when
    queued. The queue log must have room for one entry."""
    c = cfg[rep]
    m = meta[rep]
    bs = c[sk.C_BS]
    too_big = (ints[r, sk.PROMPT] + ints[r, sk.OUTPUT] + k_max + bs - 1) // bs > c[sk.C_KV]
    no_fit = c[sk.C_CHUNKED] == 0 and ints[r, sk.PROMPT] > c[sk.C_BUDGET]
    full = queue_limit >= 0 and m[sk.M_NWAIT] >= queue_limit
    if too_big or no_fit or full:
        end_request(meta, ints, floats, rep, r, sk.REJECTED, t)
        return False
    ints[r, sk.STATUS] = sk.WAITING
    ring[(m[sk.M_HEAD] + m[sk.M_NWAIT]) % ring.shape[0]] = r
    m[sk.M_NWAIT] += 1
    _qlog(m, qlog, t, 1.0)
    return True


@njit
def _qlog(m, qlog, t, sign):
    q = m[sk.M_QLOG]
    qlog[q] = t
    qlog[q + 1] = sign
    m[sk.M_QLOG] = q + 2


@njit
def end_request(meta, ints, floats, rep, r, outcome, at):
    """End request ``r`` (rejected, timed out) at ``at``: its KV blocks back to replica ``rep``."""
    m = meta[rep]
    m[sk.M_FREE] += ints[r, sk.BLOCKS]
    ints[r, sk.BLOCKS] = 0
    ints[r, sk.STATUS] = sk.DONE
    ints[r, sk.OUTCOME] = outcome
    floats[r, sk.FINISH] = at


@njit
def unqueue(meta, rep, ring, qlog, r, at):
    """Take ``r`` out of replica ``rep``'s waiting ring, the others' order kept (the queue log
    must have room for one entry)."""
    m = meta[rep]
    ring_n = ring.shape[0]
    head = m[sk.M_HEAD]
    nwait = m[sk.M_NWAIT]
    w = 0
    for i in range(nwait):
        v = ring[(head + i) % ring_n]
        if v != r:
            ring[(head + w) % ring_n] = v
            w += 1
    m[sk.M_NWAIT] = nwait - 1
    _qlog(m, qlog, at, -1.0)


@njit
def expire_due(rep, meta, ints, floats, run_idx, ring, qlog, arr_s, max_queue_s, t_dl, t_row, now):
    """``CompiledReplica.expire`` over the deadline arrays: queue-time limits (arrival order),
    then client timeouts (``t_dl``/``t_row``: sorted by deadline, then request); False when the
    queue log is full (what was done stays done; grow it, call again)."""
    m = meta[rep]
    ok = True
    if max_queue_s > 0:
        while m[M_QCUR] < m[M_ARRIVED]:
            r = m[M_QCUR]
            d = arr_s[r] + max_queue_s
            if d > now:
                break
            live = ints[r, sk.STATUS] == sk.WAITING and ints[r, sk.EVER] == 0
            if live and m[sk.M_QLOG] + 2 > qlog.shape[0]:
                return False
            m[M_QCUR] = r + 1
            if live:
                unqueue(meta, rep, ring, qlog, r, d)
                end_request(meta, ints, floats, rep, r, sk.REJECTED, d)
    changed = False
    while m[M_TCUR] < t_dl.shape[0]:
        d = t_dl[m[M_TCUR]]
        r = t_row[m[M_TCUR]]
        if d > now or r >= m[M_ARRIVED]:
            break
        status = ints[r, sk.STATUS]
        if status == sk.WAITING and m[sk.M_QLOG] + 2 > qlog.shape[0]:
            ok = False
            break
        m[M_TCUR] += 1
        if status == sk.RUNNING:
            changed = True
            end_request(meta, ints, floats, rep, r, sk.TIMED_OUT, d)
        elif status == sk.WAITING:
            unqueue(meta, rep, ring, qlog, r, d)
            end_request(meta, ints, floats, rep, r, sk.TIMED_OUT, d)
    if changed:
        sk.keep_running(rep, meta, ints, run_idx)
    return ok


@njit
def advance_alone(rep, cfg, meta, ints, floats, negrates, run_idx, ring, qlog, dec_rows, dec_draft,
                  pf_rows, pf_n, prev_idx, pre, ids, G, gap_idx, gap_s, steps, uni, partial, pol,
                  tm, slot, gm, ax, val, cnt, tc, arr_s, clock, k_max, queue_limit, max_queue_s, t_dl,
                  t_row, now, horizon):
    """``run_kernel.advance`` for a lone replica that also takes its arrivals and deadlines:
    from ``now``, submit what has arrived, expire what is due, plan, price and apply each step
    that ends before ``horizon`` (the run's stop, or inf), and skip idle time to the next arrival.
    Returns ``(why, t, dt)`` with ``run_kernel``'s codes (never ``DEADLINE``): ``IDLE`` means no
    arrival is left before ``horizon``."""
    gap_cap = gap_idx.shape[0]
    step_cap = steps.shape[0] // sk.ROW
    n = arr_s.shape[0]
    m = meta[rep]
    while True:
        if not submit_until(rep, cfg, meta, ints, floats, ring, qlog, arr_s, clock, k_max, queue_limit,
                            now, False):
            return rk.NEED_LOGS, now, 0.0
        if not expire_due(rep, meta, ints, floats, run_idx, ring, qlog, arr_s, max_queue_s, t_dl, t_row, now):
            return rk.NEED_LOGS, now, 0.0
        k = rk.policy_k(pol, rep, meta, ints, run_idx)
        nd, npf, k, ctx, cmax, pf_tokens, pfc, joined, left, drafting = sk.plan_step(
            rep, cfg, meta, ints, floats, run_idx, ring, qlog, dec_rows, dec_draft, pf_rows,
            pf_n, prev_idx, pre, ids, G, gap_cap, step_cap, now, k)
        if nd < 0:
            return rk.NEED_LOGS, now, 0.0
        if nd == 0 and npf == 0:
            if m[M_ARRIVED] < n and m[sk.M_NRUN] == 0 and m[sk.M_NWAIT] == 0:
                t = next_clock(arr_s, clock, m[M_ARRIVED])
                if t < horizon:  # idle until the next arrival wakes the replica
                    now = t
                    continue
            return rk.IDLE, now, 0.0
        dt = pk.price(tm, slot, gm, ax, val, cnt, tc, nd, ctx, k, pf_tokens, pfc, cmax, joined,
                      left, drafting)
        end = now + dt
        if not end < horizon:
            return rk.PENDING, now, dt
        if sk.finish_step(rep, cfg, meta, ints, floats, negrates, run_idx, dec_rows, dec_draft,
                          pf_rows, pf_n, uni, G, gap_idx, gap_s, steps, partial, now, dt, end) < 0:
            return rk.NEED_UNIFORMS, now, dt
        now = end


def deadline_arrays(requests) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times, and client-timeout deadlines with their request rows sorted as the heap
    pops them (by deadline, then row)."""
    arr_s = np.array([r.arrival_s for r in requests], np.float64)
    rows = [i for i, r in enumerate(requests) if r.timeout_s is not None]
    dl = np.array([requests[i].arrival_s + requests[i].timeout_s for i in rows], np.float64)
    row_arr = np.array(rows, np.int64)
    order = np.lexsort((row_arr, dl))
    return arr_s, dl[order], row_arr[order]
