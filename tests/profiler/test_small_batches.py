"""Batch sizes 1–4 are measured by every grid, quick or full, and no budget cut drops them; the
profile records which batch sizes were measured, which the grid checks added (refined), and so
which are interpolated (issue 41: a quick grid of batch 1 and 4 priced batch 2 and 3 up to
1.54× too cheap)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.grids.budget import AcceptancePlan, fit_budget
from profiler.grids.profile_request import ProfileRequest, ProposerRequest
from profiler.grids.timing_grids import SMALL_BATCHES, default_grids
from profiler.passes.models import load_model
from profiler.run import run_profile
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.contracts.profile_timing import origin_of
from tests.profiler.fake_passes import factory, linear_cost


@pytest.fixture(scope="module")
def tiny():
    return load_model("config:tiny-llama", device="cpu")


def _on(target, device: str):
    """The same model as if it sat on ``device`` (default_grids reads only the device type and config)."""
    return SimpleNamespace(config=target.config, device=torch.device(device))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("quick", [True, False])
def test_every_grid_measures_batch_sizes_one_to_four(tiny, device: str, quick: bool):
    grids = default_grids(_on(tiny, device), quick=quick, k_max=6)
    assert set(SMALL_BATCHES) <= set(grids.batch)
    assert SMALL_BATCHES == (1, 2, 3, 4)


@settings(max_examples=60, deadline=None)
@given(per_pass=st.floats(1e-3, 2.0), budget=st.floats(5, 5000), quick=st.booleans())
def test_no_budget_cut_drops_a_small_batch(tiny, per_pass: float, budget: float, quick: bool):
    grids = default_grids(tiny, quick=quick, k_max=6)
    acc = AcceptancePlan(requests=30, max_new_tokens=24, prompts_per_segment=1, prompt_tokens=100,
                         proposers=("ngram",), segments=(1,) * 30, temperatures=1)
    try:
        plan = fit_budget(grids, ["ngram"], linear_cost(per_pass), rounds=1, acceptance=acc, budget_s=budget)
    except SpecplanError:
        return  # refused in one line: nothing measured, nothing interpolated
    assert set(SMALL_BATCHES) <= set(plan.grids.batch)


def test_a_quick_run_records_batch_two_and_three_as_measured(tiny, tmp_path: Path):
    out = tmp_path / "quick.json"
    req = ProfileRequest(target="config:tiny-llama", out=out, device="cpu", quick=True, progress=False,
                         proposers=(ProposerRequest.parse("ngram"),), measure_acceptance=False, command="test")
    profile = run_profile(req, passes=factory())
    origin = profile["timing"]["batch_origin"]
    assert origin == {"measured": [1, 2, 3, 4], "refined": []}
    assert profile["timing"]["target_forward"]["axes"]["batch"] == [1, 2, 3, 4]
    timing = load_profile(out).timing
    assert timing.batch_origin is not None
    axis = timing.target_forward.axes[0]
    assert [origin_of(b, axis, timing.batch_origin) for b in (2, 3, 5)] == ["measured", "measured", "extrapolated"]


@settings(max_examples=80, deadline=None)
@given(axis=st.lists(st.integers(1, 64), min_size=1, max_size=8, unique=True).map(sorted),
       refined_share=st.floats(0, 1), b=st.integers(1, 80))
def test_a_batch_size_is_measured_refined_interpolated_or_extrapolated_by_where_it_sits(
        axis: list[int], refined_share: float, b: int):
    refined = tuple(axis[: int(len(axis) * refined_share)])
    from sim.contracts.profile_timing import BatchOrigin

    origin = BatchOrigin(measured=tuple(x for x in axis if x not in refined), refined=refined)
    got = origin_of(b, tuple(float(x) for x in axis), origin)
    if b in refined:
        assert got == "refined"
    elif b in axis:
        assert got == "measured"
    elif axis[0] < b < axis[-1]:
        assert got == "interpolated"
    else:
        assert got == "extrapolated"


def test_a_batch_origin_off_the_grid_is_one_line_naming_the_field(tmp_path: Path):
    src = json.loads(Path("profiles/smollm2-135m-cpu.json").read_text())
    src["timing"]["batch_origin"] = {"measured": [1, 2], "refined": [9]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(src))
    with pytest.raises(SpecplanError) as exc:
        load_profile(bad)
    msg = str(exc.value)
    assert "timing.batch_origin.refined" in msg and "batch 9 is not on target_forward's batch axis" in msg
    assert "\n" not in msg


def test_a_profile_without_a_batch_origin_still_loads(tmp_path: Path):
    assert load_profile(Path("profiles/smollm2-135m-cpu.json")).timing.batch_origin is None
