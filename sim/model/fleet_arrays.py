"""The requests of one simulated run as the planner's arrays, and the logs the kernels append to.

One row per request (``kernel_state.Requests``, columns named there). At the end, ``store`` writes
the final state back into the ``Request`` objects, or ``record_columns`` hands it to the records
as columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels.kernel_state import doubled
from sim.model.step_plan import Request

UNIFORM_CHUNK = 4096
"""Uniforms drawn at a time (the sequence does not depend on it)."""
_OUTCOME_NAMES = np.array(ks.OUTCOME_NAMES, dtype=object)


class FleetArrays:
    """The run's requests as arrays (``rq``) and the logs the kernels append to (``lg``)."""

    def __init__(self, requests: Sequence[Request], k_max: int, rng: np.random.Generator,
                 slack: int = 0, replay: bool = False) -> None:
        n = len(requests)
        rq = ks.new_requests(n, k_max)
        rq.ints[:, ks.PROMPT] = [r.prompt_tokens for r in requests]
        rq.ints[:, ks.OUTPUT] = [r.output_tokens for r in requests]
        rq.ints[:, ks.PROPOSES] = [r.proposes for r in requests]
        rq.floats[:, ks.PROPOSAL] = [r.proposal for r in requests]
        if k_max:
            for i, r in enumerate(requests):
                if r.negrates is not None:
                    rq.negrates[i, :k_max] = r.negrates[:k_max]
        if replay:
            rq = rq._replace(replay=_replay_values(requests, rq.ints))
        self.prefix_blocks = 0
        """Distinct prefix-block ids of the run (the size of each replica's prefix cache)."""
        if any(r.prefix is not None for r in requests):
            pfx, self.prefix_blocks = _prefix_values(requests, rq.ints)
            rq = rq._replace(pfx=pfx)
        self.rq = rq
        self.ids = np.array([r.id for r in requests], dtype=np.int64)
        # every ITL sample is a burst after a request's first, so the output tokens bound them
        # (``slack``: the room a step asks for beyond what it uses): sized once, untouched pages
        # costing nothing, instead of doubled a dozen times on a GPU hour
        gaps = max(1 << 16, int(rq.ints[:, ks.OUTPUT].sum()) + slack)
        self.lg = ks.new_logs(gaps, max(4096, 2 * n))
        self.rng = rng

    def grow_logs(self, room: int) -> None:
        """Double each fleet-wide log with less than ``room`` entries free (a step's worst case;
        their used parts copied), and only those: the ITL log is sized for the whole run."""
        lg = self.lg
        g = int(lg.G[ks.G_GAPS])
        gap_idx, gap_s, steps = lg.gap_idx, lg.gap_s, lg.steps
        while g + room > len(gap_s):
            gap_idx = doubled(gap_idx, g)
            gap_s = doubled(gap_s, g)
        used = int(lg.G[ks.G_STEPS]) * ks.ROW
        while used + ks.ROW > len(steps):
            steps = doubled(steps, used)
        self.lg = lg._replace(gap_idx=gap_idx, gap_s=gap_s, steps=steps)

    def refill(self) -> None:
        """More uniforms after the unused ones (sequence unchanged)."""
        lg = self.lg
        pos = int(lg.G[ks.G_UNI])
        self.lg = lg._replace(uni=np.concatenate((lg.uni[pos:], self.rng.random(UNIFORM_CHUNK))))
        lg.G[ks.G_UNI] = 0

    def store(self, requests: Sequence[Request]) -> None:
        """Write every request's final state back into its object (the records read those)."""
        store_rows(self.rq, range(len(requests)), requests)

    def record_columns(self) -> dict[str, np.ndarray]:
        """Every request's final state as the columns of its record (``sim.results.records``),
        NaN for a time not reached: what ``store`` would write into the objects, without them
        (a dashboard redraw makes 16 runs; writing ~20 fields per request back cost ~3 ms each).
        A request not done when the run stopped is ``unfinished`` with no finish time."""
        ints, floats = self.rq.ints, self.rq.floats
        ended = ints[:, ks.STATUS] == ks.DONE
        outcome = _OUTCOME_NAMES[ints[:, ks.OUTCOME]]
        outcome[~ended] = "unfinished"
        bursts = ints[:, ks.BURSTS]
        return {
            "id": self.ids,
            "scheduled_s": floats[:, ks.SCHEDULED].copy(),
            "first_token_s": floats[:, ks.FIRST_TOKEN].copy(),
            "finish_s": np.where(ended, floats[:, ks.FINISH], np.nan),
            "prompt_tokens": ints[:, ks.PROMPT].copy(),
            "output_tokens": ints[:, ks.OUTPUT].copy(),
            "generated_tokens": ints[:, ks.GENERATED].copy(),
            "num_bursts": bursts.copy(),
            "max_pause_s": np.where(bursts > 0, floats[:, ks.MAX_PAUSE], np.nan),
            "preemptions": ints[:, ks.PREEMPT].copy(),
            "outcome": outcome,
            "num_drafts": ints[:, ks.DRAFTS].copy(),
            "accepted_tokens": ints[:, ks.ACCEPTED].copy(),
            "num_spec_steps": ints[:, ks.SPEC].copy(),
            "prefix_hit_tokens": ints[:, ks.PFX_HIT].copy(),
            "too_long": ints[:, ks.OUTCOME] == ks.TOO_LONG,
        }

    def step_log(self) -> np.ndarray:
        """The steps logged, flat (``ks.ROW`` values a step), as a view of the log: no copy."""
        return self.lg.steps[: int(self.lg.G[ks.G_STEPS]) * ks.ROW]

    def release_logs(self) -> None:
        """Let go of the logs (the run is over; what was read of them holds its own views)."""
        self.lg = ks.new_logs(0, 0)

    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """The ITL samples logged, as views of the logs (the run is over: nothing writes them
        again; a copy was ~70 MB at its peak on a GPU hour, and the logs' unused tail, never
        touched, holds no memory)."""
        g = int(self.lg.G[ks.G_GAPS])
        return self.lg.gap_idx[:g], self.lg.gap_s[:g]


def store_rows(rq: ks.Requests, rows, requests) -> None:
    """Write the state of ``rows`` into their ``Request`` objects (``requests``, one per row)."""
    ints = rq.ints[rows].tolist() if not isinstance(rows, range) else rq.ints.tolist()
    floats = rq.floats[rows].tolist() if not isinstance(rows, range) else rq.floats.tolist()
    for req, iv, fv in zip(requests, ints, floats, strict=True):
        req.computed = iv[ks.COMPUTED]
        req.generated = iv[ks.GENERATED]
        req.blocks = iv[ks.BLOCKS]
        req.num_bursts = iv[ks.BURSTS]
        req.num_spec_steps = iv[ks.SPEC]
        req.num_drafts = iv[ks.DRAFTS]
        req.accepted_tokens = iv[ks.ACCEPTED]
        req.proposes = bool(iv[ks.PROPOSES])
        req.status = iv[ks.STATUS]
        req.outcome = ks.OUTCOME_NAMES[iv[ks.OUTCOME]]  # type: ignore[assignment]
        req.too_long = iv[ks.OUTCOME] == ks.TOO_LONG
        req.preemptions = iv[ks.PREEMPT]
        req.ever_scheduled = bool(iv[ks.EVER])
        req.replay_pos = iv[ks.REPLAY_POS]
        req.prefix_hit_tokens = iv[ks.PFX_HIT]
        req.last_burst_s, req.max_pause_s, _, first, sched, fin = fv
        req.first_token_s = None if first != first else first
        req.scheduled_s = None if sched != sched else sched
        req.finish_s = None if fin != fin else fin


def _replay_values(requests: Sequence[Request], ints: np.ndarray) -> np.ndarray:
    """Every replaying request's traced values, flat; its offset, length and layout in ``ints``."""
    flat: list[int] = []
    for i, r in enumerate(requests):
        t = r.replay
        if t is None:
            continue
        ints[i, ks.REPLAY_OFF] = len(flat)
        ints[i, ks.REPLAY_LEN] = len(t.values)
        ints[i, ks.REPLAY_STEPS] = t.layout != "positions"
        ints[i, ks.REPLAY_POS] = r.replay_pos
        flat.extend(t.values)
    return np.array(flat or [0], np.int64)


def _prefix_values(requests: Sequence[Request], ints: np.ndarray) -> tuple[np.ndarray, int]:
    """Every request's prefix-block ids, flat (its offset and count in ``ints``), and how many
    distinct ids there are (ids are dense: 0..n-1)."""
    parts = [np.zeros(0, np.int64) if r.prefix is None else np.asarray(r.prefix, np.int64)
             for r in requests]
    lens = np.array([len(p) for p in parts], np.int64)
    ints[:, ks.PFX_LEN] = lens
    ints[:, ks.PFX_OFF] = np.cumsum(lens) - lens
    flat = np.concatenate(parts) if lens.sum() else np.zeros(1, np.int64)
    return flat, int(flat.max()) + 1 if lens.sum() else 0
