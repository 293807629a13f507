"""Roofline estimate of a profile's timing and memory for a GPU we have no access to.

A forward pass on each of a replica's ``t`` GPUs takes ``max(FLOPs/t / (peak · e_c), bytes/t /
(bandwidth · e_b))`` plus its tensor-parallel communication plus a fixed per-step overhead:
FLOPs are the matmuls (2 · weights · tokens) plus attention over the cached context; bytes are the
weights read once plus the KV cache read and written; with ``t > 1`` every layer all-reduces its
attention and MLP outputs (``2·(t−1)/t · tokens · hidden · bytes`` over the interconnect, plus a
fixed latency each) and the logits are gathered. A draft pass pays its own per-pass overhead.
``e_c`` and ``e_b`` are efficiency factors, by default typical of a tuned serving engine, or
carried over from a profile measured on a known GPU (``calibrate``). The result is labelled
``estimated`` with every figure in its notes; it never has an acceptance section (acceptance must
be measured, imported or published). Only the model's ``config.json`` is read (profiler/
hf_config.py), so no torch or transformers is needed.

Every grid cell is computed from the formula, including cells no engine reaches (KV beyond the
replica's memory, positions beyond the context window): those are listed in ``timing.limits``
but keep the formula's value, because the simulator interpolates toward neighbouring cells and a
null would be filled from a shorter context (sim/contracts/grid.py), under-pricing long contexts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.estimates.gpu_specs import GpuSpec, match_device_name
from profiler.estimates.roofline import (
    ACTIVATION_BYTES,
    DTYPE_BYTES,
    Efficiency,
    forward_cost,
    kv_heads_per_gpu,
    pass_time,
    roofline_time,
)
from profiler.host_proposers import LOOKUP_S_PER_ROW, host_memory, host_timing, lookup_note
from profiler.model_shape import body_params, kv_values_per_token_layer
from profiler.profile_io import assemble, provenance, safe_name
from sim.contracts.errors import SpecplanError

PREFILL_CHUNK = 8192
"""Tokens per prefill step assumed for the activation peak (vLLM's default token budget)."""
LOGIT_ROWS = 256
"""Decode rows whose fp32 logits the activation peak allows for (× (k+1) tokens each)."""
DEFAULT_STEP_OVERHEAD_S = 1e-3
DEFAULT_DRAFT_PASS_OVERHEAD_S = 0.5e-3
OVERHEAD_DEFAULT_SOURCE = (
    "assumed defaults: 1 ms per engine step and 0.5 ms per draft pass, the host-side cost "
    "(scheduling, input preparation, sampling, kernel launch) that specplan issue 16's review "
    "of the step-time model takes as realistic for a vLLM-style engine; not measured on this "
    "GPU - set --step-overhead-ms / --draft-pass-overhead-ms from your own measurements"
)


@dataclass(frozen=True)
class EstimateProposer:
    """A proposer the estimate covers: a draft model's architecture or the target's first layers."""

    name: str
    identity: dict[str, Any]
    arch: dict[str, Any]
    layers: int | None = None
    weight_bytes_extra: bool = True
    resident_params: int | None = None
    """Weights the proposer adds besides the target's (a head sharing the target's embeddings);
    None: its whole architecture's."""
    host: bool = False
    """A host-side lookup (ngram, suffix): no GPU pass, no memory (profiler/host_proposers.py)."""
    resident_at_weight_dtype: bool = False
    """``resident_params`` stored at the weights' dtype (an MTP module of an fp8 checkpoint);
    False: 16-bit, as EAGLE heads are published."""


def _grid_axes(max_pos: int, k_max: int) -> dict[str, tuple[int, ...]]:
    ctx = tuple(c for c in (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
                if c + k_max + 1 <= max_pos) or (min(128, max_pos // 2),)
    return {
        "batch": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),  # to vLLM's 1024 default max_num_seqs
        "tokens_per_seq": tuple(range(1, k_max + 2)),
        "context": ctx,
        "prefill_tokens": tuple(t for t in (16, 64, 256, 1024, 2048, 4096, 8192, 16384) if t <= max_pos),
        "prefill_context": tuple(c for c in (0, 512, 2048, 8192, 32768) if c + 16 <= max_pos),
        "k": tuple(range(1, k_max + 1)),
    }


def _nested(axes: Sequence[Sequence[int]], fn: Any) -> Any:
    def rec(depth: int, coords: list[int]) -> Any:
        if depth == len(axes):
            return fn(*coords)
        return [rec(depth + 1, coords + [v]) for v in axes[depth]]
    return rec(0, [])


def check_tensor_parallel(arch: dict[str, Any], tp: int, who: str, gpu: GpuSpec) -> None:
    """vLLM's rule: ``tp`` divides the attention heads, and the KV heads divide by it or it by
    them (fewer KV heads than GPUs are replicated); a one-line error lists the valid sizes."""
    heads, kv = arch["num_attention_heads"], arch["num_kv_heads"]

    def ok(t: int) -> bool:
        return heads % t == 0 and (kv % t == 0 or t % kv == 0)

    if tp < 1 or not ok(tp):
        valid = [t for t in range(1, heads + 1) if ok(t)]
        raise SpecplanError(
            f"--tensor-parallel-size {tp}: must divide {who}'s {heads} attention heads ({kv} KV heads); "
            f"valid: {', '.join(map(str, valid))}"
        )
    if tp > 1 and gpu.interconnect_bandwidth <= 0:
        raise SpecplanError(f"--tensor-parallel-size {tp}: GPU {gpu.name!r} has no interconnect_gb_s, so "
                            "all-reduce time cannot be estimated; add it to the GPU spec file")


def _weight_bytes(arch: dict[str, Any], nbytes: float) -> int:
    """Layer weights at ``nbytes`` each; embeddings, LM head and norms stay 16-bit (vLLM's fp8
    and fp4 checkpoints quantize the linear layers only). All experts are resident."""
    body = body_params(arch)
    rest = max(arch["num_parameters"] - body, arch["vocab_size"] * arch["hidden_size"] + arch["hidden_size"])
    return int(body * nbytes + rest * max(nbytes, ACTIVATION_BYTES))


def _kv_per_token(arch: dict[str, Any], tp: int, kv_nbytes: float, layers: int | None = None) -> int:
    """KV bytes per token of the whole replica (every GPU's share; MLA's latent on each GPU)."""
    return int(tp * (layers or arch["num_layers"]) * kv_values_per_token_layer(arch, tp) * kv_nbytes)


def _check_fits(who: str, dtype: str, weights: int, act: int, tp: int, gpu: GpuSpec, arch: dict[str, Any]) -> None:
    if weights / tp + act < gpu.memory_bytes:
        return
    gib = 2**30
    fits = [t for t in range(tp + 1, arch["num_attention_heads"] + 1)
            if arch["num_attention_heads"] % t == 0 and weights / t + act < gpu.memory_bytes]
    hint = (f"valid: --tensor-parallel-size {fits[0]} or more (one that divides the heads)" if fits
            else "valid: a GPU with more memory")
    raise SpecplanError(
        f"{who} does not fit: {weights / gib:.1f} GiB of {dtype} weights ({weights / tp / gib:.1f} GiB per GPU "
        f"at tensor_parallel_size {tp}) plus {act / gib:.1f} GiB of activations exceed {gpu.name}'s "
        f"{gpu.memory_bytes / gib:.1f} GiB; {hint}"
    )


def estimate_profile(*, gpu: GpuSpec, target_identity: dict[str, Any], max_positions: int,
                     proposers: Sequence[EstimateProposer], dtype: str, k_max: int, eff: Efficiency,
                     command: str | None, name: str | None = None, tensor_parallel_size: int = 1,
                     kv_dtype: str | None = None, lookup_s_per_row: float = LOOKUP_S_PER_ROW) -> dict[str, Any]:
    """A complete profile (timing + memory, no acceptance) from the roofline; ``dtype`` of the
    weights (bfloat16, float16, fp8, fp4), ``kv_dtype`` of the KV cache (default 16-bit)."""
    if dtype not in DTYPE_BYTES or dtype == "float32":
        raise SpecplanError(f"--dtype {dtype}: the roofline estimate covers bf16, fp16, fp8 and fp4 weights")
    gpu.flops(dtype)  # a dtype the GPU has no tensor cores for is refused here, in one line
    kv_dtype = kv_dtype or (dtype if dtype in ("bfloat16", "float16") else "bfloat16")
    if kv_dtype not in ("bfloat16", "float16", "fp8"):
        raise SpecplanError(f"--kv-cache-dtype {kv_dtype}: valid: auto, bf16, fp16, fp8")
    if kv_dtype == "fp8" and not gpu.fp8_flops:
        raise SpecplanError(f"--kv-cache-dtype fp8: {gpu.name} has no FP8 support (valid on {gpu.name}: bf16, fp16)")
    kvb = DTYPE_BYTES[kv_dtype]
    tp = tensor_parallel_size
    arch = target_identity["architecture"]
    check_tensor_parallel(arch, tp, target_identity["id"], gpu)
    for p in proposers:
        if p.layers is None and not p.host:
            check_tensor_parallel(p.arch, tp, f"draft {p.name}", gpu)
    nbytes = DTYPE_BYTES[dtype]
    ax = _grid_axes(max_positions, k_max)
    kv_tok = _kv_per_token(arch, tp, kvb)
    weight_bytes = _weight_bytes(arch, nbytes)
    act = int(PREFILL_CHUNK * (2 * arch["intermediate_size"] // tp + 4 * arch["hidden_size"]) * ACTIVATION_BYTES
              + LOGIT_ROWS * (k_max + 1) * arch["vocab_size"] * 4)
    _check_fits(f"{target_identity['id']}", dtype, weight_bytes, act, tp, gpu, arch)
    mem_props: dict[str, dict[str, int]] = {}
    for p in proposers:
        if p.host:
            mem_props[p.name] = host_memory()
            continue
        pkv = _kv_per_token(p.arch, tp, kvb, p.layers)
        pw = 0 if not p.weight_bytes_extra else _weight_bytes(p.arch, nbytes)
        if p.resident_params is not None:
            pw = int(p.resident_params * (nbytes if p.resident_at_weight_dtype else max(nbytes, ACTIVATION_BYTES)))
        pact = int(LOGIT_ROWS * p.arch["vocab_size"] * 4)  # per GPU; the profile holds replica totals
        mem_props[p.name] = {"weight_bytes": pw, "kv_bytes_per_token": pkv, "activation_peak_bytes": tp * pact}
        _check_fits(f"{target_identity['id']} with draft {p.name} resident", dtype, weight_bytes + pw,
                    act + pact, tp, gpu, arch)  # per-GPU activations
    limits: list[dict[str, Any]] = []
    # KV the replica could hold at all (memory_utilization 1): beyond it no engine goes
    free = tp * (gpu.memory_bytes - act) - weight_bytes
    unreachable = "no engine reaches it: {why}; value kept from the roofline formula so interpolation stays honest"

    pure = Efficiency(eff.compute, eff.bandwidth, 0.0, eff.source)  # fixed costs go in their own fields

    def fwd(b: int, s: int, c: int) -> float:
        if b * (c + s) * kv_tok > free:
            limits.append({"quantity": "target_forward", "point": {"batch": b, "tokens_per_seq": s, "context": c},
                           "reason": unreachable.format(why="KV cache beyond the replica's memory (estimated)")})
        return pass_time(arch, nbytes, b, s, c, b * s, gpu, dtype, pure, tp, kv_bytes=kvb)

    def pre(n: int, c: int) -> float:
        if c + n > max_positions:
            limits.append({"quantity": "target_prefill", "point": {"tokens": n, "context": c},
                           "reason": unreachable.format(why="beyond the model's context window")})
        return pass_time(arch, nbytes, 1, n, c, 1, gpu, dtype, pure, tp, kv_bytes=kvb)

    timing: dict[str, Any] = {
        "target_forward": {"axes": {"batch": list(ax["batch"]), "tokens_per_seq": list(ax["tokens_per_seq"]),
                                    "context": list(ax["context"])},
                           "median": _nested([ax["batch"], ax["tokens_per_seq"], ax["context"]], fwd)},
        "target_prefill": {"axes": {"tokens": list(ax["prefill_tokens"]), "context": list(ax["prefill_context"])},
                           "median": _nested([ax["prefill_tokens"], ax["prefill_context"]], pre)},
        "proposers": {},
    }
    oh_note = (f"{eff.draft_pass_overhead_s * 1e3:g} ms per draft pass, k passes per step: H(k) = "
               f"k x {eff.draft_pass_overhead_s * 1e3:g} ms ({eff.overhead_source})")
    for p in proposers:
        if p.host:
            timing["proposers"][p.name] = host_timing(
                p.name, list(ax["batch"]), list(ax["k"]), list(ax["context"]), per_row_s=lookup_s_per_row,
                provenance=provenance("assumed", command=command, notes=lookup_note(p.name, lookup_s_per_row)))
            continue

        def draft(b: int, k: int, c: int, p: EstimateProposer = p) -> float:
            return sum(pass_time(p.arch, nbytes, b, 1, c + i, b, gpu, dtype, pure, tp, p.layers, kv_bytes=kvb)
                       for i in range(k))

        timing["proposers"][p.name] = {
            "draft": {"axes": {"batch": list(ax["batch"]), "k": list(ax["k"]), "context": list(ax["context"])},
                      "median": _nested([ax["batch"], ax["k"], ax["context"]], draft)},
            "overhead": {"axes": {"batch": list(ax["batch"]), "k": list(ax["k"])},
                         "median": _nested([ax["batch"], ax["k"]], lambda b, k: k * eff.draft_pass_overhead_s)},
            "overhead_provenance": provenance("assumed", command=command, notes=oh_note),
        }
    timing["step_overhead"] = {
        "seconds": eff.step_overhead_s,
        "provenance": provenance("assumed", command=command,
                                 notes=f"{eff.step_overhead_s * 1e3:g} ms per engine step ({eff.overhead_source})"),
    }
    timing["limits"] = limits
    return _assemble(gpu=gpu, target_identity=target_identity, proposers=proposers, dtype=dtype, kv_dtype=kv_dtype, eff=eff,
                     command=command, name=name, tp=tp, timing=timing, weight_bytes=weight_bytes, act=act,
                     kv_tok=kv_tok, mem_props=mem_props, k_max=k_max, batch_max=LOGIT_ROWS)


def kv_capacity_rows(device_bytes: int, target_w: int, target_act: int, target_kv: int,
                     proposers: dict[str, dict[str, int]],
                     utilizations: Sequence[float] = (0.8, 0.9)) -> list[dict[str, Any]]:
    """KV tokens at each utilisation, target alone and with each draft, by the simulator's formula
    (sim/model/kv_capacity.py) on the replica's totals."""
    rows = []
    for u in utilizations:
        for name in [None, *proposers]:
            p = proposers.get(name, {}) if name else {}
            free = (u * device_bytes - target_act - p.get("activation_peak_bytes", 0)
                    - target_w - p.get("weight_bytes", 0))
            per = target_kv + p.get("kv_bytes_per_token", 0)
            rows.append({"memory_utilization": u, "proposer": name, "kv_tokens": max(0, math.floor(free / per))})
    return rows


def _assemble(*, gpu: GpuSpec, target_identity: dict[str, Any], proposers: Sequence[EstimateProposer],
              dtype: str, kv_dtype: str, eff: Efficiency, command: str | None, name: str | None, tp: int,
              timing: dict[str, Any], weight_bytes: int, act: int, kv_tok: int,
              mem_props: dict[str, dict[str, int]], k_max: int, batch_max: int) -> dict[str, Any]:
    nbytes = DTYPE_BYTES[dtype]
    n_lim = len(timing["limits"])
    tp_note = "" if tp == 1 else (
        f"; tensor parallel {tp}: FLOPs, weights and KV split over {tp} GPUs ({kv_heads_per_gpu(target_identity['architecture'], tp)} "
        f"KV heads each), 2 ring all-reduces per layer + a logits gather at {gpu.interconnect_bandwidth / 1e9:.0f} GB/s one "
        f"way and {gpu.allreduce_latency_s * 1e6:g} us each ({gpu.source})")
    arch = target_identity["architecture"]
    moe = arch.get("moe")
    moe_note = "" if not moe else (
        f"; mixture of experts: all {moe['num_experts']} experts resident, FLOPs from the "
        f"{moe['experts_per_token']} active per token, weight reads from the distinct experts a pass's T tokens "
        f"touch, E*(1-(1-k/E)^T) with uniform routing (assumed; no expert-load skew)")
    mla_note = "" if not arch.get("mla") else "; multi-head latent attention: latent KV cache on every GPU"
    notes = (
        f"roofline on {tp}x {gpu.name} ({gpu.source}): peak {gpu.flops(dtype) / 1e12:.1f} TFLOP/s {dtype}, "
        f"{gpu.memory_bandwidth / 1e9:.0f} GB/s, {gpu.memory_bytes / 2**30:.0f} GiB; efficiency compute "
        f"{eff.compute:.3g}, bandwidth {eff.bandwidth:.3g} ({eff.source}); per-step overhead "
        f"{eff.step_overhead_s * 1e3:g} ms (timing.step_overhead), per-draft-pass overhead "
        f"{eff.draft_pass_overhead_s * 1e3:g} ms (proposers' H(k) = k passes); pass time = "
        f"max(FLOPs/(peak*e_c), bytes/(bw*e_b)) + communication; FLOPs = 2*weights*tokens + attention; "
        f"bytes = weights + KV read/write (KV cache {kv_dtype}){tp_note}{moe_note}{mla_note}; {n_lim} cells no engine reaches keep the formula's value "
        f"(timing.limits)"
    )
    mem_notes = (
        f"estimated, replica totals over {tp} GPU(s): device memory = {tp} x {gpu.name}'s datasheet "
        f"{gpu.memory_bytes / 2**30:.1f} GiB; weights = layer parameters x {nbytes:g} bytes ({dtype}) + "
        f"embeddings and LM head at 16 bits (split over the GPUs); KV bytes per token of all GPUs at "
        f"{DTYPE_BYTES[kv_dtype]:g} bytes per value ({kv_dtype}); activation peak = {tp} x ({PREFILL_CHUNK}-token "
        f"prefill chunk x (2*intermediate/{tp} + 4*hidden) x {ACTIVATION_BYTES} bytes + fp32 logits of "
        f"{batch_max} x {k_max + 1} tokens)"
    )
    models = {"target": f"{target_identity['id']} (architecture only)"}
    models.update({p.name: f"{p.identity.get('model', {}).get('id', p.name)} (architecture only)" for p in proposers})
    dev = {"kind": "cuda", "name": gpu.name, "memory_bytes": gpu.memory_bytes, "driver": None, "count": tp,
           "memory_bandwidth_bytes_per_s": gpu.memory_bandwidth}  # the step-time floor's (timing_sanity)
    timing = {"provenance": provenance("estimated", device=dev, dtype=dtype, models=models,
                                       command=command, notes=notes), **timing}
    memory = {
        "provenance": provenance("estimated", device=dev, dtype=dtype, models=models, command=command, notes=mem_notes),
        "device_memory_bytes": tp * gpu.memory_bytes,
        "target_weight_bytes": weight_bytes,
        "target_kv_bytes_per_token": kv_tok,
        "activation_peak_bytes": tp * act,
        "proposers": mem_props,
        "kv_capacity": kv_capacity_rows(tp * gpu.memory_bytes, weight_bytes, tp * act, kv_tok, mem_props),
    }
    shape = "" if tp == 1 else f"-tp{tp}"
    kvs = "" if kv_dtype in (dtype, "bfloat16") else f"-kv{kv_dtype}"
    pname = name or safe_name(f"{target_identity['id']}-{gpu.name}{shape}-{dtype}{kvs}-estimate")
    out = assemble(
        name=pname,
        description=f"roofline estimate of {target_identity['id']} on {tp}x {gpu.name} ({dtype} weights, "
                    f"{kv_dtype} KV cache); not measured",
        target=target_identity,
        proposers={p.name: p.identity for p in proposers},
        timing=timing,
        memory=memory,
        acceptance={},
    )
    out["replica"] = {"tensor_parallel_size": tp}
    return out


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
