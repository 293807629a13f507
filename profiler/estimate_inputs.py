"""What ``specplan profile estimate`` is asked for, turned into the roofline's inputs (no torch).

Model specs are read as plain ``config.json`` (profiler/hf_config.py), ``--gpu`` is a built-in
name or a spec file (profiler/gpu_specs.py), and the fixed overheads get their documented
defaults (profiler/estimate.py) unless the user gives them, with provenance saying which.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from profiler.estimate import (
    DEFAULT_DRAFT_PASS_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    OVERHEAD_DEFAULT_SOURCE,
    EstimateProposer,
    calibrate,
    estimate_profile,
)
from profiler.gpu_specs import resolve_gpu
from profiler.hf_config import read_config
from profiler.profile_io import read_profile_dict, safe_name
from profiler.roofline import Efficiency
from sim.contracts.errors import SpecplanError

_SELF_RE = re.compile(r"^selfdraft:(\d+)$")
_DTYPES = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "float16", "bfloat16": "bfloat16",
           "float16": "float16"}


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


def estimate_from_specs(*, gpu: str, target: str, proposer_models: Sequence[str], proposers: Sequence[str],
                        dtype: str, k_max: int, eff: Efficiency, tensor_parallel_size: int,
                        command: str | None, name: str | None) -> dict[str, Any]:
    """The estimated profile dict for command-line specs; every bad input is one line."""
    spec = resolve_gpu(gpu)
    dt = _DTYPES.get(dtype.lower())
    if dt is None:
        raise SpecplanError(f"--dtype {dtype}: the estimate covers bf16 and fp16")
    tgt = read_config(target)
    arch = tgt.identity["architecture"]
    props: list[EstimateProposer] = []
    for pspec in proposer_models:
        pc = read_config(pspec).identity
        if pc["architecture"]["vocab_size"] != arch["vocab_size"]:
            raise SpecplanError(f"--proposer-model {pspec}: vocabulary {pc['architecture']['vocab_size']} "
                                f"differs from the target's {arch['vocab_size']}")
        props.append(EstimateProposer(safe_name(pc["id"]), {"kind": "draft_model", "model": pc}, pc["architecture"]))
    for text in proposers:
        m = _SELF_RE.match(text.strip())
        if not m:
            raise SpecplanError(f"--proposer {text}: the estimate covers selfdraft:L and --proposer-model only "
                                "(an n-gram lookup runs on the host and has no roofline)")
        layers, n = int(m.group(1)), arch["num_layers"]
        if not 1 <= layers <= n:
            raise SpecplanError(f"--proposer {text}: layers must be between 1 and {n}")
        props.append(EstimateProposer(f"selfdraft-l{layers}",
                                      {"kind": "self_draft", "layers": list(range(layers)),
                                       "note": f"first {layers} of {n} target layers + target LM head"},
                                      arch, layers=layers, weight_bytes_extra=False))
    return estimate_profile(gpu=spec, target_identity=tgt.identity, max_positions=tgt.max_positions or 8192,
                            proposers=props, dtype=dt, k_max=k_max, eff=eff, command=command, name=name,
                            tensor_parallel_size=tensor_parallel_size)
