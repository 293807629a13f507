"""The planner's step, compiled: ``Scheduler.schedule`` and ``update`` over the fleet's arrays.

Why compiled (issue 18): in Python a step costs ~1 µs per request (attribute updates) plus
~10 µs of fixed work; numpy columns remove the first at GPU batches but their per-call cost
(~1-2 µs an operation, dozens per step) is more than a batch of 10 costs in plain Python.
Compiled loops cost nanoseconds a request at every batch size. The kernels mirror the scalar
planner (``sim.model.scheduler``, ``sim.model.step_update``) operation for operation — same
integer ceilings, the same float subtractions, ``bisect_left`` for accepted drafts — so a run
gives the same records bit for bit (``tests/sim/results/test_golden_frames.py``).

State is plain arrays (``sim.model.fleet_arrays.FleetArrays``): one row per request of the
run in ``ints`` and ``floats``, a replica's running requests as request indices in
admission order, its waiting queue as a ring of indices, and flat logs the Python side grows.
"""

from __future__ import annotations

import numpy as np

from sim.model.kernel_cache import njit

# rows of ints (int64, one column per request)
PROMPT, OUTPUT, COMPUTED, GENERATED, BLOCKS, BURSTS, SPEC, DRAFTS, ACCEPTED, PROPOSES = range(10)
STATUS, OUTCOME, PREEMPT, EVER, IN_BATCH = range(10, 15)
N_INTS = 15
# rows of floats (float64)
LAST_BURST, MAX_PAUSE, PROPOSAL, FIRST_TOKEN, SCHEDULED, FINISH = range(6)
N_FLOATS = 6
# meta: one int64 row per replica
(M_NRUN, M_HEAD, M_NWAIT, M_FREE, M_QLOG, M_ND, M_NPF, M_K, M_DRAFTS_ALL, M_NPRE, M_PREV,
 M_QNOTE, M_KVNOTE, M_PFTOK) = range(14)
N_META = 14
# cfg: one int64 row per replica
C_SEQS, C_BUDGET, C_BS, C_KV, C_CHUNKED, C_TRACK, C_RING = range(7)
N_CFG = 7
# fleet-wide counters (int64)
G_GAPS, G_STEPS, G_UNI = range(3)
ROW = 12
"""Values per logged step (``sim.model.step_protocol.ROW_WIDTH``)."""

WAITING, RUNNING, DONE = 0, 1, 2
COMPLETED, REJECTED, TIMED_OUT = 1, 2, 3
"""Outcome codes (0: none yet)."""


@njit
def plan_step(rep, cfg, meta, ints, floats, run_idx, ring, qlog, dec_rows, dec_draft, pf_rows, pf_n,
              prev_idx, pre, ids, G, gap_cap, step_cap, now, k):
    """Plan one step of replica ``rep`` at ``now`` with ``k`` drafts (``Scheduler.schedule``).

    Returns ``(nd, npf, k, decode_context, decode_context_max, prefill_tokens,
    prefill_context, joined, left, drafting)`` (``drafting`` -1: every decoding row drafts);
    the rows and chunks are left in the scratch arrays and ``meta`` for ``finish_step``.
    ``nd = -1``: a log is too small for this step's worst case (nothing changed; grow, retry).
    """
    c = cfg[rep]
    m = meta[rep]
    nrun = m[M_NRUN]
    seqs = c[C_SEQS]
    if (m[M_QLOG] + 2 * (nrun + seqs) > qlog.shape[0] or G[G_GAPS] + nrun + seqs > gap_cap
            or G[G_STEPS] + 1 > step_cap):
        return -1, 0, 0, 0.0, 0.0, 0, 0.0, 0, 0, -1
    bs = c[C_BS]
    chunked = c[C_CHUNKED] != 0
    budget = c[C_BUDGET]
    if k > budget - 1:
        k = budget - 1
    free = m[M_FREE]
    nd = 0
    npf = 0
    npre = 0
    ctx_sum = 0
    ctx_max = 0
    pf_tokens = 0
    pf_ctx = 0
    all_draft = True
    n_draft = 0
    i = 0
    while i < nrun and budget > 0:
        r = run_idx[i]
        computed = ints[r, COMPUTED]
        gen = ints[r, GENERATED]
        remaining = ints[r, PROMPT] + gen - computed
        proposes = True
        if remaining == 1 and gen > 0:
            proposes = ints[r, PROPOSES] != 0 or k == 0
            if not proposes:
                all_draft = False
            n = 1 + k if proposes else 1
            if n > budget:
                break
            is_decode = True
        else:
            n = remaining if remaining < budget else budget
            if not chunked and n < remaining:
                break
            is_decode = False
        need = (computed + n + bs - 1) // bs - ints[r, BLOCKS]
        if need > free:
            self_out = False
            while need > free:  # preempt the newest running requests until this one fits
                nrun -= 1
                v = run_idx[nrun]
                free += ints[v, BLOCKS]
                ints[v, BLOCKS] = 0
                ints[v, COMPUTED] = 0
                ints[v, STATUS] = WAITING
                ints[v, PREEMPT] += 1
                pre[npre] = v
                npre += 1
                if v == r:
                    self_out = True
                    break
            if self_out:
                break
        if need > 0:
            free -= need
            ints[r, BLOCKS] += need
        if is_decode:
            dec_rows[nd] = i
            dec_draft[nd] = 1 if proposes else 0
            n_draft += 1 if proposes else 0
            nd += 1
            ctx_sum += computed
            if computed > ctx_max:
                ctx_max = computed
        else:
            pf_rows[npf] = i
            pf_n[npf] = n
            npf += 1
            pf_tokens += n
            pf_ctx += n * computed
        budget -= n
        i += 1
    ring_n = c[C_RING]
    head = m[M_HEAD]
    nwait = m[M_NWAIT]
    q = m[M_QLOG]
    if npre:
        for j in range(npre):  # back to the front of the queue, oldest first
            head = (head - 1) % ring_n
            ring[head] = pre[j]
            nwait += 1
            qlog[q] = now
            qlog[q + 1] = 1.0
            q += 2
    else:
        while nwait > 0 and budget > 0 and nrun < seqs:  # Scheduler.admit_waiting
            r = ring[head]
            remaining = ints[r, PROMPT] + ints[r, GENERATED]
            if remaining <= budget:
                n = remaining
            elif chunked:
                n = budget
            elif nrun == 0 and npf == 0 and budget == c[C_BUDGET]:
                n = remaining  # a recompute larger than the budget runs alone
            else:
                break
            need = (n + bs - 1) // bs
            if need > free:
                break
            head = (head + 1) % ring_n
            nwait -= 1
            qlog[q] = now
            qlog[q + 1] = -1.0
            q += 2
            free -= need
            ints[r, BLOCKS] = need
            ints[r, STATUS] = RUNNING
            if ints[r, EVER] == 0:
                ints[r, EVER] = 1
                floats[r, SCHEDULED] = now
            run_idx[nrun] = r
            pf_rows[npf] = nrun
            pf_n[npf] = n
            npf += 1
            nrun += 1
            pf_tokens += n
            budget -= n if n <= budget else budget
    m[M_NRUN] = nrun
    m[M_HEAD] = head
    m[M_NWAIT] = nwait
    m[M_QLOG] = q
    m[M_FREE] = free
    m[M_ND] = nd
    m[M_NPF] = npf
    m[M_NPRE] = npre
    m[M_PFTOK] = pf_tokens
    m[M_K] = k if nd else 0
    m[M_DRAFTS_ALL] = 1 if all_draft or k == 0 else 0
    m[M_QNOTE] = nwait
    m[M_KVNOTE] = c[C_KV] - free
    if nd == 0 and npf == 0:
        return 0, 0, 0, 0.0, 0.0, 0, 0.0, 0, 0, -1
    ctx = 0.0
    cmax = 0.0
    if nd:
        ctx = np.rint(ctx_sum / (nd * bs)) * bs
        cmax = np.rint(ctx_max / bs) * bs
    pfc = pf_ctx / pf_tokens if pf_tokens else 0.0
    joined = 0
    left = 0
    if c[C_TRACK] and nd:
        joined, left = _batch_change(m, ints, run_idx, dec_rows, nd, prev_idx, ids)
    drafting = -1 if all_draft or k == 0 else n_draft
    return nd, npf, k if nd else 0, ctx, cmax, pf_tokens, pfc, joined, left, drafting


@njit
def _batch_change(m, ints, run_idx, dec_rows, nd, prev_idx, ids):
    """``DecodeBatchRows.change``: rows that joined and left the decode batch since the last
    decoding step (``(0, 0)`` when it is the same requests in the same order)."""
    prev = m[M_PREV]
    same = prev == nd
    if same:
        for j in range(nd):
            if ids[run_idx[dec_rows[j]]] != ids[prev_idx[j]]:
                same = False
                break
    if same:
        return 0, 0
    joined = 0
    for j in range(nd):
        if ints[run_idx[dec_rows[j]], IN_BATCH] == 0:
            joined += 1
    left = prev - (nd - joined)
    for j in range(prev):
        ints[prev_idx[j], IN_BATCH] = 0
    for j in range(nd):
        r = run_idx[dec_rows[j]]
        ints[r, IN_BATCH] = 1
        prev_idx[j] = r
    m[M_PREV] = nd
    return joined, left


@njit
def finish_step(rep, cfg, meta, ints, floats, negrates, run_idx, dec_rows, dec_draft, pf_rows, pf_n, uni,
                G, gap_idx, gap_s, steps, partial, start, duration, end):
    """Apply replica ``rep``'s planned step, ended at ``end`` (the engine's draws,
    ``StepCycle.finish`` and ``Scheduler.update``); returns the accepted draft tokens, or -1
    when fewer uniforms are left than the step may draw (nothing changed; refill, retry)."""
    c = cfg[rep]
    m = meta[rep]
    nd = m[M_ND]
    npf = m[M_NPF]
    k = m[M_K]
    pos = G[G_UNI]
    if pos + (nd if k else 0) + (nd + npf if partial else 0) > uni.shape[0]:
        return -1
    bs = c[C_BS]
    some_draft = m[M_DRAFTS_ALL] == 0
    free = m[M_FREE]
    g = G[G_GAPS]
    total = 0
    n_drafting = 0
    any_done = False
    for j in range(nd):
        r = run_idx[dec_rows[j]]
        a = 0
        if k:
            x = -uni[pos]  # bisect_left(negrates, -u, 0, k): accepted positions
            pos += 1
            lo = 0
            hi = k
            while lo < hi:
                mid = (lo + hi) // 2
                if negrates[r, mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            a = lo
            ints[r, SPEC] += 1
            if not some_draft or dec_draft[j]:
                ints[r, DRAFTS] += 1  # vLLM counts a draft only when there was a proposal
                n_drafting += 1
            else:
                a = 0  # no proposal: one token verified, nothing to accept
            ints[r, ACCEPTED] += a
            total += a
        computed = ints[r, COMPUTED] + 1 + a
        ints[r, COMPUTED] = computed
        gen = ints[r, GENERATED] + 1 + a
        g = _log_gap(floats, gap_idx, gap_s, g, r, end)
        floats[r, LAST_BURST] = end
        ints[r, BURSTS] += 1
        if gen >= ints[r, OUTPUT]:
            ints[r, GENERATED] = ints[r, OUTPUT]
            free += _complete(ints, floats, r, end)
            any_done = True
        else:
            ints[r, GENERATED] = gen
            keep = (computed + bs - 1) // bs
            if keep < ints[r, BLOCKS]:  # rejected drafts rolled back: their lookahead blocks return
                free += ints[r, BLOCKS] - keep
                ints[r, BLOCKS] = keep
    for j in range(npf):
        r = run_idx[pf_rows[j]]
        ints[r, COMPUTED] += pf_n[j]
        if ints[r, COMPUTED] >= ints[r, PROMPT] + ints[r, GENERATED]:
            ints[r, GENERATED] += 1
            if np.isnan(floats[r, FIRST_TOKEN]):
                floats[r, FIRST_TOKEN] = end
            else:
                g = _log_gap(floats, gap_idx, gap_s, g, r, end)
            floats[r, LAST_BURST] = end
            ints[r, BURSTS] += 1
            if ints[r, GENERATED] >= ints[r, OUTPUT]:
                free += _complete(ints, floats, r, end)
                any_done = True
    if partial:  # whether each request of the step has a proposal for its next one
        for j in range(nd + npf):
            r = run_idx[dec_rows[j]] if j < nd else run_idx[pf_rows[j - nd]]
            p = floats[r, PROPOSAL]
            if p < 1.0:
                ints[r, PROPOSES] = 1 if uni[pos] < p else 0
                pos += 1
    if any_done:
        keep_running(rep, meta, ints, run_idx)
    m[M_FREE] = free
    G[G_GAPS] = g
    G[G_UNI] = pos
    s = G[G_STEPS] * ROW
    steps[s] = rep
    steps[s + 1] = start
    steps[s + 2] = duration
    steps[s + 3] = nd
    steps[s + 4] = m[M_PFTOK]
    steps[s + 5] = k
    steps[s + 6] = total
    steps[s + 7] = m[M_QNOTE]
    steps[s + 8] = m[M_KVNOTE]
    steps[s + 9] = c[C_KV]
    steps[s + 10] = m[M_NPRE]
    steps[s + 11] = n_drafting if k else 0
    G[G_STEPS] += 1
    return total


@njit
def keep_running(rep, meta, ints, run_idx):
    """Requests that ended (completed, timed out) leave the running list, the others' order kept."""
    m = meta[rep]
    w = 0
    for i in range(m[M_NRUN]):
        r = run_idx[i]
        if ints[r, STATUS] == RUNNING:
            run_idx[w] = r
            w += 1
    m[M_NRUN] = w


@njit
def _log_gap(floats, gap_idx, gap_s, g, r, end):
    """Request ``r``'s burst at ``end``: its gap since the last one logged at ``g`` (an ITL
    sample) and its longest pause raised; returns the next log position."""
    gap = end - floats[r, LAST_BURST]
    if gap > floats[r, MAX_PAUSE]:
        floats[r, MAX_PAUSE] = gap
    gap_idx[g] = r
    gap_s[g] = gap
    return g + 1


@njit
def _complete(ints, floats, r, end):
    """End request ``r`` as completed at ``end``; returns the KV blocks it gives back."""
    freed = ints[r, BLOCKS]
    ints[r, BLOCKS] = 0
    ints[r, STATUS] = DONE
    ints[r, OUTCOME] = COMPLETED
    floats[r, FINISH] = end
    return freed


@njit
def num_decoding(rep, meta, ints, run_idx):
    """Running requests past their prompt (``Scheduler.num_decoding``)."""
    n = 0
    for i in range(meta[rep, M_NRUN]):
        r = run_idx[i]
        gen = ints[r, GENERATED]
        if gen and ints[r, COMPUTED] == ints[r, PROMPT] + gen - 1:
            n += 1
    return n
