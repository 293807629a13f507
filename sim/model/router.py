"""Routing arrivals to replicas in the SimPy driver: round robin, or least outstanding requests.

The rule itself is compiled (``kernels/route_kernels.pick``) and shared with the fleet kernel;
this holds only what the SimPy driver keeps in Python: its replicas and round robin's turn. Down
replicas (restarting) are skipped while any replica is up; when all are down the request queues
at the one the rule picks and waits for it to come back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import route_kernels as rk

Routing = Literal["round_robin", "least_outstanding"]


class Routable(Protocol):
    up: bool
    rp: ks.Replica
    """The replica's planner state; the rule reads its running and waiting counts."""


class Router:
    """Picks a replica index for each arrival."""

    def __init__(self, routing: Routing, replicas: Sequence[Routable]) -> None:
        if routing not in ("round_robin", "least_outstanding"):
            raise ValueError(f"routing {routing!r} unknown; valid: round_robin, least_outstanding")
        if not replicas:
            raise ValueError("a router needs at least one replica")
        self.routing = routing
        self.replicas = replicas
        self._next = 0

    def pick(self) -> int:
        """Index of the replica that gets the next request (``route_kernels.pick`` on the
        replicas' rows as they stand)."""
        reps = self.replicas
        n = len(reps)
        if n == 1:
            return 0
        meta = np.stack([r.rp.meta for r in reps])
        down = np.fromiter((not r.up for r in reps), np.int64, n)
        i = int(rk.pick(meta, down, 1, self._next, self.routing == "least_outstanding"))
        self._next = (i + 1) % n
        return i
