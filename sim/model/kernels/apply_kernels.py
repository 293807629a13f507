"""Applying what happened in a planned step, compiled (vLLM ``update_from_output()``).

Each decoding request commits its accepted drafts plus the bonus token as one burst (the
accepted counts are passed in, ``Replica.acc``: drawn by ``draw_kernels`` in the simulator,
verified for real in the serving loop), rolls the rejected drafts back out of its computed count
and returns the lookahead blocks they held (``kv_blocks.roll_back``). A prefill chunk that
completes the prompt (or a recompute) samples one token; with prefix caching, the prompt blocks it
filled join the replica's cache (``kv_blocks.filled``). A request with every output token ends ``completed``.
"""

from __future__ import annotations

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import kv_blocks as kv
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import keep_running


@njit
def apply_step(rp, rq, lg, end):
    """Apply replica ``rp``'s last planned step, ended at ``end``, with ``rp.acc`` accepted drafts
    per decoding request (ignored without drafts); returns the accepted draft tokens in total.
    Each burst after a request's first is an ITL sample in ``lg`` (the plan made room)."""
    m = rp.meta
    ints, floats = rq.ints, rq.floats
    nd, npf, k = m[ks.M_ND], m[ks.M_NPF], m[ks.M_K]
    bs = rp.cfg[ks.C_BS]
    some_draft = m[ks.M_DRAFTS_ALL] == 0
    free = kv.free_blocks(rp)  # carried through the pass, settled at its end
    total = 0
    any_done = False
    for j in range(nd):
        r = rp.run_idx[rp.dec_rows[j]]
        a = 0
        if k:
            ints[r, ks.SPEC] += 1
            if not some_draft or rp.dec_draft[j]:
                ints[r, ks.DRAFTS] += 1  # vLLM counts a draft only when there was a proposal
                a = rp.acc[j]
            ints[r, ks.ACCEPTED] += a  # no proposal: one token verified, nothing to accept
            total += a
        computed = ints[r, ks.COMPUTED] + 1 + a
        ints[r, ks.COMPUTED] = computed
        gen = ints[r, ks.GENERATED] + 1 + a
        _burst(rq, lg, r, end)
        if gen >= ints[r, ks.OUTPUT]:
            ints[r, ks.GENERATED] = ints[r, ks.OUTPUT]
            free += _complete(rp, rq, r, end)
            any_done = True
        else:
            ints[r, ks.GENERATED] = gen
            # rejected drafts rolled back: their lookahead blocks return (what is kept never
            # exceeds what was held: the step's blocks covered every token it computed)
            free = kv.roll_back(rq, r, computed, bs, free)
    for j in range(npf):
        r = rp.run_idx[rp.pf_rows[j]]
        ints[r, ks.COMPUTED] += rp.pf_n[j]
        kv.filled(rp, rq, r)
        if ints[r, ks.COMPUTED] >= ints[r, ks.PROMPT] + ints[r, ks.GENERATED]:
            ints[r, ks.GENERATED] += 1
            if np.isnan(floats[r, ks.FIRST_TOKEN]):
                floats[r, ks.FIRST_TOKEN] = end
                floats[r, ks.LAST_BURST] = end
                ints[r, ks.BURSTS] += 1
            else:
                _burst(rq, lg, r, end)
            if ints[r, ks.GENERATED] >= ints[r, ks.OUTPUT]:
                free += _complete(rp, rq, r, end)
                any_done = True
    if any_done:
        keep_running(rp, rq)
    kv.settle(rp, free)
    return total


@njit
def _burst(rq, lg, r, end):
    """Request ``r``'s tokens reach the user at ``end``: an ITL sample (the gap since its last
    burst), its longest pause raised."""
    floats = rq.floats
    gap = end - floats[r, ks.LAST_BURST]
    if gap > floats[r, ks.MAX_PAUSE]:
        floats[r, ks.MAX_PAUSE] = gap
    g = lg.G[ks.G_GAPS]
    lg.gap_idx[g] = r
    lg.gap_s[g] = gap
    lg.G[ks.G_GAPS] = g + 1
    floats[r, ks.LAST_BURST] = end
    rq.ints[r, ks.BURSTS] += 1


@njit
def _complete(rp, rq, r, end):
    """End request ``r`` as completed at ``end``; returns the KV blocks that become free."""
    freed = kv.release(rp, rq, r)
    rq.ints[r, ks.STATUS] = ks.DONE
    rq.ints[r, ks.OUTCOME] = ks.COMPLETED
    rq.floats[r, ks.FINISH] = end
    return freed


@njit
def log_step(rp, lg, start, duration, accepted):
    """The step's row (``sim.model.step_protocol.ROW_WIDTH``): what the plan noted, and when."""
    m = rp.meta
    s = lg.G[ks.G_STEPS] * ks.ROW
    st = lg.steps
    st[s] = rp.cfg[ks.C_INDEX]
    st[s + 1] = start
    st[s + 2] = duration
    st[s + 3] = m[ks.M_ND]
    st[s + 4] = m[ks.M_PFTOK]
    st[s + 5] = m[ks.M_K]
    st[s + 6] = accepted
    st[s + 7] = m[ks.M_QNOTE]
    st[s + 8] = m[ks.M_KVNOTE]
    st[s + 9] = rp.cfg[ks.C_KV]
    st[s + 10] = m[ks.M_NPRE]
    st[s + 11] = m[ks.M_NDRAFT]
    lg.G[ks.G_STEPS] += 1
