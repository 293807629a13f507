"""The ORACLE's prefix cache: ``sim/model/kernels/prefix_cache.py``'s rules written readably, over dicts.

A block id is cached while it is in ``ref`` (its first copy's reference count); unreferenced
first copies are in ``lru`` (oldest first) and still count as free. A hit is the longest run of a
request's leading ids in ``ref``, for at most ``has - 1`` tokens; an allocation evicts from the
front of ``lru`` only when it finds no empty block. Every block a request computes is cached:
the id's first copy (``owner`` names the request), or a duplicate it holds (``dups`` counts
them); an evicted first copy hands the id to the earliest-admitted running holder of a
duplicate, and a duplicate that falls free is dropped. Used by
``oracle_scheduler.OracleScheduler``.
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
        self.hit: dict[int, int] = {}  # id(request) -> how many of those its admission hit
        self.owner: dict[int, int] = {}  # block id -> id(request) that computed its first copy
        self.dups: dict[int, int] = {}  # block id -> duplicate copies held
        self.evictions = 0
        self.duplicates = 0  # copies cached under an id cached already
        self.promotions = 0  # evicted first copies whose id a held duplicate kept cached

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
        self.hit[id(req)] = hit

    def _holds_duplicate(self, req, u: int) -> bool:
        ids = self._ids(req)
        computed = ids[self.hit.get(id(req), 0):self.held.get(id(req), 0)]
        return u in computed and self.owner.get(u) != id(req)

    def make_room(self, need: int, free: int, running) -> None:
        """Evict the least recently freed blocks until ``need`` of the ``free`` ones are empty;
        an evicted id a running request holds a duplicate of stays cached, as that copy."""
        if not self.on or need <= 0:
            return
        while free - len(self.lru) < need:
            u, _ = self.lru.popitem(last=False)
            del self.ref[u]
            self.evictions += 1
            if self.dups.get(u, 0):
                holder = next(r for r in running if self._holds_duplicate(r, u))
                self.ref[u] = 1
                self.owner[u] = id(holder)
                self.dups[u] -= 1
                self.promotions += 1

    def register(self, req) -> None:
        """Every newly full prefix block of ``req`` joins the cache: the first copy, or a
        duplicate when the id is cached already."""
        if not self.on:
            return
        ids = self._ids(req)
        h = self.held.get(id(req), 0)
        while h < min(len(ids), req.computed // self.bs):
            u = ids[h]
            if u in self.ref:
                self.dups[u] = self.dups.get(u, 0) + 1
                self.duplicates += 1
            else:
                self.ref[u] = 1
                self.owner[u] = id(req)
            h += 1
        self.held[id(req)] = h

    def release(self, req) -> int:
        """``req`` drops all its blocks; returns how many become free."""
        h = self.held.pop(id(req), 0)
        hit = self.hit.pop(id(req), 0)
        back = req.blocks - h
        for i, u in reversed(list(enumerate(self._ids(req)[:h]))):
            if i >= hit and self.owner.get(u) != id(req):
                self.dups[u] -= 1  # its own duplicate: dropped, an empty block
                back += 1
                continue
            if self.owner.get(u) == id(req):
                del self.owner[u]
            self.ref[u] -= 1
            if self.ref[u] == 0:
                self.lru[u] = None
                back += 1
        req.blocks = 0
        return back

    def physical(self) -> int:
        """Blocks the cache's held copies occupy: each held first copy once, each duplicate."""
        return sum(r > 0 for r in self.ref.values()) + sum(self.dups.values())

    def clear(self) -> None:
        self.ref.clear()
        self.lru.clear()
        self.held.clear()
        self.hit.clear()
        self.owner.clear()
        self.dups.clear()
