"""Every piece of paged-KV block arithmetic the planner does, in one place (vLLM's KVCacheManager).

A request holds whole blocks of ``block_size`` tokens for what it has computed plus what the step
computes (prompt chunk, recompute, or the last token and ``k`` lookahead drafts); rejected drafts
roll back, and the blocks they no longer need return. With prefix caching on, a request's leading
prompt blocks may be shared through the replica's cache (``prefix_cache``): what it lets go of is
counted by ``give_back``, and an allocation may first evict (``take``). Compiled (numba inlines these into the
planning and apply kernels); callable from Python too.
"""

from __future__ import annotations

from sim.model.kernels import kernel_state as ks
from sim.model.kernels import prefix_cache as pc
from sim.model.kernels.kernel_cache import njit


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


@njit
def give_back(rp, rq, r):
    """``r`` lets go of every KV block it holds; returns how many become free (with prefix
    caching, blocks it shares stay held by the others; its cached ones stay cached)."""
    if rp.cfg[ks.C_PREFIX]:
        return pc.release(rp, rq, r)
    b = rq.ints[r, ks.BLOCKS]
    rq.ints[r, ks.BLOCKS] = 0
    return b


@njit
def take(rp, rq, need, free):
    """About to take ``need`` of the ``free`` blocks: with prefix caching, evict cached blocks
    nobody holds until that many are empty. Returns the free count after."""
    if rp.cfg[ks.C_PREFIX] and need > 0:
        pc.make_room(rp, rq, need, free)
    return free - need
