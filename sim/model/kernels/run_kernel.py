"""A replica's steps between two events of the simulation, run in one compiled call.

Why: SimPy's event machinery and the Python around each step cost more than a compiled step.
Nothing outside a replica can change it between two events of the simulation (an arrival,
another replica's step, a restart, the end of the run), so every step that ends strictly before
the next scheduled event is run here, back to back, exactly as the one-event-per-step loop would
run it; the step that would end at or after that event is handed back to SimPy, which then
orders it against the others (``sim.model.drivers.compiled_replica.CompiledReplica.run``).

One step is: choose ``k`` (``policy_kernels``), plan (``plan_kernels``), price (``price_kernels``), draw
what happened (``draw_kernels``), apply it (``apply_kernels``), log the row.
"""

from __future__ import annotations

from sim.model.kernels import price_kernels as pk
from sim.model.kernels.apply_kernels import apply_step, log_step
from sim.model.kernels.draw_kernels import draw_outcome
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import plan_step
from sim.model.kernels.policy_kernels import policy_k

# what ``advance`` stopped for
IDLE, PENDING, NEED_LOGS, NEED_UNIFORMS, DEADLINE = range(5)


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
    p = plan_step(rp, rq, lg, now, policy_k(pol, rp, rq, now))
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
