"""Routing arrivals to replicas: round robin, or least outstanding requests.

Down replicas (restarting) are skipped while any replica is up; when all are down the request
queues at the one the rule picks and waits for it to come back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

Routing = Literal["round_robin", "least_outstanding"]


class Routable(Protocol):
    up: bool

    def outstanding(self) -> int: ...


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
        """Index of the replica that gets the next request."""
        reps = self.replicas
        n = len(reps)
        if n == 1:
            return 0
        candidates = [i for i in range(n) if reps[i].up] or list(range(n))
        if self.routing == "round_robin":
            for step in range(n):
                i = (self._next + step) % n
                if i in candidates:
                    self._next = (i + 1) % n
                    return i
        # least outstanding; ties go to the lowest index
        return min(candidates, key=lambda i: (reps[i].outstanding(), i))
