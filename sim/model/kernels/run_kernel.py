"""One engine step of a replica, compiled: planned and priced, then (when it ends in time) applied.

Why: SimPy's event machinery and the Python around each step cost more than a compiled step.
The fleet kernel (``fleet_kernels.run_fleet``) runs every step that ends strictly before the
emulated queue's next event here, back to back, exactly as the one-event-per-step loop would run
it; the SimPy driver (``sim.model.drivers.compiled_replica.CompiledReplica``, the reference
semantics) plans and prices each step here too (``plan_and_price``, or ``price_planned`` with
the ``k`` a Python policy chose) when the timer is compiled, and clocks it on SimPy.

One step is: choose ``k`` (``policy_kernels``), plan (``plan_kernels``), price (``price_kernels``), draw
what happened (``draw_kernels``), apply it (``apply_kernels``), log the row.
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import price_kernels as pk
from sim.model.kernels.apply_kernels import apply_step, log_step
from sim.model.kernels.draw_kernels import draw_outcome
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import plan_step
from sim.model.kernels.policy_kernels import has_room, observe, policy_k

# what a step call stopped for
IDLE, PENDING, NEED_LOGS, NEED_UNIFORMS = range(4)


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
def finish_observed(rp, rq, lg, pol, start, duration, end):
    """``finish``, then the step fed to the replica's policy (``policy_kernels.observe``: an
    adaptive one's window) when it was applied: the compiled loops' one way to end a step (the
    SimPy driver calls ``finish`` and feeds ``PolicyState`` in Python)."""
    total = finish(rp, rq, lg, start, duration, end)
    if total >= 0:
        observe(pol, end, duration, rp.meta[ks.M_ND])
    return total


@njit
def plan_and_price(rp, rq, lg, pol, ta, now):
    """Plan ``rp``'s step at ``now`` with its policy's ``k`` and price it: ``price_planned``."""
    return price_planned(rp, rq, lg, ta, now, policy_k(pol, rp, rq, now))


@njit
def price_planned(rp, rq, lg, ta, now, k):
    """Plan ``rp``'s step at ``now`` with ``k`` and price it. Returns ``(why, dt, decoding)``:
    ``PENDING`` (planned, takes ``dt``: apply it with ``finish`` at its end), ``IDLE`` (nothing to
    run) or ``NEED_LOGS`` (a log might overflow: grow them, plan again)."""
    p = plan_step(rp, rq, lg, now, k)
    if p[0] < 0:
        return NEED_LOGS, 0.0, 0
    if p[0] == 0 and p[1] == 0:
        return IDLE, 0.0, 0
    return PENDING, pk.price_plan(ta, p), p[0]


@njit
def step_until(rp, rq, lg, pol, ta, now, horizon):
    """Plan and price one step at ``now`` and, when it ends before ``horizon``, apply it.
    Returns ``(why, dt)``: ``why`` -1 when it was applied, else ``IDLE``, ``NEED_LOGS``,
    ``PENDING`` (it ends at or after ``horizon``) or ``NEED_UNIFORMS`` (it ends before
    ``horizon`` but needs more uniforms: refill, then ``finish`` it). ``price_planned``'s lines
    written out here: calling it from this loop cost ~5 % of a lone replica's step (a third
    value returned; ``bench/bench_engine.py`` small-ngram-k3, 1.29 against 1.23 µs a step).
    An adaptive policy observes the step it applied (``policy_kernels.observe``; ``NEED_LOGS``
    too when its window's ring is full)."""
    if not has_room(pol):
        return NEED_LOGS, 0.0
    p = plan_step(rp, rq, lg, now, policy_k(pol, rp, rq, now))
    if p[0] < 0:
        return NEED_LOGS, 0.0
    if p[0] == 0 and p[1] == 0:
        return IDLE, 0.0
    dt = pk.price_plan(ta, p)
    if not now + dt < horizon:
        return PENDING, dt
    if finish_observed(rp, rq, lg, pol, now, dt, now + dt) < 0:
        return NEED_UNIFORMS, dt
    return -1, dt
