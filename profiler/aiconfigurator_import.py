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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from profiler import aic_database as db
from profiler.aic_grids import GridBuilder, target_forward_notes
from sim.contracts.errors import SpecplanError

BATCH = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CONTEXT = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
PREFILL_TOKENS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
PREFILL_CONTEXT = [0, 512, 1024, 2048, 4096, 8192, 16384, 32768]
DENSE_TOKENS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768]
K_MAX = 8

STEP_OVERHEAD_S = 1.0e-3
DRAFT_PASS_OVERHEAD_S = 0.5e-3
OVERHEAD_NOTE = (
    "assumed default, not in the kernel database: host time per engine step (scheduling, input "
    "preparation, sampling) the GPU kernels do not show; vLLM's blogs of 2024-09-05 (v0.6.0) and "
    "2025-01-27 (V1) describe this cost for Llama-8B on H100 without a per-step figure "
    "(docs/fidelity-gpu.md)"
)
DRAFT_OVERHEAD_NOTE = (
    "assumed default: {ms:.2f} ms of host time per draft pass (kernel launches, proposer "
    "bookkeeping between the k passes), k passes per speculative step; not in the kernel database."
)
EAGLE3_DRAFT_VOCAB = 32000
MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class ImportRequest:
    """What to import; validated against the installed database by :func:`build_profile`."""

    system: str
    backend: str
    target: str
    drafts: tuple[str, ...] = ()
    backend_version: str | None = None
    tp: int = 1
    dtype: str = "bf16"
    command: str | None = None
    assumed_acceptance: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Proposer name -> unconditional survival rate per position (method ``assumed``)."""
    step_overhead_s: float = STEP_OVERHEAD_S
    draft_pass_overhead_s: float = DRAFT_PASS_OVERHEAD_S


def build_profile(req: ImportRequest) -> dict[str, Any]:
    """The profile JSON object (docs/profile-format.md) for ``req``; one-line errors on bad input."""
    if req.dtype not in ("bf16", "bfloat16"):
        raise SpecplanError(f"--dtype {req.dtype!r}: the importer builds bf16 profiles only (valid: bf16)")
    db.require_package()
    t0 = time.perf_counter()
    version = db.resolve_version(req.system, req.backend, req.backend_version)
    tcfg = db.model_config(req.target)
    target = db.compile_engine(req.target, req.system, req.backend, version, req.tp)
    tb = GridBuilder(target)
    proposers: dict[str, Any] = {}
    ptiming: dict[str, Any] = {}
    pmem: dict[str, Any] = {}
    notes: list[str] = []
    for draft in req.drafts:
        name, ident, cfg, note = _proposer(draft, tcfg)
        if name is None:
            continue
        eng = db.compile_engine(cfg, req.system, req.backend, version, req.tp) if isinstance(cfg, str) \
            else _compile_config(cfg, req, version)
        gb = GridBuilder(eng)
        proposers[name] = ident
        ptiming[name] = {
            "draft": gb.draft_grid(BATCH, K_MAX, CONTEXT),
            "overhead": _overhead_grid(req.draft_pass_overhead_s),
            "prefill": gb.prefill_grid(PREFILL_TOKENS, PREFILL_CONTEXT),
            "overhead_provenance": _assumed(DRAFT_OVERHEAD_NOTE.format(ms=req.draft_pass_overhead_s * 1e3), req),
        }
        pmem[name] = _draft_memory(cfg if isinstance(cfg, str) else draft, cfg, req, version)
        notes.append(note)
    meta = db.collection_meta(req.system, req.backend, version)
    timing = {
        "provenance": _provenance(req, version, meta, notes, target_forward_notes()),
        "step_composition": "fused",
        "target_forward": tb.forward_grid(BATCH, K_MAX + 1, CONTEXT),
        "target_prefill": tb.prefill_grid(PREFILL_TOKENS, PREFILL_CONTEXT),
        "fused": tb.fused_grids(DENSE_TOKENS, BATCH, K_MAX + 1, CONTEXT, PREFILL_TOKENS, PREFILL_CONTEXT),
        "step_overhead": {"seconds": req.step_overhead_s, "provenance": _assumed(
            OVERHEAD_NOTE if req.step_overhead_s == STEP_OVERHEAD_S else "chosen on the command line", req)},
        "proposers": ptiming,
    }
    memory = _memory(req, version, pmem)
    profile = {
        "schema": "specplan.profile",
        "schema_version": 1,
        "name": _name(req),
        "description": f"{req.target} bf16 on {req.tp}x {req.system}, {req.backend} {version}: "
                       "timing and memory imported from aiconfigurator-core",
        "target": _identity(db.ALIASES.get(req.target, req.target), tcfg),
        "proposers": proposers,
        "timing": timing,
        "memory": memory,
        "acceptance": _acceptance(req, proposers),
        "x-aiconfigurator": {"library": db.package_version(), "system": req.system, "backend": req.backend,
                             "backend_version": version, "tp": req.tp, "collection_meta": meta,
                             "wall_s": round(time.perf_counter() - t0, 2)},
    }
    if req.tp > 1:
        profile["replica"] = {"tensor_parallel_size": req.tp}
    return profile


def _proposer(draft: str, tcfg: dict) -> tuple[str | None, dict, Any, str]:
    """(name, identity, model id or config dict, provenance note) of one ``--draft`` value."""
    if draft == "none":
        return None, {}, None, ""
    if draft == "mtp":
        n = int(tcfg.get("num_nextn_predict_layers") or 0)
        raise SpecplanError(
            f"--draft mtp: the target has {n} MTP (next-n) modules in its config.json, so there is "
            "nothing to time (valid for this target: none, eagle3, a draft model id)"
        )
    if draft == "eagle3":
        cfg = dict(tcfg)
        cfg.update(num_hidden_layers=1, vocab_size=EAGLE3_DRAFT_VOCAB, tie_word_embeddings=False)
        note = (
            "eagle3: modelled, not a database entry: an EAGLE-3 head priced as one Llama decoder "
            f"layer at the target's hidden size ({tcfg.get('hidden_size')}) with a "
            f"{EAGLE3_DRAFT_VOCAB}-token draft LM head (the EAGLE-3 Llama-3.1 heads' draft vocab), "
            "timed from the same database; the 3h->h fusion of target hidden states is not priced. "
            "First pass over every scheduled token (decode rows x (k+1) and prompt tokens), then "
            "k-1 one-token passes"
        )
        ident = {"kind": "draft_model", "note": "EAGLE-3-style head (one decoder layer) reading the target's hidden states",
                 "model": _identity("eagle3-head-shaped", cfg)}
        return "eagle3", ident, cfg, note
    cfg = db.model_config(draft)
    name = db.ALIASES.get(draft, draft).split("/")[-1].lower()
    note = (
        f"{name}: the draft model's own passes from the same database: first pass over every "
        "scheduled token (decode rows x (k+1), and prompt tokens via timing.proposers.<p>.prefill), "
        "then k-1 one-token passes"
    )
    return name, {"kind": "draft_model", "model": _identity(db.ALIASES.get(draft, draft), cfg)}, draft, note


def _compile_config(cfg: dict, req: ImportRequest, version: str) -> db.Engine:
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(cfg))
        return db.compile_engine(tmp, req.system, req.backend, version, req.tp)


def _overhead_grid(per_pass_s: float) -> dict[str, Any]:
    ks = list(range(1, K_MAX + 1))
    return {"axes": {"batch": BATCH, "k": ks}, "median": [[k * per_pass_s for k in ks] for _ in BATCH]}


def _memory(req: ImportRequest, version: str, pmem: dict[str, Any]) -> dict[str, Any]:
    est = db.memory_estimate(req.target, req.system, req.backend, version, req.tp, MEMORY_UTILIZATION, 8192, 1024)
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
    for name, m in pmem.items():
        free = MEMORY_UTILIZATION * device - weights - act - m["weight_bytes"] - m["activation_peak_bytes"]
        rows.append({"memory_utilization": MEMORY_UTILIZATION, "proposer": name,
                     "kv_tokens": max(int(free // (kv + m["kv_bytes_per_token"])), 0)})
    prov = {
        "method": "imported",
        "device": {"kind": "cuda", "name": req.system, "memory_bytes": device // tp, "count": tp},
        "dtype": "bfloat16",
        "libraries": {"aiconfigurator-core": db.package_version()},
        "date": _now(), "command": req.command,
        "notes": (f"aiconfigurator-core memory model (sdk.memory.estimate_kv_cache, {req.backend} "
                  f"{version}, source {est.get('source')}), per GPU x {tp} GPUs = replica totals; "
                  "activation_peak_bytes = activations + runtime overhead (the package's 'other_mem', "
                  "a non-official allowance) + NCCL buffers"),
    }
    return {"provenance": prov, "device_memory_bytes": device, "target_weight_bytes": weights,
            "target_kv_bytes_per_token": kv, "activation_peak_bytes": act, "proposers": pmem,
            "kv_capacity": rows}


def _draft_memory(model: Any, cfg: Any, req: ImportRequest, version: str) -> dict[str, int]:
    if isinstance(cfg, dict):  # EAGLE-3 head: one layer + draft LM head, sharded like the target
        h, layers = int(cfg["hidden_size"]), 1
        kvh, hd = int(cfg["num_key_value_heads"]), int(cfg.get("head_dim") or h // int(cfg["num_attention_heads"]))
        params = _params(cfg) + 3 * h * h  # the fc fusing three target hidden states
        return {"weight_bytes": 2 * params, "kv_bytes_per_token": 2 * layers * kvh * hd * 2,
                "activation_peak_bytes": 0}
    est = db.memory_estimate(model, req.system, req.backend, version, req.tp, MEMORY_UTILIZATION, 8192, 1024)
    br = est["memory_breakdown"] or {}
    return {"weight_bytes": int(br.get("weights_bytes", 0)) * req.tp,
            "kv_bytes_per_token": int(est["kv_size_per_token_bytes"]) * req.tp,
            "activation_peak_bytes": int(br.get("activations_bytes", 0)) * req.tp}


def _acceptance(req: ImportRequest, proposers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, rates in req.assumed_acceptance.items():
        if name not in proposers:
            raise SpecplanError(f"--assume-acceptance {name}: no such proposer (valid: {', '.join(proposers) or 'none'})")
        drafts = 1000
        acc = [int(round(r * drafts)) for r in rates]
        if any(b > a for a, b in zip(acc, acc[1:], strict=False)) or not all(0 <= r <= 1 for r in rates):
            raise SpecplanError(f"--assume-acceptance {name}: survival rates must lie in [0, 1] and not increase")
        out[name] = {
            "provenance": {"method": "assumed", "date": _now(), "command": req.command,
                           "notes": "assumed survival rates per position, chosen by a person; not measured or "
                                    "imported. Replace with a measured or published entry (specplan profile merge)."},
            "k_max": len(acc),
            "segments": [{"segment": {"task": "chat", "language": "any", "temperature": 0.0},
                          "num_drafts": drafts, "num_draft_tokens": drafts * len(acc),
                          "num_accepted_tokens": sum(acc), "accepted_per_pos": acc}],
        }
    return out


def _provenance(req: ImportRequest, version: str, meta: dict, notes: list[str], tf_note: str) -> dict[str, Any]:
    fams = ", ".join(f"{op} {m.get('provenance')}" for op, m in meta.items() if op in ("gemm", "attention", "comm"))
    return {
        "method": "imported",
        "device": {"kind": "cuda", "name": req.system, "count": req.tp},
        "dtype": "bfloat16",
        "libraries": {"aiconfigurator-core": db.package_version()},
        "models": {"target": req.target},
        "date": _now(),
        "command": req.command,
        "notes": "; ".join([f"aiconfigurator-core {db.package_version()} database {req.system}/{req.backend} "
                            f"{version} tp={req.tp} (collection_meta: {fams or 'none'})", tf_note, *notes]),
    }


def _assumed(note: str, req: ImportRequest) -> dict[str, Any]:
    return {"method": "assumed", "date": _now(), "command": req.command, "notes": note}


def _identity(mid: str, cfg: dict) -> dict[str, Any]:
    h, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    return {"id": mid, "source": "config-only", "sha256": None, "architecture": {
        "family": str(cfg.get("model_type", "llama")), "num_layers": int(cfg["num_hidden_layers"]),
        "hidden_size": h, "intermediate_size": int(cfg.get("intermediate_size", 0)),
        "num_attention_heads": heads, "num_kv_heads": int(cfg.get("num_key_value_heads") or heads),
        "head_dim": int(cfg.get("head_dim") or h // heads), "vocab_size": int(cfg["vocab_size"]),
        "num_parameters": _params(cfg)}}


def _params(cfg: dict) -> int:
    h, i, v = int(cfg["hidden_size"]), int(cfg.get("intermediate_size", 0)), int(cfg["vocab_size"])
    heads = int(cfg["num_attention_heads"])
    kvh, hd = int(cfg.get("num_key_value_heads") or heads), int(cfg.get("head_dim") or h // heads)
    layer = h * hd * (heads * 2 + kvh * 2) + 3 * h * i + 2 * h
    head = 0 if cfg.get("tie_word_embeddings") else v * h
    return v * h + int(cfg["num_hidden_layers"]) * layer + head + h


def _name(req: ImportRequest) -> str:
    base = db.ALIASES.get(req.target, req.target).split("/")[-1].lower().replace("meta-", "")
    tp = f"-tp{req.tp}" if req.tp > 1 else ""
    return f"{base}-{req.system.replace('_', '-')}{tp}-{req.backend}"


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


__all__ = ["ImportRequest", "build_profile"]
