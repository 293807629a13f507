"""A model's architecture from its Hugging Face ``config.json``, read as plain JSON.

The roofline estimate needs layer counts and widths, not weights, so it must not need torch or
transformers (a planner on a laptop estimates a 70B model on H100s). This reads the keys of
llama-style decoders (Llama, Mistral, Qwen2/3, ...) and counts parameters from them the way the
model classes build their tensors (``tests/profiler/test_estimate_roofline.py`` checks the count against
Llama-3.1-8B's published 8,030,261,248).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin_configs"
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")


@dataclass(frozen=True)
class ConfigArchitecture:
    """A model identity (config-only, as profiles record it) and its context window."""

    identity: dict[str, Any]
    max_positions: int | None


def _builtins() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.json"))


def _locate(spec: str) -> tuple[Path, str, str]:
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
        raise SpecplanError(
            f"--target {spec}: no config.json there; give config:NAME ({', '.join(_builtins())}), "
            "config:PATH.json, a config.json file or a model folder holding one"
        )
    stem = path.parent.name if path.name == "config.json" else path.stem
    return path, str(path), f"{stem}-shaped"


def read_config(spec: str) -> ConfigArchitecture:
    """The architecture of ``spec`` from its JSON alone; one-line errors name the file and key."""
    path, shown, default_id = _locate(spec)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecplanError(f"{shown}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise SpecplanError(f"{shown}: expected a JSON object (a transformers config.json)")
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    for key in _REQUIRED:
        v = text.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecplanError(f"{shown}: {key}: expected a positive integer, got {v!r} "
                                "(the roofline covers llama-style decoder configs)")
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or text["hidden_size"] // heads)
    arch = {
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
    arch["num_parameters"] = count_parameters(arch, tied=tied, qkv_bias=bias)
    model_id = str(data.get("_specplan_id") or default_id)
    mp = text.get("max_position_embeddings")
    identity = {"id": model_id, "source": "config-only", "path": shown, "sha256": None, "architecture": arch}
    return ConfigArchitecture(identity, int(mp) if isinstance(mp, int) and mp > 0 else None)


def count_parameters(arch: dict[str, Any], *, tied: bool, qkv_bias: bool = False) -> int:
    """Parameters of a llama-style decoder: embeddings, per layer q/k/v/o + gated MLP + two
    norms, final norm, and an LM head unless tied to the embeddings."""
    h, hd = arch["hidden_size"], arch["head_dim"]
    q, kv = arch["num_attention_heads"] * hd, arch["num_kv_heads"] * hd
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * arch["intermediate_size"] + 2 * h
    if qkv_bias:
        per_layer += q + 2 * kv
    emb = arch["vocab_size"] * h
    return int(emb + arch["num_layers"] * per_layer + h + (0 if tied else emb))
