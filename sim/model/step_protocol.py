"""One engine iteration around the planner, for a driver that holds request objects.

The step is: choose ``k`` (the speculation policy), ``plan = scheduler.schedule(now, k)``,
build the :class:`~sim.model.step_time.StepShape` the step timer prices (or the real loop
runs), apply the outcome with ``scheduler.update``, log the row, feed the adaptive policy.
:class:`StepCycle` holds that protocol for the real serving loop (``profiler/passes/serving.py``: the
wall clock, acceptance from real verification) over the ``Scheduler`` facade; the simulated
fleet runs the same planning and apply kernels directly (``sim.model.kernels.run_kernel``: the same
steps, acceptance drawn). Both log the same row layout, so their step frames
(``sim.results.records``) are built by the same code.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.model.kernels.policy_kernels import policy_k
from sim.model.scheduler import Scheduler
from sim.model.speculation import PolicyState, SpeculationPolicy
from sim.model.step_plan import Request, StepPlan
from sim.model.step_time import StepShape

ROW_WIDTH = 12
"""Values per logged step: replica, t_start_s, duration_s, decode_seqs, prefill_tokens, k,
accepted_tokens, queue_len, kv_used_blocks, kv_total_blocks, preempted, drafting_seqs."""


class DecodeBatchRows:
    """Rows joining and leaving the decode batch from one decoding step to the next.

    Why: a padded engine keeps its decode batch's KV as one left-padded tensor and edits it
    when the decode set changes (appends joiners, removes leavers) — work that step pays for
    (``timing.padded_batch``). A step without decoding leaves the batch as it was, so changes
    are counted against the last decode set. The simulator's engine and the real serving loop
    both count with this, so they agree on every step.
    """

    def __init__(self) -> None:
        self._rows: frozenset[int] = frozenset()
        self._last: list[int] = []

    def change(self, ids: Sequence[int]) -> tuple[int, int]:
        """``(joined, left)`` for a step decoding ``ids``; ``(0, 0)`` for one that decodes nothing."""
        if not ids or ids == self._last:  # most steps: the same requests in the same order (the hot path)
            return 0, 0
        self._last = list(ids)
        now = frozenset(ids)
        joined, left = len(now - self._rows), len(self._rows - now)
        self._rows = now
        return joined, left


class StepCycle:
    """The step protocol of one replica: policy state, batch rows and the row log it writes.

    Plain object on purpose (the engine calls it every iteration). ``policy`` and
    ``batch_rows`` are replaced on a restart (the fallback policy; the batch's KV is gone).
    """

    __slots__ = ("replica", "scheduler", "policy", "state", "proposer", "batch_rows", "rows",
                 "kv_total", "_qlen", "_kv_used", "track_rows")

    def __init__(self, replica: int, scheduler: Scheduler, policy: SpeculationPolicy,
                 proposer: str | None, rows: array) -> None:
        self.replica = replica
        self.scheduler = scheduler
        self.policy = policy
        self.state = PolicyState()
        self.proposer = proposer
        self.batch_rows = DecodeBatchRows()
        self.rows = rows
        """Flat float array shared by a fleet's replicas; one ``extend`` per step."""
        self.kv_total = scheduler.config.kv_blocks
        self._qlen = 0
        self._kv_used = 0
        self.track_rows = True
        """Count rows joining/leaving the decode batch (only a padded engine's timer reads them)."""

    def plan(self, now: float) -> StepPlan:
        """Choose ``k`` for this step and ask the planner for the step."""
        policy = self.policy
        name = policy.name
        if name == "fixed":
            k = policy.k
        elif name == "off":
            k = 0
        elif name == "kv_fallback":  # the compiled rule, on this replica's state and KV use
            sched = self.scheduler
            k = policy_k(self.state.kernel_array(policy), sched.rp, sched.rq, float(now))
        else:
            k = policy.k_for(self.state, self.scheduler.num_decoding())
        return self.scheduler.schedule(now, k)

    def shape(self, plan: StepPlan, start: float) -> StepShape:
        """The shape of a non-empty step starting at ``start``; notes the queue and KV use
        before it (what the row logs)."""
        sched = self.scheduler
        self._qlen = len(sched.waiting)
        self._kv_used = self.kv_total - sched.free_blocks
        k = plan.k
        joined, left = self.batch_rows.change([r.id for r in plan.decode]) if self.track_rows else (0, 0)
        # rows without a proposal (n-gram no match) verify one token: the timer prices them so
        drafting = plan.num_drafting if plan.drafting else None
        return StepShape(len(plan.decode), plan.decode_context, k, self.proposer if k else None,
                         plan.prefill_tokens, plan.prefill_context, plan.decode_context_max, start,
                         joined, left, drafting)

    def finish(self, plan: StepPlan, accepted: list[int] | None, start: float, duration: float,
               end: float, gap_idx: array, gap_s: array, drafting: int | None = None) -> int:
        """Apply the step's outcome (``accepted`` per decoding request, ignored without drafts),
        log its row and feed the adaptive policy; returns the accepted draft tokens.
        ``drafting``: rows that fed drafts when the driver knows better than the plan (the real
        loop learns from its proposer which rows had a proposal)."""
        nd = len(plan.decode)
        k = plan.k
        if k and accepted is not None and plan.drafting:
            # rows without a proposal verified one token and accept nothing
            accepted = [a if d else 0 for a, d in zip(accepted, plan.drafting, strict=True)]
        total_acc = self.scheduler.update(plan, accepted if k else None, end, gap_idx, gap_s)
        self.rows.extend((self.replica, start, duration, nd, plan.prefill_tokens, k, total_acc,
                          self._qlen, self._kv_used, self.kv_total, len(plan.preempted),
                          plan.num_drafting if drafting is None else drafting))
        policy = self.policy
        if policy.name == "adaptive":
            policy.observe(self.state, end, duration, nd)
        return total_acc


@dataclass
class StepLog:
    """Per-step columns as compact arrays (8 bytes a value), turned into a frame at the end."""

    replica: array = field(default_factory=lambda: array("q"))
    t_start_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    decode_seqs: array = field(default_factory=lambda: array("q"))
    prefill_tokens: array = field(default_factory=lambda: array("q"))
    k: array = field(default_factory=lambda: array("q"))
    draft_tokens: array = field(default_factory=lambda: array("q"))
    accepted_tokens: array = field(default_factory=lambda: array("q"))
    queue_len: array = field(default_factory=lambda: array("q"))
    kv_used_blocks: array = field(default_factory=lambda: array("q"))
    kv_total_blocks: array = field(default_factory=lambda: array("q"))
    preempted: array = field(default_factory=lambda: array("q"))
    drafting_seqs: array = field(default_factory=lambda: array("q"))
    """Decoding requests that fed drafts (the others had no proposal and verified 1 token)."""

    def __len__(self) -> int:
        return len(self.t_start_s)

    @classmethod
    def from_flat(cls, flat: array | np.ndarray) -> StepLog:
        """Columns from ``(replica, t_start_s, duration_s, decode_seqs, prefill_tokens, k,
        accepted_tokens, queue_len, kv_used_blocks, kv_total_blocks, preempted, drafting_seqs)``
        rows stored back to back in one float array (one ``extend`` per step in the hot loop; or
        the compiled engine's log, read in place). One column is converted at a time, so the
        rows are never held twice (~40 MB of steps on a GPU hour)."""
        m = np.frombuffer(flat, dtype=np.float64).reshape(-1, ROW_WIDTH) if len(flat) else np.empty((0, ROW_WIDTH))

        def col(j: int, code: str = "q") -> array:
            return _array(code, np.ascontiguousarray(m[:, j]) if code == "d" else m[:, j].astype(np.int64))

        log = cls(replica=col(0), t_start_s=col(1, "d"), duration_s=col(2, "d"), decode_seqs=col(3),
                  prefill_tokens=col(4), k=col(5), accepted_tokens=col(6), queue_len=col(7),
                  kv_used_blocks=col(8), kv_total_blocks=col(9), preempted=col(10), drafting_seqs=col(11))
        log.draft_tokens = _array("q", np.frombuffer(log.drafting_seqs, np.int64) * np.frombuffer(log.k, np.int64))
        return log


def _array(code: str, values: np.ndarray) -> array:
    """``values`` (contiguous) copied once into an ``array`` of ``code``."""
    out = array(code)
    out.frombytes(memoryview(values).cast("B"))
    return out


@dataclass
class FleetRun:
    """Raw outcome of one fleet simulation (turned into frames by sim.results.records)."""

    requests: list[Request]
    steps: StepLog
    gap_idx: array | np.ndarray
    """Request index of each inter-burst gap (ITL sample); int64 (a numpy array from the
    compiled engine, millions long on GPU runs)."""
    gap_s: array | np.ndarray
    """Seconds between a burst and the previous one of the same request (float64)."""
    end_s: float
    """Simulated time the run ended."""
    queue_log: array = field(default_factory=lambda: array("d"))
    """Every replica's (time, +1 | -1) waiting-queue entries and exits, flat."""
    columns: dict[str, np.ndarray] | None = None
    """The requests' final state as record columns (``FleetArrays.record_columns``) when the
    compiled engine ran without writing it back into ``requests``; None: read the objects."""
