"""Routing, compiled: which replica an arrival (or a request a restart re-routes) goes to.

The one home of the rule: the fleet kernel calls it on its stacked replicas
(``fleet_clock.pick``), and the SimPy driver's ``router.Router`` calls it from Python on its
replicas' rows, so both drivers route by the same code (its readable oracle:
``tests/sim/model/test_route_rules.py``).
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels.kernel_cache import njit


@njit
def pick(meta, kind, down, turn, least):
    """The replica for the next request: ``meta`` the replicas' meta rows (one row each: their
    running and waiting counts), ``kind[r] == down`` for a replica that is down (restarting),
    ``turn`` round robin's next replica, ``least`` least-outstanding routing. A replica that is
    down is skipped while any is up; with all down the rule picks among all (the request waits
    for its replica to come back). Round robin: the first replica from ``turn``; least
    outstanding: the fewest running + waiting, ties to the lowest index. The caller moves the
    turn to the pick + 1."""
    n = kind.shape[0]
    some_up = False
    for r in range(n):
        some_up = some_up or kind[r] != down
    start = 0 if least else turn
    best = start
    for s in range(n):  # the first replica that may take it, from the round-robin turn
        best = (start + s) % n
        if not some_up or kind[best] != down:
            break
    if least:
        for r in range(best + 1, n):
            if (not some_up or kind[r] != down) and _outstanding(meta, r) < _outstanding(meta, best):
                best = r
    return best


@njit
def _outstanding(meta, r):
    return meta[r, ks.M_NRUN] + meta[r, ks.M_NWAIT]
