"""A replica's waiting queue and the ends that do not come from a step, compiled: admission on
arrival (vLLM refuses what could never run), adoption of re-routed work, leaving the queue, ending
a request early (rejected, timed out) and evacuating a replica that goes down (restarts).

What a deadline ends is written once here (``queue_time_up``, ``client_gone``); when one falls
is kept by ``sim.model.deadlines`` (heaps, in Python) or ``arrival_kernels`` (cursors over the
run's sorted deadlines, compiled), which call them.
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import kv_blocks as kv
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import forget_batch, log_queue


@njit
def admit(rp, rq, r, t):
    """Request ``r`` arrives at ``rp`` at ``t``: rejected when it could never run here (more KV
    blocks at its longest than the replica has; a prompt over the token budget with chunking
    off) or the queue is full, else queued; rejected ``TOO_LONG`` first when its prompt plus
    output cannot fit the model's context (``kv.too_long``). True when queued. The queue log
    has room for one."""
    c = rp.cfg
    ints = rq.ints
    if kv.too_long(ints[r, ks.PROMPT], ints[r, ks.OUTPUT], c[ks.C_MAXLEN]):
        end_request(rp, rq, r, ks.TOO_LONG, t)
        return False
    too_big = not kv.fits_at_all(ints[r, ks.PROMPT], ints[r, ks.OUTPUT], c[ks.C_KMAX], c[ks.C_BS],
                                 c[ks.C_KV])
    no_fit = c[ks.C_CHUNKED] == 0 and ints[r, ks.PROMPT] > c[ks.C_BUDGET]
    full = c[ks.C_QLIMIT] >= 0 and rp.meta[ks.M_NWAIT] >= c[ks.C_QLIMIT]
    if too_big or no_fit or full:
        end_request(rp, rq, r, ks.REJECTED, t)
        return False
    enqueue(rp, rq, r, t)
    return True


@njit
def enqueue(rp, rq, r, t):
    """``r`` to the back of the waiting queue at ``t`` (a new arrival, or work re-routed from a
    restarted replica, which keeps its deadlines). The queue log has room for one entry."""
    m = rp.meta
    rq.ints[r, ks.STATUS] = ks.WAITING
    rp.ring[(m[ks.M_HEAD] + m[ks.M_NWAIT]) % rp.ring.shape[0]] = r
    m[ks.M_NWAIT] += 1
    log_queue(rp, t, 1.0)


@njit
def end_request(rp, rq, r, outcome, at):
    """End request ``r`` (rejected, timed out) at ``at``: its KV blocks back to ``rp``."""
    kv.give_back(rp, rq, r)
    rq.ints[r, ks.STATUS] = ks.DONE
    rq.ints[r, ks.OUTCOME] = outcome
    rq.floats[r, ks.FINISH] = at


@njit
def queue_time_up(rp, rq, r, at):
    """``r``'s queue-time limit falls at ``at``: still waiting and never scheduled, it ends
    rejected (the queue log has room for one entry)."""
    if rq.ints[r, ks.STATUS] == ks.WAITING and rq.ints[r, ks.EVER] == 0:
        unqueue(rp, r, at)
        end_request(rp, rq, r, ks.REJECTED, at)


@njit
def client_gone(rp, rq, r, at):
    """``r``'s client gives up at ``at``: waiting or running, it ends timed out. True when a
    running request ended (call ``plan_kernels.keep_running`` after the last one; the queue log
    has room for one entry)."""
    status = rq.ints[r, ks.STATUS]
    if status == ks.WAITING:
        unqueue(rp, r, at)
    elif status != ks.RUNNING:
        return False
    end_request(rp, rq, r, ks.TIMED_OUT, at)
    return status == ks.RUNNING


@njit
def unqueue(rp, r, at):
    """Take ``r`` out of the waiting ring, the others' order kept (the queue log has room)."""
    m = rp.meta
    ring_n = rp.ring.shape[0]
    head = m[ks.M_HEAD]
    nwait = m[ks.M_NWAIT]
    w = 0
    for i in range(nwait):
        v = rp.ring[(head + i) % ring_n]
        if v != r:
            rp.ring[(head + w) % ring_n] = v
            w += 1
    m[ks.M_NWAIT] = nwait - 1
    log_queue(rp, at, -1.0)


@njit
def evacuate(rp, rq, out, now):
    """Take every in-flight request out (the replica goes down): KV freed, nothing computed,
    rows into ``out`` oldest-admitted first (running ones, then the queue in order); returns how
    many. The decode batch is forgotten (its KV is gone with the process). The queue log has
    room for an exit per waiting request."""
    m = rp.meta
    ints = rq.ints
    n = 0
    for i in range(m[ks.M_NRUN]):
        out[n] = rp.run_idx[i]
        n += 1
    ring_n = rp.ring.shape[0]
    for i in range(m[ks.M_NWAIT]):
        out[n] = rp.ring[(m[ks.M_HEAD] + i) % ring_n]
        n += 1
        log_queue(rp, now, -1.0)
    for i in range(n):
        r = out[i]
        kv.give_back(rp, rq, r)
        ints[r, ks.COMPUTED] = 0
        ints[r, ks.STATUS] = ks.WAITING
    kv.drop_cache(rp)  # the cache went down with the process
    forget_batch(rp, rq)
    m[ks.M_NRUN] = 0
    m[ks.M_NWAIT] = 0
    m[ks.M_HEAD] = 0
    return n


@njit
def go_down(rp, rq, out, drop, now):
    """A restart takes the replica down at ``now``: every in-flight request evacuated
    (``evacuate``) and, when the restart drops them, each ended rejected (its client got an
    error). Returns how many rows of ``out`` are left to re-route (0 when dropped): both drivers'
    restarts call this, then route each in order."""
    n = evacuate(rp, rq, out, now)
    if not drop:
        return n
    for i in range(n):
        end_request(rp, rq, out[i], ks.REJECTED, now)
    return 0
