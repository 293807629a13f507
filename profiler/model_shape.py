"""Parameter, FLOP and byte counts of a decoder from its architecture: dense, MoE and MLA.

Why one module: the parameter count a profile records, the weight memory of an estimate and
the weights a forward pass reads must agree, so they are all written here once. The
architecture is the profile's ``target.architecture`` dict (profiler/hf_config.py reads it from
``config.json``), optionally with a ``moe`` block (routed experts, experts per token, expert
and shared-expert widths, leading dense layers) and an ``mla`` block (DeepSeek's multi-head
latent attention: low-rank query and key/value projections, a latent KV cache).

A pass over ``T`` tokens reads every non-expert weight once and, in each MoE layer, the experts
its tokens were routed to: with uniform routing of ``k`` of ``E`` experts per token the expected
number of distinct experts is ``E · (1 − (1 − k/E)^T)`` (``expert_coverage``, whose one home is
``sim.contracts.expert_traffic``: the bandwidth floor and the import read it too). Matmul FLOPs use
the active parameters only (shared experts and ``k`` routed ones per token).
"""

from __future__ import annotations

from typing import Any

from sim.contracts.expert_traffic import expert_coverage


def attention_params(arch: dict[str, Any]) -> int:
    """Weights of one layer's attention (projections, MLA's latent norms)."""
    h, heads = arch["hidden_size"], arch["num_attention_heads"]
    mla = arch.get("mla")
    if mla:
        qk = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        qr = mla["q_lora_rank"]
        q = (h * qr + qr + qr * heads * qk) if qr else h * heads * qk
        kv = (h * (mla["kv_lora_rank"] + mla["qk_rope_head_dim"]) + mla["kv_lora_rank"]
              + mla["kv_lora_rank"] * heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"]))
        return int(q + kv + heads * mla["v_head_dim"] * h)
    hd, kvh = arch["head_dim"], arch["num_kv_heads"]
    bias = (heads * hd + 2 * kvh * hd) if arch.get("qkv_bias") else 0
    return int(2 * h * heads * hd + 2 * h * kvh * hd + bias)


def moe_layers(arch: dict[str, Any], layers: int | None = None) -> int:
    """How many of the first ``layers`` (default all) layers are MoE layers."""
    n = arch["num_layers"] if layers is None else layers
    moe = arch.get("moe")
    return 0 if not moe else max(0, n - moe["dense_layers"])


def expert_params(arch: dict[str, Any]) -> int:
    """Weights of one routed expert (gated MLP)."""
    return 3 * arch["hidden_size"] * arch["moe"]["expert_intermediate_size"]


def _shared_params(arch: dict[str, Any]) -> int:
    """A MoE layer's weights besides its routed experts: router and shared experts."""
    moe, h = arch["moe"], arch["hidden_size"]
    return int(h * moe["num_experts"] + 3 * h * moe["shared_intermediate_size"])


def body_params(arch: dict[str, Any], layers: int | None = None) -> int:
    """Weights of the first ``layers`` decoder layers (attention, MLP or experts, two norms)."""
    n = arch["num_layers"] if layers is None else layers
    h = arch["hidden_size"]
    m = moe_layers(arch, n)
    dense = (n - m) * 3 * h * arch["intermediate_size"]
    experts = m * (arch["moe"]["num_experts"] * expert_params(arch) + _shared_params(arch)) if m else 0
    return int(n * (attention_params(arch) + 2 * h) + dense + experts)


def total_params(arch: dict[str, Any], *, tied: bool) -> int:
    """All parameters: embeddings, layers, final norm, and an LM head unless tied."""
    emb = arch["vocab_size"] * arch["hidden_size"]
    return int(emb + body_params(arch) + arch["hidden_size"] + (0 if tied else emb))


def active_body_params(arch: dict[str, Any], layers: int | None = None) -> int:
    """Layer weights one token multiplies through: routed experts count ``k`` times, not ``E``."""
    n = arch["num_layers"] if layers is None else layers
    m = moe_layers(arch, n)
    if not m:
        return body_params(arch, n)
    idle = arch["moe"]["num_experts"] - arch["moe"]["experts_per_token"]
    return int(body_params(arch, n) - m * idle * expert_params(arch))


def body_bytes_read(arch: dict[str, Any], tokens: float, nbytes: float, layers: int | None = None) -> float:
    """Layer weight bytes a pass over ``tokens`` tokens reads (experts at their coverage)."""
    n = arch["num_layers"] if layers is None else layers
    m = moe_layers(arch, n)
    if not m:
        return body_params(arch, n) * nbytes
    moe = arch["moe"]
    unread = moe["num_experts"] - float(expert_coverage(moe["num_experts"], moe["experts_per_token"], tokens))
    return (body_params(arch, n) - m * unread * expert_params(arch)) * nbytes


def kv_values_per_token_layer(arch: dict[str, Any], tp: int) -> int:
    """Cached values per token per layer on each of ``tp`` GPUs: K and V of the GPU's KV heads,
    or MLA's latent plus its rope key (replicated on every GPU, as vLLM does)."""
    mla = arch.get("mla")
    if mla:
        return int(mla["kv_lora_rank"] + mla["qk_rope_head_dim"])
    kv = arch["num_kv_heads"]
    return 2 * (kv // tp if kv >= tp else 1) * arch["head_dim"]


def attention_flops_per_query(arch: dict[str, Any]) -> float:
    """FLOPs per layer for one query token per cached token it attends (scores and values);
    MLA attends in the latent space (vLLM's absorbed decode kernel)."""
    heads = arch["num_attention_heads"]
    mla = arch.get("mla")
    if mla:
        return 2.0 * heads * (2 * mla["kv_lora_rank"] + mla["qk_rope_head_dim"])
    return 4.0 * heads * arch["head_dim"]
