"""The ORACLE: the planner's rules written a second time, readably, over ``Request`` objects.

The planner is the compiled kernels (``sim/model/kernels/plan_kernels.py``, ``apply_kernels.py``,
``queue_kernels.py``, ``sim/model/deadlines.py``); this is the scalar planner they were compiled
from, kept in ``tests/`` as their test oracle (CONVENTIONS 19): ``test_planner_oracle.py`` feeds
both the same arrivals, ``k`` and accepted counts and asks for the same plan and the same request
state after every step. Nothing in ``sim/`` imports it. Change a rule in both, on purpose.

Tokens are counted one way (vLLM v1 ``scheduler.py``): a request *has* ``prompt + generated``
tokens and has *computed* some of them into its KV cache. A step gives each scheduled request
``num_tokens - computed`` new tokens to compute (a prompt chunk, a recompute after preemption,
or the one last-sampled token of a decoding request) plus ``k`` draft tokens when it decodes
speculatively (with a proposal, or without one on an engine that verifies full width:
``SchedulerConfig.full_width_drafts``); drafts take token budget and KV slots (lookahead). ``update`` commits accepted
drafts plus the bonus token and rolls the rejected ones back, freeing their lookahead slots.

``schedule(now, k)`` returns a frozen :class:`StepPlan`; the engine times it, lets the clock
run, then calls ``update(plan, accepted, end)``. Requests are plain ``__slots__`` objects
mutated only by the planner.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Sequence

from sim.model.step_plan import (
    DONE,
    EMPTY_PLAN,
    RUNNING,
    WAITING,
    Outcome,
    Request,
    SchedulerConfig,
    StepPlan,
)
from tests.sim.model.oracle_prefix_cache import OraclePrefixCache
from tests.sim.model.oracle_update import update_scalar


class OracleScheduler:
    """Continuous-batching planner for one replica.

    Running requests are served first in the order they were admitted, waiting ones next in
    FCFS order. When a running request needs a KV block and none is free, the newest running
    request is preempted by recompute (vLLM's default): its KV is freed and it goes back to
    the front of the waiting queue with nothing computed. Waiting requests never preempt.
    """

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.waiting: deque[Request] = deque()
        self.queue_log = array("d")
        """(time, +1 | -1) pairs, flat: every entry to and exit from ``waiting``, so the queue
        length's time average over any window is exact (sim.results.time_weighted.queue_len_tw)."""
        self.running: list[Request] = []
        self.free_blocks = config.kv_blocks
        self.cache = OraclePrefixCache(config.block_size, config.prefix_caching)
        """Full prompt blocks by prefix id; unreferenced ones count in ``free_blocks``."""
        self.finished: list[Request] = []
        # (deadline, idx, request): client timeouts and queue-time limits, earliest first
        self._timeouts: list[tuple[float, int, Request]] = []
        self._queue_deadlines: list[tuple[float, int, Request]] = []

    # ------------------------------------------------------------------ admission
    def add_request(self, req: Request, now: float, k_max: int = 0) -> bool:
        """Admit an arriving request to the waiting queue; False (and rejected) if refused.

        Refused when the queue is full, or when the request could never run here: its prompt
        exceeds the token budget with chunked prefill off, or it would need more KV blocks
        than the replica has (vLLM refuses prompts beyond its capacity the same way).
        """
        cfg = self.config
        if cfg.max_model_len is not None and req.prompt_tokens + max(req.output_tokens, 1) > cfg.max_model_len:
            self._end(req, "rejected", now)  # vLLM's HTTP 400: prompt + max_tokens over max_model_len
            req.too_long = True
            return False
        bs = cfg.block_size
        too_big = -(-(req.prompt_tokens + req.output_tokens + k_max) // bs) > cfg.kv_blocks
        no_fit = not cfg.chunked_prefill and req.prompt_tokens > cfg.max_num_batched_tokens
        full = cfg.queue_limit is not None and len(self.waiting) >= cfg.queue_limit
        if too_big or no_fit or full:
            self._end(req, "rejected", now)
            return False
        req.status = WAITING
        self.waiting.append(req)
        self.queue_log.extend((now, 1.0))
        if req.timeout_s is not None:
            heapq.heappush(self._timeouts, (req.arrival_s + req.timeout_s, req.idx, req))
        if cfg.max_queue_time_s is not None and not req.ever_scheduled:
            heapq.heappush(
                self._queue_deadlines, (req.arrival_s + cfg.max_queue_time_s, req.idx, req)
            )
        return True

    def adopt(self, req: Request, now: float) -> None:
        """Take over a request re-routed from a restarted replica (keeps its deadlines)."""
        req.status = WAITING
        self.waiting.append(req)
        self.queue_log.extend((now, 1.0))
        if req.timeout_s is not None:
            heapq.heappush(self._timeouts, (req.arrival_s + req.timeout_s, req.idx, req))
        if self.config.max_queue_time_s is not None and not req.ever_scheduled:
            heapq.heappush(
                self._queue_deadlines,
                (req.arrival_s + self.config.max_queue_time_s, req.idx, req),
            )

    def _end(self, req: Request, outcome: Outcome, at: float) -> None:
        self.free_blocks += self.cache.release(req)
        req.status = DONE
        req.outcome = outcome
        req.finish_s = at
        self.finished.append(req)

    def expire(self, now: float) -> None:
        """End requests whose client gave up or that waited past ``max_queue_time_s``.

        The finish time is the deadline itself (when the client stopped waiting); the KV is
        freed at the first step boundary after it, as an engine notices an abort.
        """
        changed = False
        q = self._queue_deadlines
        while q and q[0][0] <= now:
            deadline, _, req = heapq.heappop(q)
            if req.status == WAITING and not req.ever_scheduled:
                self.waiting.remove(req)
                self.queue_log.extend((deadline, -1.0))
                self._end(req, "rejected", deadline)
        t = self._timeouts
        while t and t[0][0] <= now:
            deadline, _, req = heapq.heappop(t)
            if req.status == RUNNING:
                changed = True
                self._end(req, "timed_out", deadline)
            elif req.status == WAITING:
                self.waiting.remove(req)
                self.queue_log.extend((deadline, -1.0))
                self._end(req, "timed_out", deadline)
        if changed:
            self.running = [r for r in self.running if r.status == RUNNING]

    # ------------------------------------------------------------------ planning
    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def num_decoding(self) -> int:
        """Running requests past their prompt (candidates for a decode slot this step)."""
        return sum(1 for r in self.running if r.generated and r.computed == r.num_tokens - 1)

    def used_blocks(self) -> int:
        return self.config.kv_blocks - self.free_blocks

    def schedule(self, now: float, k: int = 0) -> StepPlan:
        """Plan one step at ``now`` with ``k`` draft tokens per decoding request (one function:
        its phases share the step's budget, free blocks and output lists, read top to bottom)."""
        self.expire(now)
        cfg = self.config
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        if k > budget - 1:
            k = budget - 1
        decode: list[Request] = []
        prefill: list[tuple[Request, int]] = []
        preempted: list[Request] = []
        running = self.running
        free = self.free_blocks
        ctx_sum = 0
        ctx_max = 0
        pf_tokens = 0
        pf_ctx = 0
        drafting: list[bool] = []
        all_draft = True
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.computed
            remaining = req.prompt_tokens + req.generated - computed
            if remaining == 1 and req.generated:
                # k draft slots: a proposal, or slots filled without one on a full-width engine
                proposes = req.proposes or not k or cfg.full_width_drafts
                if not proposes:
                    all_draft = False
                n = 1 + k if proposes else 1
                if n > budget:
                    break
                is_decode = True
            else:
                # mid-prompt: only with chunked prefill (without it a prompt is admitted whole)
                n = remaining if remaining < budget else budget
                is_decode = False
            need = -(-(computed + n) // bs) - req.blocks
            if need > free:
                # preempt newest running requests until this one fits (or is itself preempted)
                while need > free:
                    victim = running.pop()
                    free += self.cache.release(victim)
                    victim.computed = 0
                    victim.status = WAITING
                    victim.preemptions += 1
                    preempted.append(victim)
                    if victim is req:
                        break
                if req.status == WAITING:
                    break
            if need > 0:
                self.cache.make_room(need, free, self.running)
                free -= need
                req.blocks += need
            if is_decode:
                decode.append(req)
                drafting.append(proposes)
                ctx_sum += computed
                if computed > ctx_max:
                    ctx_max = computed
            else:
                prefill.append((req, n))
                pf_tokens += n
                pf_ctx += n * computed
            budget -= n
            i += 1
        if preempted:
            # vLLM puts preempted requests back at the front of the queue, oldest first
            for victim in preempted:
                self.waiting.appendleft(victim)
                self.queue_log.extend((now, 1.0))
        else:
            budget, free, added, admitted = self.admit_waiting(now, budget, free, prefill)
            pf_tokens += added
            if admitted:  # a cached prefix is context for the chunk after it
                pf_ctx += sum(n * r.computed for r, n in prefill[-len(admitted):])
        self.free_blocks = free
        if not decode and not prefill:
            return EMPTY_PLAN
        nd = len(decode)
        return StepPlan(
            tuple(decode),
            k if nd else 0,
            tuple(prefill),
            tuple(preempted),
            # at KV-block resolution: paged attention reads whole blocks, and a step timer
            # then sees repeating shapes it can cache (the mean moves every step otherwise)
            float(round(ctx_sum / (nd * bs)) * bs) if nd else 0.0,
            pf_tokens,
            pf_ctx / pf_tokens if pf_tokens else 0.0,
            float(round(ctx_max / bs) * bs) if nd else 0.0,
            () if all_draft or not k else tuple(drafting),
        )

    def admit_waiting(self, now: float, budget: int, free: int,
                      prefill: list[tuple[Request, int]]) -> tuple[int, int, int, list[Request]]:
        """Waiting requests, FCFS, into what the running ones left of the step's token budget
        and free blocks; each admitted one is appended to ``running`` and to ``prefill`` with
        its chunk. Returns ``(budget, free, prompt tokens added, admitted requests)``."""
        cfg = self.config
        bs = cfg.block_size
        waiting = self.waiting
        running = self.running
        max_seqs = cfg.max_num_seqs
        added = 0
        admitted: list[Request] = []
        while waiting and budget > 0 and len(running) < max_seqs:
            req = waiting[0]
            # a cached prefix is computed already: at most has - 1 tokens, whole blocks
            hit, unheld = self.cache.longest_hit(req, req.prompt_tokens + req.generated)
            remaining = req.prompt_tokens + req.generated - hit * bs
            if remaining <= budget:
                n = remaining
            elif cfg.chunked_prefill:
                n = budget
            elif not running and not prefill and budget == cfg.max_num_batched_tokens:
                # a recompute (prompt + generated) larger than the budget, chunking off:
                # it runs alone in one step rather than never
                n = remaining
            else:
                break
            need = -(-(hit * bs + n) // bs) - hit  # the hit blocks are shared, not allocated
            if need + unheld > free:
                break
            waiting.popleft()
            self.queue_log.extend((now, -1.0))
            if self.cache.on:
                self.cache.take_hit(req, hit)
                free -= unheld
                req.computed = hit * bs
                if not req.ever_scheduled:
                    req.prefix_hit_tokens = hit * bs
            self.cache.make_room(need, free, self.running)
            free -= need
            req.blocks = hit + need
            req.status = RUNNING
            if not req.ever_scheduled:
                req.ever_scheduled = True
                req.scheduled_s = now
            running.append(req)
            admitted.append(req)
            prefill.append((req, n))
            added += n
            budget -= n if n <= budget else budget
        return budget, free, added, admitted

    # ------------------------------------------------------------------ applying
    def update(
        self,
        plan: StepPlan,
        accepted: Sequence[int] | None,
        now: float,
        gap_idx: array | None = None,
        gap_s: array | None = None,
    ) -> int:
        """Apply a finished step at time ``now``; returns the accepted draft tokens in total.

        ``accepted[i]`` is how many of ``plan.k`` drafts the target kept for
        ``plan.decode[i]`` (0..k; None means none). Each decoding request commits those plus
        the bonus token as one burst, rolls the rejected drafts back out of its computed count
        and frees the lookahead blocks they held. A prefill chunk that completes the prompt
        (or a recompute) samples one token. ``gap_idx``/``gap_s`` (optional) receive each
        burst's request index and seconds since its previous burst (ITL samples).
        """
        return update_scalar(self, plan, accepted, now, gap_idx, gap_s)

    # ------------------------------------------------------------------ restarts
    def evacuate(self, now: float) -> list[Request]:
        """Take every in-flight request out (replica going down): KV freed, nothing computed.
        Returned oldest-admitted first (running ones, then the waiting queue in order)."""
        out = list(self.running) + list(self.waiting)
        for _ in self.waiting:
            self.queue_log.extend((now, -1.0))
        for req in out:
            self.free_blocks += self.cache.release(req)
            req.computed = 0
            req.status = WAITING
        self.cache.clear()  # the KV went down with the process
        self.running = []
        self.waiting.clear()
        self._timeouts.clear()
        self._queue_deadlines.clear()
        return out

    def drop_all(self, now: float) -> list[Request]:
        """End every in-flight request as lost with the replica (outcome ``rejected``)."""
        out = self.evacuate(now)
        for req in out:
            self._end(req, "rejected", now)
        return out
