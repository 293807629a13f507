"""The oracle's update: what a finished step did to each request (accepted drafts committed as one
burst, rejected ones rolled back, completions), written as plain loops to check the compiled
``apply_kernels`` against (``oracle_scheduler.OracleScheduler.update`` calls it)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import repeat
from typing import Any

from sim.model.step_plan import (
    DONE,
    RUNNING,
    StepPlan,
)


def update_scalar(sched: Any, plan: StepPlan, accepted: Sequence[int] | None, now: float,
                  gap_idx: array | None = None, gap_s: array | None = None) -> int:
    """See ``OracleScheduler.update`` (one function: its halves share the commit counters)."""
    k = plan.k
    bs = sched.config.block_size
    free = sched.free_blocks
    finished = sched.finished
    record = gap_s is not None
    if record:
        idx_append = gap_idx.append  # type: ignore[union-attr]
        gap_append = gap_s.append  # type: ignore[union-attr]
    any_done = False
    total_accepted = 0
    decode = plan.decode
    if k and accepted is not None:
        pairs = zip(decode, accepted, strict=True)
    else:
        pairs = zip(decode, repeat(0))  # noqa: B905 - repeat is endless
    drafting = plan.drafting
    # requests in a plan are RUNNING until update: only schedule() ends or preempts them
    for j, (req, a) in enumerate(pairs):
        if k:
            req.num_spec_steps += 1
            if not drafting or drafting[j]:
                req.num_drafts += 1  # vLLM counts a draft only when there was a proposal
            req.accepted_tokens += a
            total_accepted += a
        computed = req.computed + 1 + a
        req.computed = computed
        gen = req.generated + 1 + a
        gap = now - req.last_burst_s
        if gap > req.max_pause_s:
            req.max_pause_s = gap
        if record:
            idx_append(req.idx)
            gap_append(gap)
        req.last_burst_s = now
        req.num_bursts += 1
        if gen >= req.output_tokens:
            req.generated = req.output_tokens
            free += _complete(sched, req, now, finished)
            any_done = True
        else:
            req.generated = gen
            keep = -(-computed // bs)
            if keep < req.blocks:
                # rejected drafts rolled back: their lookahead blocks return
                free += req.blocks - keep
                req.blocks = keep
    for req, n in plan.prefill:
        req.computed += n
        sched.cache.register(req)
        if req.computed >= req.prompt_tokens + req.generated:
            req.generated += 1
            if req.first_token_s is None:
                req.first_token_s = now
            else:
                gap = now - req.last_burst_s
                if gap > req.max_pause_s:
                    req.max_pause_s = gap
                if record:
                    idx_append(req.idx)
                    gap_append(gap)
            req.last_burst_s = now
            req.num_bursts += 1
            if req.generated >= req.output_tokens:
                free += _complete(sched, req, now, finished)
                any_done = True
    sched.free_blocks = free
    if any_done:
        sched.running = [r for r in sched.running if r.status == RUNNING]
    return total_accepted


def _complete(sched: Any, req, now: float, finished: list) -> int:
    """End ``req`` as completed at ``now``; returns the KV blocks that become free."""
    freed = sched.cache.release(req)
    req.status = DONE
    req.outcome = "completed"
    req.finish_s = now
    finished.append(req)
    return freed
