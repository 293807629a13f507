"""Roofline estimates: sane numbers for known GPUs, honest provenance, calibration round trip."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from profiler.estimates.estimate import (
    EstimateProposer,
    calibrate,
    estimate_profile,
)
from profiler.estimates.gpu_specs import GPUS, gpu_spec, match_device_name
from profiler.estimates.roofline import Efficiency, forward_cost
from profiler.passes.models import load_config
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile


def h100_8b(eff: Efficiency | None = None, proposers=()):
    target = load_config("config:llama-3.1-8b")
    return target, estimate_profile(gpu=gpu_spec("H100"), target_identity=target.identity, max_positions=131072,
                                    proposers=list(proposers), dtype="bfloat16", k_max=4,
                                    eff=eff or Efficiency(), command="test")


def test_decode_step_of_8b_on_h100_is_weight_bytes_over_bandwidth():
    _, prof = h100_8b()
    t = prof["timing"]["target_forward"]["median"][0][0][0]
    weights = prof["memory"]["target_weight_bytes"]
    assert 15e9 < weights < 17e9  # 8.03B parameters in bf16
    floor = weights / 3.35e12  # datasheet bandwidth, 100% efficient
    assert floor < t < 2 * floor
    assert 4e-3 < t < 10e-3  # about 6 ms, as served 8B models decode at batch 1


def test_grids_grow_the_right_way_and_the_profile_validates():
    draft = load_config("config:llama-3.2-1b")
    prop = EstimateProposer("llama-1b", {"kind": "draft_model", "model": draft.identity}, draft.identity["architecture"])
    _, prof = h100_8b(proposers=[prop])
    parsed = Profile.from_dict(prof, "estimate")
    assert parsed.timing.provenance.method == "estimated"
    assert parsed.acceptance == {}
    tf = np.array(prof["timing"]["target_forward"]["median"], dtype=float)
    assert np.all(np.diff(tf[:, 0, 0]) >= 0)  # more sequences never faster
    pre = np.array(prof["timing"]["target_prefill"]["median"], dtype=float)
    assert pre[-1, 0] > 100 * pre[0, 0] / 10  # 16k-token prefill is compute bound, far above 16 tokens
    d = np.array(prof["timing"]["proposers"]["llama-1b"]["draft"]["median"], dtype=float)
    assert np.all(np.diff(d[0, :, 0]) > 0)  # k sequential draft steps
    notes = prof["timing"]["provenance"]["notes"]
    assert "989.5 TFLOP/s" in notes and "3350 GB/s" in notes and "efficiency" in notes
    caps = {(r["memory_utilization"], r["proposer"]): r["kv_tokens"] for r in prof["memory"]["kv_capacity"]}
    assert caps[(0.9, "llama-1b")] < caps[(0.9, None)]
    # 80 GiB * 0.9 minus ~16 GB of weights over 128 KiB per token: a few hundred thousand tokens
    assert 300_000 < caps[(0.9, None)] < 600_000


def test_calibration_recovers_the_efficiency_it_was_built_with():
    _, prof = h100_8b(Efficiency(compute=0.45, bandwidth=0.6, source="test"))
    measured = copy.deepcopy(prof)
    measured["timing"]["provenance"]["method"] = "measured"
    measured["timing"]["provenance"]["device"]["name"] = "NVIDIA H100 80GB HBM3"
    eff = calibrate(measured, "m.json")
    assert eff.bandwidth == pytest.approx(0.6, rel=1e-6)
    assert eff.compute == pytest.approx(0.45, rel=1e-6)
    assert "calibrated from m.json" in eff.source


def test_calibration_refuses_unknown_devices_and_estimates():
    _, prof = h100_8b()
    with pytest.raises(SpecplanError, match="measured"):
        calibrate(prof, "e.json")
    prof["timing"]["provenance"]["method"] = "measured"
    prof["timing"]["provenance"]["device"]["name"] = "AMD EPYC"
    with pytest.raises(SpecplanError, match="datasheet"):
        calibrate(prof, "e.json")


def test_gpu_table_and_lookup():
    assert set(GPUS) == {"A100-80GB", "H100-SXM", "H200", "L40S", "B200"}
    assert gpu_spec("h100").name == "H100-SXM"
    assert match_device_name("NVIDIA H200").name == "H200"
    with pytest.raises(SpecplanError, match="known"):
        gpu_spec("RTX 9090")


def test_forward_cost_counts_context_reads():
    arch = load_config("config:llama-3.1-8b").identity["architecture"]
    f0, b0 = forward_cost(arch, 2, 1, 1, 0, 1)
    f1, b1 = forward_cost(arch, 2, 1, 1, 1000, 1)
    assert b1 - b0 == pytest.approx(1000 * 131072)
    assert f1 > f0


def test_the_profile_records_the_models_context_length():
    """The target's context length (config ``max_position_embeddings``) travels into the profile
    (``target.max_model_len``), read the same way by the torch loader and the plain-JSON reader, so
    the simulator can reject what vLLM rejects (issue 38)."""
    from profiler.hf_config import read_config

    target, prof = h100_8b()
    assert target.identity["max_model_len"] == read_config("config:llama-3.1-8b").identity["max_model_len"] == 131072
    assert Profile.from_dict(prof, "estimate").target.max_model_len == 131072
