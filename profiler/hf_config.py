"""A model's architecture from its Hugging Face ``config.json``, read as plain JSON.

The roofline estimate needs layer counts and widths, not weights, so it must not need torch or
transformers (a planner on a laptop estimates a 70B model on H100s). This reads the keys of
llama-style decoders (Llama, Mistral, Qwen2/3, ...), of mixture-of-experts ones (Mixtral,
Qwen-MoE, DeepSeek: routed and shared experts, leading dense layers) and DeepSeek's multi-head
latent attention, and counts parameters from them the way the model classes build their tensors
(profiler/model_shape.py; ``tests/profiler/test_estimate_roofline.py`` checks the counts against
Llama-3.1-8B's published 8,030,261,248, Mixtral-8x7B's 46.7B and DeepSeek-V3's 671B). A config
with experts it cannot read is refused in one line, never estimated as a dense model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.model_shape import total_params
from sim.contracts.errors import SpecplanError

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin_configs"
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")


@dataclass(frozen=True)
class ConfigArchitecture:
    """A model identity (config-only, as profiles record it) and its context window."""

    identity: dict[str, Any]
    max_positions: int | None
    mtp_layers: int = 0
    """Multi-token-prediction modules the checkpoint ships (``num_nextn_predict_layers``)."""


def _builtins() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.json"))


def _locate(spec: str, flag: str) -> tuple[Path, str, str]:
    """(config file, how to show it, default id) for ``config:NAME``, ``config:PATH``, a
    ``config.json`` path or a model folder holding one."""
    ref = spec.split(":", 1)[1].strip() if spec.startswith("config:") else spec.strip()
    builtin = BUILTIN_DIR / f"{ref}.json"
    if ref and "/" not in ref and builtin.is_file():
        return builtin, f"profiler/builtin_configs/{ref}.json", f"{ref}-shaped"
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not ref or not path.is_file():
        if ref.startswith("/") or ref.startswith("~"):
            raise SpecplanError(f"{flag} {spec}: no file {path} (give a config.json, a folder holding one, "
                                f"or config:NAME: {', '.join(_builtins())})")
        raise SpecplanError(
            f"{flag} {spec}: no config.json there; give config:NAME ({', '.join(_builtins())}), "
            "config:PATH.json, a config.json file or a model folder holding one"
        )
    stem = path.parent.name if path.name == "config.json" else path.stem
    return path, str(path), f"{stem}-shaped"


def read_config(spec: str, flag: str = "--target") -> ConfigArchitecture:
    """The architecture of ``spec`` from its JSON alone; one-line errors name the flag, file and key."""
    path, shown, default_id = _locate(spec, flag)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecplanError(f"{shown}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise SpecplanError(f"{shown}: expected a JSON object (a transformers config.json)")
    arch, mp, nextn = parse_architecture(data, shown)
    model_id = str(data.get("_specplan_id") or default_id)
    # a machine path (/home/...) would not mean anything on another machine: the id names it
    rel = None if Path(shown).is_absolute() else shown
    identity = {"id": model_id, "source": "config-only", "path": rel, "sha256": None, "architecture": arch,
                **({"max_model_len": mp} if mp and mp >= 2 else {})}
    return ConfigArchitecture(identity, mp, nextn)


def parse_architecture(data: dict[str, Any], shown: str) -> tuple[dict[str, Any], int | None, int]:
    """(architecture, context window or None, MTP modules) of a config.json's content."""
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    for key in _REQUIRED:
        v = text.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecplanError(f"{shown}: {key}: expected a positive integer, got {v!r} "
                                "(the roofline covers llama-style decoder configs)")
    heads = int(text["num_attention_heads"])
    mla = _mla(text, shown)
    kv_heads = heads if mla else int(text.get("num_key_value_heads") or heads)
    head_dim = (mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]) if mla else \
        int(text.get("head_dim") or text["hidden_size"] // heads)
    arch: dict[str, Any] = {
        "family": str(text.get("model_type", data.get("model_type", "unknown"))),
        "num_layers": int(text["num_hidden_layers"]),
        "hidden_size": int(text["hidden_size"]),
        "intermediate_size": int(text["intermediate_size"]),
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": int(text["vocab_size"]),
    }
    tied = bool(text.get("tie_word_embeddings", data.get("tie_word_embeddings", False)))
    bias = bool(text.get("attention_bias", False)) or arch["family"] in ("qwen2",)
    moe = _moe(text, shown, arch["num_layers"])
    if moe:
        arch["moe"] = moe
    if mla:
        arch["mla"] = mla
    arch["num_parameters"] = count_parameters(arch, tied=tied, qkv_bias=bias)
    mp = text.get("max_position_embeddings")
    nextn = text.get("num_nextn_predict_layers")
    return (arch, int(mp) if isinstance(mp, int) and mp > 0 else None,
            int(nextn) if isinstance(nextn, int) and nextn > 0 else 0)


_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _int_key(text: dict[str, Any], key: str, shown: str, why: str, minimum: int = 1) -> int:
    v = text.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SpecplanError(f"{shown}: {key}: expected an integer >= {minimum}, got {v!r} ({why})")
    return v


def _moe(text: dict[str, Any], shown: str, layers: int) -> dict[str, int] | None:
    """The experts block of a MoE config, or None for a dense one; never a silent dense guess."""
    key = next((k for k in _EXPERT_KEYS if text.get(k)), None)
    if key is None:
        return None
    why = "a mixture-of-experts config needs it"
    experts = _int_key(text, key, shown, why)
    if experts < 2:
        return None
    per_token = _int_key(text, "num_experts_per_tok", shown, why)
    if per_token > experts:
        raise SpecplanError(f"{shown}: num_experts_per_tok: {per_token} exceeds the {experts} experts ({key})")
    width = text.get("moe_intermediate_size") or text["intermediate_size"]
    width = _int_key({"moe_intermediate_size": width}, "moe_intermediate_size", shown, why)
    if text.get("shared_expert_intermediate_size"):
        shared = _int_key(text, "shared_expert_intermediate_size", shown, why, 0)
    else:
        shared = _int_key(text, "n_shared_experts", shown, why, 0) * width if text.get("n_shared_experts") else 0
    dense = _int_key(text, "first_k_dense_replace", shown, why, 0) if text.get("first_k_dense_replace") else 0
    for k, ok in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
        if text.get(k, ok) != ok:
            raise SpecplanError(f"{shown}: {k}: {text[k]!r}: interleaved dense and MoE layers are not covered "
                                f"by the roofline (valid: {ok}, every layer after the first dense ones is MoE)")
    if text.get("mlp_only_layers"):
        raise SpecplanError(f"{shown}: mlp_only_layers: dense layers among MoE ones are not covered by the "
                            "roofline (valid: [])")
    if dense >= layers:
        raise SpecplanError(f"{shown}: first_k_dense_replace: {dense} leaves no MoE layer of {layers}")
    return {"num_experts": experts, "experts_per_token": per_token, "expert_intermediate_size": width,
            "shared_intermediate_size": shared, "dense_layers": dense}


def _mla(text: dict[str, Any], shown: str) -> dict[str, int] | None:
    """DeepSeek's multi-head latent attention widths, or None for standard attention."""
    if not text.get("kv_lora_rank"):
        return None
    why = "multi-head latent attention (kv_lora_rank is set) needs it"
    out = {k: _int_key(text, k, shown, why) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    out["q_lora_rank"] = _int_key(text, "q_lora_rank", shown, why, 0) if text.get("q_lora_rank") else 0
    return out


def count_parameters(arch: dict[str, Any], *, tied: bool, qkv_bias: bool = False) -> int:
    """Parameters of the decoder: embeddings, per layer attention + gated MLP or experts + two
    norms, final norm, and an LM head unless tied to the embeddings (profiler/model_shape.py)."""
    return total_params({**arch, "qkv_bias": qkv_bias}, tied=tied)
