"""The timing phase of a profile run: the probe that prices it, the grid measured point by point
(checkpointed), the grid checks that add values where step time is not smooth.

``Passes`` is what measures: ``RealPasses`` runs real forward passes (``profiler.grids.timing``); a
test gives a fake one with a known step-time function, so the run's logic (budget, checks,
resume) is tested without a model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from profiler.grids.budget import CostModel, Plan, cell_seconds, fit_cost_model, grid_points
from profiler.grids.grid_refine import TOLERANCE, Check, refine
from profiler.grids.timing_grids import (
    DraftRuntime,
    Measured,
    Point,
    Task,
    TimingGrids,
    combine_rounds,
    point,
)
from profiler.run_progress import RunProgress


class Passes(Protocol):
    def tasks(self, grids: TimingGrids) -> list[Task]:
        """Every timing task of the grid, in run order."""

    def cells(self, grids: TimingGrids, points: Sequence[Point]) -> list[Task]:
        """Tasks measuring just these target_forward points (grid checks)."""

    def probe(self, grids: TimingGrids) -> CostModel:
        """A few seconds of real passes, fitted to a cost model."""


class RealPasses:
    """Real passes of a loaded target and its proposers (``profiler.grids.timing``)."""

    def __init__(self, target: Any, proposers: Sequence[DraftRuntime], *, seed: int, free_bytes: int | None):
        self.target, self.proposers, self.seed, self.free_bytes = target, list(proposers), seed, free_bytes

    def tasks(self, grids: TimingGrids) -> list[Task]:
        from profiler.grids.timing import plan_tasks

        return plan_tasks(self.target, self.proposers, grids, seed=self.seed, free_bytes=self.free_bytes)

    def cells(self, grids: TimingGrids, points: Sequence[Point]) -> list[Task]:
        from profiler.grids.grid_passes import PassRunner

        runner = PassRunner(self.target, grids, self.seed, self.free_bytes)
        groups: dict[tuple[int, int], list[Point]] = {}
        for pt in points:
            d = pt.as_dict()
            groups.setdefault((d["batch"], d["context"]), []).append(pt)
        return [Task(f"grid check batch={b} context={c}", tuple(pts),
                     lambda todo, b=b, c=c: runner.forward_passes(todo, b, c)) for (b, c), pts in groups.items()]

    def probe(self, grids: TimingGrids) -> CostModel:
        """Five kinds of pass, warm-up 1 and 2 repeats each: one decode row, the most rows, the
        longest context, the longest prefill, and one step of each model proposer."""
        import torch

        from profiler.grids.grid_passes import PassRunner
        from profiler.grids.timing import _cell_grids

        t0 = time.perf_counter()
        runner = PassRunner(self.target, _cell_grids(1, 2), self.seed, self.free_bytes)
        g = grids
        c0, cmax, smax, bmax = g.context[0], g.context[-1], g.tokens_per_seq[-1], g.batch[-1]
        shapes = [(1, 1, c0), (bmax, smax, c0), (1, 1, cmax)]
        samples = []
        with torch.inference_mode():
            for b, s, c in shapes:
                m = next(iter(runner.forward_passes([point("target_forward", batch=b, tokens_per_seq=s, context=c)], b, c)))
                samples.append((b, s, c, _seconds(m)))
            n = g.prefill_tokens[-1]
            m = next(iter(runner.prefill_passes([point("target_prefill", tokens=n, context=0)], 0)))
            drafts = {}
            for p in self.proposers:
                if p.model is not None:
                    d = next(iter(runner._draft(p, [point(f"draft:{p.name}", batch=1, k=1, context=c0)], 1, c0)))
                    drafts[p.name] = _seconds(d)
        return fit_cost_model(samples, (n, _seconds(m)), drafts, time.perf_counter() - t0)


def _seconds(m: Measured) -> float:
    """A probe that hit a limit (out of memory) prices as unaffordable, not free."""
    return float(m.median) if m.median is not None else 3600.0


def round_key(pt: Point, fp: str, rnd: int) -> str:
    """Checkpoint key of a point in round ``rnd`` (round 0 keeps the plain key)."""
    return pt.key(fp) if rnd == 0 else f"{pt.key(fp)}@{rnd}"


class TimingPhase:
    """Measures the plan's grid over its rounds, with the grid checks after round 0.

    ``ckpt`` is the run's checkpoint (``add(key, value)``, ``records``, ``in``); ``on_point`` sees
    the count of points measured by this run after each one.
    """

    def __init__(self, passes: Passes, plan: Plan, cost: CostModel, proposers: Sequence[str], *, ckpt: Any,
                 fp: str, rounds: int, progress: RunProgress, on_point: Callable[[int], None] | None,
                 count: list[int], grid_checks: bool = True):
        self.passes, self.plan, self.cost, self.proposers = passes, plan, cost, list(proposers)
        self.ckpt, self.fp, self.rounds, self.progress, self.on_point = ckpt, fp, rounds, progress, on_point
        self.count = count
        self.grid_checks = grid_checks
        self.grids = plan.grids
        self._extra_s = 0.0

    def done_s(self) -> float:
        """Estimated seconds of the grid already in the checkpoint (a resumed run starts there)."""
        return sum(cell_seconds(p, self.grids, self.cost) for r in range(self.rounds)
                   for p in grid_points(self.grids, self.proposers) if round_key(p, self.fp, r) in self.ckpt)

    def _run(self, tasks: list[Task], rnd: int, label: str = "") -> None:
        for task in tasks:
            todo = [p for p in task.points if round_key(p, self.fp, rnd) not in self.ckpt]
            if not todo:
                continue
            self.progress.phase(task.label + label)
            for m in task.run(todo):
                self.ckpt.add(round_key(m.point, self.fp, rnd), m.to_json())
                self.progress.advance(cell_seconds(m.point, self.grids, self.cost))
                self.count[0] += 1
                if self.on_point is not None:
                    self.on_point(self.count[0])

    def _measure(self, probes: Sequence[Point], ends: Sequence[Point]) -> dict[Point, Measured]:
        """Probes become grid cells (round 0); their neighbours are timed again beside them and
        kept under their own keys (``#check``), so a resumed run decides the same way."""
        self._run(self.passes.cells(self.grids, probes), 0, " (grid check)")
        again = [p for p in ends if self._check_key(p) not in self.ckpt]
        for task in self.passes.cells(self.grids, again):
            self.progress.phase(task.label + " (grid check, neighbours again)")
            for m in task.run(task.points):
                self.ckpt.add(self._check_key(m.point), m.to_json())
                self.progress.advance(cell_seconds(m.point, self.grids, self.cost))
        got = {p: Measured.from_json(self.ckpt.records[k]) for p in probes if (k := round_key(p, self.fp, 0)) in self.ckpt}
        got.update((p, Measured.from_json(self.ckpt.records[k])) for p in ends if (k := self._check_key(p)) in self.ckpt)
        return got

    def _check_key(self, pt: Point) -> str:
        return f"{pt.key(self.fp)}#check"

    def _afford(self, points: Sequence[Point], row: bool) -> bool:
        """Points beyond the plan are measured only while the budget's slack lasts: a check's
        probes and re-timed neighbours once, an added row in every round."""
        if row:
            new, times = [p for p in points if round_key(p, self.fp, 0) not in self.ckpt], self.rounds
        else:
            new, times = [p for p in points if round_key(p, self.fp, 0) not in self.ckpt
                          and self._check_key(p) not in self.ckpt], 1
        extra = times * sum(cell_seconds(p, self.grids, self.cost) for p in new)
        slack = self.plan.refine_s
        if self._extra_s + extra > slack:
            return False
        self._extra_s += extra
        self.progress.grow(extra)
        return True

    def run(self) -> tuple[TimingGrids, list[Measured], list[Check]]:
        checks: list[Check] = []
        for r in range(self.rounds):
            label = f" (round {r + 1}/{self.rounds})" if self.rounds > 1 else ""
            self._run(self.passes.tasks(self.grids), r, label)
            if r == 0 and self.grid_checks:
                self.grids, checks = refine(self.grids, self._measure, afford=self._afford)
                self._run(self.passes.tasks(self.grids), 0, label)  # rows the checks added
        rounds = range(self.rounds)
        measured = [combine_rounds([Measured.from_json(self.ckpt.records[round_key(p, self.fp, r)]) for r in rounds])
                    for p in grid_points(self.grids, self.proposers)]
        return self.grids, measured, checks


def check_notes(checks: Sequence[Check], base: TimingGrids, final: TimingGrids) -> list[str]:
    """Provenance notes: what the grid checks compared and which values they added."""
    if not checks:
        return []
    added = [f"{a} {v}" for a in ("batch", "context") for v in getattr(final, a) if v not in getattr(base, a)]
    head = (f"grid checks (a value between two measured ones against the simulator's interpolation, "
            f"tolerance ±{TOLERANCE:.0%}): {len(checks)} probed, "
            + (f"added {', '.join(added)} (whole rows measured)" if added else "none added"))
    return [head, *[f"grid check: {c.line()}" for c in checks]]
