"""Imports of the models fleets plan for: MoE with TP x EP, DeepSeek's MLA with MTP, every vLLM
proposer method by its own name, and precision as a choice (skipped without the gpu-data extra)."""

from __future__ import annotations

import json

import pytest

from sim.contracts.profile import Profile

aic = pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

from profiler.imported import aic_database as db  # noqa: E402
from profiler.imported.aiconfigurator_import import ImportRequest, build_profile  # noqa: E402


def _t(p: dict, batch: int, s: int = 1, context: int = 1024) -> float:
    tf = p["timing"]["target_forward"]
    ax = tf["axes"]
    return tf["median"][ax["batch"].index(batch)][s - 1][ax["context"].index(context)]


@pytest.fixture(scope="module")
def deepseek() -> dict:
    """DeepSeek-V3 on 8x H200 with experts EP=8 and its MTP module, acceptance assumed."""
    return build_profile(ImportRequest("h200_sxm", "vllm", "deepseek-ai/DeepSeek-V3", ("mtp",), tp=8, ep=8,
                                       command="test", assumed_acceptance={"mtp": (0.8, 0.6, 0.45)}))


@pytest.fixture(scope="module")
def small() -> dict:
    """Llama-3.2-1B with every model-free and head method, fp8 KV cache."""
    return build_profile(ImportRequest("h200_sxm", "vllm", "meta-llama/Llama-3.2-1B",
                                       ("eagle", "eagle3", "ngram", "suffix"), kv_dtype="fp8", command="test",
                                       assumed_acceptance={"ngram": (0.5, 0.3)}, assumed_proposal_rate={"ngram": 0.4}))


def test_deepseek_mla_moe_imports_with_mtp_priced_as_the_database_prices_nextn(deepseek) -> None:
    from aiconfigurator_core.sdk.models.helpers import mtp_scale_factor

    p = Profile.from_dict(json.loads(json.dumps(deepseek)), "ds")
    arch = p.target.architecture
    assert arch.moe is not None and arch.moe.num_experts == 256 and arch.mla is not None
    assert deepseek["x-aiconfigurator"]["moe_ep"] == 8 and deepseek["x-aiconfigurator"]["moe_tp"] == 1
    assert p.proposers["mtp"].kind == "mtp"
    eng = db.compile_engine("deepseek-ai/DeepSeek-V3", "h200_sxm", "vllm", "0.24.0",
                            db.Layout(tp=8, moe_ep=8, kv="bfloat16"))  # vLLM's auto KV dtype for it
    assert _t(deepseek, 1) * 1e3 == pytest.approx(eng.handle.decode_step_latency(1, 1024, 2), rel=1e-6)
    d = deepseek["timing"]["proposers"]["mtp"]["draft"]
    c = d["axes"]["context"].index(1024)
    for bi, b in enumerate(d["axes"]["batch"][:7]):
        for ki, k in enumerate(d["axes"]["k"]):
            # the database's nextn pricing over its own pass; the profile's target pass over k+1
            # tokens may since have been lifted by the MoE repair (extra routed experts at the
            # bandwidth, never lowered), which the MTP draft does not follow (docs/profile-format.md)
            want = (mtp_scale_factor(k, 61) - 1) * _t(deepseek, b, k + 1)
            assert 0.8 * want <= d["median"][bi][ki][c] <= want * (1 + 1e-9)
    assert deepseek["acceptance"]["mtp"]["provenance"]["method"] == "assumed"
    # --dtype auto: the checkpoint's fp8 blocks; --kv-cache-dtype auto: vLLM's, the model dtype (the
    # checkpoint's quant_method fp8 declares no KV cache quantization)
    assert deepseek["x-aiconfigurator"]["quant_modes"] == {"weights": "fp8_block", "kv_cache": "bfloat16",
                                                           "experts": "fp8_block"}
    assert "(fp8_block weights, bfloat16 KV cache)" in deepseek["description"]
    assert "KV cache bfloat16: vLLM's auto = the model dtype" in p.sources()[0]
    assert p.timing.provenance.dtype == "fp8_block"
    assert _t(deepseek, 64) > _t(deepseek, 1)  # a larger batch touches more experts


def test_moe_expert_parallel_is_a_layout_of_its_own() -> None:
    tp = build_profile(ImportRequest("h200_sxm", "vllm", "Qwen/Qwen3-30B-A3B", tp=2, command="test"))
    ep = build_profile(ImportRequest("h200_sxm", "vllm", "Qwen/Qwen3-30B-A3B", tp=2, ep=2, command="test"))
    assert (tp["x-aiconfigurator"]["moe_tp"], tp["x-aiconfigurator"]["moe_ep"]) == (2, 1)
    assert (ep["x-aiconfigurator"]["moe_tp"], ep["x-aiconfigurator"]["moe_ep"]) == (1, 2)
    assert _t(tp, 1) != _t(ep, 1) and ep["name"].endswith("-tp2-ep2-vllm")
    assert tp["target"]["architecture"]["moe"]["experts_per_token"] == 8


def test_every_proposer_is_named_by_its_vllm_method(small) -> None:
    p = Profile.from_dict(json.loads(json.dumps(small)), "small")
    assert {n: x.kind for n, x in p.proposers.items()} == {"eagle": "eagle", "eagle3": "eagle3", "ngram": "ngram",
                                                           "suffix": "suffix"}
    for host in ("ngram", "suffix"):
        t = p.timing.proposers[host]
        assert float(t.draft.median.max()) == 0.0 and t.overhead_provenance.method == "assumed"
        assert small["memory"]["proposers"][host]["weight_bytes"] == 0
    seg = p.acceptance["ngram"].segments[0]
    assert seg.proposal_rate == pytest.approx(0.4, rel=1e-3)
    assert "proposal rate 0.4" in small["acceptance"]["ngram"]["provenance"]["notes"]
    # EAGLE-1 reads the target's 128k-token LM head each pass, EAGLE-3 a 32k one
    d = small["timing"]["proposers"]
    assert d["eagle"]["draft"]["median"][0][0][0] > d["eagle3"]["draft"]["median"][0][0][0]


def test_fp8_kv_cache_doubles_the_kv_tokens_at_equal_memory(small) -> None:
    bf16 = build_profile(ImportRequest("h200_sxm", "vllm", "meta-llama/Llama-3.2-1B", command="test"))
    a, b = bf16["memory"], small["memory"]
    assert b["target_kv_bytes_per_token"] * 2 == a["target_kv_bytes_per_token"]
    assert b["target_weight_bytes"] == a["target_weight_bytes"]
    free = [m["device_memory_bytes"] * 0.9 - m["target_weight_bytes"] - m["activation_peak_bytes"] for m in (a, b)]
    ratio = (b["kv_capacity"][0]["kv_tokens"] / a["kv_capacity"][0]["kv_tokens"]) * (free[0] / free[1])
    assert ratio == pytest.approx(2.0, rel=1e-4)  # twice the tokens per byte of free memory
    assert "fp8 KV cache" in small["description"]
