"""What ``specplan profile estimate`` is asked for, turned into the roofline's inputs (no torch).

Model specs are read as plain ``config.json`` (profiler/hf_config.py), ``--gpu`` is a built-in
name or a spec file (profiler/estimates/gpu_specs.py), and the fixed overheads get their documented
defaults (profiler/estimates/estimate.py) unless the user gives them, with provenance saying which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiler.estimates.estimate import (
    DEFAULT_DRAFT_PASS_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    OVERHEAD_DEFAULT_SOURCE,
    EstimateProposer,
    calibrate,
    estimate_profile,
)
from profiler.estimates.estimate_proposers import estimate_proposer
from profiler.estimates.gpu_specs import resolve_gpu
from profiler.estimates.roofline import Efficiency
from profiler.hf_config import read_config
from profiler.host_proposers import lookup_seconds
from profiler.profile_io import read_profile_dict, safe_name
from sim.contracts.errors import SpecplanError

_DTYPES = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "float16", "bfloat16": "bfloat16",
           "float16": "float16", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4"}
_KV_DTYPES = {"auto": None, "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
              "fp8": "fp8", "fp8_e4m3": "fp8"}
VOCAB_PADDING = 1024
"""Largest vocabulary difference taken as embedding-table padding between models of one family
(Qwen2.5-0.5B 151,936 vs -32B 152,064: same tokenizer, tables padded to different multiples)."""


def efficiency(*, calibrate_from: str | None, compute: float | None, bandwidth: float | None,
               step_overhead_ms: float | None, draft_pass_overhead_ms: float | None) -> Efficiency:
    """Efficiency factors and overheads: calibrated, given, or the documented defaults."""
    for flag, v in (("--step-overhead-ms", step_overhead_ms), ("--draft-pass-overhead-ms", draft_pass_overhead_ms)):
        if v is not None and not v >= 0:
            raise SpecplanError(f"{flag} {v}: must be >= 0 milliseconds")
    given = step_overhead_ms is not None or draft_pass_overhead_ms is not None
    if calibrate_from:
        base = calibrate(read_profile_dict(calibrate_from), calibrate_from)
        # measured times already hold the host overhead the calibration folded in
        step, draft, osrc = 0.0, 0.0, f"folded into the efficiencies calibrated from {calibrate_from}"
        cmp_, bw, src = base.compute, base.bandwidth, base.source
    else:
        d = Efficiency()
        cmp_, bw = compute or d.compute, bandwidth or d.bandwidth
        src = "given on the command line" if (compute or bandwidth) else d.source
        step, draft, osrc = DEFAULT_STEP_OVERHEAD_S, DEFAULT_DRAFT_PASS_OVERHEAD_S, OVERHEAD_DEFAULT_SOURCE
    if given:
        step = step if step_overhead_ms is None else step_overhead_ms * 1e-3
        draft = draft if draft_pass_overhead_ms is None else draft_pass_overhead_ms * 1e-3
        osrc = "given on the command line" + ("" if step_overhead_ms is not None and draft_pass_overhead_ms is not None
                                              else f"; the other: {osrc}")
    return Efficiency(cmp_, bw, step, src, draft, osrc)


def draft_vocab_note(flag: str, draft: dict[str, Any], target: dict[str, Any]) -> str | None:
    """None when the vocabularies match, a note when they differ by embedding padding within one
    family; otherwise one line saying why a draft cannot propose the target's tokens."""
    a, b = draft["architecture"], target["architecture"]
    if a["vocab_size"] == b["vocab_size"]:
        return None
    if a["family"] == b["family"] and abs(a["vocab_size"] - b["vocab_size"]) <= VOCAB_PADDING:
        return (f"vocabulary {a['vocab_size']} vs the target's {b['vocab_size']}: embedding-table padding within "
                f"the {a['family']} family (same tokenizer assumed)")
    raise SpecplanError(
        f"{flag} {draft['id']}: vocabulary {a['vocab_size']} ({a['family']}) differs from the target's "
        f"{b['vocab_size']} ({b['family']}); a draft model must share the target's tokenizer (valid: a "
        f"{b['family']} model whose vocabulary is within {VOCAB_PADDING} of {b['vocab_size']})"
    )


def estimate_from_specs(*, gpu: str, target: str, proposer_models: Sequence[str], proposers: Sequence[str],
                        dtype: str, k_max: int, eff: Efficiency, tensor_parallel_size: int,
                        command: str | None, name: str | None, kv_cache_dtype: str = "auto",
                        host_lookup_us: float | None = None) -> dict[str, Any]:
    """The estimated profile dict for command-line specs; every bad input is one line."""
    spec = resolve_gpu(gpu)
    dt = _DTYPES.get(dtype.lower())
    if dt is None:
        raise SpecplanError(f"--dtype {dtype}: valid for the estimate: bf16, fp16, fp8, fp4")
    if kv_cache_dtype.lower() not in _KV_DTYPES:
        raise SpecplanError(f"--kv-cache-dtype {kv_cache_dtype}: valid: {', '.join(_KV_DTYPES)}")
    tgt = read_config(target)
    props: list[EstimateProposer] = []
    for pspec in proposer_models:
        pc = read_config(pspec, "--proposer-model").identity
        note = draft_vocab_note("--proposer-model", pc, tgt.identity)
        ident = {"kind": "draft_model", "model": pc, **({"note": note} if note else {})}
        props.append(EstimateProposer(safe_name(pc["id"]), ident, pc["architecture"]))
    for text in proposers:
        props.append(estimate_proposer(text.strip(), tgt.identity, tgt.mtp_layers))
    return estimate_profile(gpu=spec, target_identity=tgt.identity, max_positions=tgt.max_positions or 8192,
                            proposers=props, dtype=dt, k_max=k_max, eff=eff, command=command, name=name,
                            tensor_parallel_size=tensor_parallel_size, kv_dtype=_KV_DTYPES[kv_cache_dtype.lower()],
                            lookup_s_per_row=lookup_seconds(host_lookup_us))
