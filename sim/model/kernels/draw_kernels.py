"""The simulated world's side of a step: how many drafts the target accepts, and whether each
request has a proposal for its next step. Kept apart from the planner's rules (``plan_kernels``,
``apply_kernels``), which take the accepted counts as given, as the real serving loop gives them.

Acceptance: one uniform per decoding request, accepted positions = those whose survival rate
exceeds it (``bisect_left`` over the negated rates: ``sim.model.acceptance.draw_accepted``
draw for draw), or the request's traced sequence when it replays a trace
(``sim.contracts.acceptance_trace``: ``positions`` or ``steps`` layout, restarting at its end).
A request without a proposal this step accepts nothing (on an engine that verifies full width
its row still fed ``k`` filled slots: ``sim.model.serving_engine``).
Proposals (n-gram matches): one uniform per request of the step whose proposal rate is below 1,
after the acceptance draws; a replaying request reads its trace instead.
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels.kernel_cache import njit


@njit
def draw_outcome(rp, rq, lg):
    """Draw the accepted drafts of ``rp``'s planned step into ``rp.acc`` and its requests' next
    proposals; False (nothing drawn) when fewer uniforms are left than it may take (refill)."""
    m = rp.meta
    nd, npf, k = m[ks.M_ND], m[ks.M_NPF], m[ks.M_K]
    partial = rp.cfg[ks.C_PARTIAL] != 0
    pos = lg.G[ks.G_UNI]
    if pos + (nd if k else 0) + (nd + npf if partial else 0) > lg.uni.shape[0]:
        return False
    ints = rq.ints
    for j in range(nd):
        r = rp.run_idx[rp.dec_rows[j]]
        if k:
            a = _bisect(rq.negrates, r, -lg.uni[pos], k)
            pos += 1
            if ints[r, ks.REPLAY_LEN]:
                a = replay_accepted(rq, r, k)
            # no proposal: slots a full-width engine filled anyway are rejected
            rp.acc[j] = a if ints[r, ks.PROPOSES] else 0
        else:
            rp.acc[j] = 0
            if ints[r, ks.REPLAY_LEN] and ints[r, ks.REPLAY_STEPS] == 0:
                ints[r, ks.REPLAY_POS] += 1  # a plain step moves a replayed answer on by one token
    if partial:
        for j in range(nd + npf):
            r = rp.run_idx[rp.dec_rows[j]] if j < nd else rp.run_idx[rp.pf_rows[j - nd]]
            if ints[r, ks.REPLAY_LEN]:
                ints[r, ks.PROPOSES] = 1 if replay_proposes(rq, r) else 0
                continue
            p = rq.floats[r, ks.PROPOSAL]
            if p < 1.0:
                ints[r, ks.PROPOSES] = 1 if lg.uni[pos] < p else 0
                pos += 1
    lg.G[ks.G_UNI] = pos
    return True


@njit
def _bisect(negrates, r, x, k):
    """``bisect_left(negrates[r], x, 0, k)``: accepted positions of one draw (no row view: a
    view per draw costs a reference count each way)."""
    lo = 0
    hi = k
    while lo < hi:
        mid = (lo + hi) // 2
        if negrates[r, mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit
def _traced(rq, r):
    ints = rq.ints
    return rq.replay[ints[r, ks.REPLAY_OFF] + ints[r, ks.REPLAY_POS] % ints[r, ks.REPLAY_LEN]]


@njit
def replay_accepted(rq, r, k):
    """Accepted drafts of replaying request ``r``'s step at ``k``; moves its trace position on.
    ``positions``: the step commits ``min(commit, k + 1)`` tokens from the answer position it
    is at; ``steps``: the next recorded step, capped at ``k`` (no proposal: 0)."""
    v = _traced(rq, r)
    if rq.ints[r, ks.REPLAY_STEPS] == 0:
        a = (v if v <= k + 1 else k + 1) - 1
        rq.ints[r, ks.REPLAY_POS] += a + 1
        return a
    rq.ints[r, ks.REPLAY_POS] += 1
    return 0 if v < 0 else (v if v < k else k)


@njit
def replay_proposes(rq, r):
    """Whether replaying request ``r``'s next step has a proposal (``steps`` layout: not null)."""
    return rq.ints[r, ks.REPLAY_STEPS] == 0 or _traced(rq, r) >= 0
