"""The rules of ``profiler.grids.timing_assembly`` on made-up cells (no torch): each grid nests its
axes in order and holds the measured median, p10 and p90 of that cell or null (not measured, NaN
or infinite), ``repeats`` counts every timed pass over all rounds, and every limit is listed under
the profile's name for its quantity (``proposers.NAME.draft``)."""

from __future__ import annotations

import itertools
import math

import pytest

from profiler.grids.timing_assembly import assemble_timing
from profiler.grids.timing_grids import Measured, TimingGrids, point

GRIDS = TimingGrids(batch=(1, 2), tokens_per_seq=(1, 3), context=(8, 24), prefill_tokens=(4, 12),
                    prefill_context=(0, 8), draft_batch=(1, 2), k_max=3, draft_context=(8,),
                    overhead_batch=(1,), overhead_k=(1, 3), overhead_context=8, warmup=1, repeats=2,
                    prefill_repeats=1)
AXES = {  # quantity → its axes, in the order the profile nests them (docs/profile-format.md)
    "target_forward": {"batch": GRIDS.batch, "tokens_per_seq": GRIDS.tokens_per_seq, "context": GRIDS.context},
    "target_prefill": {"tokens": GRIDS.prefill_tokens, "context": GRIDS.prefill_context},
    "draft:eagle": {"batch": GRIDS.draft_batch, "k": (1, 2, 3), "context": GRIDS.draft_context},
    "overhead:eagle": {"batch": GRIDS.overhead_batch, "k": GRIDS.overhead_k},
}
UNMEASURED = {("target_forward", (2, 3, 24)): "missing", ("target_prefill", (12, 0)): math.nan,
              ("draft:eagle", (2, 3, 8)): math.inf, ("target_forward", (1, 3, 8)): "out of memory"}


def value(quantity: str, coords: tuple[int, ...]) -> float:
    """A distinct time per cell, so a cell read from the wrong place shows."""
    return 1e-3 * (1 + list(AXES).index(quantity)) + sum(c * 10.0 ** -(4 + i) for i, c in enumerate(coords))


def measured() -> list[Measured]:
    out = []
    for q, axes in AXES.items():
        for coords in itertools.product(*axes.values()):
            odd = UNMEASURED.get((q, coords))
            pt = point(q, **dict(zip(axes, coords, strict=True)))
            if odd == "missing":
                continue
            if odd == "out of memory":
                out.append(Measured(pt, None, limit="out of memory"))
                continue
            v = value(q, coords) if odd is None else odd
            out.append(Measured(pt, v, 0.9 * v, 1.1 * v, GRIDS.repeats))
    return out


def at(grid: list, coords: tuple[int, ...], axes: dict) -> float | None:
    for c, vals in zip(coords, axes.values(), strict=True):
        grid = grid[list(vals).index(c)]
    return grid


@pytest.mark.parametrize("rounds", [1, 3])
def test_each_grid_holds_its_cells_measured_values_in_axis_order_or_null(rounds) -> None:
    sec = assemble_timing(GRIDS, ["eagle"], measured(), rounds=rounds)
    grids = {"target_forward": sec["target_forward"], "target_prefill": sec["target_prefill"],
             "draft:eagle": sec["proposers"]["eagle"]["draft"], "overhead:eagle": sec["proposers"]["eagle"]["overhead"]}
    for q, axes in AXES.items():
        g = grids[q]
        assert g["axes"] == {n: list(v) for n, v in axes.items()}
        assert g["repeats"] == (GRIDS.prefill_repeats if q == "target_prefill" else GRIDS.repeats) * rounds
        for coords in itertools.product(*axes.values()):
            for stat, share in (("median", 1.0), ("p10", 0.9), ("p90", 1.1)):
                got = at(g[stat], coords, axes)
                if (q, coords) in UNMEASURED:
                    assert got is None, (q, coords, stat)
                else:
                    assert got == pytest.approx(share * value(q, coords), rel=1e-12), (q, coords, stat)


def test_limits_name_the_profiles_quantity_and_the_cell() -> None:
    extra = Measured(point("draft:eagle", batch=1, k=2, context=8), None, limit="beyond the window")
    sec = assemble_timing(GRIDS, ["eagle"], [*measured(), extra])
    assert sec["limits"] == [
        {"quantity": "target_forward", "point": {"batch": 1, "tokens_per_seq": 3, "context": 8},
         "reason": "out of memory"},
        {"quantity": "proposers.eagle.draft", "point": {"batch": 1, "k": 2, "context": 8},
         "reason": "beyond the window"},
    ]
    assert assemble_timing(GRIDS, [], [])["limits"] == [] and assemble_timing(GRIDS, [], [])["proposers"] == {}
