"""Grid checks measure where step time is not smooth, and only there (a fake clock, no model)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.grids.grid_refine import SCAN_ALL, TOLERANCE, refine
from profiler.grids.timing_grids import Measured, Point, TimingGrids
from tests.profiler.fake_passes import FakePasses, kinked


def grids(batch: Sequence[int] = (1, 4), context: Sequence[int] = (64, 512)) -> TimingGrids:
    return TimingGrids(batch=tuple(batch), tokens_per_seq=(1, 2, 3, 4), context=tuple(context), prefill_tokens=(16,),
                       prefill_context=(0,), draft_batch=(1,), k_max=3, draft_context=(64,), overhead_batch=(1,),
                       overhead_k=(1,), overhead_context=64)


def measure_with(fake: FakePasses):
    def measure(probes: Sequence[Point], ends: Sequence[Point]) -> dict[Point, Measured]:
        return {m.point: m for task in fake.cells(grids(), [*probes, *ends]) for m in task.run(task.points)}
    return measure


@settings(max_examples=60, deadline=None)
@given(t0=st.floats(1e-4, 1.0), per_row=st.floats(0, 0.1), per_ctx=st.floats(0, 1e-4),
       top=st.integers(3, 64), cmax=st.integers(128, 8192))
def test_where_step_time_is_linear_nothing_is_added(t0: float, per_row: float, per_ctx: float, top: int, cmax: int):
    fake = FakePasses(step=lambda b, s, c: t0 + per_row * b * s + per_ctx * b * s * c)
    g = grids(batch=(1, top), context=(64, cmax))
    out, checks = refine(g, measure_with(fake))
    assert out == g
    assert checks and all(abs(c.error) <= 1e-9 for c in checks)


@settings(max_examples=60, deadline=None)
@given(top=st.integers(3, 2 + SCAN_ALL), data=st.data(), factor=st.floats(1.0 + 2 * TOLERANCE, 3.0))
def test_a_kink_inside_a_short_gap_is_measured(top: int, data: st.DataObject, factor: float):
    at = data.draw(st.integers(2, top - 1))
    fake = FakePasses(step=kinked(at, factor))
    out, checks = refine(grids(batch=(1, top)), measure_with(fake), axes=("batch",))
    assert at in out.batch
    added = set(out.batch) - {1, top}
    # every value added is one whose check disagreed with the interpolation beyond the tolerance
    assert added == {c.value for c in checks if c.added}
    assert all(abs(c.error) > TOLERANCE for c in checks if c.added)


def test_a_kink_in_the_middle_of_a_wide_gap_is_found_by_bisection():
    fake = FakePasses(step=kinked(32, 1.5))
    out, _ = refine(grids(batch=(1, 64)), measure_with(fake), axes=("batch",))
    assert 32 in out.batch


def test_a_kink_within_tolerance_is_interpolated():
    fake = FakePasses(step=kinked(2, 1.0 + TOLERANCE / 2))
    out, checks = refine(grids(batch=(1, 4)), measure_with(fake), axes=("batch",))
    assert out.batch == (1, 4) and len(checks) == 2 and not any(c.added for c in checks)


def test_a_row_over_the_budget_is_not_added_and_says_so():
    fake = FakePasses(step=kinked(2, 2.0))
    allowed = {"n": 1}  # the probes fit, the row after them does not

    def afford(points: Sequence[Point], row: bool) -> bool:
        allowed["n"] -= 1
        return allowed["n"] >= 0

    out, checks = refine(grids(batch=(1, 4)), measure_with(fake), afford=afford, axes=("batch",))
    assert out.batch == (1, 4)
    assert checks[0].value == 2 and not checks[0].added and "budget" in checks[0].line()
