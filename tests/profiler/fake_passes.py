"""A fake device for the profile run's timing logic: every pass takes a known, deterministic
time (a function of its cell), so budget, grid checks and resume are tested without a model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from profiler.grids.budget import CostModel
from profiler.grids.timing_grids import Measured, Point, Task, TimingGrids

StepTime = Callable[[int, int, int], float]


def linear_cost(per_pass: float = 0.01, probe_s: float = 1.0) -> CostModel:
    """A cost model where every pass costs about ``per_pass`` seconds."""
    return CostModel(t0=per_pass, per_row=per_pass / 100, per_row_ctx=0.0, per_prefill_token=per_pass / 100,
                     draft_step={}, lookup_s=per_pass / 10, probe_s=probe_s)


def smooth(b: int, s: int, c: int) -> float:
    """Linear in rows and rows × context: interpolation is exact everywhere."""
    return 0.010 + 0.002 * (b * s - 1) + 1e-6 * b * s * c


def kinked(at: int, factor: float = 1.5) -> StepTime:
    """``smooth`` but batch ``at`` costs ``factor`` times as much (a CPU kernel switch)."""
    def f(b: int, s: int, c: int) -> float:
        return smooth(b, s, c) * (factor if b == at else 1.0)
    return f


class FakePasses:
    """``Passes`` whose cells take ``step(b, s, c)`` seconds; counts every cell it measures."""

    def __init__(self, target: Any = None, proposers: Sequence[Any] = (), *, seed: int = 0,
                 free_bytes: int | None = None, step: StepTime = smooth, cost: CostModel | None = None):
        self.step, self.cost = step, cost or linear_cost()
        self.measured: list[Point] = []
        self.probed = 0

    def value(self, pt: Point) -> float:
        d = pt.as_dict()
        if pt.quantity == "target_forward":
            return self.step(d["batch"], d["tokens_per_seq"], d["context"])
        if pt.quantity == "target_prefill":
            return 1e-4 * d["tokens"] + 1e-6 * d["context"]
        return 1e-3 * d.get("k", 1) * d["batch"]

    def _task(self, label: str, pts: Sequence[Point]) -> Task:
        def run(todo: Sequence[Point]) -> Any:
            for p in todo:
                self.measured.append(p)
                v = self.value(p)
                yield Measured(p, v, v * 0.98, v * 1.02, 3)
        return Task(label, tuple(pts), run)

    proposer_names: list[str] = []

    def tasks(self, grids: TimingGrids) -> list[Task]:
        from profiler.grids.budget import grid_points

        return [self._task("fake grid", grid_points(grids, self.proposer_names))]

    def cells(self, grids: TimingGrids, points: Sequence[Point]) -> list[Task]:
        return [self._task("fake check", points)]

    def probe(self, grids: TimingGrids) -> CostModel:
        self.probed += 1
        return self.cost


def factory(step: StepTime = smooth, cost: CostModel | None = None, names: Sequence[str] = (),
            made: list[FakePasses] | None = None) -> Callable[..., FakePasses]:
    """``run_profile(passes=...)``: builds a FakePasses for the run's proposers."""
    def make(target: Any, proposers: Sequence[Any], **kw: Any) -> FakePasses:
        fp = FakePasses(target, proposers, step=step, cost=cost, **kw)
        fp.proposer_names = [p.name for p in proposers]
        if made is not None:
            made.append(fp)
        return fp
    return make
