"""The KV ledger and every piece of paged-KV block arithmetic, in one place (vLLM's KVCacheManager).

A request holds whole blocks of ``block_size`` tokens for what it has computed plus what the step
computes (prompt chunk, recompute, or the last token and ``k`` lookahead drafts); rejected drafts
roll back, and the blocks they no longer need return. With prefix caching on, a request's leading
prompt blocks may be shared through the replica's cache (``prefix_cache``): what it lets go of may
stay cached, evictable, and an allocation may first evict.

Why one module: the ledger (each request's ``Requests.ints[r, BLOCKS]``, the replica's free count
``meta[M_FREE]`` and its evictable count ``meta[M_EVICT]``) must balance after every kernel call:
free + every request's own blocks + the cache's held copies == ``cfg[C_KV]``. So only the
functions below write those fields, and only they drive the prefix cache (``tests/sim/model/test_kv_ledger.py``
holds both: no other module writes them, and the sum balances over generated runs), the opening
balance too (``open_ledger``: ``kernel_state.new_replica`` builds a replica with none free, as it
sits below this module).
Compiled (numba inlines these into the planning and apply kernels); callable from Python too.
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import prefix_cache as pc
from sim.model.kernels.kernel_cache import njit

# ------------------------------------------------------------------ arithmetic (pure)


@njit
def blocks_for(tokens, block_size):
    """Blocks that hold ``tokens`` tokens (a ceiling)."""
    return (tokens + block_size - 1) // block_size


@njit
def fits_at_all(prompt, output, k_max, block_size, kv_blocks):
    """Whether a request could ever run here: at its longest (prompt, every output token and a
    step's lookahead drafts) it needs no more blocks than the replica has."""
    return blocks_for(prompt + output + k_max, block_size) <= kv_blocks


@njit
def too_long(prompt, output, max_model_len):
    """vLLM's length check (``max_model_len`` > 0): the OpenAI server answers HTTP 400 when
    prompt + ``max_tokens`` > max_model_len, and the engine refuses a prompt of max_model_len
    tokens or more (it must leave room for one output token). ``output`` is what the request
    asks for (its ``max_tokens``, at least 1)."""
    return max_model_len > 0 and prompt + max(output, 1) > max_model_len


@njit
def running_need(computed, n, held, block_size):
    """More blocks a running request needs to compute ``n`` more tokens (<= 0: none)."""
    return blocks_for(computed + n, block_size) - held


@njit
def admission_need(n, block_size):
    """Blocks a waiting request takes when admitted with an ``n``-token chunk (it holds none)."""
    return blocks_for(n, block_size)


@njit
def rollback_keep(computed, block_size):
    """Blocks a request keeps after a step: those of its computed tokens (the rejected drafts'
    lookahead blocks return)."""
    return blocks_for(computed, block_size)


# ------------------------------------------------------------------ the ledger's moves
# A pass of the planner (``plan_step``, ``apply_step``) carries the free count in a local, as a
# register, through ``grow``/``admit``/``roll_back``/``release`` (each takes it and returns it
# moved) and stores it once at its end with ``settle``; the other kernels (``queue_kernels``)
# move it in place with ``give_back``. Both ways, only this module writes it.


def open_ledger(rp):
    """A new replica's opening balance, every block free, none cached; returns ``rp``. Whoever
    builds a replica (``ks.new_replica``) calls it before the first plan: a replica whose ledger
    was never opened has no free block and admits nothing. Plain Python: it runs once per replica
    built, never inside a kernel."""
    rp.meta[ks.M_FREE] = rp.cfg[ks.C_KV]
    rp.meta[ks.M_EVICT] = 0
    return rp


@njit
def free_blocks(rp):
    """Blocks free (evictable cached ones included, as vLLM's free-block queue holds them)."""
    return rp.meta[ks.M_FREE]


@njit
def settle(rp, free):
    """The end of a pass: the free count it carried becomes the replica's."""
    rp.meta[ks.M_FREE] = free


@njit
def cached_prefix(rp, rq, r, has):
    """``(blocks, evictable)``: ``r``'s leading prefix blocks cached here (for at most ``has - 1``
    tokens) and how many of them nobody holds; ``(0, 0)`` with prefix caching off."""
    if rp.cfg[ks.C_PREFIX]:
        return pc.longest_hit(rp, rq, r, has)
    return 0, 0


@njit
def _take(rp, rq, need, free):
    """``need`` of the ``free`` blocks become used: with prefix caching, cached blocks nobody
    holds are evicted first until that many are empty (the caller checked ``need <= free``).
    Returns the free count after."""
    if rp.cfg[ks.C_PREFIX] and need > 0:
        short = need - (free - rp.meta[ks.M_EVICT])
        if short > 0:
            pc.evict(rp, rq, short)
            rp.meta[ks.M_EVICT] -= short
    return free - need


@njit
def grow(rp, rq, r, need, free):
    """Running request ``r`` takes ``need`` more of the ``free`` blocks for this step's tokens
    (never more than are free: the planner preempts first). Returns the free count after."""
    free = _take(rp, rq, need, free)
    rq.ints[r, ks.BLOCKS] += need
    return free


@njit
def admit(rp, rq, r, hit, taken, need, free):
    """Waiting request ``r`` (holding none) is admitted: it shares its ``hit`` cached prefix
    blocks (``taken`` of them evictable, so they leave the free count) and takes ``need`` new
    ones (vLLM ``get_computed_blocks``, ``allocate_slots``). Returns the free count after."""
    if rp.cfg[ks.C_PREFIX]:
        rp.meta[ks.M_EVICT] -= pc.take_hit(rp, rq, r, hit)
        free -= taken
    free = _take(rp, rq, need, free)
    rq.ints[r, ks.BLOCKS] = hit + need
    return free


@njit
def roll_back(rq, r, computed, block_size, free):
    """After a step, ``r`` keeps the blocks of its ``computed`` tokens; the lookahead blocks of
    its rejected drafts return (what is kept never exceeds what was held). Returns the free
    count after."""
    keep = rollback_keep(computed, block_size)
    free += rq.ints[r, ks.BLOCKS] - keep
    rq.ints[r, ks.BLOCKS] = keep
    return free


@njit
def filled(rp, rq, r):
    """``r`` computed more of its prompt: with prefix caching its newly full prefix blocks join
    the cache (still held by it: the counts do not move)."""
    if rp.cfg[ks.C_PREFIX]:
        pc.register(rp, rq, r)


@njit
def release(rp, rq, r):
    """``r`` lets go of every block it holds (finished, preempted, ended, evacuated); returns
    how many become free, for the pass that carries the free count (with prefix caching,
    blocks it shares stay held by the others; its cached ones stay cached, evictable)."""
    if rp.cfg[ks.C_PREFIX]:
        back, evictable = pc.release(rp, rq, r)
        rp.meta[ks.M_EVICT] += evictable
    else:
        back = rq.ints[r, ks.BLOCKS]
    rq.ints[r, ks.BLOCKS] = 0
    return back


@njit
def give_back(rp, rq, r):
    """``release`` outside a pass: the blocks go straight back to the replica's free count."""
    rp.meta[ks.M_FREE] += release(rp, rq, r)


@njit
def drop_cache(rp):
    """The replica went down: its prefix cache is gone (every block it held is free already)."""
    if rp.cfg[ks.C_PREFIX]:
        pc.clear(rp.cache)
        rp.meta[ks.M_EVICT] = 0
