"""A replica's prefix cache of KV blocks, compiled: vLLM v1's automatic prefix caching.

A request's prompt carries the ids of its full prefix blocks (``Requests.pfx``; one id per
``block_size`` tokens, equal ids = equal tokens *and* equal everything before them, as vLLM's
chained block hashes are: ``sim.workload.prefix_blocks`` makes them). On admission the longest run
of its leading blocks cached on this replica is a hit (at most ``has - 1`` tokens: the last token
is always computed, for its logits); the hit blocks are shared (reference count + 1), not
allocated again, and their tokens count as computed. Blocks a request computes itself join the
cache as they fill, every one of them: when another request cached the same id first (both
computed it at once), the later copy is a *duplicate*, kept and held by the request that
computed it, and that request's later blocks are cached as usual (vLLM ``cache_full_blocks``
never de-duplicates: block tables are append-only). A hit takes the first copy; when the first
copy is evicted while a duplicate is held, the duplicate becomes the id's copy (vLLM
``get_cached_block`` returns the first of the hash's blocks left). When a request lets go of its
KV (finished, preempted, ended) its cached blocks stay cached with one reference less; at zero
they are *evictable*: still counted free (``M_FREE``, as vLLM's free-block queue holds them),
and evicted least-recently-freed first, only when an allocation finds no empty block. A
duplicate that falls free is dropped at once (an empty free block; vLLM keeps its hash, but a
hit reaches it only after the first copy is gone). Blocks are freed tail first, so a prompt's
deeper blocks go before its shared head (vLLM ``free_blocks`` reversed).

The draft model's KV follows the same blocks: a hit skips the drafter's prefill too (vLLM's
EAGLE and draft-model layers live in the same KV cache groups; ``kv_capacity`` already sizes a
block with both). Reference: vLLM ``v1/core/kv_cache_manager.py`` (``get_computed_blocks``,
``allocate_slots``), ``v1/core/block_pool.py`` (``BlockHashToBlockMap``, ``cache_full_blocks``,
``get_cached_block``, ``touch``, ``free_blocks``, ``get_new_blocks``),
``v1/core/kv_cache_utils.py`` (``FreeKVCacheBlockQueue``, ``hash_block_tokens``).

This module keeps the cache's map (which ids are cached, their references, the LRU order); the
counts those moves change (free, evictable, a request's blocks) are the KV ledger's, so only
``kv_blocks`` calls these functions and writes the counts they return.
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels.kernel_cache import njit

REF, PREV, NEXT, OWNER, DUP = 0, 1, 2, 3, 4
"""``Replica.cache`` columns: the first copy's reference count (-1: not cached), LRU list links,
the request that computed the first copy and holds it (-1: none), held duplicate copies."""

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
    the unreferenced ones out of the LRU list (vLLM ``touch``). Returns how many were
    evictable (``kv_blocks.admit`` moves them in the ledger)."""
    cache = rp.cache
    off = rq.ints[r, ks.PFX_OFF]
    unlinked = 0
    for i in range(h):
        u = rq.pfx[off + i]
        if cache[u, REF] == 0:
            _unlink(cache, u)
            unlinked += 1
        cache[u, REF] += 1
    rq.ints[r, ks.PFX_HELD] = h
    rq.ints[r, ks.PFX_TOUCH] = h
    return unlinked


@njit
def evict(rp, rq, n):
    """Evict the ``n`` least-recently-freed cached blocks nobody holds (``kv_blocks`` asks for
    as many as an allocation lacks empty ones, and moves them in the ledger). An evicted id
    with a held duplicate stays cached: that copy becomes its first."""
    cache = rp.cache
    s = cache.shape[0] - 1
    for _ in range(n):
        u = cache[s, NEXT]
        _unlink(cache, u)
        cache[u, REF] = -1
        if cache[u, DUP] > 0:
            holder = _dup_holder(rp, rq, u)
            if holder >= 0:
                cache[u, REF] = 1
                cache[u, OWNER] = holder
                cache[u, DUP] -= 1


@njit
def _dup_holder(rp, rq, u):
    """The earliest-admitted running request holding a duplicate of ``u`` (-1: none; cannot
    happen while ``DUP`` counts one). Only reached when a first copy is evicted while a
    duplicate is held, so a scan of the running rows is cheap enough."""
    ints = rq.ints
    for j in range(rp.meta[ks.M_NRUN]):
        r = rp.run_idx[j]
        off = ints[r, ks.PFX_OFF]
        for i in range(ints[r, ks.PFX_TOUCH], ints[r, ks.PFX_HELD]):
            if rq.pfx[off + i] == u:
                return r
    return -1


@njit
def register(rp, rq, r):
    """After ``r`` computed tokens: every newly full prefix block of it joins the cache, held
    by it: as the id's first copy, or as a duplicate when another copy is cached already (vLLM
    ``cache_full_blocks`` keeps both, so the blocks after it are cached too)."""
    ints = rq.ints
    cache = rp.cache
    h = ints[r, ks.PFX_HELD]
    lim = ints[r, ks.COMPUTED] // rp.cfg[ks.C_BS]
    if ints[r, ks.PFX_LEN] < lim:
        lim = ints[r, ks.PFX_LEN]
    off = ints[r, ks.PFX_OFF]
    while h < lim:
        u = rq.pfx[off + h]
        if cache[u, REF] < 0:
            cache[u, REF] = 1
            cache[u, OWNER] = r
        else:
            cache[u, DUP] += 1
        h += 1
    ints[r, ks.PFX_HELD] = h


@njit
def release(rp, rq, r):
    """``r`` lets go of its KV; returns ``(free, evictable)``: the blocks that become free (its
    own ones, its duplicates, and the first copies nobody else holds) and how many of those stay
    cached, evictable (newest at the LRU tail, the deepest block first). ``kv_blocks.give_back``
    moves both in the ledger."""
    ints = rq.ints
    cache = rp.cache
    h = ints[r, ks.PFX_HELD]
    touched = ints[r, ks.PFX_TOUCH]
    back = ints[r, ks.BLOCKS] - h
    evictable = 0
    off = ints[r, ks.PFX_OFF]
    for i in range(h - 1, -1, -1):
        u = rq.pfx[off + i]
        if i >= touched and cache[u, OWNER] != r:
            cache[u, DUP] -= 1  # a duplicate r computed: dropped, an empty block
            back += 1
            continue
        if cache[u, OWNER] == r:
            cache[u, OWNER] = -1
        cache[u, REF] -= 1
        if cache[u, REF] == 0:
            _append(cache, u)
            evictable += 1
            back += 1
    ints[r, ks.PFX_HELD] = 0
    ints[r, ks.PFX_TOUCH] = 0
    return back, evictable


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
