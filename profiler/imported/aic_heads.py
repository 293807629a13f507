"""The shape of an EAGLE / EAGLE-3 head, as vLLM builds it for the target, for the database to price.

Why a shape per attention kind: vLLM gives a target with DeepSeek's multi-head latent attention
(MLA: DeepSeek-V3/R1, Kimi-K2, GLM-5, ...) a head of its own kind, not a Llama layer:
``vllm/model_executor/models/deepseek_eagle3.py`` (``Eagle3DeepseekV2ForCausalLM``: one
DeepSeek decoder layer with MLA attention and a dense MLP, "no MoE", its own draft LM head) and
``deepseek_eagle.py`` (``EagleDeepseekV3ForCausalLM``: one full DeepSeek decoder layer, MLA and
the routed experts, the target's vocabulary). The package prices every layer of a DeepSeek
config as a MoE layer (``first_k_dense_replace`` is not read), so the EAGLE-3 head's dense MLP is
spliced in: the DeepSeek layer's ops without its expert ops, plus the MLP ops of a Llama layer of
the same hidden and MLP widths (``DenseMlpSplice``). Other targets get ``llama_eagle3.py`` /
``llama_eagle.py`` heads: one Llama decoder layer at the target's widths. A Llama layer with the
target's 128 MLA heads of width 56 is no layer vLLM runs, and the database has no kernels for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from profiler.estimates.estimate_proposers import EAGLE3_DRAFT_VOCAB
from profiler.imported import aic_database as db
from sim.contracts.errors import SpecplanError

_EXPERT_KEYS = ("n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group")
_DROP = ("quantization_config", "auto_map", "text_config", "vision_config", "num_nextn_predict_layers")


@dataclass(frozen=True)
class HeadShape:
    """A one-layer model config the database compiles as the head, the layout it runs at, and
    the words the provenance note and errors use for it."""

    config: dict[str, Any]
    layout: db.Layout
    what: str
    mla: bool
    identity_config: dict[str, Any]
    """The config the profile's identity records: a dense head without the expert keys the
    package needs only to size its (unused) expert widths."""
    mlp_config: dict[str, Any] | None = None
    """A Llama layer whose MLP ops replace the DeepSeek layer's expert ops (EAGLE-3 MLA heads)."""


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The decoder's own config (multimodal checkpoints nest it under ``text_config``)."""
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def head_shape(kind: str, target_cfg: dict[str, Any], layout: db.Layout) -> HeadShape:
    """The ``eagle`` or ``eagle3`` head of this target at the target's TP (and expert split)."""
    t = text_config(target_cfg)
    if t.get("kv_lora_rank"):
        return _mla_head(kind, t, layout)
    return _llama_head(kind, t, layout)


def _mla_head(kind: str, t: dict[str, Any], layout: db.Layout) -> HeadShape:
    cfg = {k: v for k, v in t.items() if k not in _DROP}
    moe = kind == "eagle"
    vocab = int(t["vocab_size"]) if moe else EAGLE3_DRAFT_VOCAB
    cfg.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", num_hidden_layers=1,
               first_k_dense_replace=0 if moe else 1, num_nextn_predict_layers=0, vocab_size=vocab,
               torch_dtype="bfloat16")
    # the package builds a DeepSeek layer with expert widths even when the layer is dense
    run = layout if moe else replace(layout, moe_tp=layout.tp, moe_ep=1)
    h, inter = int(t["hidden_size"]), int(t["intermediate_size"])
    what = (f"one DeepSeek decoder layer with the target's MLA (kv_lora_rank {t['kv_lora_rank']}) and "
            + (f"its routed experts, experts TP {run.moe_tp} x EP {run.moe_ep}, and the target's "
               f"{vocab}-token LM head (vLLM deepseek_eagle.py)" if moe else
               f"a dense MLP (hidden {h}, MLP {inter}) with a {EAGLE3_DRAFT_VOCAB}-token draft LM head "
               "(assumed, as for the EAGLE-3 Llama-3.1 heads, vLLM deepseek_eagle3.py)"))
    dense = {k: v for k, v in cfg.items() if k not in _EXPERT_KEYS}
    mlp = None if moe else _llama_config(h, 64, 8, 128, inter, EAGLE3_DRAFT_VOCAB, 131072)
    return HeadShape(cfg, run, what, mla=True, identity_config=cfg if moe else dense, mlp_config=mlp)


def _llama_head(kind: str, t: dict[str, Any], layout: db.Layout) -> HeadShape:
    h, heads = int(t["hidden_size"]), int(t["num_attention_heads"])
    kvh = int(t.get("num_key_value_heads") or heads)
    hd = int(t.get("head_dim") or h // heads)
    vocab = EAGLE3_DRAFT_VOCAB if kind == "eagle3" else int(t["vocab_size"])
    inter = int(t.get("intermediate_size") or 4 * h)
    cfg = _llama_config(h, heads, kvh, hd, inter, vocab, int(t.get("max_position_embeddings") or 131072))
    what = (f"one Llama decoder layer at the target's widths (hidden {h}, MLP {inter})"
            + (f" with a {EAGLE3_DRAFT_VOCAB}-token draft LM head (the EAGLE-3 Llama-3.1 heads' draft vocab)"
               if kind == "eagle3" else " and the target's LM head"))
    return HeadShape(cfg, replace(layout, moe_tp=layout.tp, moe_ep=1), what, mla=False, identity_config=cfg)


def _llama_config(h: int, heads: int, kvh: int, hd: int, inter: int, vocab: int, positions: int) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
            "num_attention_heads": heads, "num_key_value_heads": kvh, "head_dim": hd, "intermediate_size": inter,
            "num_hidden_layers": 1, "vocab_size": vocab, "tie_word_embeddings": False,
            "max_position_embeddings": positions, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "torch_dtype": "bfloat16"}


EXPERT_OPS = ("moe", "router", "shared_")
"""Op names (substrings) of a DeepSeek layer's routed and shared experts in the package."""
MLP_OPS = ("gate_ffn1_gemm", "act_gate", "ffn2_gemm")
"""A Llama layer's MLP ops in the package."""


class DenseMlpSplice:
    """The engine interface GridBuilder reads (per-op ms of one pass), for a DeepSeek layer whose
    experts are replaced by a dense MLP: ``mla``'s ops without expert ops, plus ``mlp``'s MLP ops."""

    def __init__(self, mla: db.Engine, mlp: db.Engine) -> None:
        self.mla, self.mlp, self.model_path = mla, mlp, mla.model_path

    def _splice(self, base: dict[str, float], dense: dict[str, float]) -> dict[str, float]:
        out = {k: v for k, v in base.items() if not any(e in k for e in EXPERT_OPS)}
        mlp = {k: v for k, v in dense.items() if k in MLP_OPS}
        if len(mlp) != len(MLP_OPS) or "mla_block" not in out:
            raise SpecplanError(f"{self.model_path}: the database's ops ({', '.join(base)}; {', '.join(dense)}) "
                                "are not the MLA block and Llama MLP ops the head is spliced from")
        return out | mlp

    def decode_ops(self, rows: int, context: int) -> dict[str, float]:
        return self._splice(self.mla.decode_ops(rows, context), self.mlp.decode_ops(rows, context))

    def context_ops(self, batch: int, tokens: int, prefix: int) -> dict[str, float]:
        return self._splice(self.mla.context_ops(batch, tokens, prefix), self.mlp.context_ops(batch, tokens, prefix))
