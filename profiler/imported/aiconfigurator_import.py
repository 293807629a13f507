"""``specplan profile import-aiconfigurator``: a calibration profile from NVIDIA's kernel database.

Why: users plan GPU fleets they do not own. ``aiconfigurator-core`` ships per-kernel times
measured on real GPUs for vLLM, SGLang and TensorRT-LLM; composing them per op gives every grid
the simulator reads (decode, verification at every k+1, prefill, the fused-step decomposition,
draft D(k) and the draft's pass over prompt tokens) plus the package's memory model. Timing and
memory are *imported*; what specplan models on top (how verification attention grows with k,
the EAGLE-3 head as one decoder layer, overheads) is written in the provenance notes, and the
overheads are *assumed* defaults carried with their own provenance. docs/profile-format.md,
"Imported GPU profiles", is the reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from profiler.hf_config import parse_architecture
from profiler.host_proposers import HOST_PROPOSERS, LOOKUP_S_PER_ROW
from profiler.imported import aic_database as db
from profiler.imported import aic_proposers, engine_overhead
from profiler.imported.aic_grids import GridBuilder, target_forward_notes
from profiler.imported.aic_step_terms import (
    cuda_graph_entry,
    fa3_pack_gqa_group,
    host_rows_entry,
    sampler_entry,
)
from profiler.imported.import_sanity import sanitize
from profiler.imported.published_library import prefer_published
from profiler.imported.vllm_kv_dtype import KvChoice, resolve_auto
from sim.contracts.errors import SpecplanError

BATCH = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CONTEXT = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
PREFILL_TOKENS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
PREFILL_CONTEXT = [0, 512, 1024, 2048, 4096, 8192, 16384, 32768]
DENSE_TOKENS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768]
K_MAX = 8

DRAFT_PASS_OVERHEAD_S = 0.5e-3
DRAFT_OVERHEAD_NOTE = (
    "assumed default: {ms:.2f} ms of host time per draft pass (kernel launches, proposer "
    "bookkeeping between the k passes), k passes per speculative step; not in the kernel database."
)
MEMORY_UTILIZATION = 0.9


DTYPES = {"auto": None, "bf16": "bfloat16", "bfloat16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "nvfp4": "nvfp4"}
"""--dtype -> the package's GEMM/MoE quant mode (None: the checkpoint's own, as the package reads it)."""
KV_DTYPES = {"auto": None, "bf16": "bfloat16", "bfloat16": "bfloat16", "fp8": "fp8"}
FP4_SYSTEMS = ("b200", "gb200", "b300", "gb300", "rtx_pro")
"""Systems with FP4 tensor cores (Blackwell); elsewhere fp4 weights are refused."""
NO_FP8_SYSTEMS = ("a100",)
"""Systems without FP8 tensor cores (Ampere); fp8 weights are refused there."""


@dataclass(frozen=True)
class ImportRequest:
    """What to import; validated against the installed database by :func:`build_profile`."""

    system: str
    backend: str
    target: str
    drafts: tuple[str, ...] = ()
    backend_version: str | None = None
    tp: int = 1
    dtype: str = "auto"
    """Weights: auto (the checkpoint's) | bf16 | fp8 | fp4."""
    command: str | None = None
    assumed_acceptance: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Proposer name -> unconditional survival rate per position (method ``assumed``); set aside
    where the published library has a table for the proposer's kind on the target's family."""
    step_overhead_s: float | None = None
    """Host time per step beyond the kernels; None: the engine's (profiler/imported/engine_overhead.py)."""
    step_overhead_of: str | None = None
    """An older engine whose published per-step overhead to write instead (``vllm-0.10.1``)."""
    draft_pass_overhead_s: float = DRAFT_PASS_OVERHEAD_S
    ep: int = 1
    """Expert parallelism of a MoE model: experts split over ``ep`` GPUs, TP ``tp / ep`` within."""
    kv_dtype: str = "auto"
    """KV cache: auto (what vLLM's auto picks: profiler/imported/vllm_kv_dtype.py) | bf16 | fp8."""
    assumed_proposal_rate: dict[str, float] = field(default_factory=dict)
    """Proposer name -> fraction of steps with a proposal (ngram, suffix), method ``assumed``."""
    lookup_s_per_row: float = LOOKUP_S_PER_ROW
    """Host time of an ngram/suffix lookup per request per step (assumed default)."""


def _layout(req: ImportRequest) -> db.Layout:
    """The target's layout from the flags; one line for a dtype the system or database lacks."""
    if req.dtype not in DTYPES:
        raise SpecplanError(f"--dtype {req.dtype!r}: valid for the import: {', '.join(DTYPES)}")
    if req.kv_dtype not in KV_DTYPES:
        raise SpecplanError(f"--kv-cache-dtype {req.kv_dtype!r}: valid for the import: {', '.join(KV_DTYPES)}")
    gemm = DTYPES[req.dtype]
    if gemm == "fp8" and req.system.startswith(NO_FP8_SYSTEMS):
        raise SpecplanError(f"--dtype {req.dtype}: {req.system} has no FP8 tensor cores (valid on {req.system}: "
                            "auto, bf16; fp8 needs Hopper, Ada or Blackwell, e.g. h100_sxm, l40s, b200_sxm)")
    if gemm == "nvfp4" and not req.system.startswith(FP4_SYSTEMS):
        raise SpecplanError(f"--dtype {req.dtype}: {req.system} has no FP4 tensor cores (valid on {req.system}: "
                            "auto, bf16, fp8; fp4 needs a Blackwell system such as b200_sxm)")
    if req.ep < 1:
        raise SpecplanError(f"--ep {req.ep}: must be at least 1 (1: experts tensor-parallel)")
    for name, rate in req.assumed_proposal_rate.items():
        if name not in req.assumed_acceptance:
            raise SpecplanError(f"--assume-proposal-rate {name}: needs --assume-acceptance {name}=r1,r2,... too "
                                f"(valid: {', '.join(req.assumed_acceptance) or 'none given'})")
        if not 0 < rate <= 1:
            raise SpecplanError(f"--assume-proposal-rate {name}={rate:g}: must lie in (0, 1]")
    return db.Layout(tp=req.tp, moe_tp=max(req.tp // req.ep, 1), moe_ep=req.ep, gemm=gemm, moe=gemm, kv=KV_DTYPES[req.kv_dtype])


def _kv_choice(req: ImportRequest, cfg: dict[str, Any]) -> KvChoice:
    """The KV cache dtype: as asked, or what vLLM's ``auto`` picks for this checkpoint."""
    if req.kv_dtype == "auto":
        return resolve_auto(cfg, *db.quant_config(req.target))
    mode = KV_DTYPES[req.kv_dtype]
    return KvChoice(mode, f"KV cache {mode}: as asked (--kv-cache-dtype {req.kv_dtype})")


def build_profile(req: ImportRequest) -> dict[str, Any]:
    """The profile JSON object (docs/profile-format.md) for ``req``; one-line errors on bad input."""
    layout = _layout(req)
    step_overhead = _step_overhead(req)  # a bad --step-overhead-of: one line, before any work
    db.require_package()
    t0 = time.perf_counter()
    version = db.resolve_version(req.system, req.backend, req.backend_version)
    tcfg = db.model_config(req.target)
    kv = _kv_choice(req, tcfg)
    layout = replace(layout, kv=kv.mode)
    db.check_layout(req.target, tcfg, layout)
    target = db.compile_engine(req.target, req.system, req.backend, version, layout)
    tb = GridBuilder(target, fa3_pack_gqa_group(req.backend, req.system, tcfg))
    quant = db.resolved_quant(req.target, req.backend, layout)
    memory = _target_memory(req, version, layout, quant, kv)
    ctx = aic_proposers.Context(
        target=req.target, target_cfg=tcfg, target_grid=tb,
        target_memory={"weight_bytes": memory["target_weight_bytes"], "kv_bytes_per_token": memory["target_kv_bytes_per_token"]},
        system=req.system, backend=req.backend, version=version,
        layout=db.Layout(tp=req.tp, moe_tp=layout.moe_tp, moe_ep=layout.moe_ep,
                         gemm=layout.gemm if layout.gemm != "nvfp4" else None, kv=quant["kv_cache"]),
        grids=aic_proposers.Grids(BATCH, K_MAX, CONTEXT, PREFILL_TOKENS, PREFILL_CONTEXT),
        overhead=lambda: {"overhead": _overhead_grid(req.draft_pass_overhead_s), "overhead_provenance": _assumed(
            DRAFT_OVERHEAD_NOTE.format(ms=req.draft_pass_overhead_s * 1e3), req)},
        assumed=lambda note: _assumed(note, req), identity=_identity, lookup_s_per_row=req.lookup_s_per_row)
    built = [p for p in (aic_proposers.build(d, ctx) for d in dict.fromkeys(req.drafts)) if p is not None]
    proposers = {p.name: p.identity for p in built}
    _add_proposer_memory(memory, {p.name: p.memory for p in built})
    meta = db.collection_meta(req.system, req.backend, version)
    timing = {
        "provenance": _provenance(req, version, meta, [p.note for p in built],
                                  "; ".join(filter(None, (target_forward_notes(tb.pack_gqa_group), target.routing))), layout, quant, kv),
        "step_composition": "fused",
        "target_forward": tb.forward_grid(BATCH, K_MAX + 1, CONTEXT),
        "target_prefill": tb.prefill_grid(PREFILL_TOKENS, PREFILL_CONTEXT),
        "fused": tb.fused_grids(DENSE_TOKENS, BATCH, K_MAX + 1, CONTEXT, PREFILL_TOKENS, PREFILL_CONTEXT),
        "step_overhead": step_overhead,
        "proposers": {p.name: p.timing for p in built},
    }
    target_id = _identity(db.ALIASES.get(req.target, req.target), tcfg)
    vocab = int(target_id["architecture"]["vocab_size"])
    for key, entry in (("sampler", sampler_entry(vocab, req.system, lambda n: _assumed(n, req))),
                       ("cuda_graphs", cuda_graph_entry(req.backend, version, lambda n: _assumed(n, req))),
                       ("host_rows", host_rows_entry(req.backend, lambda n: _assumed(n, req)))):
        if entry is not None:
            timing[key] = entry
    wdt, kdt = quant["weights"], quant["kv_cache"]
    profile = {
        "schema": "specplan.profile",
        "schema_version": 1,
        "name": _name(req),
        "description": f"{req.target} ({wdt} weights, {kdt} KV cache) on {req.tp}x {req.system}"
                       f"{f' (experts EP={req.ep})' if req.ep > 1 else ''}, {req.backend} {version}: "
                       "timing and memory imported from aiconfigurator-core",
        "target": target_id,
        "proposers": proposers,
        "timing": timing,
        "memory": memory,
        "acceptance": _acceptance(req, proposers),
        "x-aiconfigurator": {"library": db.package_version(), "system": req.system, "backend": req.backend,
                             "backend_version": version, "tp": req.tp, "moe_tp": layout.moe_tp, "moe_ep": layout.moe_ep,
                             "quant_modes": quant,
                             "collection_meta": meta, "wall_s": round(time.perf_counter() - t0, 2)},
    }
    if req.tp > 1:
        profile["replica"] = {"tensor_parallel_size": req.tp}
    sanitize(profile, _name(req))  # step-time rules: repaired, and said in timing.provenance.notes
    prefer_published(profile, req.command)  # measured > published > assumed: a cited table wins
    return profile


def _overhead_grid(per_pass_s: float) -> dict[str, Any]:
    ks = list(range(1, K_MAX + 1))
    return {"axes": {"batch": BATCH, "k": ks}, "median": [[k * per_pass_s for k in ks] for _ in BATCH]}


def _target_memory(req: ImportRequest, version: str, layout: db.Layout, quant: dict[str, str],
                   kv_choice: KvChoice) -> dict[str, Any]:
    est = db.memory_estimate(req.target, req.system, req.backend, version, layout, MEMORY_UTILIZATION, 8192, 1024)
    br = est["memory_breakdown"] or {}
    tp = req.tp
    device = int(est["total_gpu_capacity_bytes"]) * tp
    weights = int(br.get("weights_bytes", 0)) * tp
    act = int(br.get("activations_bytes", 0) + br.get("runtime_overhead_bytes", 0) + br.get("comm_overhead_bytes", 0)) * tp
    kv = int(est["kv_size_per_token_bytes"]) * tp
    if weights + act >= MEMORY_UTILIZATION * device:
        raise SpecplanError(
            f"{req.target} does not fit on {tp}x {req.system}: weights and activations need "
            f"{(weights + act) / 2**30:.0f} GiB of {MEMORY_UTILIZATION * device / 2**30:.0f} GiB usable (try a larger --tp)"
        )
    rows = [{"memory_utilization": MEMORY_UTILIZATION, "proposer": None,
             "kv_tokens": int((MEMORY_UTILIZATION * device - weights - act) // kv)}]
    prov = {
        "method": "imported",
        "device": {"kind": "cuda", "name": req.system, "memory_bytes": device // tp, "count": tp},
        "dtype": quant["weights"],
        "libraries": {"aiconfigurator-core": db.package_version()},
        "date": _now(), "command": req.command,
        "notes": (f"aiconfigurator-core memory model (sdk.memory.estimate_kv_cache, {req.backend} "
                  f"{version}, source {est.get('source')}), per GPU x {tp} GPUs = replica totals; "
                  f"{_quant_note(req, quant, kv_choice)}"
                  f"{f', experts TP {layout.moe_tp} x EP {layout.moe_ep}' if layout.moe_ep > 1 else ''}; "
                  "activation_peak_bytes = activations + runtime overhead (the package's 'other_mem', "
                  "a non-official allowance) + NCCL buffers"),
    }
    return {"provenance": prov, "device_memory_bytes": device, "target_weight_bytes": weights,
            "target_kv_bytes_per_token": kv, "activation_peak_bytes": act, "proposers": {},
            "kv_capacity": rows}


def _add_proposer_memory(memory: dict[str, Any], pmem: dict[str, dict[str, int]]) -> None:
    """Each proposer's resident memory and the KV capacity left with it."""
    device, weights, act = memory["device_memory_bytes"], memory["target_weight_bytes"], memory["activation_peak_bytes"]
    kv = memory["target_kv_bytes_per_token"]
    memory["proposers"] = pmem
    for name, m in pmem.items():
        free = MEMORY_UTILIZATION * device - weights - act - m["weight_bytes"] - m["activation_peak_bytes"]
        memory["kv_capacity"].append({"memory_utilization": MEMORY_UTILIZATION, "proposer": name,
                                      "kv_tokens": max(int(free // (kv + m["kv_bytes_per_token"])), 0)})


def _acceptance(req: ImportRequest, proposers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, rates in req.assumed_acceptance.items():
        if name not in proposers:
            raise SpecplanError(f"--assume-acceptance {name}: no such proposer (valid: {', '.join(proposers) or 'none'})")
        drafts = 1000
        acc = [int(round(r * drafts)) for r in rates]
        if any(b > a for a, b in zip(acc, acc[1:], strict=False)) or not all(0 <= r <= 1 for r in rates):
            raise SpecplanError(f"--assume-acceptance {name}: survival rates must lie in [0, 1] and not increase")
        rate = req.assumed_proposal_rate.get(name)
        seg = {"segment": {"task": "chat", "language": "any", "temperature": 0.0},
               "num_drafts": drafts, "num_draft_tokens": drafts * len(acc),
               "num_accepted_tokens": sum(acc), "accepted_per_pos": acc}
        note = ("assumed survival rates per position, chosen by a person; not measured or imported. Replace "
                "with a measured or published entry (specplan profile merge).")
        if rate is not None:
            seg["num_steps"] = int(round(drafts / rate))
            note += f" Assumed proposal rate {rate:g}: a proposal at {rate:.0%} of steps (num_steps)."
        elif proposers[name].get("kind") in HOST_PROPOSERS:
            note += " Every step assumed to have a proposal (no --assume-proposal-rate given)."
        out[name] = {
            "provenance": {"method": "assumed", "date": _now(), "command": req.command, "notes": note},
            "k_max": len(acc),
            "segments": [seg],
        }
    return out


def _quant_note(req: ImportRequest, quant: dict[str, str], kv: KvChoice) -> str:
    how = "as asked" if req.dtype != "auto" else "the checkpoint's, as the package reads it"
    text = f"weights {quant['weights']} ({how})" + (f", experts {quant['experts']}" if "experts" in quant else "")
    return f"{text}; {kv.reason}"


def _provenance(req: ImportRequest, version: str, meta: dict, notes: list[str], tf_note: str,
                layout: db.Layout, quant: dict[str, str], kv: KvChoice) -> dict[str, Any]:
    fams = ", ".join(f"{op} {m.get('provenance')}" for op, m in meta.items()
                     if op in ("gemm", "attention", "comm", "moe", "mla"))
    return {
        "method": "imported",
        "device": {"kind": "cuda", "name": req.system, "count": req.tp},
        "dtype": quant["weights"],
        "libraries": {"aiconfigurator-core": db.package_version()},
        "models": {"target": req.target},
        "date": _now(),
        "command": req.command,
        "notes": "; ".join([f"aiconfigurator-core {db.package_version()} database {req.system}/{req.backend} "
                            f"{version} tp={req.tp}"
                            f"{f' moe_tp={layout.moe_tp} moe_ep={layout.moe_ep}' if layout.moe_ep > 1 else ''}, "
                            f"{_quant_note(req, quant, kv)} (collection_meta: {fams or 'none'})", tf_note, *notes]),
    }


def _step_overhead(req: ImportRequest) -> dict[str, Any]:
    h = engine_overhead.step_overhead(req.backend, req.step_overhead_s, req.step_overhead_of)
    cite = {"citation": h.citation} if h.citation else {}
    return {"seconds": h.seconds, "provenance": {**_assumed(h.note, req), "method": h.method, **cite}}


def _assumed(note: str, req: ImportRequest) -> dict[str, Any]:
    return {"method": "assumed", "date": _now(), "command": req.command, "notes": note}


def _identity(mid: str, cfg: dict) -> dict[str, Any]:
    """A config-only identity; MoE and MLA blocks as profiler/hf_config.py reads them."""
    arch, mp, _n = parse_architecture(cfg, mid)
    return {"id": mid, "source": "config-only", "sha256": None, "architecture": arch,
            **({"max_model_len": mp} if mp and mp >= 2 else {})}


def _name(req: ImportRequest) -> str:
    base = db.ALIASES.get(req.target, req.target).split("/")[-1].lower().replace("meta-", "")
    tp = f"-tp{req.tp}" if req.tp > 1 else ""
    ep = f"-ep{req.ep}" if req.ep > 1 else ""
    dt = "" if req.dtype in ("auto", "bf16", "bfloat16") else f"-{req.dtype}"
    kv = "" if req.kv_dtype in ("auto", "bf16", "bfloat16") else f"-kv{req.kv_dtype}"
    return f"{base}-{req.system.replace('_', '-')}{tp}{ep}{dt}{kv}-{req.backend}"


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


__all__ = ["ImportRequest", "build_profile"]
