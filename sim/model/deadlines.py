"""Client timeouts and queue-time limits of one replica: when each falls, and what it ends.

A client that gives up ends its request ``timed_out`` at the deadline itself, waiting or running;
a request not yet scheduled ``max_queue_time_s`` after arrival ends ``rejected``. The KV is freed
at the first step boundary after the deadline, as an engine notices an abort. Queue-time limits
are applied before timeouts, each in (deadline, request) order. Kept here, in heaps, by the drivers
that route in Python (step by step, closed-loop clients, the ``Scheduler`` facade); the kernels that
take the arrivals keep them as cursors over arrays (``arrival_kernels``). What a deadline ends is
written once, in ``queue_kernels`` (``queue_time_up``, ``client_gone``).
"""

from __future__ import annotations

import heapq
from math import inf

from sim.model.kernels import kernel_state as ks
from sim.model.kernels.plan_kernels import keep_running
from sim.model.kernels.queue_kernels import client_gone, queue_time_up


class Deadlines:
    """The pending deadlines of one replica's requests (rows of ``Requests``)."""

    __slots__ = ("timeouts", "queue", "max_queue_s")

    def __init__(self, max_queue_time_s: float | None) -> None:
        self.timeouts: list[tuple[float, int]] = []
        self.queue: list[tuple[float, int]] = []
        self.max_queue_s = max_queue_time_s

    def add(self, r: int, arrival_s: float, timeout_s: float | None, ever_scheduled: bool) -> None:
        """Request row ``r`` joined the queue (arrived, or re-routed after a restart)."""
        if timeout_s is not None:
            heapq.heappush(self.timeouts, (arrival_s + timeout_s, r))
        if self.max_queue_s is not None and not ever_scheduled:
            heapq.heappush(self.queue, (arrival_s + self.max_queue_s, r))

    def clear(self) -> None:
        self.timeouts.clear()
        self.queue.clear()

    def next(self, ints) -> float:
        """When ``expire`` next has something to do (inf: nothing pending). Deadlines that can no
        longer act are dropped first (a finished request's timeout, the queue-time limit of one
        already scheduled), so a compiled loop stops only for live ones."""
        t, q = self.timeouts, self.queue
        while t and ints[t[0][1], ks.STATUS] == ks.DONE:
            heapq.heappop(t)
        while q and (ints[q[0][1], ks.EVER] or ints[q[0][1], ks.STATUS] == ks.DONE):
            heapq.heappop(q)
        return min(t[0][0] if t else inf, q[0][0] if q else inf)

    def expire(self, rp: ks.Replica, rq: ks.Requests, now: float, room) -> None:
        """End what fell due at or before ``now`` (``queue_kernels.queue_time_up``, then
        ``client_gone``); ``room()`` makes room in the queue log for one entry and returns the
        replica (its log may have been replaced)."""
        q = self.queue
        while q and q[0][0] <= now:
            deadline, r = heapq.heappop(q)
            queue_time_up(room(), rq, r, deadline)
        t = self.timeouts
        changed = False
        while t and t[0][0] <= now:
            deadline, r = heapq.heappop(t)
            rp = room()
            changed = client_gone(rp, rq, r, deadline) or changed
        if changed:
            keep_running(rp, rq)
