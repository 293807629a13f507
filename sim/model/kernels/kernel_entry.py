"""Where Python calls the fleet's kernels: one named parameter per state object.

Why each state object arrives as a plain tuple of its arrays (``fields(rp)``), not as the
NamedTuple itself: numba types a call's arguments before it dispatches, and it types a plain tuple
of arrays on its C fast path but a NamedTuple in Python, field by field, ~3x slower (measured on
this VM, ``num_decoding`` on a replica and its requests: 0.76 µs a call as plain tuples or as
the arrays one by one, 2.26 µs as NamedTuples). The fleet calls a kernel once or twice per engine
step of a run that Python clocks, so these entries take ``fields`` of each object and rebuild the
NamedTuple inside compiled code, where that costs nothing; the kernels themselves take the state
objects. An entry never slices a packed argument list: its parameters name the seams
(``tests/test_kernel_seams.py`` checks that).
"""

from __future__ import annotations

from sim.model.kernels import arrival_kernels as ak
from sim.model.kernels import client_kernels as ck
from sim.model.kernels import fleet_clock as fclock
from sim.model.kernels import fleet_kernels as fk
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import price_kernels as pk
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import num_decoding, plan_step
from sim.model.kernels.policy_kernels import policy_k


def fields(state: tuple) -> tuple:
    """A state object (``ks.Replica``, ``ks.Requests``, ``ks.Logs``, ``pk.TimerArrays``,
    ``ak.Arrivals``, ``fclock.FleetClock``, ``ck.Clients``) as the plain tuple of its arrays an entry takes."""
    return tuple(state)


@njit
def plan_and_price(rp, rq, lg, pol, ta, now):
    """``run_kernel.plan_and_price``."""
    return rk.plan_and_price(ks.Replica(*rp), ks.Requests(*rq), ks.Logs(*lg), pol, pk.TimerArrays(*ta), now)


@njit
def price_planned(rp, rq, lg, ta, now, k):
    """``run_kernel.price_planned``."""
    return rk.price_planned(ks.Replica(*rp), ks.Requests(*rq), ks.Logs(*lg), pk.TimerArrays(*ta), now, k)


@njit
def price(ta, shape):
    """``price_kernels.price``: what ``ProfileStepTimer.price`` calls from Python."""
    return pk.price(pk.TimerArrays(*ta), shape)


@njit
def finish(rp, rq, lg, start, duration, end):
    """``run_kernel.finish``."""
    return rk.finish(ks.Replica(*rp), ks.Requests(*rq), ks.Logs(*lg), start, duration, end)


@njit
def run_fleet(st, rq, lg, pol, ta, av, fc, cl):
    """``fleet_kernels.run_fleet`` (``st``: every replica's arrays stacked, one ``ks.Replica``)."""
    return fk.run_fleet(ks.Replica(*st), ks.Requests(*rq), ks.Logs(*lg), pol, pk.TimerArrays(*ta),
                        ak.Arrivals(*av), fclock.FleetClock(*fc), ck.Clients(*cl))


@njit
def plan(rp, rq, lg, now, k):
    """``plan_kernels.plan_step``."""
    return plan_step(ks.Replica(*rp), ks.Requests(*rq), ks.Logs(*lg), now, k)


@njit
def decoding(rp, rq):
    """``plan_kernels.num_decoding``."""
    return num_decoding(ks.Replica(*rp), ks.Requests(*rq))


@njit
def choose_k(pol, rp, rq, now):
    """``policy_kernels.policy_k``."""
    return policy_k(pol, ks.Replica(*rp), ks.Requests(*rq), now)
