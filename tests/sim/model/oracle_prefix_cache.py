"""The ORACLE's prefix cache: ``sim/model/prefix_cache.py``'s rules written readably, over dicts.

A block id is cached while it is in ``ref`` (its reference count); unreferenced cached blocks
are in ``lru`` (oldest first) and still count as free. A hit is the longest run of a request's
leading ids in ``ref``, for at most ``has - 1`` tokens; an allocation evicts from the front of
``lru`` only when it finds no empty block. Used by ``oracle_scheduler.OracleScheduler``.
"""

from __future__ import annotations

from collections import OrderedDict


class OraclePrefixCache:
    """One replica's prefix cache (``on`` false: every call is what the planner does without)."""

    def __init__(self, block_size: int, on: bool) -> None:
        self.bs = block_size
        self.on = on
        self.ref: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.held: dict[int, int] = {}  # id(request) -> leading prefix blocks it holds in the cache
        self.evictions = 0

    def _ids(self, req) -> list[int]:
        return [] if req.prefix is None else [int(u) for u in req.prefix]

    def longest_hit(self, req, has: int) -> tuple[int, int]:
        """(blocks hit, how many of them nobody holds)."""
        if not self.on:
            return 0, 0
        hit = unheld = 0
        for u in self._ids(req)[: (has - 1) // self.bs]:
            if u not in self.ref:
                break
            unheld += self.ref[u] == 0
            hit += 1
        return hit, unheld

    def take_hit(self, req, hit: int) -> None:
        for u in self._ids(req)[:hit]:
            if self.ref[u] == 0:
                del self.lru[u]
            self.ref[u] += 1
        self.held[id(req)] = hit

    def make_room(self, need: int, free: int) -> None:
        """Evict the least recently freed blocks until ``need`` of the ``free`` ones are empty."""
        if not self.on or need <= 0:
            return
        while free - len(self.lru) < need:
            u, _ = self.lru.popitem(last=False)
            del self.ref[u]
            self.evictions += 1

    def register(self, req) -> None:
        """Newly full prefix blocks of ``req`` join the cache, up to one cached already."""
        if not self.on:
            return
        ids = self._ids(req)
        h = self.held.get(id(req), 0)
        while h < min(len(ids), req.computed // self.bs) and ids[h] not in self.ref:
            self.ref[ids[h]] = 1
            h += 1
        self.held[id(req)] = h

    def release(self, req) -> int:
        """``req`` drops all its blocks; returns how many become free."""
        h = self.held.pop(id(req), 0)
        back = req.blocks - h
        for u in reversed(self._ids(req)[:h]):
            self.ref[u] -= 1
            if self.ref[u] == 0:
                self.lru[u] = None
                back += 1
        req.blocks = 0
        return back

    def clear(self) -> None:
        self.ref.clear()
        self.lru.clear()
        self.held.clear()
