"""The rules of ``profiler.estimates.estimate`` against independent statements of them: vLLM's tensor-
parallel divisibility rule, which grid points fit the context window (inclusive), when weights
fit a GPU (strictly under its memory) and which size the hint then offers, and that a calibrated
efficiency carries no step overhead of its own."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.estimates.estimate import (
    _check_fits,
    _grid_axes,
    calibrate,
    check_tensor_parallel,
    decode_time_batch1,
)
from profiler.estimates.gpu_specs import gpu_spec
from profiler.estimates.roofline import Efficiency
from sim.contracts.errors import SpecplanError
from tests.profiler.test_estimate import h100_8b

H100 = gpu_spec("H100")


def vllm_tp_ok(heads: int, kv: int, t: int) -> bool:
    """vLLM: tp divides the attention heads; KV heads divide by tp, or tp by them (replicated)."""
    if heads % t:
        return False
    return kv % t == 0 if kv >= t else t % kv == 0


@settings(max_examples=300, deadline=None)
@given(heads=st.sampled_from([8, 12, 14, 16, 24, 28, 32, 40, 64]), kv=st.sampled_from([1, 2, 4, 8, 16]),
       tp=st.integers(1, 70))
def test_tensor_parallel_size_follows_vllm_divisibility_rule(heads, kv, tp) -> None:
    arch = {"num_attention_heads": heads, "num_kv_heads": kv}
    if vllm_tp_ok(heads, kv, tp):
        check_tensor_parallel(arch, tp, "target", H100)
        return
    with pytest.raises(SpecplanError) as e:
        check_tensor_parallel(arch, tp, "target", H100)
    valid = [int(x) for x in re.search(r"valid: ([\d, ]+)", str(e.value)).group(1).split(", ")]
    assert valid == [t for t in range(1, heads + 1) if vllm_tp_ok(heads, kv, t)]


def test_tensor_parallel_needs_an_interconnect_figure() -> None:
    from dataclasses import replace
    arch = {"num_attention_heads": 32, "num_kv_heads": 8}
    check_tensor_parallel(arch, 1, "target", replace(H100, interconnect_bandwidth=0.0))
    with pytest.raises(SpecplanError, match="interconnect"):
        check_tensor_parallel(arch, 2, "target", replace(H100, interconnect_bandwidth=0.0))


@settings(max_examples=200, deadline=None)
@given(max_pos=st.integers(160, 300_000), k_max=st.integers(1, 8))
def test_grid_points_fit_the_context_window_inclusive(max_pos, k_max) -> None:
    ax = _grid_axes(max_pos, k_max)
    assert ax["prefill_tokens"] == tuple(t for t in (16, 64, 256, 1024, 2048, 4096, 8192, 16384) if t <= max_pos)
    assert ax["prefill_context"] == tuple(c for c in (0, 512, 2048, 8192, 32768) if c + 16 <= max_pos)
    assert all(c + k_max + 1 <= max_pos for c in ax["context"]) and ax["context"][0] == 128
    assert ax["tokens_per_seq"] == tuple(range(1, k_max + 2)) and ax["k"] == tuple(range(1, k_max + 1))
    assert ax["batch"][0] == 1 and ax["batch"][-1] == 1024


def test_grid_keeps_points_exactly_at_the_window() -> None:
    ax = _grid_axes(8192, 3)
    assert ax["prefill_tokens"][-1] == 8192 and ax["prefill_context"][-1] == 2048
    assert ax["context"][-1] == 4096 and _grid_axes(8192 + 4, 3)["context"][-1] == 8192
    assert _grid_axes(100, 4)["context"] == (50,)  # a window under 128: one context, half of it


def test_weights_fit_only_strictly_under_gpu_memory_and_the_hint_names_the_next_dividing_size() -> None:
    mem = H100.memory_bytes
    arch = {"num_attention_heads": 12}
    _check_fits("t", "bfloat16", mem - 2, 1, 1, H100, arch)  # one byte to spare
    with pytest.raises(SpecplanError, match="does not fit"):
        _check_fits("t", "bfloat16", mem - 1, 1, 1, H100, arch)  # exactly full
    with pytest.raises(SpecplanError, match=r"--tensor-parallel-size 3 or more"):
        _check_fits("t", "bfloat16", int(2.5 * mem), 1, 2, H100, arch)  # 4 would also fit; 3 is the first
    with pytest.raises(SpecplanError, match="a GPU with more memory"):
        _check_fits("t", "bfloat16", 20 * mem, 1, 1, H100, arch)


def test_calibrated_efficiency_adds_no_step_overhead_and_stays_in_range() -> None:
    _, prof = h100_8b(Efficiency(compute=0.45, bandwidth=0.6, step_overhead_s=0.0, source="test"))
    measured = copy.deepcopy(prof)
    measured["timing"]["provenance"]["method"] = "measured"
    measured["timing"]["provenance"]["device"]["name"] = "NVIDIA H100 80GB HBM3"
    eff = calibrate(measured, "m.json")
    assert eff.step_overhead_s == 0.0 and eff.draft_pass_overhead_s == 0.0
    assert 0 < eff.compute <= 1 and 0 < eff.bandwidth <= 1


def test_batch_one_decode_time_reads_the_first_cell_of_batch_1_one_token() -> None:
    _, prof = h100_8b()
    med = prof["timing"]["target_forward"]["median"]
    assert decode_time_batch1(prof) == med[0][0][0] and decode_time_batch1(prof, 2) == med[0][0][2]


def test_default_efficiency_adds_no_fixed_overhead_as_its_source_says() -> None:
    eff = Efficiency()
    assert (eff.compute, eff.bandwidth) == (0.6, 0.8)
    assert eff.step_overhead_s == 0.0 and eff.draft_pass_overhead_s == 0.0
    assert eff.overhead_source == "no fixed overhead"


def test_calibration_reads_memory_bound_decode_cells_of_batch_8_or_less_only() -> None:
    # decode cells built at bandwidth efficiency 0.6 are rescaled per batch so the ratios are
    # 0.2 (batch 1), 0.4 (2), 0.6 (4), 0.8 (8), 0.99 (16 and up): the median of batches <= 8 is 0.5
    _, prof = h100_8b(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    measured = copy.deepcopy(prof)
    measured["timing"]["provenance"]["method"] = "measured"
    measured["timing"]["provenance"]["device"]["name"] = "NVIDIA H100 80GB HBM3"
    tf = measured["timing"]["target_forward"]
    want = {1: 0.2, 2: 0.4, 4: 0.6, 8: 0.8}
    for i, b in enumerate(tf["axes"]["batch"]):
        for k, _ in enumerate(tf["axes"]["context"]):
            tf["median"][i][0][k] *= 0.6 / want.get(b, 0.99)
    assert calibrate(measured, "m.json").bandwidth == pytest.approx(0.5, rel=1e-6)


def test_calibration_reads_every_measured_prefill_cell_short_ones_included() -> None:
    # prefill cells rescaled: under a second at compute efficiency 0.9 (so they stay short), a
    # second or more at 0.3; most compute-bound cells are short, so the median is 0.9 only when
    # they all count
    _, prof = h100_8b(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    measured = copy.deepcopy(prof)
    measured["timing"]["provenance"]["method"] = "measured"
    measured["timing"]["provenance"]["device"]["name"] = "NVIDIA H100 80GB HBM3"
    med = measured["timing"]["target_prefill"]["median"]
    for row in med:
        for k, t in enumerate(row):
            if t is not None:
                row[k] = t * 0.45 / (0.9 if t < 1.0 else 0.3)
    assert calibrate(measured, "m.json").compute == pytest.approx(0.9, rel=1e-6)


def test_calibration_clamps_efficiency_to_at_most_one_for_cells_faster_than_the_datasheet() -> None:
    _, prof = h100_8b(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    measured = copy.deepcopy(prof)
    measured["timing"]["provenance"]["method"] = "measured"
    measured["timing"]["provenance"]["device"]["name"] = "NVIDIA H100 80GB HBM3"
    for grid, ratio in ((measured["timing"]["target_forward"]["median"], 0.6 / 1.5),
                        (measured["timing"]["target_prefill"]["median"], 0.45 / 1.5)):
        stack = [grid]
        while stack:  # every cell 1.5× faster than the datasheet allows
            row = stack.pop()
            for k, v in enumerate(row):
                if isinstance(v, list):
                    stack.append(v)
                elif v is not None:
                    row[k] = v * ratio
    eff = calibrate(measured, "m.json")
    assert (eff.bandwidth, eff.compute) == (1.0, 1.0)
