"""``timing.padded_batch``: a padded engine's batch edits, timed with the real loop's own code."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from profiler.grids import padded_batch  # noqa: E402
from profiler.passes.models import load_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return load_model("config:tiny-llama", device="cpu")


def test_grids_have_the_asked_axes_and_positive_times(tiny) -> None:
    got = padded_batch.measure_padded_batch(tiny, [1, 3], [8, 40], repeats=2)
    assert got["limits"] == []
    for name in ("join", "leave"):
        grid = got["section"][name]
        assert grid["axes"] == {"batch": [1, 3], "context": [8, 40]} and grid["repeats"] == 2
        cells = [v for row in grid["median"] for v in row]
        assert all(v is not None and math.isfinite(v) and v > 0 for v in cells)
        for lo, mid, hi in zip(*(sum(grid[q], []) for q in ("p10", "median", "p90")), strict=True):
            assert lo <= mid <= hi


def test_cells_over_the_kv_limit_are_null_with_a_reason(tiny, monkeypatch) -> None:
    cfg = tiny.model.config
    per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    monkeypatch.setattr(padded_batch, "CELL_KV_LIMIT", 3 * 8 * per_token)  # (b+1)·c·bytes: only b=1, c=8 fits
    got = padded_batch.measure_padded_batch(tiny, [1, 3], [8, 40], repeats=1)
    assert got["section"]["join"]["median"][0][0] is not None
    assert got["section"]["join"]["median"][1] == [None, None]
    reasons = {(lim["quantity"], lim["point"]["batch"], lim["point"]["context"]) for lim in got["limits"]}
    assert ("padded_batch.leave", 3, 40) in reasons and ("padded_batch.join", 1, 8) not in reasons
    monkeypatch.setattr(padded_batch, "CELL_KV_LIMIT", 1)
    with pytest.raises(ValueError, match="no cell could be measured"):
        padded_batch.measure_padded_batch(tiny, [1], [8], repeats=1)


def test_rounds_time_the_grid_again_and_count_every_pass(tiny) -> None:
    got = padded_batch.measure_padded_batch(tiny, [2], [16], repeats=2, rounds=3)
    grid = got["section"]["join"]
    assert grid["repeats"] == 6
    assert grid["p10"][0][0] <= grid["median"][0][0] <= grid["p90"][0][0]
    with pytest.raises(ValueError, match="rounds 0 >= 1"):
        padded_batch.measure_padded_batch(tiny, [2], [16], rounds=0)
