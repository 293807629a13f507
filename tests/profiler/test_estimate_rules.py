"""The rules of ``profiler.estimates.estimate`` against independent statements of them: vLLM's tensor-
parallel divisibility rule, which grid points fit the context window (inclusive), when weights
fit a GPU (strictly under its memory) and which size the hint then offers, and that a calibrated
efficiency carries no step overhead of its own."""

from __future__ import annotations

import copy
import functools
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


@functools.cache
def _estimated(eff: Efficiency) -> dict:
    return h100_8b(eff)[1]


def _measured(eff: Efficiency) -> dict:
    """An estimate at ``eff`` relabelled as measured on an H100 (what calibration reads); built
    once per ``eff`` (each mutant of the runner reruns these tests)."""
    measured = copy.deepcopy(_estimated(eff))
    measured["timing"]["provenance"]["method"] = "measured"
    measured["timing"]["provenance"]["device"]["name"] = "NVIDIA H100 80GB HBM3"
    return measured


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
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, step_overhead_s=0.0, source="test"))
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
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
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
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    med = measured["timing"]["target_prefill"]["median"]
    for row in med:
        for k, t in enumerate(row):
            if t is not None:
                row[k] = t * 0.45 / (0.9 if t < 1.0 else 0.3)
    assert calibrate(measured, "m.json").compute == pytest.approx(0.9, rel=1e-6)


def _scale_cells(grid: list, factor: float) -> None:
    """Multiply every measured cell of a nested timing grid by ``factor``, in place."""
    stack = [grid]
    while stack:
        row = stack.pop()
        for k, v in enumerate(row):
            if isinstance(v, list):
                stack.append(v)
            elif v is not None:
                row[k] = v * factor


def test_calibration_clamps_efficiency_to_at_most_one_for_cells_faster_than_the_datasheet() -> None:
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    # every cell 1.5× faster than the datasheet allows
    _scale_cells(measured["timing"]["target_forward"]["median"], 0.6 / 1.5)
    _scale_cells(measured["timing"]["target_prefill"]["median"], 0.45 / 1.5)
    eff = calibrate(measured, "m.json")
    assert (eff.bandwidth, eff.compute) == (1.0, 1.0)




def _blank(grid: list) -> None:
    """Every cell of a nested timing grid unmeasured (None)."""
    for i, v in enumerate(grid):
        if isinstance(v, list):
            _blank(v)
        else:
            grid[i] = None


def test_calibration_recovers_the_efficiencies_an_estimate_was_built_with() -> None:
    # memory-bound decode cells take bytes / (bw · e_b), compute-bound prefill cells FLOPs / (peak · e_c)
    eff = calibrate(_measured(Efficiency(compute=0.45, bandwidth=0.6, source="test")), "m.json")
    assert (eff.compute, eff.bandwidth) == (pytest.approx(0.45, rel=1e-9), pytest.approx(0.6, rel=1e-9))
    assert "calibrated from m.json measured on NVIDIA H100 80GB HBM3" in eff.source


def test_calibration_takes_the_default_for_a_side_without_cells_and_says_so_and_refuses_neither() -> None:
    no_decode = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    _blank(no_decode["timing"]["target_forward"]["median"])
    eff = calibrate(no_decode, "m.json")
    assert (eff.compute, eff.bandwidth) == (pytest.approx(0.45, rel=1e-9), Efficiency().bandwidth)
    assert "0 decode cells - bandwidth default" in eff.source and "compute default" not in eff.source
    no_prefill = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    _blank(no_prefill["timing"]["target_prefill"]["median"])
    eff = calibrate(no_prefill, "m.json")
    assert (eff.compute, eff.bandwidth) == (Efficiency().compute, pytest.approx(0.6, rel=1e-9))
    assert "0 prefill cells - compute default" in eff.source and "bandwidth default" not in eff.source
    _blank(no_prefill["timing"]["target_forward"]["median"])
    with pytest.raises(SpecplanError, match="no memory-bound decode or compute-bound prefill cells"):
        calibrate(no_prefill, "m.json")


@pytest.mark.parametrize("field,value,ok", [
    ("dtype", "float16", True), ("dtype", None, True), ("dtype", "fp8", False), ("dtype", "float32", False),
    ("method", "estimated", False), ("device", {"name": "NVIDIA H100 80GB HBM3"}, True),
    ("device", {"name": "TPU v5e"}, False), ("device", None, False),
])
def test_calibration_needs_a_measured_16_bit_profile_from_a_gpu_with_a_datasheet(field, value, ok) -> None:
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    measured["timing"]["provenance"][field] = value
    if ok:  # fp16 has bf16's bytes and peak: the same efficiencies
        assert calibrate(measured, "m.json").bandwidth == pytest.approx(0.6, rel=1e-9)
        return
    with pytest.raises(SpecplanError, match=f"m.json: timing.provenance.{field}"):
        calibrate(measured, "m.json")


def _estimate(dtype: str = "bfloat16", kv_dtype: str | None = None, gpu: str = "H100", proposers=()) -> dict:
    from profiler.estimates.estimate import estimate_profile
    from profiler.hf_config import read_config

    target = read_config("config:llama-3.1-8b")
    return estimate_profile(gpu=gpu_spec(gpu), target_identity=target.identity, max_positions=4096,
                            proposers=list(proposers), dtype=dtype, k_max=2, eff=Efficiency(), command="test",
                            kv_dtype=kv_dtype)


@pytest.mark.parametrize("dtype,kv_dtype,gpu,error", [
    ("float32", None, "H100", "--dtype float32: the roofline estimate covers bf16, fp16, fp8 and fp4 weights"),
    ("int4", None, "H100", "--dtype int4: the roofline estimate covers"),
    ("fp4", None, "H100", "--dtype fp4: H100-SXM has no fp4 tensor cores"),
    ("bfloat16", "fp8", "A100", "--kv-cache-dtype fp8: A100-80GB has no FP8 support"),
    ("bfloat16", "int8", "H100", "--kv-cache-dtype int8: valid: auto, bf16, fp16, fp8"),
])
def test_estimate_refuses_weight_and_kv_dtypes_it_cannot_price_in_one_line(dtype, kv_dtype, gpu, error) -> None:
    with pytest.raises(SpecplanError, match=error):
        _estimate(dtype, kv_dtype, gpu)


@pytest.mark.parametrize("dtype,kv_dtype,kv_bytes", [
    ("bfloat16", None, 2), ("float16", None, 2), ("fp8", None, 2),  # an 8-bit checkpoint keeps a 16-bit KV cache
    ("bfloat16", "fp8", 1), ("fp8", "fp8", 1)])
def test_kv_cache_is_16_bit_unless_fp8_is_asked_and_weights_are_layers_at_dtype_plus_16_bit_embeddings(
        dtype, kv_dtype, kv_bytes) -> None:
    from profiler.estimates.roofline import DTYPE_BYTES
    from profiler.hf_config import read_config
    from profiler.model_shape import body_params, kv_values_per_token_layer

    arch = read_config("config:llama-3.1-8b").identity["architecture"]
    mem = _estimate(dtype, kv_dtype)["memory"]
    assert mem["target_kv_bytes_per_token"] == arch["num_layers"] * kv_values_per_token_layer(arch, 1) * kv_bytes
    body = body_params(arch)
    rest = max(arch["num_parameters"] - body, arch["vocab_size"] * arch["hidden_size"] + arch["hidden_size"])
    assert mem["target_weight_bytes"] == int(body * DTYPE_BYTES[dtype] + rest * 2)
    assert rest == arch["num_parameters"] - body  # untied embeddings and head: the config's own count


@pytest.mark.parametrize("at_weight_dtype,per_param", [(False, 2), (True, 1)])
def test_a_heads_resident_weights_are_16_bit_unless_stored_at_the_checkpoints_dtype(at_weight_dtype, per_param) -> None:
    from profiler.estimates.estimate import EstimateProposer
    from profiler.hf_config import read_config

    target = read_config("config:llama-3.1-8b").identity
    head = EstimateProposer("head", {"kind": "eagle"}, target["architecture"], layers=1,
                            resident_params=1_000_000, resident_at_weight_dtype=at_weight_dtype)
    mem = _estimate("fp8", proposers=[head])["memory"]["proposers"]["head"]
    assert mem["weight_bytes"] == 1_000_000 * per_param


@pytest.mark.parametrize("kw,ok", [
    (dict(compute=1.0, bandwidth=1.0), True), (dict(compute=1e-9, bandwidth=0.5), True),
    (dict(compute=1.0 + 1e-9), False), (dict(bandwidth=1.5), False), (dict(compute=0.0), False),
    (dict(bandwidth=-0.1), False), (dict(step_overhead_s=0.0, draft_pass_overhead_s=0.0), True),
    (dict(step_overhead_s=-1e-9), False), (dict(draft_pass_overhead_s=-1e-9), False)])
def test_efficiency_is_a_share_in_0_to_1_and_overheads_are_never_negative(kw, ok) -> None:
    if ok:
        Efficiency(**kw)
        return
    with pytest.raises(SpecplanError, match=r"must be in \(0, 1\]|must be >= 0 seconds"):
        Efficiency(**kw)


def test_calibration_floors_efficiency_at_one_in_ten_thousand_for_cells_far_slower_than_the_datasheet() -> None:
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    # every cell 20,000× slower than the datasheet: efficiency 5e-5, floored
    _scale_cells(measured["timing"]["target_forward"]["median"], 0.6 / 5e-5)
    _scale_cells(measured["timing"]["target_prefill"]["median"], 0.45 / 5e-5)
    eff = calibrate(measured, "m.json")
    assert (eff.bandwidth, eff.compute) == (1e-4, 1e-4)


def test_a_draft_model_must_split_over_the_targets_tensor_parallel_size_too() -> None:
    from dataclasses import replace

    from profiler.estimates.estimate import EstimateProposer
    from profiler.hf_config import read_config

    draft = read_config("config:llama-3.2-1b").identity
    odd = dict(draft["architecture"], num_attention_heads=12, num_kv_heads=3)  # 12 heads: not over 8 GPUs
    with pytest.raises(SpecplanError, match="draft d's 12 attention heads"):
        check_tensor_parallel(odd, 8, "draft d", H100)
    from profiler.estimates.estimate import estimate_profile

    target = read_config("config:llama-3.1-8b").identity
    for prop, error in ((EstimateProposer("d", {"kind": "draft_model"}, odd), "draft d"),
                        (replace(EstimateProposer("d", {"kind": "draft_model"}, odd), layers=1), None)):
        run = lambda p=prop: estimate_profile(gpu=H100, target_identity=target, max_positions=4096,  # noqa: E731
                                              proposers=[p], dtype="bfloat16", k_max=2, eff=Efficiency(),
                                              command="test", tensor_parallel_size=8)
        if error is None:  # the target's own first layers: the target's split, already checked
            run()
        else:
            with pytest.raises(SpecplanError, match=error):
                run()


def test_a_dense_models_estimate_notes_name_no_experts_and_no_latent_attention() -> None:
    notes = _estimate()["timing"]["provenance"]["notes"]
    assert notes.startswith("roofline on 1x H100-SXM") and "(KV cache bfloat16)" in notes
    assert "mixture of experts" not in notes and "latent" not in notes and "tensor parallel" not in notes


def test_a_draft_models_weights_are_its_whole_architecture_and_a_self_draft_adds_none() -> None:
    from profiler.estimates.estimate import EstimateProposer, _weight_bytes
    from profiler.hf_config import read_config

    draft = read_config("config:llama-3.2-1b").identity
    target = read_config("config:llama-3.1-8b").identity
    own = EstimateProposer("d", {"kind": "draft_model"}, draft["architecture"])
    early = EstimateProposer("early", {"kind": "self_draft"}, target["architecture"], layers=2, weight_bytes_extra=False)
    mem = _estimate("bfloat16", proposers=[own, early])["memory"]["proposers"]
    assert mem["d"]["weight_bytes"] == _weight_bytes(draft["architecture"], 2) > 2e9  # ~1.2B parameters in bf16
    assert mem["early"]["weight_bytes"] == 0  # the target's own first layers: nothing more resident


def test_calibration_skips_cells_measured_at_zero_seconds() -> None:
    # a zero time is no measurement (a timer's floor): it must neither divide nor count
    measured = _measured(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    measured["timing"]["target_forward"]["median"][0][0][0] = 0.0
    measured["timing"]["target_prefill"]["median"][-1][0] = 0.0
    eff = calibrate(measured, "m.json")
    assert (eff.compute, eff.bandwidth) == (pytest.approx(0.45, rel=1e-9), pytest.approx(0.6, rel=1e-9))
