"""A replica's prefix cache of KV blocks, compiled: vLLM v1's automatic prefix caching.

A request's prompt carries the ids of its full prefix blocks (``Requests.pfx``; one id per
``block_size`` tokens, equal ids = equal tokens *and* equal everything before them, as vLLM's
chained block hashes are: ``sim.model.prefix_blocks`` makes them). On admission the longest run
of its leading blocks cached on this replica is a hit (at most ``has - 1`` tokens: the last token
is always computed, for its logits); the hit blocks are shared (reference count + 1), not
allocated again, and their tokens count as computed. Blocks a request computes itself join the
cache as they fill. When a request lets go of its KV (finished, preempted, ended) its cached
blocks stay cached with one reference less; at zero they are *evictable*: still counted free
(``M_FREE``, as vLLM's free-block queue holds them), and evicted least-recently-freed first,
only when an allocation finds no empty block. Blocks are freed tail first, so a prompt's deeper
blocks go before its shared head (vLLM ``free_blocks`` reversed).

The draft model's KV follows the same blocks: a hit skips the drafter's prefill too (vLLM's
EAGLE and draft-model layers live in the same KV cache groups; ``kv_capacity`` already sizes a
block with both). Reference: vLLM ``v1/core/kv_cache_manager.py`` (``get_computed_blocks``,
``allocate_slots``), ``v1/core/block_pool.py`` (``touch``, ``free_blocks``, ``get_new_blocks``),
``v1/core/kv_cache_utils.py`` (``FreeKVCacheBlockQueue``, ``hash_block_tokens``).
"""

from __future__ import annotations

from sim.model import kernel_state as ks
from sim.model.kernel_cache import njit

REF, PREV, NEXT = 0, 1, 2
"""``Replica.cache`` columns: reference count (-1: not cached), LRU list links."""

clear = njit(ks.empty_cache)


@njit
def longest_hit(rp, rq, r, has):
    """``(blocks, evictable)``: how many of ``r``'s leading prefix blocks are cached here (for
    at most ``has - 1`` tokens), and how many of those no request holds (they leave the free
    count when taken)."""
    ints = rq.ints
    cache = rp.cache
    off = ints[r, ks.PFX_OFF]
    n = (has - 1) // rp.cfg[ks.C_BS]
    if ints[r, ks.PFX_LEN] < n:
        n = ints[r, ks.PFX_LEN]
    h = 0
    ev = 0
    while h < n:
        ref = cache[rq.pfx[off + h], REF]
        if ref < 0:
            break
        if ref == 0:
            ev += 1
        h += 1
    return h, ev


@njit
def take_hit(rp, rq, r, h):
    """``r`` shares its first ``h`` prefix blocks (``longest_hit``): each referenced once more,
    the unreferenced ones out of the LRU list (vLLM ``touch``)."""
    cache = rp.cache
    off = rq.ints[r, ks.PFX_OFF]
    for i in range(h):
        u = rq.pfx[off + i]
        if cache[u, REF] == 0:
            _unlink(cache, u)
            rp.meta[ks.M_EVICT] -= 1
        cache[u, REF] += 1
    rq.ints[r, ks.PFX_HELD] = h


@njit
def make_room(rp, need, free):
    """Evict least-recently-freed cached blocks until ``need`` blocks are empty (``free``
    counts the evictable ones; the caller checked ``need <= free``)."""
    m = rp.meta
    cache = rp.cache
    s = cache.shape[0] - 1
    while free - m[ks.M_EVICT] < need:
        u = cache[s, NEXT]
        _unlink(cache, u)
        cache[u, REF] = -1
        m[ks.M_EVICT] -= 1


@njit
def register(rp, rq, r):
    """After ``r`` computed tokens: its newly full prefix blocks join the cache (held by it),
    up to the first one already cached by another (``r`` keeps its own copy of that and the
    rest: vLLM keeps duplicates too, and they never serve a hit here)."""
    ints = rq.ints
    cache = rp.cache
    h = ints[r, ks.PFX_HELD]
    lim = ints[r, ks.COMPUTED] // rp.cfg[ks.C_BS]
    if ints[r, ks.PFX_LEN] < lim:
        lim = ints[r, ks.PFX_LEN]
    off = ints[r, ks.PFX_OFF]
    while h < lim:
        u = rq.pfx[off + h]
        if cache[u, REF] >= 0:
            break
        cache[u, REF] = 1
        h += 1
    ints[r, ks.PFX_HELD] = h


@njit
def release(rp, rq, r):
    """``r`` lets go of its KV; returns the blocks that become free: its own ones, and its
    cached ones nobody else holds (those stay cached, evictable, newest at the LRU tail, the
    deepest block first)."""
    ints = rq.ints
    cache = rp.cache
    h = ints[r, ks.PFX_HELD]
    back = ints[r, ks.BLOCKS] - h
    off = ints[r, ks.PFX_OFF]
    for i in range(h - 1, -1, -1):
        u = rq.pfx[off + i]
        cache[u, REF] -= 1
        if cache[u, REF] == 0:
            _append(cache, u)
            rp.meta[ks.M_EVICT] += 1
            back += 1
    ints[r, ks.BLOCKS] = 0
    ints[r, ks.PFX_HELD] = 0
    return back


@njit
def _unlink(cache, u):
    p = cache[u, PREV]
    q = cache[u, NEXT]
    cache[p, NEXT] = q
    cache[q, PREV] = p


@njit
def _append(cache, u):
    s = cache.shape[0] - 1
    last = cache[s, PREV]
    cache[last, NEXT] = u
    cache[u, PREV] = last
    cache[u, NEXT] = s
    cache[s, PREV] = u
