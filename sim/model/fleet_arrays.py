"""The requests of one compiled run as arrays, and the logs the kernels append to.

One row per request in ``ints`` and ``floats`` (columns named in ``sim.model.step_kernels``):
a step reads and writes a request's fields together. At the end, ``store`` writes the final state
back into the ``Request`` objects, or ``record_columns`` hands it to the records as columns.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from sim.model import step_kernels as sk
from sim.model.step_plan import Request

_UNIFORM_CHUNK = 4096  # as sim.model.engine._Uniforms: the same stream in the same chunks
_OUTCOMES = {sk.COMPLETED: "completed", sk.REJECTED: "rejected", sk.TIMED_OUT: "timed_out"}
_OUTCOME_NAMES = np.array([_OUTCOMES.get(code) for code in range(max(_OUTCOMES) + 1)], dtype=object)


class FleetArrays:
    """The run's requests as arrays (one column each) and the logs the kernels append to."""

    def __init__(self, requests: Sequence[Request], k_max: int, rng: np.random.Generator,
                 slack: int = 0) -> None:
        n = len(requests)
        # one row per request: a step reads and writes a request's fields together
        self.ints = np.zeros((n, sk.N_INTS), np.int64)
        self.floats = np.zeros((n, sk.N_FLOATS), np.float64)
        self.ints[:, sk.PROMPT] = [r.prompt_tokens for r in requests]
        self.ints[:, sk.OUTPUT] = [r.output_tokens for r in requests]
        self.ints[:, sk.PROPOSES] = [r.proposes for r in requests]
        self.floats[:, sk.PROPOSAL] = [r.proposal for r in requests]
        self.floats[:, sk.FIRST_TOKEN:sk.FINISH + 1] = np.nan  # None until set
        self.negrates = np.zeros((n, max(k_max, 1)), np.float64)
        if k_max:
            for i, r in enumerate(requests):
                if r.negrates is not None:
                    self.negrates[i, :k_max] = r.negrates[:k_max]
        self.ids = np.array([r.id for r in requests], dtype=np.int64)
        self.G = np.zeros(3, np.int64)
        # every ITL sample is a burst after a request's first, so the output tokens bound them
        # (``slack``: the room a step asks for beyond what it uses): sized once, untouched pages
        # costing nothing, instead of doubled a dozen times on a GPU hour
        gaps = max(1 << 16, int(self.ints[:, sk.OUTPUT].sum()) + slack)
        self.gap_idx = np.empty(gaps, np.int64)
        self.gap_s = np.empty(gaps, np.float64)
        self.steps = np.empty(sk.ROW * max(4096, 2 * n), np.float64)
        self.rng = rng
        self.uni = np.empty(0)

    def grow_logs(self, room: int) -> None:
        """Double each fleet-wide log with less than ``room`` entries free (a step's worst case;
        their used parts copied), and only those: the ITL log is sized for the whole run."""
        g = int(self.G[sk.G_GAPS])
        while g + room > len(self.gap_s):
            self.gap_idx = doubled(self.gap_idx, g)
            self.gap_s = doubled(self.gap_s, g)
        used = int(self.G[sk.G_STEPS]) * sk.ROW
        while used + sk.ROW > len(self.steps):
            self.steps = doubled(self.steps, used)

    def refill(self) -> None:
        """More uniforms after the unused ones (``_Uniforms.refill_keep``: sequence unchanged)."""
        pos = int(self.G[sk.G_UNI])
        self.uni = np.concatenate((self.uni[pos:], self.rng.random(_UNIFORM_CHUNK)))
        self.G[sk.G_UNI] = 0

    def store(self, requests: Sequence[Request]) -> None:
        """Write every request's final state back into its object (the records read those)."""
        ints = self.ints.tolist()
        floats = self.floats.tolist()
        for req, iv, fv in zip(requests, ints, floats, strict=True):
            (_, _, req.computed, req.generated, req.blocks, req.num_bursts, req.num_spec_steps,
             req.num_drafts, req.accepted_tokens, proposes, req.status, outcome, req.preemptions,
             ever, _) = iv
            req.proposes = bool(proposes)
            req.ever_scheduled = bool(ever)
            req.outcome = _OUTCOMES.get(outcome)  # type: ignore[assignment]
            req.last_burst_s, req.max_pause_s, _, first, sched, fin = fv
            req.first_token_s = None if first != first else first
            req.scheduled_s = None if sched != sched else sched
            req.finish_s = None if fin != fin else fin

    def record_columns(self) -> dict[str, np.ndarray]:
        """Every request's final state as the columns of its record (``sim.results.records``),
        NaN for a time not reached: what ``store`` would write into the objects, without them
        (a dashboard redraw makes 16 runs; writing ~20 fields per request back cost ~3 ms each).
        A request not done when the run stopped is ``unfinished`` with no finish time."""
        ints, floats = self.ints, self.floats
        status = ints[:, sk.STATUS]
        ended = status == sk.DONE
        outcome = _OUTCOME_NAMES[ints[:, sk.OUTCOME]]
        outcome[~ended] = "unfinished"
        bursts = ints[:, sk.BURSTS]
        return {
            "id": self.ids,
            "scheduled_s": floats[:, sk.SCHEDULED].copy(),
            "first_token_s": floats[:, sk.FIRST_TOKEN].copy(),
            "finish_s": np.where(ended, floats[:, sk.FINISH], np.nan),
            "prompt_tokens": ints[:, sk.PROMPT].copy(),
            "output_tokens": ints[:, sk.OUTPUT].copy(),
            "generated_tokens": ints[:, sk.GENERATED].copy(),
            "num_bursts": bursts.copy(),
            "max_pause_s": np.where(bursts > 0, floats[:, sk.MAX_PAUSE], np.nan),
            "preemptions": ints[:, sk.PREEMPT].copy(),
            "outcome": outcome,
            "num_drafts": ints[:, sk.DRAFTS].copy(),
            "accepted_tokens": ints[:, sk.ACCEPTED].copy(),
            "num_spec_steps": ints[:, sk.SPEC].copy(),
        }

    def step_log(self) -> array:
        return array("d", self.steps[: int(self.G[sk.G_STEPS]) * sk.ROW].tobytes())

    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        g = int(self.G[sk.G_GAPS])
        return self.gap_idx[:g].copy(), self.gap_s[:g].copy()  # numpy: one copy, no Python array


def doubled(a: np.ndarray, used: int) -> np.ndarray:
    """A copy of ``a`` twice as long, its first ``used`` values kept."""
    out = np.empty(2 * len(a), a.dtype)
    out[:used] = a[:used]
    return out
