"""Roofline estimate of a profile's timing and memory for a GPU we have no access to.

A forward pass takes ``max(FLOPs / (peak · e_c), bytes / (bandwidth · e_b)) + step overhead``:
FLOPs are the matmuls (2 · weights · tokens) plus attention over the cached context; bytes are
the weights read once plus the KV cache read and written. ``e_c`` and ``e_b`` are efficiency
factors, by default typical of a tuned serving engine, or carried over from a profile measured on
a known GPU (``calibrate``). The result is labelled ``estimated`` with every figure in its notes;
it never has an acceptance section (acceptance must be measured, imported or published).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.gpu_specs import GpuSpec, match_device_name
from profiler.memory import kv_capacity_rows
from profiler.profile_io import assemble, provenance, safe_name
from sim.contracts.errors import SpecplanError

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
PREFILL_CHUNK = 8192
"""Tokens per prefill step assumed for the activation peak (vLLM's default token budget)."""


@dataclass(frozen=True)
class Efficiency:
    """Fractions of datasheet peak a real engine reaches, and a fixed per-step cost."""

    compute: float = 0.6
    bandwidth: float = 0.8
    step_overhead_s: float = 0.0
    source: str = "default factors (typical of tuned inference kernels)"

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise SpecplanError(f"efficiency {name}={v}: must be in (0, 1]")
        if self.step_overhead_s < 0:
            raise SpecplanError(f"step overhead {self.step_overhead_s}: must be >= 0 seconds")


def layer_params(arch: dict[str, Any]) -> int:
    """Weights of one llama-style decoder layer (attention, gated MLP, two norms)."""
    h, hd = arch["hidden_size"], arch["head_dim"]
    q = h * arch["num_attention_heads"] * hd
    kv = 2 * h * arch["num_kv_heads"] * hd
    o = arch["num_attention_heads"] * hd * h
    mlp = 3 * h * arch["intermediate_size"]
    return int(q + kv + o + mlp + 2 * h)


def forward_cost(arch: dict[str, Any], dtype_bytes: int, batch: int, new_tokens: int, context: int,
                 logit_tokens: int, layers: int | None = None) -> tuple[float, float]:
    """(FLOPs, bytes moved) of one forward over ``batch × new_tokens`` on ``context`` cached tokens."""
    n_layers = arch["num_layers"] if layers is None else layers
    tokens = batch * new_tokens
    head = arch["vocab_size"] * arch["hidden_size"]
    lin = 2.0 * layer_params(arch) * n_layers * tokens + 2.0 * head * logit_tokens
    attended = tokens * (context + (new_tokens + 1) / 2.0)
    attn = 4.0 * n_layers * arch["num_attention_heads"] * arch["head_dim"] * attended
    kv_tok = 2 * n_layers * arch["num_kv_heads"] * arch["head_dim"] * dtype_bytes
    weights = (layer_params(arch) * n_layers + head + arch["hidden_size"]) * dtype_bytes
    moved = weights + batch * context * kv_tok + tokens * kv_tok
    return lin + attn, float(moved)


def roofline_time(flops: float, moved: float, gpu: GpuSpec, dtype: str, eff: Efficiency) -> float:
    return max(flops / (gpu.flops(dtype) * eff.compute), moved / (gpu.memory_bandwidth * eff.bandwidth)) + eff.step_overhead_s


@dataclass(frozen=True)
class EstimateProposer:
    """A proposer the estimate covers: a draft model's architecture or the target's first layers."""

    name: str
    identity: dict[str, Any]
    arch: dict[str, Any]
    layers: int | None = None
    weight_bytes_extra: bool = True


def _grid_axes(max_pos: int, k_max: int) -> dict[str, tuple[int, ...]]:
    ctx = tuple(c for c in (128, 512, 2048, 8192, 32768) if c + k_max + 1 <= max_pos) or (min(128, max_pos // 2),)
    return {
        "batch": (1, 2, 4, 8, 16, 32, 64, 128, 256),
        "tokens_per_seq": tuple(range(1, k_max + 2)),
        "context": ctx,
        "prefill_tokens": tuple(t for t in (16, 64, 256, 1024, 4096, 8192, 16384) if t <= max_pos),
        "prefill_context": tuple(c for c in (0, 512, 2048, 8192) if c + 16 <= max_pos),
        "k": tuple(range(1, k_max + 1)),
    }


def _nested(axes: Sequence[Sequence[int]], fn: Any) -> Any:
    def rec(depth: int, coords: list[int]) -> Any:
        if depth == len(axes):
            return fn(*coords)
        return [rec(depth + 1, coords + [v]) for v in axes[depth]]
    return rec(0, [])


def estimate_profile(*, gpu: GpuSpec, target_identity: dict[str, Any], max_positions: int,
                     proposers: Sequence[EstimateProposer], dtype: str, k_max: int, eff: Efficiency,
                     command: str | None, name: str | None = None) -> dict[str, Any]:
    """A complete profile (timing + memory, no acceptance) from the roofline."""
    if dtype not in ("bfloat16", "float16"):
        raise SpecplanError(f"--dtype {dtype}: the roofline estimate covers bf16 and fp16 only")
    arch = target_identity["architecture"]
    nbytes = DTYPE_BYTES[dtype]
    ax = _grid_axes(max_positions, k_max)
    kv_tok = 2 * arch["num_layers"] * arch["num_kv_heads"] * arch["head_dim"] * nbytes
    weight_bytes = int((layer_params(arch) * arch["num_layers"] + arch["vocab_size"] * arch["hidden_size"]
                        + arch["hidden_size"]) * nbytes)
    if arch["num_parameters"] * nbytes > weight_bytes:  # untied input embedding lives in memory too
        weight_bytes = int(arch["num_parameters"] * nbytes)
    limits: list[dict[str, Any]] = []
    free = gpu.memory_bytes - weight_bytes

    def fwd(b: int, s: int, c: int) -> float | None:
        if b * (c + s) * kv_tok > free:
            limits.append({"quantity": "target_forward", "point": {"batch": b, "tokens_per_seq": s, "context": c},
                           "reason": "KV cache would exceed device memory (estimated)"})
            return None
        return roofline_time(*forward_cost(arch, nbytes, b, s, c, b * s), gpu, dtype, eff)

    def pre(n: int, c: int) -> float | None:
        if c + n > max_positions:
            limits.append({"quantity": "target_prefill", "point": {"tokens": n, "context": c},
                           "reason": "beyond the model's context window"})
            return None
        return roofline_time(*forward_cost(arch, nbytes, 1, n, c, 1), gpu, dtype, eff)

    timing: dict[str, Any] = {
        "target_forward": {"axes": {"batch": list(ax["batch"]), "tokens_per_seq": list(ax["tokens_per_seq"]),
                                    "context": list(ax["context"])},
                           "median": _nested([ax["batch"], ax["tokens_per_seq"], ax["context"]], fwd)},
        "target_prefill": {"axes": {"tokens": list(ax["prefill_tokens"]), "context": list(ax["prefill_context"])},
                           "median": _nested([ax["prefill_tokens"], ax["prefill_context"]], pre)},
        "proposers": {},
    }
    mem_props: dict[str, dict[str, int]] = {}
    for p in proposers:
        parch = p.arch
        pbytes_tok = 2 * (p.layers or parch["num_layers"]) * parch["num_kv_heads"] * parch["head_dim"] * nbytes

        def draft(b: int, k: int, c: int, p: EstimateProposer = p, parch: dict = parch, pkv: int = pbytes_tok) -> float | None:
            if b * (c + k) * (kv_tok + pkv) > free:
                return None
            return sum(roofline_time(*forward_cost(parch, nbytes, b, 1, c + i, b, layers=p.layers), gpu, dtype, eff)
                       for i in range(k))

        timing["proposers"][p.name] = {
            "draft": {"axes": {"batch": list(ax["batch"]), "k": list(ax["k"]), "context": list(ax["context"])},
                      "median": _nested([ax["batch"], ax["k"], ax["context"]], draft)},
            "overhead": {"axes": {"batch": list(ax["batch"]), "k": list(ax["k"])},
                         "median": _nested([ax["batch"], ax["k"]], lambda b, k: eff.step_overhead_s)},
        }
        pw = 0 if not p.weight_bytes_extra else int(parch["num_parameters"] * nbytes)
        pact = int(max(ax["batch"]) * parch["vocab_size"] * 4)
        mem_props[p.name] = {"weight_bytes": pw, "kv_bytes_per_token": pbytes_tok, "activation_peak_bytes": pact}
    timing["limits"] = limits
    act = int(PREFILL_CHUNK * (2 * arch["intermediate_size"] + 4 * arch["hidden_size"]) * nbytes
              + max(ax["batch"]) * (k_max + 1) * arch["vocab_size"] * 4)
    notes = (
        f"roofline on {gpu.name} ({gpu.source}): peak {gpu.bf16_flops / 1e12:.1f} TFLOP/s {dtype}, "
        f"{gpu.memory_bandwidth / 1e9:.0f} GB/s, {gpu.memory_bytes / 2**30:.0f} GiB; efficiency compute "
        f"{eff.compute:.3g}, bandwidth {eff.bandwidth:.3g}, per-step overhead {eff.step_overhead_s:g} s "
        f"({eff.source}); time = max(FLOPs/(peak*e_c), bytes/(bw*e_b)) + overhead; FLOPs = 2*weights*tokens "
        f"+ attention; bytes = weights + KV read/write; H(k) = the per-step overhead only (bookkeeping not modelled)"
    )
    mem_notes = (
        f"estimated: {gpu.name} capacity from its datasheet; weights = parameters x {nbytes} bytes; "
        f"activation peak = {PREFILL_CHUNK}-token prefill chunk x (2*intermediate + 4*hidden) x {nbytes} bytes "
        f"+ fp32 logits of {max(ax['batch'])} x {k_max + 1} tokens"
    )
    models = {"target": f"{target_identity['id']} (architecture only)"}
    models.update({p.name: f"{p.identity.get('model', {}).get('id', p.name)} (architecture only)" for p in proposers})
    dev = {"kind": "cuda", "name": gpu.name, "memory_bytes": gpu.memory_bytes, "driver": None, "count": 1}
    timing = {"provenance": provenance("estimated", device=dev, dtype=dtype, models=models,
                                       command=command, notes=notes), **timing}
    memory = {
        "provenance": provenance("estimated", device=dev, dtype=dtype, models=models, command=command, notes=mem_notes),
        "device_memory_bytes": gpu.memory_bytes,
        "target_weight_bytes": weight_bytes,
        "target_kv_bytes_per_token": kv_tok,
        "activation_peak_bytes": act,
        "proposers": mem_props,
        "kv_capacity": kv_capacity_rows(gpu.memory_bytes, weight_bytes, act, kv_tok, mem_props),
    }
    pname = name or safe_name(f"{target_identity['id']}-{gpu.name}-{dtype}-estimate")
    return assemble(
        name=pname,
        description=f"roofline estimate of {target_identity['id']} on {gpu.name} ({dtype}); not measured",
        target=target_identity,
        proposers={p.name: p.identity for p in proposers},
        timing=timing,
        memory=memory,
        acceptance={},
    )


def calibrate(measured: dict[str, Any], origin: str) -> Efficiency:
    """Efficiency of a profile measured on a known GPU against that GPU's own roofline.

    Bandwidth efficiency from decode cells (one token per sequence, memory-bound at batch ≤ 8),
    compute efficiency from compute-bound prefill cells; each is the median ratio of roofline
    time at 100% to the measured time.
    """
    tp = measured["timing"]["provenance"]
    if tp.get("method") != "measured":
        raise SpecplanError(f"{origin}: timing.provenance.method: calibration needs a measured profile, got {tp.get('method')!r}")
    dev_name = (tp.get("device") or {}).get("name", "")
    gpu = match_device_name(dev_name)
    if gpu is None:
        raise SpecplanError(f"{origin}: timing.provenance.device.name {dev_name!r}: not a GPU with datasheet figures "
                            "(A100, H100, H200, L40S, B200); calibrate from a profile measured on one of them")
    dtype = tp.get("dtype") or "bfloat16"
    if dtype not in ("bfloat16", "float16"):
        raise SpecplanError(f"{origin}: timing.provenance.dtype {dtype!r}: calibration needs a bf16 or fp16 profile")
    arch = measured["target"]["architecture"]
    nbytes = DTYPE_BYTES[dtype]
    peak = Efficiency(1.0, 1.0, 0.0, "peak")
    bw_ratios, c_ratios = [], []
    tf = measured["timing"]["target_forward"]
    ax = tf["axes"]
    for i, b in enumerate(ax["batch"]):
        for j, s in enumerate(ax["tokens_per_seq"]):
            for k, c in enumerate(ax["context"]):
                t = tf["median"][i][j][k]
                if t is None or s != 1 or b > 8 or t <= 0:
                    continue
                flops, moved = forward_cost(arch, nbytes, b, s, c, b * s)
                if moved / gpu.memory_bandwidth >= flops / gpu.flops(dtype):
                    bw_ratios.append(moved / gpu.memory_bandwidth / t)
    pf = measured["timing"]["target_prefill"]
    for i, n in enumerate(pf["axes"]["tokens"]):
        for k, c in enumerate(pf["axes"]["context"]):
            t = pf["median"][i][k]
            if t is None or t <= 0:
                continue
            flops, moved = forward_cost(arch, nbytes, 1, n, c, 1)
            if flops / gpu.flops(dtype) > moved / gpu.memory_bandwidth:
                c_ratios.append(roofline_time(flops, moved, gpu, dtype, peak) / t)
    if not bw_ratios and not c_ratios:
        raise SpecplanError(f"{origin}: timing: no memory-bound decode or compute-bound prefill cells to calibrate from")
    default = Efficiency()
    e_b = float(np.median(bw_ratios)) if bw_ratios else default.bandwidth
    e_c = float(np.median(c_ratios)) if c_ratios else default.compute
    e_b, e_c = min(1.0, max(e_b, 1e-4)), min(1.0, max(e_c, 1e-4))
    return Efficiency(
        compute=e_c,
        bandwidth=e_b,
        step_overhead_s=0.0,
        source=(f"calibrated from {origin} measured on {dev_name} ({len(bw_ratios)} decode cells"
                f"{'' if bw_ratios else ' - bandwidth default'}, {len(c_ratios)} prefill cells"
                f"{'' if c_ratios else ' - compute default'})"),
    )


def decode_time_batch1(profile: dict[str, Any], context_index: int = 0) -> float:
    """T at batch 1, one token, the first context: what a quick sanity check compares."""
    val = profile["timing"]["target_forward"]["median"][0][0][context_index]
    if val is None or not math.isfinite(val):
        raise SpecplanError("target_forward[batch=1, tokens=1] is not available")
    return float(val)
