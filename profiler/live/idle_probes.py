"""Reference passes timed in a real run's idle gaps: the machine's speed *during* the run.

Why: on a shared VM the speed moves by 5–30 % within minutes, and full drift checks (a dozen
cells, ~15 s) can only bracket a run; a 140 s run can slow down in its middle and neither check
sees it. When the serving loop has nothing to do and the next arrival is far enough away
(``profiler/passes/serving.py: serve(idle_work=…)``), this times one pass of one profile cell (after
an untimed warm-up pass), so no request ever waits for it. The ratios (measured / profile) become knots of the run's
``sim.model.machine_speed.SpeedTimeline``. Prefill cells take one probe in three when the gap allows:
prefill drifts apart from decode on a CPU, and TTFT leans on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from profiler.grids.timing import ReferencePasses
from sim.fidelity.drift import DriftCell
from sim.model.machine_speed import SpeedSample


@dataclass(frozen=True)
class ProbeRecord:
    t_s: float
    cell: int
    seconds: float


class IdleProbes:
    """``serve(idle_work=probes)``: one reference pass per call when it surely fits the gap."""

    def __init__(self, passes: ReferencePasses, cells: Sequence[DriftCell], *, min_interval_s: float = 1.0,
                 safety: float = 2.0, margin_s: float = 0.1) -> None:
        if len(cells) != len(passes.points) or not cells:
            raise ValueError("IdleProbes: one cell per reference pass, at least one")
        self.passes = passes
        self.cells = tuple(cells)
        self.min_interval_s = min_interval_s
        self.safety = safety
        self.margin_s = margin_s
        self.slow = 1.0
        """The machine's last known now/profile ratio: a probe's expected cost is its passes
        (warm-up and timed) × the profile time × this × ``safety`` + ``margin_s``, and it runs
        only if that is under the gap."""
        self._kinds = {
            kind: [i for i, c in enumerate(self.cells) if c.kind == kind] for kind in ("decode", "prefill")
        }
        self._turn = {"decode": 0, "prefill": 0}
        self.records: list[ProbeRecord] = []
        self._last = -math.inf

    def start_run(self, slow: float) -> None:
        """Forget the last run's records; ``slow`` = the check just before this run."""
        self.records = []
        self._last = -math.inf
        self.slow = max(1.0, float(slow))

    def _fits(self, i: int, until_s: float) -> bool:
        return (1 + self.passes.WARMUP) * self.cells[i].profile_s * self.slow * self.safety + self.margin_s < until_s

    def __call__(self, now: float, until_next_arrival_s: float) -> bool:
        if now - self._last < self.min_interval_s:
            return False
        n_pre = sum(self.cells[r.cell].kind == "prefill" for r in self.records)
        order = ["prefill", "decode"] if 3 * n_pre < len(self.records) else ["decode", "prefill"]
        for kind in order:
            idx = self._kinds[kind]
            for j in range(len(idx)):
                i = idx[(self._turn[kind] + j) % len(idx)]
                if self._fits(i, until_next_arrival_s):
                    self.records.append(ProbeRecord(now, i, self.passes.time(i)))
                    self._turn[kind] = (self._turn[kind] + j + 1) % len(idx)
                    self._last = now
                    return True
        return False

    def samples(self) -> list[SpeedSample]:
        return [SpeedSample(r.t_s, self.cells[r.cell].kind, r.seconds / self.cells[r.cell].profile_s)
                for r in self.records]

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "t_s": [r.t_s for r in self.records],
                "cell": [self.cells[r.cell].label for r in self.records],
                "kind": [self.cells[r.cell].kind for r in self.records],
                "seconds": [r.seconds for r in self.records],
                "profile_s": [self.cells[r.cell].profile_s for r in self.records],
            },
            schema={"t_s": pl.Float64, "cell": pl.String, "kind": pl.String, "seconds": pl.Float64,
                    "profile_s": pl.Float64},
        ).with_columns((pl.col("seconds") / pl.col("profile_s")).alias("ratio"))


__all__ = ["IdleProbes", "ProbeRecord"]
