"""The scenario result's steps frame is every run's steps joined in one chunk, and the runs let
go of theirs (issue 39 item 5: the steps held once, not twice, at the end of a scenario)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from sim.results.records import ITL_SCHEMA, REQUEST_SCHEMA, STEP_SCHEMA
from sim.results.runner import _joined_steps
from sim.results.simulation import RunResult


def _steps(rng: np.random.Generator, n: int, cand: str, seed: int) -> pl.DataFrame:
    data: dict[str, object] = {"candidate": [cand] * n, "seed": [seed] * n}
    for name, dtype in STEP_SCHEMA.items():
        if name not in data:
            data[name] = rng.random(n) if dtype == pl.Float64 else rng.integers(0, 1000, n)
    return pl.DataFrame(data, schema=STEP_SCHEMA)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_joined_steps_are_one_concat_and_runs_keep_none(heights, seed) -> None:
    rng = np.random.default_rng(seed)
    frames = [_steps(rng, n, f"c{i % 2}", i) for i, n in enumerate(heights)]
    runs = [(RunResult(f"c{i % 2}", i, pl.DataFrame(schema=REQUEST_SCHEMA), f, pl.DataFrame(schema=ITL_SCHEMA),
                       pl.DataFrame()), b"part") for i, f in enumerate(frames)]
    want = pl.concat(frames, how="vertical", rechunk=True)
    got = _joined_steps(runs)
    assert_frame_equal(got, want)
    assert got.n_chunks("all") == [1] * got.width
    assert all(r.steps.height == 0 and r.steps.schema == STEP_SCHEMA for r, _ in runs)
    assert [p for _, p in runs] == [b"part"] * len(heights)
