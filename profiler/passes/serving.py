"""A real serving loop: the simulator's own planner, executed with real forward passes.

Why it exists: to measure how far the simulator is from reality, something must serve the
same open-loop arrivals for real. This loop asks ``sim.model.scheduler.Scheduler`` for a plan each
step — exactly the planner the simulator runs — and *executes* it: the plan's prefill chunks
as one packed target pass (each chunk over its own request's KV cache), its decoding requests
as one batched target pass over ``1 + k`` tokens each (the last token plus ``k`` drafts from a real proposer),
verified greedily. The wall clock takes the place of the profile's step times, and the real
proposer's acceptance takes the place of the profile's acceptance draws; everything else
(admission, batching, chunking, preemption, token counting) is shared code, so a difference
between the two runs isolates the step-time and acceptance models.

Arrivals are fed on the wall clock by a thread (open loop: it never waits for completions);
the loop admits what has arrived at every step boundary, as an engine would. Tokens stream at
the end of the step that produced them; the loop records every burst.

KV layout: a prefilling request owns a batch-1 ``DynamicCache``; a step's chunks are packed
into one sequence over the concatenation of their caches with a block-diagonal mask. Decoding requests share one
left-padded batched cache that persists across steps while the decode set is unchanged, so
this is a *padded* engine (``fleet.engine.kv_layout = "padded"``): every row attends over the
longest row's width. After verification the columns every row rejected are cropped; drafts only
some rows rejected stay as masked holes (an attention mask and explicit positions keep the
computation exact) until they add up to ``HOLE_LIMIT`` columns beyond the longest row, when the
batch is compacted. When the decode set changes, leaving rows are dropped and joining rows
appended in place (one op per layer each). Greedy
(temperature 0) verification only: the output is the target's own greedy text.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import queue
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import torch

from profiler.passes.batch_executor import BatchExecutor
from profiler.passes.batch_state import ServingRequest
from sim.model.scheduler import Scheduler
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import DONE, Request, SchedulerConfig, StepPlan
from sim.model.step_protocol import ROW_WIDTH, FleetRun, StepCycle, StepLog
from sim.model.step_time import StepShape
from sim.results import records


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """A snapshot of one ``StepPlan`` by request id (plans hold live, mutable requests)."""

    decode: tuple[int, ...]
    k: int
    prefill: tuple[tuple[int, int], ...]
    preempted: tuple[int, ...]

    @classmethod
    def of(cls, plan: StepPlan) -> PlanRecord:
        return cls(
            decode=tuple(r.id for r in plan.decode),
            k=plan.k,
            prefill=tuple((r.id, n) for r, n in plan.prefill),
            preempted=tuple(r.id for r in plan.preempted),
        )


@dataclass(frozen=True)
class ServingResult:
    """What the real loop measured, in the simulator's frame layouts (architecture.md)."""

    requests: pl.DataFrame
    """Per-request records (``sim.results.records`` layout, the simulator's own)."""
    steps: pl.DataFrame
    """Per-step records (``sim.results.records`` layout); ``duration_s`` is measured wall time."""
    itl: pl.DataFrame
    """Gaps between consecutive bursts of each request (``sim.results.records`` layout)."""
    bursts: pl.DataFrame
    """Every streamed burst: ``id``, ``t_s`` (seconds from start), ``tokens``."""
    plans: tuple[PlanRecord, ...]
    """Every executed plan, in order."""
    shapes: tuple[StepShape, ...]
    """The step shape of every executed plan (what a step timer would be asked to time)."""
    kv_widths: tuple[int, ...]
    """Per step, the KV width the decode pass attended over (padding and holes included;
    0 without decode): compare with the shape's ``decode_context_max``."""
    outputs: dict[int, tuple[int, ...]]
    """Generated token ids of every request."""
    proposed_tokens: int
    """Draft tokens the real proposer returned (positions it left empty are not counted)."""
    threads: int
    """``torch.get_num_threads()`` during the run."""
    device: str
    wall_s: float
    clock: str
    """``wall`` (real serving) or ``virtual`` (replayed on a step timer)."""
    aborted: bool


# ---------------------------------------------------------------------------------------------
# arrivals on the wall clock


class ArrivalFeeder(threading.Thread):
    """Puts each request on ``out`` at ``t0 + arrival_s`` (wall clock), never waiting for service."""

    def __init__(self, requests: Sequence[ServingRequest], t0: float, out: queue.SimpleQueue) -> None:
        super().__init__(name="specplan-arrivals", daemon=True)
        self.requests = sorted(requests, key=lambda r: (r.arrival_s, r.id))
        self.t0 = t0
        self.out = out
        self.stop = threading.Event()

    def run(self) -> None:
        for req in self.requests:
            delay = self.t0 + req.arrival_s - time.perf_counter()
            if delay > 0 and self.stop.wait(delay):
                return
            self.out.put(req)


def serve(
    requests: Sequence[ServingRequest],
    config: SchedulerConfig,
    model: torch.nn.Module,
    *,
    policy: SpeculationPolicy,
    proposer_factory: Callable[[], Any] | None = None,
    proposer_name: str | None = None,
    candidate: str = "baseline",
    seed: int = 0,
    warmup_s: float = 0.0,
    step_timer: Callable[[StepShape], float] | None = None,
    progress: Callable[[str], None] | None = None,
    max_wall_s: float | None = None,
    idle_work: Callable[[float, float], bool] | None = None,
) -> ServingResult:
    """Serve ``requests`` for real on ``model`` and record what a client would see.

    ``policy`` chooses ``k`` per step exactly as the simulator's engine does;
    ``proposer_factory`` makes one proposer per request (model proposers keep per-sequence
    state) and is required when the policy speculates.

    Clock: by default the wall clock (arrivals fed by a thread at their times). With
    ``step_timer`` the run is *replayed* on a virtual clock instead — every step still executes
    real forward passes and real verification, but time advances by ``step_timer(shape)`` —
    which makes the plan sequence deterministic (tests compare it with the simulator's).
    ``max_wall_s`` aborts a wall-clock run that cannot keep up; requests not ended by then are
    recorded as ``unfinished``.

    ``idle_work(now, until_next_arrival_s)`` is called (wall clock only) whenever the system is
    empty — every request due so far admitted and ended — and returns whether it did something;
    it must finish before the next arrival (``specplan validate`` times reference passes there).

    This is the wall-clock driver of the step protocol (``StepCycle`` holds the protocol
    itself); ``_ServingLoop`` holds what admission, the idle path and a step share.
    """
    if policy.speculates and proposer_factory is None:
        raise ValueError("a speculating policy needs a proposer_factory")
    order = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    ids = [r.id for r in order]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique")
    loop = _ServingLoop(order, config, model, policy, proposer_factory, proposer_name, step_timer,
                        idle_work, progress or (lambda _m: None), candidate)
    aborted = loop.run(max_wall_s)
    return loop.result(ids, aborted, seed, warmup_s)


class _ServingLoop:
    """The state one real run shares between admission, the idle path and a step: the
    scheduler, the executor, the clock, the pending arrivals and the records."""

    def __init__(self, order: list[ServingRequest], config: SchedulerConfig, model: torch.nn.Module,
                 policy: SpeculationPolicy, proposer_factory: Callable[[], Any] | None,
                 proposer_name: str | None, step_timer: Callable[[StepShape], float] | None,
                 idle_work: Callable[[float, float], bool] | None, say: Callable[[str], None],
                 candidate: str) -> None:
        self.k_max = policy.k_max
        self.sched = Scheduler(config)
        self.execu = BatchExecutor(model, proposer_factory=proposer_factory)
        self.sreqs = [
            Request(idx=i, id=spec.id, arrival_s=spec.arrival_s, prompt_tokens=len(spec.prompt_ids),
                    output_tokens=spec.output_tokens, segment=spec.segment, timeout_s=spec.timeout_s)
            for i, spec in enumerate(order)
        ]
        self.by_id = {r.id: r for r in self.sreqs}
        self.rows: array = array("d")
        self.cycle = StepCycle(0, self.sched, policy, proposer_name, self.rows)
        self.gap_idx: array = array("q")
        self.gap_s: array = array("d")
        self.bursts: list[tuple[int, float, int]] = []
        self.plans: list[PlanRecord] = []
        self.shapes: list[StepShape] = []
        self.widths: list[int] = []
        self.n = len(order)
        self.say = say
        self.candidate = candidate
        self.step_timer = step_timer
        self.idle_work = idle_work
        self.virtual = step_timer is not None
        self.vnow = 0.0
        self.pending = deque(order)
        self.arrivals: queue.SimpleQueue = queue.SimpleQueue()
        self.t0 = time.perf_counter()
        self.feeder = None if self.virtual else ArrivalFeeder(order, self.t0, self.arrivals)
        self.arrival_times = [r.arrival_s for r in order]
        self.admitted = 0

    def clock(self) -> float:
        return self.vnow if self.virtual else time.perf_counter() - self.t0

    def admit(self, spec: ServingRequest, at: float) -> None:
        self.admitted += 1
        req = self.by_id[spec.id]
        req.replica = 0
        self.execu.admit(spec)
        if not self.sched.add_request(req, at, self.k_max):
            self.execu.release(spec.id)

    def admit_arrived(self) -> None:
        if self.virtual:
            while self.pending and self.pending[0].arrival_s <= self.vnow:
                spec = self.pending.popleft()
                self.admit(spec, spec.arrival_s)
            return
        while True:
            try:
                spec = self.arrivals.get_nowait()
            except queue.Empty:
                return
            self.admit(spec, self.clock())

    def run(self, max_wall_s: float | None) -> bool:
        """Step until every request has ended; True when ``max_wall_s`` stopped it first."""
        sched, execu = self.sched, self.execu
        if self.feeder is not None:
            self.feeder.start()
        try:
            while len(sched.finished) < self.n:
                self.admit_arrived()
                now = self.clock()
                if max_wall_s is not None and not self.virtual and now > max_wall_s:
                    return True
                done_before = len(sched.finished)
                plan = self.cycle.plan(now)
                for r in sched.finished[done_before:]:
                    execu.release(r.id)  # expired while waiting or running
                if plan.empty:
                    self.wait()
                else:
                    self.step(plan)
        finally:
            if self.feeder is not None:
                self.feeder.stop.set()
                self.feeder.join(timeout=1.0)
        return False

    def wait(self) -> None:
        """Nothing to schedule: jump the virtual clock, or do idle work, or wait for an arrival."""
        sched, n = self.sched, self.n
        if len(sched.finished) >= n:
            return
        if self.virtual:
            if not self.pending:
                raise RuntimeError("work queued but nothing schedulable and no arrivals left")
            self.vnow = max(self.vnow, self.pending[0].arrival_s)
            return
        if self.idle_work is not None and not sched.has_work:
            t = self.clock()
            due = bisect.bisect_right(self.arrival_times, t)
            if self.admitted == due and self.idle_work(t, self.arrival_times[due] - t if due < n else math.inf):
                return
        try:
            nxt = self.arrivals.get(timeout=0.05 if sched.has_work else 1.0)
        except queue.Empty:
            return
        self.admit(nxt, self.clock())

    def step(self, plan: StepPlan) -> None:
        """Run one plan for real, then finish it through the step protocol and record it."""
        sched, execu, cycle = self.sched, self.execu, self.cycle
        self.plans.append(PlanRecord.of(plan))
        gen_before = {r.id: r.generated for r in plan.decode}
        gen_before.update({r.id: r.generated for r, _ in plan.prefill})
        start = self.clock()
        shape = cycle.shape(plan, start)
        self.shapes.append(shape)
        execu.last_width = 0
        execu.last_drafting = len(plan.decode)
        accepted = execu.execute(plan)
        if self.k_max and execu.proposer_factory is not None:
            self.propose_ahead(plan)
        self.widths.append(execu.last_width)
        drafting = execu.last_drafting if plan.k else 0
        if plan.k and drafting < len(plan.decode):  # rows without a proposal verified one token
            shape = dataclasses.replace(shape, drafting_seqs=drafting)
            self.shapes[-1] = shape
        if self.virtual:
            assert self.step_timer is not None
            self.vnow = start + self.step_timer(shape)
        end = self.clock()
        done_before = len(sched.finished)
        cycle.finish(plan, accepted, start, end - start, end, self.gap_idx, self.gap_s, drafting=drafting)
        for rid, g in gen_before.items():
            got = self.by_id[rid].generated - g
            if got > 0:
                self.bursts.append((rid, end, got))
        for r in sched.finished[done_before:]:
            execu.release(r.id)
        if len(self.rows) % (200 * ROW_WIDTH) == 0:
            self.say(f"{self.candidate}: {len(sched.finished)}/{self.n} requests ended, t={end:.1f}s")

    def propose_ahead(self, plan: StepPlan) -> None:
        """Tell the scheduler which of this step's requests have a proposal for their next
        step (``Request.proposes``), so a row without an n-gram match is budgeted one token,
        as vLLM and the simulator schedule it."""
        execu = self.execu
        for r in (*plan.decode, *(r for r, _ in plan.prefill)):
            seq = execu.seqs[r.id]
            if seq.generated and len(seq.generated) < r.output_tokens:
                r.proposes = execu.proposes_next(r.id, self.k_max)

    def result(self, ids: list[int], aborted: bool, seed: int, warmup_s: float) -> ServingResult:
        """The run's records in the simulator's frame layouts."""
        candidate, execu, bursts = self.candidate, self.execu, self.bursts
        wall = self.clock()
        for req in self.sreqs:
            if req.status != DONE:  # only after an abort: as the engine marks them
                req.outcome = "unfinished"
                req.finish_s = None
        if aborted:
            self.say(f"{candidate}: stopped after {wall:.0f}s (max_wall_s); unfinished requests kept as such")
        run = FleetRun(self.sreqs, StepLog.from_flat(self.rows), self.gap_idx, self.gap_s, wall)
        outputs = {rid: tuple(sq.generated) for rid, sq in execu.seqs.items()}
        return ServingResult(
            requests=records.requests_frame(run, candidate, seed, warmup_s),
            steps=records.steps_frame(run, candidate, seed),
            itl=records.itl_frame(run, candidate, seed),
            bursts=pl.DataFrame(
                {"id": [b[0] for b in bursts], "t_s": [b[1] for b in bursts], "tokens": [b[2] for b in bursts]},
                schema={"id": pl.Int64, "t_s": pl.Float64, "tokens": pl.Int64},
            ),
            plans=tuple(self.plans),
            shapes=tuple(self.shapes),
            kv_widths=tuple(self.widths),
            outputs={rid: outputs.get(rid, ()) for rid in ids},
            proposed_tokens=execu.proposed_tokens,
            threads=torch.get_num_threads(),
            device=str(execu.device),
            wall_s=wall,
            clock="virtual" if self.virtual else "wall",
            aborted=aborted,
        )


__all__ = ["ArrivalFeeder", "PlanRecord", "ServingRequest", "ServingResult", "serve"]
