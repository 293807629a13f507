"""``--kv-cache-dtype auto`` is vLLM's auto: the model dtype unless the checkpoint declares a KV
cache quantization vLLM applies (profiler/imported/vllm_kv_dtype.py names the vLLM sources)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiler.imported.vllm_kv_dtype import declared_kv, resolve_auto

BF16 = {"torch_dtype": "bfloat16"}
STATIC_FP8 = {"dynamic": False, "num_bits": 8, "type": "float"}


@pytest.mark.parametrize(
    ("quant", "mode"),
    [
        (None, "bfloat16"),
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "bfloat16"),  # DeepSeek-R1
        ({"quant_method": "mxfp4"}, "bfloat16"),  # gpt-oss
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_scheme": STATIC_FP8}, "fp8"),
        ({"quant_method": "modelopt_fp4", "kv_cache_quant_algo": "FP8"}, "fp8"),
        ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}},
         "fp8"),  # hf_quant_config.json of ModelOpt <= 0.29
        ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None}, "bfloat16"),
        ({"quant_method": "modelopt", "kv_cache_scheme": {**STATIC_FP8, "dynamic": True}}, "bfloat16"),  # unknown
        ({"quant_method": "compressed-tensors", "kv_cache_scheme": None}, "bfloat16"),  # Kimi-K2.5
        ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, "fp8"),
        ({"quant_method": "fp8", "kv_cache_quant_algo": "fp8"}, "bfloat16"),  # vLLM reads it for ModelOpt only
    ],
)
def test_auto_follows_the_checkpoint_only_where_vllm_does(quant, mode) -> None:
    choice = resolve_auto(BF16, quant, "config.json quantization_config")
    assert choice.mode == mode
    assert choice.reason.startswith(f"KV cache {'fp8' if mode == 'fp8' else 'bfloat16'}: vLLM's auto ")


def test_the_reason_says_why() -> None:
    assert resolve_auto(BF16, None, "none").reason == (
        "KV cache bfloat16: vLLM's auto = the model dtype; the checkpoint declares no KV quantization")
    fp16 = resolve_auto({"torch_dtype": "float16"}, None, "none")
    assert fp16.mode == "bfloat16" and fp16.reason.startswith("KV cache float16: vLLM's auto = the model dtype")
    nvfp4 = resolve_auto(BF16, {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}, "hf_quant_config.json")
    assert nvfp4.reason == ("KV cache fp8: vLLM's auto follows the checkpoint's ModelOpt kv_cache_quant_algo "
                            "'FP8' (hf_quant_config.json)")


@given(method=st.sampled_from(["fp8", "mxfp4", "awq", "gptq", "bitsandbytes", "fbgemm_fp8", ""]),
       extra=st.dictionaries(st.sampled_from(["kv_cache_quant_algo", "kv_cache_scheme", "fmt", "bits"]),
                             st.sampled_from(["FP8", "fp8", None, 8, STATIC_FP8])))
def test_only_modelopt_and_compressed_tensors_configs_quantize_the_kv_cache(method, extra) -> None:
    """Weight quantization alone never changes vLLM's auto KV dtype (the 2x KV capacity error)."""
    assert declared_kv({"quant_method": method, **extra}) is None


def test_every_checkpoint_the_database_has_gets_vllms_auto_kv_dtype() -> None:
    """The package, given the mode, keeps it (it would otherwise give FP8 checkpoints an FP8 KV)."""
    pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")
    from profiler.imported import aic_database as db

    fp8 = []
    for model in db.cached_models():
        choice = resolve_auto(db.model_config(model), *db.quant_config(model))
        assert db.resolved_quant(model, "vllm", db.Layout(kv=choice.mode))["kv_cache"] == choice.mode, model
        fp8 += [model] if choice.mode == "fp8" else []
    assert "deepseek-ai/DeepSeek-R1" not in fp8 and "Qwen/Qwen3-32B-FP8" not in fp8
    assert {"nvidia/Llama-3.1-70B-Instruct-FP8", "nvidia/Qwen3.5-122B-A10B-NVFP4"} <= set(fp8)


def test_deepseek_r1_imports_with_the_kv_capacity_of_a_default_vllm_launch(monkeypatch) -> None:
    """DeepSeek-R1 (FP8 weights) on 8x H200: auto = bf16 KV, 0.56 M tokens; fp8 only when asked (1.13 M)."""
    pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")
    import profiler.imported.aiconfigurator_import as ai

    for name, value in {"BATCH": [1], "CONTEXT": [1024], "PREFILL_TOKENS": [128], "PREFILL_CONTEXT": [0],
                        "DENSE_TOKENS": [1], "K_MAX": 1}.items():
        monkeypatch.setattr(ai, name, value)  # memory does not depend on the grids

    def imported(kv: str) -> dict:
        return ai.build_profile(ai.ImportRequest("h200_sxm", "vllm", "deepseek-ai/DeepSeek-R1", tp=8, ep=8,
                                                 kv_dtype=kv, command="test"))

    auto, bf16, fp8 = (imported(kv) for kv in ("auto", "bf16", "fp8"))
    tokens = {k: p["memory"]["kv_capacity"][0]["kv_tokens"] for k, p in (("auto", auto), ("bf16", bf16), ("fp8", fp8))}
    assert tokens["auto"] == tokens["bf16"] and 0.5e6 < tokens["auto"] < 0.6e6
    assert tokens["fp8"] == pytest.approx(2 * tokens["auto"], rel=1e-3)
    assert ("KV cache bfloat16: vLLM's auto = the model dtype; its quantization config (config.json "
            "quantization_config) declares no KV cache quantization vLLM applies") in auto["memory"]["provenance"]["notes"]
    assert "KV cache fp8: as asked (--kv-cache-dtype fp8)" in fp8["timing"]["provenance"]["notes"]
