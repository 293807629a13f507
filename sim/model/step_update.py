"""``Scheduler.update`` one request at a time: applying a finished step to the request objects.

The scalar twin of ``sim.model.batch_step.update_columns`` (small batches, and every driver
that does not plan over columns, such as the real serving loop in ``profiler/``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING

from sim.model.step_plan import DONE, RUNNING, StepPlan

if TYPE_CHECKING:
    from sim.model.scheduler import Scheduler


def update_scalar(sched: Scheduler, plan: StepPlan, accepted: Sequence[int] | None, now: float,
                  gap_idx: array | None = None, gap_s: array | None = None) -> int:
    """See ``Scheduler.update``.

    Why one function of ~90 lines: once per engine step over the batch, like ``schedule``;
    the decode and prefill halves share the commit counters as locals."""
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
            free += _complete(req, now, finished)
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
                free += _complete(req, now, finished)
                any_done = True
    sched.free_blocks = free
    if any_done:
        sched.running = [r for r in sched.running if r.status == RUNNING]
    return total_accepted


def _complete(req, now: float, finished: list) -> int:
    """End ``req`` as completed at ``now``; returns the KV blocks it gives back."""
    freed = req.blocks
    req.blocks = 0
    req.status = DONE
    req.outcome = "completed"
    req.finish_s = now
    finished.append(req)
    return freed
