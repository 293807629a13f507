"""Where Python calls the fleet's kernels: each state object passed as its arrays, one by one.

Why: numba unboxes a NamedTuple argument field by field in Python, about 2.5x slower than the
same arrays passed as separate arguments (measured on this VM: ~28 µs against ~10 µs for a
replica and its requests under load; the ratio held across runs). The fleet calls a kernel once or
twice per engine step of a multi-replica run, so it calls these entries, which take the arrays
flat (``*args``) and rebuild the NamedTuples inside compiled code, where that costs nothing; the
kernels themselves take the state objects. ``flat_state`` gives the arrays in the order below.
"""

from __future__ import annotations

from sim.model.kernels import arrival_kernels as ak
from sim.model.kernels import fleet_kernels as fk
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import price_kernels as pk
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import num_decoding, plan_step
from sim.model.kernels.policy_kernels import policy_k

# the flat layout: Replica (13 arrays), Requests (5), Logs (5), then pol and TimerArrays (7)
assert (len(ks.Replica._fields), len(ks.Requests._fields), len(ks.Logs._fields),
        len(pk.TimerArrays._fields), len(ak.Arrivals._fields), len(fk.FleetClock._fields)) == (13, 5, 5, 7, 7, 9)
STATE = 23
"""Arrays of (Replica, Requests, Logs)."""


def flat_state(rp: ks.Replica, rq: ks.Requests, lg: ks.Logs) -> tuple:
    return (*rp, *rq, *lg)


@njit
def advance(*a):
    """``run_kernel.advance(rp, rq, lg, pol, ta, now, horizon, deadline)``, flat."""
    return rk.advance(ks.Replica(*a[0:13]), ks.Requests(*a[13:18]), ks.Logs(*a[18:23]), a[23],
                      pk.TimerArrays(*a[24:31]), a[31], a[32], a[33])


@njit
def finish(*a):
    """``run_kernel.finish(rp, rq, lg, start, duration, end)``, flat."""
    return rk.finish(ks.Replica(*a[0:13]), ks.Requests(*a[13:18]), ks.Logs(*a[18:23]), a[23], a[24],
                     a[25])


@njit
def advance_alone(*a):
    """``arrival_kernels.advance_alone(rp, rq, lg, pol, ta, av, now, horizon)``, flat."""
    return ak.advance_alone(ks.Replica(*a[0:13]), ks.Requests(*a[13:18]), ks.Logs(*a[18:23]), a[23],
                            pk.TimerArrays(*a[24:31]), ak.Arrivals(*a[31:38]), a[38], a[39])


@njit
def run_fleet(*a):
    """``fleet_kernels.run_fleet(st, rq, lg, pol, ta, av, fc)`` (``st``: every replica's arrays
    stacked), flat."""
    return fk.run_fleet(ks.Replica(*a[0:13]), ks.Requests(*a[13:18]), ks.Logs(*a[18:23]), a[23],
                        pk.TimerArrays(*a[24:31]), ak.Arrivals(*a[31:38]), fk.FleetClock(*a[38:47]))


@njit
def plan(*a):
    """``plan_kernels.plan_step(rp, rq, lg, now, k)``, flat."""
    return plan_step(ks.Replica(*a[0:13]), ks.Requests(*a[13:18]), ks.Logs(*a[18:23]), a[23], a[24])


@njit
def decoding(*a):
    """``plan_kernels.num_decoding(rp, rq)`` (``a``: the state), flat."""
    return num_decoding(ks.Replica(*a[0:13]), ks.Requests(*a[13:18]))


@njit
def choose_k(*a):
    """``policy_kernels.policy_k(pol, rp, rq, now)`` (``a``: the state, then pol and now), flat."""
    return policy_k(a[23], ks.Replica(*a[0:13]), ks.Requests(*a[13:18]), a[24])
