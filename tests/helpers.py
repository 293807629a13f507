"""Small builders shared by several test modules (no torch at import time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.contracts.synthetic import synthetic_profile_dict


def write_scenario(
    folder: Path, scenario_toml: str, *, profile_file: str = "profile.json",
    scenario_file: str = "s.toml", **profile_args: Any,
) -> Path:
    """Write ``synthetic_profile_dict(**profile_args)`` as ``folder/profile_file`` and the
    scenario text (whose ``fleet.profile`` names that file) as ``folder/scenario_file``; return
    the scenario's path."""
    (folder / profile_file).write_text(json.dumps(synthetic_profile_dict(**profile_args)), encoding="utf-8")
    path = folder / scenario_file
    path.write_text(scenario_toml, encoding="utf-8")
    return path


def tiny_llama(seed: int, *, vocab: int, layers: int = 4, hidden: int = 32,
               max_positions: int = 512) -> Any:
    """A tiny random Llama in float64 (batched and one-token passes agree to ~1e-15, so greedy
    argmax never flips on rounding); ``seed`` fixes its weights only."""
    import torch
    import transformers

    torch.manual_seed(seed)  # model init only; decoding uses explicit generators
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=0.5,  # sharper distributions than the default 0.02
    )
    return transformers.LlamaForCausalLM(cfg).to(torch.float64).eval()
