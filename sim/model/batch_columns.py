"""The running batch as columns: the planner's per-request arithmetic in numpy for GPU batches.

Why: at batches of hundreds, ``Scheduler.schedule`` and ``update`` spent ~2 µs per request per
step in Python attribute updates. Here the running requests' changing fields (computed,
generated, KV blocks, burst times, speculation counters) live in arrays aligned with
``Scheduler.running``, and one step is a few dozen array operations whatever the batch.

The arithmetic is the scalar planner's, operation for operation (same integer ceilings, the same
float subtraction for every gap), so a run gives the same records bit for bit
(``tests/sim/results/test_golden_frames.py`` runs every golden scenario both ways). Whatever the
columns do not cover — a step that must preempt, a restart — is handed back to the scalar code:
``store_all`` writes the columns back into the ``Request`` objects first. While columns are
active the objects' changing fields are stale; the scheduler writes a row back whenever a
request leaves the batch (finished, timed out, preempted, evacuated, end of run).
"""

from __future__ import annotations

from array import array
from operator import attrgetter

import numpy as np

from sim.model.step_plan import DONE, Request

DEFAULT_FROM: int | None = 128
"""Running requests from which a replica's planner switches to columns (back below half);
None: never (tests set it to compare both planners)."""

# rows of ``ints`` (one contiguous array per field: each operation reads one stretch of memory)
IDX, PROMPT, OUTPUT, COMPUTED, GENERATED, BLOCKS, BURSTS, SPEC, DRAFTS, ACCEPTED, PROPOSES = range(11)
INT_FIELDS = ("idx", "prompt_tokens", "output_tokens", "computed", "generated", "blocks",
              "num_bursts", "num_spec_steps", "num_drafts", "accepted_tokens", "proposes")
# rows of ``floats``
LAST_BURST, MAX_PAUSE, PROPOSAL = range(3)
FLOAT_FIELDS = ("last_burst_s", "max_pause_s", "proposal")
_WRITTEN_INTS = INT_FIELDS[COMPUTED:]  # what a request's row changes (written back)
_WRITTEN_FLOATS = FLOAT_FIELDS[:PROPOSAL]
_GET_INTS = attrgetter(*INT_FIELDS)
_GET_FLOATS = attrgetter(*FLOAT_FIELDS)


class BatchColumns:
    """Arrays of the running requests' state: column ``i`` = ``Scheduler.running[i]``."""

    __slots__ = ("n", "cap", "k_max", "ints", "floats", "rates")

    def __init__(self, k_max: int, cap: int = 64) -> None:
        self.n = 0
        self.k_max = k_max
        self.cap = cap
        self.ints = np.zeros((len(INT_FIELDS), cap), np.int64)
        self.floats = np.zeros((len(FLOAT_FIELDS), cap), np.float64)
        self.rates = np.zeros((cap, max(k_max, 1)), np.float64)
        """Per-position acceptance survival rates, one row per request (its ``-negrates``)."""

    def _grow(self, need: int) -> None:
        cap = max(need, self.cap * 2)
        n = self.n
        ints = np.zeros((len(INT_FIELDS), cap), np.int64)
        floats = np.zeros((len(FLOAT_FIELDS), cap), np.float64)
        rates = np.zeros((cap, self.rates.shape[1]), np.float64)
        ints[:, :n] = self.ints[:, :n]
        floats[:, :n] = self.floats[:, :n]
        rates[:n] = self.rates[:n]
        self.ints, self.floats, self.rates, self.cap = ints, floats, rates, cap

    def load(self, reqs: list[Request]) -> None:
        """Requests join the batch (admitted, or all running ones when columns switch on)."""
        i = self.n
        m = len(reqs)
        if i + m > self.cap:
            self._grow(i + m)
        if m == 1:
            req = reqs[0]
            self.ints[:, i] = _GET_INTS(req)
            self.floats[:, i] = _GET_FLOATS(req)
        else:
            self.ints[:, i:i + m] = np.array([_GET_INTS(r) for r in reqs], dtype=np.int64).T
            self.floats[:, i:i + m] = np.array([_GET_FLOATS(r) for r in reqs], dtype=np.float64).T
        k = self.k_max
        if k:
            for j, req in enumerate(reqs, start=i):
                neg = req.negrates
                if neg is not None:
                    self.rates[j, :k] = neg[:k]
                    np.negative(self.rates[j], out=self.rates[j])
        self.n = i + m

    def store(self, rows: list[int], reqs: list[Request]) -> None:
        """Write the given columns back into their request objects."""
        ints = self.ints[COMPUTED:, rows].T.tolist()
        floats = self.floats[:PROPOSAL, rows].T.tolist()
        for req, iv, fv in zip(reqs, ints, floats, strict=True):
            (req.computed, req.generated, req.blocks, req.num_bursts, req.num_spec_steps,
             req.num_drafts, req.accepted_tokens, proposes) = iv
            req.proposes = bool(proposes)
            req.last_burst_s, req.max_pause_s = fv

    def store_all(self, running: list[Request]) -> None:
        if running:
            self.store(list(range(len(running))), running)

    def keep(self, mask: np.ndarray) -> None:
        """Drop the columns where ``mask`` is False (order kept)."""
        n = int(mask.sum())
        L = self.n
        self.ints[:, :n] = self.ints[:, :L][:, mask]
        self.floats[:, :n] = self.floats[:, :L][:, mask]
        if self.k_max:
            self.rates[:n] = self.rates[:L][mask]
        self.n = n

    def accepted(self, rows: slice | np.ndarray, uniforms: np.ndarray, k: int) -> np.ndarray:
        """Accepted drafts per row: positions whose survival rate exceeds the row's uniform —
        what ``bisect_left(negrates, -u, 0, k)`` counts in the scalar engine."""
        return (self.rates[rows, :k] > uniforms[:, None]).sum(axis=1)

    def num_decoding(self) -> int:
        n = self.n
        gen = self.ints[GENERATED, :n]
        return int(((gen > 0) & (self.ints[COMPUTED, :n] == self.ints[PROMPT, :n] + gen - 1)).sum())


def columns_for(sched, start: int, k_max: int) -> BatchColumns | None:
    """Switch a scheduler's columns on (``start`` or more running) or off (below half, or
    empty) for the step about to be planned; returns the columns to plan with, or None."""
    n_running = len(sched.running)
    cols = sched.columns
    if cols is None:
        if n_running >= start:
            cols = BatchColumns(k_max, cap=max(64, n_running))
            cols.load(sched.running)
            sched.columns = cols
    elif n_running == 0 or n_running < start // 2:
        sched.sync()
        cols = None
    return cols


def finish_rows(cols: BatchColumns, running: list[Request], rows: list[int], now: float,
                finished: list[Request]) -> None:
    """End the requests of ``rows`` as completed at ``now`` (their KV already freed)."""
    reqs = [running[i] for i in rows]
    cols.store(rows, reqs)
    for req in reqs:
        req.status = DONE
        req.outcome = "completed"
        req.finish_s = now
        finished.append(req)


def log_gaps(gap_idx: array, gap_s: array, idx: np.ndarray, gaps: np.ndarray) -> None:
    """Append ITL samples from arrays (the same bytes the scalar loop appends one by one)."""
    gap_idx.frombytes(np.ascontiguousarray(idx, dtype=np.int64).tobytes())
    gap_s.frombytes(np.ascontiguousarray(gaps, dtype=np.float64).tobytes())
