"""EAGLE heads are shaped as vLLM builds them for the target: MLA targets get a DeepSeek layer."""

from __future__ import annotations

import json

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

import profiler.imported.aiconfigurator_import as ai  # noqa: E402
from profiler.imported import aic_database as db  # noqa: E402
from profiler.imported import aic_heads  # noqa: E402

R1 = "deepseek-ai/DeepSeek-R1"
TINY = {"BATCH": [1, 64], "CONTEXT": [1024], "PREFILL_TOKENS": [128], "PREFILL_CONTEXT": [0],
        "DENSE_TOKENS": [1, 64, 128], "K_MAX": 2}


@pytest.fixture(autouse=True)
def tiny_axes(monkeypatch):
    for name, value in TINY.items():
        monkeypatch.setattr(ai, name, value)


def _r1(*drafts: str) -> dict:
    return ai.build_profile(ai.ImportRequest("h200_sxm", "vllm", R1, drafts, tp=8, ep=8, command="test"))


def test_an_mla_target_gets_a_deepseek_layer_head_and_a_llama_target_a_llama_layer() -> None:
    ds = aic_heads.head_shape("eagle3", db.model_config(R1), db.Layout(tp=8, moe_tp=1, moe_ep=8))
    assert ds.mla and ds.config["kv_lora_rank"] == 512 and ds.config["num_hidden_layers"] == 1
    assert ds.config["first_k_dense_replace"] == 1 and "n_routed_experts" not in ds.identity_config
    assert (ds.layout.moe_tp, ds.layout.moe_ep) == (8, 1) and "quantization_config" not in ds.config
    e1 = aic_heads.head_shape("eagle", db.model_config(R1), db.Layout(tp=8, moe_tp=1, moe_ep=8))
    assert e1.config["first_k_dense_replace"] == 0 and (e1.layout.moe_tp, e1.layout.moe_ep) == (1, 8)
    assert e1.config["vocab_size"] == db.model_config(R1)["vocab_size"]
    llama = aic_heads.head_shape("eagle3", db.model_config("meta-llama/Llama-3.1-8B"), db.Layout())
    assert not llama.mla and llama.config["architectures"] == ["LlamaForCausalLM"]


def test_deepseek_imports_eagle_and_eagle3_heads_priced_as_one_mla_layer() -> None:
    p = _r1("eagle", "eagle3", "mtp")
    prof = Profile.from_dict(json.loads(json.dumps(p)), "r1")
    notes = p["timing"]["provenance"]["notes"]
    assert "vLLM deepseek_eagle3.py" in notes and "vLLM deepseek_eagle.py" in notes
    assert prof.proposers["eagle3"].model.architecture.mla is not None
    tf, d = p["timing"]["target_forward"]["median"], p["timing"]["proposers"]
    for kind in ("eagle", "eagle3"):
        # one layer of 61 plus an LM head: a few percent of the target's pass, never nothing
        assert 0 < d[kind]["draft"]["median"][0][0][0] < 0.1 * tf[0][1][0]
        assert p["memory"]["proposers"][kind]["kv_bytes_per_token"] > 0
    # EAGLE-1 runs the routed experts and the 129k-token LM head; EAGLE-3 a dense MLP and a 32k head
    assert d["eagle"]["draft"]["median"][1][0][0] > 2 * d["eagle3"]["draft"]["median"][1][0][0]
    assert p["memory"]["proposers"]["eagle"]["weight_bytes"] > p["memory"]["proposers"]["eagle3"]["weight_bytes"]


def test_a_head_the_database_cannot_price_is_one_line_naming_it_with_fixes_that_work(monkeypatch) -> None:
    """The Llama layer the importer used to give DeepSeek (128 heads of width 56) has no kernels."""
    real = aic_heads.head_shape

    def llama_for_all(kind, cfg, layout):
        return aic_heads._llama_head(kind, aic_heads.text_config(cfg), layout)

    monkeypatch.setattr(aic_heads, "head_shape", llama_for_all)
    with pytest.raises(SpecplanError) as exc:
        _r1("eagle3")
    line = str(exc.value)
    assert line.startswith(f"--draft eagle3: {R1}'s eagle3 head (one Llama decoder layer at the target's widths) "
                           "cannot be priced on h200_sxm/vllm 0.24.0 tp=8: the database has no timings for its "
                           "attention kernels")
    assert "\n" not in line and "tmp" not in line and "valid for this target: --draft mtp, ngram, suffix" in line
    monkeypatch.setattr(aic_heads, "head_shape", real)
    for fix in ("mtp", "ngram", "suffix"):
        assert fix in _r1(fix)["proposers"]


def test_an_eagle3_mla_head_runs_a_dense_mlp_of_its_width_not_the_targets_experts() -> None:
    """The package prices every DeepSeek layer as MoE; the head's MLP ops come from a Llama layer."""
    import tempfile
    from pathlib import Path

    from profiler.imported.aic_proposers import _compile_head

    class Ctx:
        system, backend, version = "h200_sxm", "vllm", "0.24.0"

    def mlp_ms(inter: int) -> tuple[dict, float]:
        shape = aic_heads.head_shape("eagle3", {**db.model_config(R1), "intermediate_size": inter},
                                     db.Layout(tp=8, moe_tp=1, moe_ep=8, kv="bfloat16"))
        with tempfile.TemporaryDirectory() as tmp:
            head = _compile_head(shape.config, Path(tmp, "h"), shape.layout, "head", Ctx)
            mlp = _compile_head(shape.mlp_config, Path(tmp, "m"), shape.layout, "mlp", Ctx)
        ops = aic_heads.DenseMlpSplice(head, mlp).decode_ops(64, 1024)
        return ops, sum(ops[k] for k in aic_heads.MLP_OPS)

    ops, wide = mlp_ms(18432)
    assert not [k for k in ops if any(e in k for e in aic_heads.EXPERT_OPS)] and "mla_block" in ops
    assert mlp_ms(9216)[1] < 0.8 * wide
