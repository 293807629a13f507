"""The engine's host work per scheduled request, from published measurements only
(profiler/imported/aic_step_terms.py, issue 37 item 1).

Each figure must be the published one: the per-request line reproduces every point the PRs
wrote (vLLM PR 46112's update_from_output at batch 128 and 256, PR 57888's parse_output at
batch 4, 16, 64, 256) within the points' own scatter, and the entry says where it is from.
"""

from __future__ import annotations

import pytest

from profiler.imported.aic_step_terms import (
    PARSE_OUTPUT_US,
    UPDATE_FROM_OUTPUT_US,
    host_rows_entry,
    host_rows_values,
)
from sim.model.kernels import price_kernels as pk


def _prov(note: str) -> dict:
    return {"method": "assumed", "notes": note}


def test_host_rows_reproduce_every_published_point() -> None:
    row, fixed, spec_row = host_rows_values()
    for batch, us in UPDATE_FROM_OUTPUT_US:  # PR 46112: 0.142 ms at 128, 0.287 ms at 256
        assert row * batch * 1e6 == pytest.approx(us, rel=0.03)
    for batch, us in PARSE_OUTPUT_US:  # PR 57888: 17.00, 21.70, 34.18, 97.17 µs
        assert (fixed + spec_row * batch) * 1e6 == pytest.approx(us, rel=0.10)
    assert UPDATE_FROM_OUTPUT_US == ((128, 142.0), (256, 287.0))
    assert PARSE_OUTPUT_US == ((4, 17.00), (16, 21.70), (64, 34.18), (256, 97.17))


def test_host_rows_are_published_with_their_citation_for_vllm_only() -> None:
    entry = host_rows_entry("vllm", _prov)
    assert entry is not None
    prov = entry["provenance"]
    assert prov["method"] == "published"
    assert "46112" in prov["citation"] and "57888" in prov["citation"]
    assert "update_from_output" in prov["notes"] and "parse_output" in prov["notes"]
    assert (entry["seconds_per_row"], entry["spec_seconds"], entry["spec_seconds_per_row"]) == host_rows_values()
    assert host_rows_entry("sglang", _prov) is None and host_rows_entry("trtllm", _prov) is None


@pytest.mark.parametrize(("rows", "verifies"), [(1, False), (1, True), (32, True), (128, False), (128, True)])
def test_a_verifying_step_pays_parse_output_on_top_of_the_scheduler_update(rows: int, verifies: bool) -> None:
    row, fixed, spec_row = host_rows_values()
    tm = pk.timer_constants(pk.KIND_FUSED, False, 1.0, 1.0, 0.0, host_rows=(row, fixed, spec_row))
    want = row * rows + ((fixed + spec_row * rows) if verifies else 0.0)
    assert pk.host_seconds(tm, rows, 0, verifies) == pytest.approx(want)
