"""Planning one engine step: continuous batching in vLLM v1's style, compiled (vLLM ``schedule()``).

Tokens are counted one way: a request *has* ``prompt + generated`` tokens and has *computed*
some of them into its KV cache. A step gives each running request, in admission order,
``has - computed`` new tokens (a prompt chunk, a recompute, or the one last-sampled token of a
decoding request) plus ``k`` draft tokens when it decodes with a proposal, or without one on an
engine that verifies full width (``SchedulerConfig.full_width_drafts``,
``sim.model.serving_engine``); drafts take token budget and KV slots (lookahead). A decoding request is never cut; a prompt is cut into a chunk
when chunked prefill is on. When a running request needs a block and none is free, the newest
running request is preempted by recompute (KV freed, back to the front of the queue). Then
waiting requests, FCFS, into what is left — unless the step preempted; with prefix caching a
waiting request's cached prefix is computed already (``prefix_cache``). Block arithmetic and
every move of the KV ledger are ``kv_blocks``'s (a plan carries the free count in a local and
settles it once); what happened in the step is applied by ``apply_kernels.apply_step``.

This is the only home of these rules; ``tests/sim/model/oracle_scheduler.py`` writes them a
second time, readably, and a property test compares the two after every step.
"""

from __future__ import annotations

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import kv_blocks as kv
from sim.model.kernels.kernel_cache import njit

EMPTY = (0, 0, 0, 0.0, 0.0, 0, 0.0, 0, 0, -1)
NO_ROOM = (-1, 0, 0, 0.0, 0.0, 0, 0.0, 0, 0, -1)


@njit
def plan_step(rp, rq, lg, now, k):
    """Plan one step of replica ``rp`` at ``now`` with ``k`` drafts per decoding request.

    Returns ``(nd, npf, k, decode_context, decode_context_max, prefill_tokens,
    prefill_context, joined, left, drafting)`` (``drafting`` -1: every decoding row drafts); the
    rows and chunks are left in ``rp``'s scratch arrays and ``meta`` for the apply kernel.
    ``nd = -1``: a log is too small for this step's worst case (nothing changed; grow, retry).
    """
    c, m = rp.cfg, rp.meta
    seqs = c[ks.C_SEQS]
    if (m[ks.M_QLOG] + 2 * (m[ks.M_NRUN] + seqs) > rp.qlog.shape[0]
            or lg.G[ks.G_GAPS] + m[ks.M_NRUN] + seqs > lg.gap_idx.shape[0]
            or (lg.G[ks.G_STEPS] + 1) * ks.ROW > lg.steps.shape[0]):
        return NO_ROOM
    budget = c[ks.C_BUDGET]
    k = min(k, budget - 1)
    budget, free, nd, npf, npre, ctx_sum, ctx_max, pf_tokens, pf_ctx, n_draft, all_draft = (
        _serve_running(rp, rq, budget, k))
    if npre:
        _requeue_preempted(rp, npre, now)
    else:
        npf, pf_tokens, pf_ctx, free = _admit_waiting(rp, rq, now, budget, free, npf, pf_tokens, pf_ctx)
    all_draft = all_draft or k == 0
    kv.settle(rp, free)
    m[ks.M_ND] = nd
    m[ks.M_NPF] = npf
    m[ks.M_NPRE] = npre
    m[ks.M_PFTOK] = pf_tokens
    m[ks.M_K] = k if nd else 0
    m[ks.M_DRAFTS_ALL] = 1 if all_draft else 0
    m[ks.M_NDRAFT] = (nd if all_draft else n_draft) if k and nd else 0
    m[ks.M_QNOTE] = m[ks.M_NWAIT]
    m[ks.M_KVNOTE] = c[ks.C_KV] - free
    if nd == 0 and npf == 0:
        return EMPTY
    bs = c[ks.C_BS]
    ctx = 0.0
    cmax = 0.0
    if nd:  # at block resolution: paged attention reads whole blocks (and shapes repeat)
        ctx = np.rint(ctx_sum / (nd * bs)) * bs
        cmax = np.rint(ctx_max / bs) * bs
    pfc = pf_ctx / pf_tokens if pf_tokens else 0.0
    joined = 0
    left = 0
    if c[ks.C_TRACK] and nd:
        joined, left = _batch_change(rp, rq, nd)
    return nd, npf, k if nd else 0, ctx, cmax, pf_tokens, pfc, joined, left, -1 if all_draft else n_draft


@njit
def _serve_running(rp, rq, budget, k):
    """Running requests first, in admission order, until the budget runs out; preempts the
    newest when one needs a block and none is free. Returns the step's running-side sums."""
    c, m = rp.cfg, rp.meta
    ints = rq.ints
    bs = c[ks.C_BS]
    free = kv.free_blocks(rp)
    nrun = m[ks.M_NRUN]
    nd = npf = npre = ctx_sum = ctx_max = pf_tokens = pf_ctx = n_draft = 0
    all_draft = True  # no decoding request met that feeds one token
    full_width = c[ks.C_FULLW] != 0  # rows without a proposal verify k filled slots anyway
    i = 0
    while i < nrun and budget > 0:
        r = rp.run_idx[i]
        computed = ints[r, ks.COMPUTED]
        gen = ints[r, ks.GENERATED]
        remaining = ints[r, ks.PROMPT] + gen - computed
        proposes = True  # feeds k draft slots (a proposal, or slots filled without one)
        if remaining == 1 and gen > 0:
            proposes = ints[r, ks.PROPOSES] != 0 or k == 0 or full_width
            if not proposes:
                all_draft = False
            n = 1 + k if proposes else 1
            if n > budget:
                break
            is_decode = True
        else:
            # mid-prompt: only with chunked prefill (without it a prompt is admitted whole)
            n = remaining if remaining < budget else budget
            is_decode = False
        need = kv.running_need(computed, n, ints[r, ks.BLOCKS], bs)
        if need > free:
            free, nrun, npre, self_out = _preempt(rp, rq, r, need, free, nrun, npre)
            if self_out:
                break
        free = kv.grow(rp, rq, r, need, free)  # never below 0: a request holds no more than its computed tokens' blocks
        if is_decode:
            rp.dec_rows[nd] = i
            rp.dec_draft[nd] = 1 if proposes else 0
            n_draft += 1 if proposes else 0
            nd += 1
            ctx_sum += computed
            ctx_max = max(ctx_max, computed)
        else:
            rp.pf_rows[npf] = i
            rp.pf_n[npf] = n
            npf += 1
            pf_tokens += n
            pf_ctx += n * computed
        budget -= n
        i += 1
    m[ks.M_NRUN] = nrun
    return budget, free, nd, npf, npre, ctx_sum, ctx_max, pf_tokens, pf_ctx, n_draft, all_draft


@njit
def _preempt(rp, rq, r, need, free, nrun, npre):
    """Preempt the newest running requests (recompute: KV freed, nothing computed) until ``r``
    fits or is itself preempted. Returns ``(free, nrun, npre, r preempted)``."""
    ints = rq.ints
    while need > free:
        nrun -= 1
        v = rp.run_idx[nrun]
        free += kv.release(rp, rq, v)
        ints[v, ks.COMPUTED] = 0
        ints[v, ks.STATUS] = ks.WAITING
        ints[v, ks.PREEMPT] += 1
        rp.pre[npre] = v
        npre += 1
        if v == r:
            return free, nrun, npre, True
    return free, nrun, npre, False


@njit
def _requeue_preempted(rp, npre, now):
    """Preempted requests back to the front of the queue, oldest first (vLLM)."""
    m = rp.meta
    ring_n = rp.ring.shape[0]
    head = m[ks.M_HEAD]
    for j in range(npre):
        head = (head - 1) % ring_n
        rp.ring[head] = rp.pre[j]
        m[ks.M_NWAIT] += 1
        log_queue(rp, now, 1.0)
    m[ks.M_HEAD] = head


@njit
def _admit_waiting(rp, rq, now, budget, free, npf, pf_tokens, pf_ctx):
    """Waiting requests, FCFS, into what the running ones left of the budget and free blocks
    (vLLM never admits in a step that preempted). With prefix caching, a request's cached prefix
    counts computed and only the blocks it newly needs (and the cached ones it takes off the
    free list) must be free (vLLM ``get_computed_blocks``, ``allocate_slots``).
    Returns ``(npf, pf_tokens, pf_ctx, free)``."""
    c, m = rp.cfg, rp.meta
    ints = rq.ints
    bs = c[ks.C_BS]
    prefix = c[ks.C_PREFIX] != 0
    ring_n = rp.ring.shape[0]
    nrun = m[ks.M_NRUN]
    while m[ks.M_NWAIT] > 0 and budget > 0 and nrun < c[ks.C_SEQS]:
        r = rp.ring[m[ks.M_HEAD]]
        has = ints[r, ks.PROMPT] + ints[r, ks.GENERATED]
        hit, taken = kv.cached_prefix(rp, rq, r, has)
        cached = hit * bs
        remaining = has - cached
        if remaining <= budget:
            n = remaining
        elif c[ks.C_CHUNKED] != 0:
            n = budget
        elif nrun == 0 and npf == 0 and budget == c[ks.C_BUDGET]:
            n = remaining  # a recompute larger than the budget, chunking off: it runs alone
        else:
            break
        need = kv.admission_need(cached + n, bs) - hit
        if need + taken > free:
            break
        m[ks.M_HEAD] = (m[ks.M_HEAD] + 1) % ring_n
        m[ks.M_NWAIT] -= 1
        log_queue(rp, now, -1.0)
        free = kv.admit(rp, rq, r, hit, taken, need, free)
        if prefix:
            ints[r, ks.COMPUTED] = cached
            if ints[r, ks.EVER] == 0:
                ints[r, ks.PFX_HIT] = cached
        ints[r, ks.STATUS] = ks.RUNNING
        if ints[r, ks.EVER] == 0:
            ints[r, ks.EVER] = 1
            rq.floats[r, ks.SCHEDULED] = now
        rp.run_idx[nrun] = r
        rp.pf_rows[npf] = nrun
        rp.pf_n[npf] = n
        npf += 1
        nrun += 1
        pf_tokens += n
        pf_ctx += n * cached
        budget -= min(n, budget)
    m[ks.M_NRUN] = nrun
    return npf, pf_tokens, pf_ctx, free


@njit
def log_queue(rp, t, sign):
    """One entry to (+1) or exit from (-1) the waiting queue (the log has room: checked first)."""
    q = rp.meta[ks.M_QLOG]
    rp.qlog[q] = t
    rp.qlog[q + 1] = sign
    rp.meta[ks.M_QLOG] = q + 2


@njit
def _batch_change(rp, rq, nd):
    """``DecodeBatchRows.change``: rows that joined and left the decode batch since the last
    decoding step (``(0, 0)`` when it is the same requests in the same order)."""
    m = rp.meta
    ints = rq.ints
    prev = m[ks.M_PREV]
    same = prev == nd
    if same:
        for j in range(nd):
            if rp.run_idx[rp.dec_rows[j]] != rp.prev_idx[j]:
                same = False
                break
    if same:
        return 0, 0
    joined = 0
    for j in range(nd):
        if ints[rp.run_idx[rp.dec_rows[j]], ks.IN_BATCH] == 0:
            joined += 1
    left = prev - (nd - joined)
    forget_batch(rp, rq)
    for j in range(nd):
        r = rp.run_idx[rp.dec_rows[j]]
        ints[r, ks.IN_BATCH] = 1
        rp.prev_idx[j] = r
    m[ks.M_PREV] = nd
    return joined, left


@njit
def forget_batch(rp, rq):
    """No decode batch remembered (its rows' flags cleared): at a change, or a restart."""
    for j in range(rp.meta[ks.M_PREV]):
        rq.ints[rp.prev_idx[j], ks.IN_BATCH] = 0
    rp.meta[ks.M_PREV] = 0


@njit
def num_decoding(rp, rq):
    """Running requests past their prompt (what a speculation policy reads as the batch)."""
    n = 0
    ints = rq.ints
    for i in range(rp.meta[ks.M_NRUN]):
        r = rp.run_idx[i]
        gen = ints[r, ks.GENERATED]
        if gen and ints[r, ks.COMPUTED] == ints[r, ks.PROMPT] + gen - 1:
            n += 1
    return n


@njit
def keep_running(rp, rq):
    """Requests that ended (completed, timed out) leave the running list, the others' order kept."""
    m = rp.meta
    w = 0
    for i in range(m[ks.M_NRUN]):
        r = rp.run_idx[i]
        if rq.ints[r, ks.STATUS] == ks.RUNNING:
            rp.run_idx[w] = r
            w += 1
    m[ks.M_NRUN] = w
