"""``Scheduler.schedule`` and ``update`` over the batch columns (``sim.model.batch_columns``).

Same plan, same outcome as the scalar planner: running requests first in admission order, each
decoding one gets ``1 + k`` tokens (1 without a proposal) and a prompt chunk the rest of its
prompt, until the token budget runs out (a prompt may be cut into a chunk, a decoding request
never is); then waiting requests FCFS. A step that would have to preempt returns None before
touching anything, and the scheduler replans it with the scalar code. Each array operation costs
microseconds whatever the batch, so the code keeps their number small.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import compress
from typing import TYPE_CHECKING

import numpy as np

from sim.model.batch_columns import (
    ACCEPTED,
    BLOCKS,
    BURSTS,
    COMPUTED,
    DRAFTS,
    GENERATED,
    IDX,
    LAST_BURST,
    MAX_PAUSE,
    OUTPUT,
    PROMPT,
    PROPOSES,
    SPEC,
    finish_rows,
    log_gaps,
)
from sim.model.step_plan import EMPTY_PLAN, WAITING, StepPlan

if TYPE_CHECKING:
    from sim.model.scheduler import Scheduler


def _running_tokens(ints: np.ndarray, L: int, k: int, budget: int, chunked: bool):
    """Tokens per running row this step and how many rows are scheduled: ``(n, S, is_dec)``."""
    comp = ints[COMPUTED, :L]
    gen = ints[GENERATED, :L]
    remaining = ints[PROMPT, :L] + gen - comp
    is_dec = (remaining == 1) & (gen > 0)
    if k:
        n = np.where(is_dec, np.where(ints[PROPOSES, :L] != 0, 1 + k, 1), remaining)
    else:
        n = remaining  # a decoding row has exactly 1 token left to compute
    total = int(n.sum())
    if total <= budget:
        return n, L, is_dec
    cum = np.cumsum(n)
    S = int(np.searchsorted(cum, budget, side="right"))  # first row over the budget
    left = budget - (int(cum[S - 1]) if S else 0)
    if left > 0 and not is_dec[S] and chunked:  # a prompt cut into a chunk
        n = n[: S + 1].copy()
        n[S] = left
        return n, S + 1, is_dec
    return n[:S], S, is_dec


def _preempt(sched: Scheduler, need: np.ndarray, S: int, free: int, now: float):
    """The scalar planner's preemption over the columns: walking the scheduled rows in order,
    when a row needs more blocks than are free, the newest running requests (the last rows)
    are preempted until it fits, or it is preempted itself. Returns the rows still scheduled,
    the blocks then free and the victims (pop order); victims leave the batch and go back to
    the front of the waiting queue."""
    cols = sched.columns
    assert cols is not None
    held = cols.ints[BLOCKS]
    cum = np.cumsum(need)
    live = cols.n  # rows [0, live) still running
    i0 = 0
    while True:
        end = min(S, live)
        if i0 >= end:
            break
        before = int(cum[i0 - 1]) if i0 else 0
        j = int(np.searchsorted(cum[i0:end], free + before, side="right"))
        if i0 + j == end:  # the rest fits
            free -= int(cum[end - 1]) - before
            break
        i = i0 + j
        free -= int(cum[i - 1]) - before if i > i0 else 0
        need_i = int(need[i])
        while need_i > free:
            live -= 1
            free += int(held[live])
            if live == i:
                break
        if live <= i:  # the row itself was preempted: nothing after it runs
            break
        free -= need_i
        i0 = i + 1
    running = sched.running
    victims = list(range(cols.n - 1, live - 1, -1))
    reqs = [running[v] for v in victims]
    cols.store(victims, reqs)
    for req in reqs:
        req.blocks = 0
        req.computed = 0
        req.status = WAITING
        req.preemptions += 1
    del running[live:]
    cols.n = live
    for req in reqs:  # vLLM puts preempted requests back at the front of the queue, oldest first
        sched.waiting.appendleft(req)
        sched.queue_log.extend((now, 1.0))
    return min(S, live), free, tuple(reqs)


def schedule_columns(sched: Scheduler, now: float, k: int) -> StepPlan | None:
    """Plan one step from the columns (preempting as the scalar planner does).

    Why one function of ~90 lines: it is ``Scheduler.schedule``'s hot path and mirrors its
    phases (running, waiting, plan) over the same budget and free blocks."""
    cfg = sched.config
    cols = sched.columns
    assert cols is not None
    ints = cols.ints
    bs = cfg.block_size
    budget = cfg.max_num_batched_tokens
    if k > budget - 1:
        k = budget - 1
    L = cols.n
    n, S, is_dec = _running_tokens(ints, L, k, budget, cfg.chunked_prefill)
    comp = ints[COMPUTED, :S]
    blocks = ints[BLOCKS, :S]
    need = (comp + n + (bs - 1)) // bs - blocks
    np.maximum(need, 0, out=need)
    total_need = int(need.sum())
    free = sched.free_blocks
    running = sched.running
    preempted: tuple = ()
    if total_need > free:  # some request needs a block none is free for: preempt the newest
        S, free, preempted = _preempt(sched, need, S, free, now)
        n = n[:S]
        need = need[:S]
        comp = comp[:S]
        blocks = blocks[:S]
    else:
        free -= total_need
    blocks += need
    budget -= int(n.sum())
    dec = is_dec[:S]
    pf = np.flatnonzero(~dec).tolist()
    nd = S - len(pf)
    if not pf or pf[0] == nd:  # the usual case: decoding rows first, prompt chunks after
        rows: slice | np.ndarray = slice(0, nd)  # views, not gathers, in every operation
        decode = tuple(running[:nd])
    else:
        rows = np.flatnonzero(dec)
        decode = tuple(map(running.__getitem__, rows.tolist()))
    prefill: list = []
    prefill_rows: list[int] = []
    pf_tokens = 0
    pf_ctx = 0
    for r in pf:
        m = int(n[r])
        prefill.append((running[r], m))
        prefill_rows.append(r)
        pf_tokens += m
        pf_ctx += m * int(comp[r])
    if not preempted:
        first = len(running)
        budget, free, added, admitted = sched.admit_waiting(now, budget, free, prefill)
        pf_tokens += added
        prefill_rows.extend(range(first, first + len(admitted)))
        if admitted:
            cols.load(admitted)
    sched.free_blocks = free
    if not nd and not prefill:
        return EMPTY_PLAN
    drafting = ()
    ctx = ctx_max = 0.0
    if nd:
        dctx = ints[COMPUTED, rows]
        ctx = float(round(int(dctx.sum()) / (nd * bs)) * bs)
        ctx_max = float(round(int(dctx.max()) / bs) * bs)
        if k:
            props = ints[PROPOSES, rows]
            if not props.all():  # some rows have no proposal: they feed one token
                drafting = tuple((props != 0).tolist())
    return StepPlan(decode, k if nd else 0, tuple(prefill), preempted, ctx, pf_tokens,
                    pf_ctx / pf_tokens if pf_tokens else 0.0, ctx_max, drafting, rows,
                    tuple(prefill_rows))


def update_columns(sched: Scheduler, plan: StepPlan, accepted: Sequence[int] | np.ndarray | None,
                   now: float, gap_idx: array | None, gap_s: array | None) -> int:
    """``Scheduler.update`` for a plan made by ``schedule_columns``; returns accepted drafts.

    Why one function of ~85 lines: the decode half is a block of array operations and the
    prefill half a short loop; both share the freed blocks and the finished rows."""
    cols = sched.columns
    assert cols is not None
    ints = cols.ints
    floats = cols.floats
    k = plan.k
    bs = sched.config.block_size
    free = sched.free_blocks
    record = gap_s is not None
    rows = plan.rows
    total = 0
    done_rows: list[int] = []
    if plan.decode:
        if k and accepted is not None:
            a = np.asarray(accepted, dtype=np.int64)
            total = int(a.sum())
            ints[COMPUTED:GENERATED + 1, rows] += a + 1  # the accepted drafts plus the bonus token
        else:
            a = None
            ints[COMPUTED:GENERATED + 1, rows] += 1
        gap = now - floats[LAST_BURST, rows]
        floats[MAX_PAUSE, rows] = np.maximum(floats[MAX_PAUSE, rows], gap)
        if record:
            log_gaps(gap_idx, gap_s, ints[IDX, rows], gap)  # type: ignore[arg-type]
        floats[LAST_BURST, rows] = now
        if k and not plan.drafting:
            ints[BURSTS:DRAFTS + 1, rows] += 1  # bursts, verification steps, drafts
        else:
            ints[BURSTS, rows] += 1
            if k:  # vLLM counts a draft only when there was a proposal
                ints[SPEC, rows] += 1
                ints[DRAFTS, rows] += np.asarray(plan.drafting, dtype=np.int64)
        if a is not None:
            ints[ACCEPTED, rows] += a
        gen = ints[GENERATED, rows]
        out = ints[OUTPUT, rows]
        done = gen >= out
        held = ints[BLOCKS, rows]
        kept = np.minimum(held, (ints[COMPUTED, rows] + (bs - 1)) // bs)  # rejected drafts' blocks return
        if done.any():
            ints[GENERATED, rows] = np.minimum(gen, out)
            kept[done] = 0
            done_rows = (np.flatnonzero(done) if isinstance(rows, slice) else rows[done]).tolist()
        free += int(held.sum()) - int(kept.sum())
        ints[BLOCKS, rows] = kept
    running = sched.running
    pf_done: list[int] = []
    for (req, n), r in zip(plan.prefill, plan.prefill_rows, strict=True):
        computed = int(ints[COMPUTED, r]) + n
        ints[COMPUTED, r] = computed
        generated = int(ints[GENERATED, r])
        if computed >= req.prompt_tokens + generated:
            generated += 1
            ints[GENERATED, r] = generated
            if req.first_token_s is None:
                req.first_token_s = now
            else:
                gap_r = now - float(floats[LAST_BURST, r])
                if gap_r > floats[MAX_PAUSE, r]:
                    floats[MAX_PAUSE, r] = gap_r
                if record:
                    gap_idx.append(req.idx)  # type: ignore[union-attr]
                    gap_s.append(gap_r)  # type: ignore[union-attr]
            floats[LAST_BURST, r] = now
            ints[BURSTS, r] += 1
            if generated >= req.output_tokens:
                free += int(ints[BLOCKS, r])
                ints[BLOCKS, r] = 0
                pf_done.append(r)
    sched.free_blocks = free
    if done_rows or pf_done:
        ended = done_rows + pf_done
        finish_rows(cols, running, ended, now, sched.finished)
        keep = np.ones(cols.n, dtype=bool)
        keep[ended] = False
        sched.running = list(compress(running, keep.tolist()))
        cols.keep(keep)
    return total
