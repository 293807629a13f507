"""Default grids measure every verification width, so V(k) is never interpolated across k."""

from __future__ import annotations

import pytest

from profiler.grids.timing_grids import default_grids
from profiler.passes.models import load_model


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("k_max", [1, 4, 6])
def test_every_verification_width_is_on_the_grid(quick: bool, k_max: int) -> None:
    target = load_model("config:tiny-llama", device="cpu")
    grids = default_grids(target, quick=quick, k_max=k_max)
    assert grids.tokens_per_seq == tuple(range(1, k_max + 2))
