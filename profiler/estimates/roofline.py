"""The roofline cost of one forward pass: FLOPs and bytes on each GPU, communication, efficiency.

``max(FLOPs / (peak · e_c), bytes / (bandwidth · e_b))`` plus tensor-parallel communication
plus a fixed per-step overhead (profiler/estimates/estimate.py's docstring gives the whole model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler.estimates.gpu_specs import GpuSpec
from profiler.model_shape import (
    active_body_params,
    attention_flops_per_query,
    body_bytes_read,
    body_params,
    kv_values_per_token_layer,
)
from sim.contracts.errors import SpecplanError

DTYPE_BYTES: dict[str, float] = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "fp4": 0.5}
"""Bytes per weight or KV value; fp4 counts its values only (block scales add ~6 %, not priced)."""
ACTIVATION_BYTES = 2
"""Activations, embeddings and the LM head stay 16-bit in vLLM's fp8/fp4 checkpoints."""


@dataclass(frozen=True)
class Efficiency:
    """Fractions of datasheet peak a real engine reaches, and fixed per-pass costs."""

    compute: float = 0.6
    bandwidth: float = 0.8
    step_overhead_s: float = 0.0
    """Added to every target pass (decode, verification, prefill)."""
    source: str = "default factors (typical of tuned inference kernels)"
    draft_pass_overhead_s: float = 0.0
    """Added to every draft forward pass (k per D(k))."""
    overhead_source: str = "no fixed overhead"

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise SpecplanError(f"efficiency {name}={v}: must be in (0, 1]")
        for name in ("step_overhead_s", "draft_pass_overhead_s"):
            if getattr(self, name) < 0:
                raise SpecplanError(f"{name.replace('_s', '')} {getattr(self, name)}: must be >= 0 seconds")


def layer_params(arch: dict[str, Any]) -> int:
    """Weights of one decoder layer on average (attention, MLP or experts, two norms)."""
    return int(body_params(arch) // arch["num_layers"])


def kv_heads_per_gpu(arch: dict[str, Any], tp: int) -> int:
    """KV heads each GPU holds: split when there are at least ``tp``, else one replicated."""
    kv = arch["num_kv_heads"]
    return kv // tp if kv >= tp else 1


def forward_cost(arch: dict[str, Any], dtype_bytes: float, batch: int, new_tokens: int, context: int,
                 logit_tokens: int, layers: int | None = None, tp: int = 1,
                 kv_bytes: float | None = None) -> tuple[float, float]:
    """(FLOPs, bytes moved) on each of ``tp`` GPUs of one forward over ``batch × new_tokens`` on
    ``context`` cached tokens (``tp = 1``: the whole model). ``dtype_bytes`` per layer weight,
    ``kv_bytes`` per cached value (default the same); a MoE layer multiplies its active experts
    and reads the experts its tokens touch (profiler/model_shape.py)."""
    n_layers = arch["num_layers"] if layers is None else layers
    kvb = dtype_bytes if kv_bytes is None else kv_bytes
    tokens = batch * new_tokens
    head = arch["vocab_size"] * arch["hidden_size"]
    lin = 2.0 * active_body_params(arch, n_layers) * tokens + 2.0 * head * logit_tokens
    attended = tokens * (context + (new_tokens + 1) / 2.0)
    attn = n_layers * attention_flops_per_query(arch) * attended
    kv_tok = n_layers * kv_values_per_token_layer(arch, tp) * kvb
    head_bytes = max(dtype_bytes, ACTIVATION_BYTES)
    weights = body_bytes_read(arch, tokens, dtype_bytes, n_layers) + (head + arch["hidden_size"]) * head_bytes
    moved = weights / tp + batch * context * kv_tok + tokens * kv_tok
    return (lin + attn) / tp, float(moved)


def comm_time(arch: dict[str, Any], dtype_bytes: int, tokens: int, logit_tokens: int, gpu: GpuSpec,
              tp: int, layers: int | None = None) -> float:
    """Tensor-parallel communication of one forward: two ring all-reduces of the hidden states
    per layer and a gather of the vocab-sharded logits, each a fixed latency plus bytes over the
    one-way interconnect bandwidth."""
    if tp == 1:
        return 0.0
    n_layers = arch["num_layers"] if layers is None else layers
    ring = 2.0 * (tp - 1) / tp
    per_ar = gpu.allreduce_latency_s + ring * tokens * arch["hidden_size"] * dtype_bytes / gpu.interconnect_bandwidth
    gather = gpu.allreduce_latency_s + (tp - 1) / tp * logit_tokens * arch["vocab_size"] * dtype_bytes / gpu.interconnect_bandwidth
    return 2 * n_layers * per_ar + gather


def roofline_time(flops: float, moved: float, gpu: GpuSpec, dtype: str, eff: Efficiency) -> float:
    """Seconds of a pass bound by compute or by memory traffic, whichever is slower."""
    return max(flops / (gpu.flops(dtype) * eff.compute), moved / (gpu.memory_bandwidth * eff.bandwidth)) + eff.step_overhead_s


def pass_time(arch: dict[str, Any], nbytes: float, batch: int, new_tokens: int, context: int, logit_tokens: int,
              gpu: GpuSpec, dtype: str, eff: Efficiency, tp: int = 1, layers: int | None = None,
              kv_bytes: float | None = None) -> float:
    """Seconds of one target-style forward on a replica of ``tp`` GPUs (step overhead included)."""
    flops, moved = forward_cost(arch, nbytes, batch, new_tokens, context, logit_tokens, layers, tp, kv_bytes)
    return (roofline_time(flops, moved, gpu, dtype, eff)
            + comm_time(arch, max(nbytes, ACTIVATION_BYTES), batch * new_tokens, logit_tokens, gpu, tp, layers))
