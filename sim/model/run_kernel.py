"""A replica's steps between two events of the simulation, run in one compiled call.

Why: SimPy's event machinery and the Python around each step cost more than a compiled step.
Nothing outside a replica can change it between two events of the simulation (an arrival,
another replica's step, the end of the run), so every step that ends strictly before the next
scheduled event is run here, back to back, exactly as the one-event-per-step loop would run it;
the step that would end at or after that event is handed back to SimPy, which then orders it
against the others as before (``sim.model.compiled_replica.CompiledReplica.run``). Records come
out identical (``tests/sim/results/test_golden_frames.py``).
"""

from __future__ import annotations

from sim.model import price_kernels as pk
from sim.model import step_kernels as sk
from sim.model.kernel_cache import njit

# what ``advance`` stopped for
IDLE, PENDING, NEED_LOGS, NEED_UNIFORMS, DEADLINE = range(5)
# pol (int64): policy kind, k, max_batch, then (threshold, k) rows of k_by_batch
P_KIND, P_K, P_MAX_BATCH, P_ROWS = range(4)
POL_OFF, POL_FIXED, POL_OFF_ABOVE, POL_BY_BATCH = range(4)


@njit
def policy_k(pol, rep, meta, ints, run_idx):
    """``SpeculationPolicy.k_for`` for the policies that need no window of past steps."""
    kind = pol[P_KIND]
    if kind == POL_FIXED:
        return pol[P_K]
    if kind == POL_OFF:
        return 0
    batch = sk.num_decoding(rep, meta, ints, run_idx)
    if kind == POL_OFF_ABOVE:
        return pol[P_K] if batch <= pol[P_MAX_BATCH] else 0
    k = pol[P_ROWS + 1]
    for j in range((pol.shape[0] - P_ROWS) // 2):
        if batch >= pol[P_ROWS + 2 * j]:
            k = pol[P_ROWS + 2 * j + 1]
        else:
            break
    return k


@njit
def advance(rep, cfg, meta, ints, floats, negrates, run_idx, ring, qlog, dec_rows, dec_draft,
            pf_rows, pf_n, prev_idx, pre, ids, G, gap_idx, gap_s, steps, uni, partial, pol,
            tm, slot, gm, ax, val, cnt, tc, now, horizon, deadline):
    """Plan, price and apply replica ``rep``'s steps from ``now`` while each ends before
    ``horizon``, planning none at or after ``deadline`` (the earliest client timeout or queue-time
    limit, which ``expire`` handles in Python before that step is planned). Returns
    ``(why, t, dt)``: ``DEADLINE`` (expire at ``t``, call again), ``IDLE`` (nothing to run at
    ``t``), ``PENDING`` (the
    step planned at ``t`` takes ``dt`` and ends at or after ``horizon``: SimPy clocks it, then
    ``finish_step``), ``NEED_LOGS`` (grow the logs, call again at ``t``) or ``NEED_UNIFORMS``
    (the step at ``t`` of ``dt`` ends before ``horizon`` but needs more uniforms: refill, then
    ``finish_step`` and call again)."""
    gap_cap = gap_idx.shape[0]
    step_cap = steps.shape[0] // sk.ROW
    while True:
        if now >= deadline:
            return DEADLINE, now, 0.0
        k = policy_k(pol, rep, meta, ints, run_idx)
        nd, npf, k, ctx, cmax, pf_tokens, pfc, joined, left, drafting = sk.plan_step(
            rep, cfg, meta, ints, floats, run_idx, ring, qlog, dec_rows, dec_draft, pf_rows,
            pf_n, prev_idx, pre, ids, G, gap_cap, step_cap, now, k)
        if nd < 0:
            return NEED_LOGS, now, 0.0
        if nd == 0 and npf == 0:
            return IDLE, now, 0.0
        dt = pk.price(tm, slot, gm, ax, val, cnt, tc, nd, ctx, k, pf_tokens, pfc, cmax, joined,
                      left, drafting)
        end = now + dt
        if not end < horizon:
            return PENDING, now, dt
        if sk.finish_step(rep, cfg, meta, ints, floats, negrates, run_idx, dec_rows, dec_draft,
                          pf_rows, pf_n, uni, G, gap_idx, gap_s, steps, partial, now, dt, end) < 0:
            return NEED_UNIFORMS, now, dt
        now = end
