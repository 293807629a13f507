"""A replica's steps between two events of the simulation, run in one compiled call.

Why: SimPy's event machinery and the Python around each step cost more than a compiled step.
Nothing outside a replica can change it between two events of the simulation (an arrival,
another replica's step, a restart, the end of the run), so every step that ends strictly before
the next scheduled event is run here, back to back, exactly as the one-event-per-step loop would
run it; the step that would end at or after that event is handed back to SimPy, which then
orders it against the others (``sim.model.compiled_replica.CompiledReplica.run``).

One step is: choose ``k`` (``policy_k``), plan (``plan_kernels``), price (``price_kernels``), draw
what happened (``draw_kernels``), apply it (``apply_kernels``), log the row.
"""

from __future__ import annotations

from sim.model import price_kernels as pk
from sim.model.apply_kernels import apply_step, log_step
from sim.model.draw_kernels import draw_outcome
from sim.model.kernel_cache import njit
from sim.model.plan_kernels import num_decoding, plan_step

# what ``advance`` stopped for
IDLE, PENDING, NEED_LOGS, NEED_UNIFORMS, DEADLINE = range(5)
# pol (int64): policy kind, k, max_batch, then (threshold, k) rows of k_by_batch
P_KIND, P_K, P_MAX_BATCH, P_ROWS = range(4)
POL_OFF, POL_FIXED, POL_OFF_ABOVE, POL_BY_BATCH = range(4)


@njit
def policy_k(pol, rp, rq):
    """``SpeculationPolicy.k_for`` for the policies that need no window of past steps."""
    kind = pol[P_KIND]
    if kind == POL_FIXED:
        return pol[P_K]
    if kind == POL_OFF:
        return 0
    batch = num_decoding(rp, rq)
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
def finish(rp, rq, lg, start, duration, end):
    """The simulated outcome of ``rp``'s planned step, applied and logged; returns the accepted
    draft tokens, or -1 when the uniforms ran short (nothing changed; refill, call again)."""
    if not draw_outcome(rp, rq, lg):
        return -1
    total = apply_step(rp, rq, lg, end)
    log_step(rp, lg, start, duration, total)
    return total


@njit
def step_until(rp, rq, lg, pol, ta, now, horizon):
    """Plan and price one step at ``now`` and, when it ends before ``horizon``, apply it.
    Returns ``(why, dt)``: ``why`` -1 when it was applied, else ``advance``'s code."""
    p = plan_step(rp, rq, lg, now, policy_k(pol, rp, rq))
    if p[0] < 0:
        return NEED_LOGS, 0.0
    if p[0] == 0 and p[1] == 0:
        return IDLE, 0.0
    dt = pk.price_plan(ta, p)
    if not now + dt < horizon:
        return PENDING, dt
    if finish(rp, rq, lg, now, dt, now + dt) < 0:
        return NEED_UNIFORMS, dt
    return -1, dt


@njit
def advance(rp, rq, lg, pol, ta, now, horizon, deadline):
    """Plan, price and apply ``rp``'s steps from ``now`` while each ends before ``horizon``,
    planning none at or after ``deadline`` (the earliest client timeout or queue-time limit, which
    ``sim.model.deadlines`` applies in Python before that step is planned). Returns
    ``(why, t, dt)``: ``DEADLINE`` (expire at ``t``, call again), ``IDLE`` (nothing to run at
    ``t``), ``PENDING`` (the step planned at ``t`` takes ``dt`` and ends at or after ``horizon``:
    SimPy clocks it, then ``finish``), ``NEED_LOGS`` (grow the logs, call again at ``t``) or
    ``NEED_UNIFORMS`` (the step at ``t`` of ``dt`` ends before ``horizon`` but needs more
    uniforms: refill, then ``finish`` and call again)."""
    while True:
        if now >= deadline:
            return DEADLINE, now, 0.0
        why, dt = step_until(rp, rq, lg, pol, ta, now, horizon)
        if why >= 0:
            return why, now, dt
        now = now + dt
