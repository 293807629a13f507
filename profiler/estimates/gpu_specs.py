"""Datasheet figures of the GPUs a roofline estimate can target, built in or from a spec file.

Dense (no structured sparsity) tensor-core throughput, memory bandwidth and capacity, and the
GPU-to-GPU bandwidth a tensor-parallel all-reduce uses, one GPU each, as printed in NVIDIA's
datasheets. A GPU nobody listed here is described in a small TOML or JSON file (``load_gpu_spec``;
format in docs/profile-format.md, "GPU spec files"). Estimates built from them are labelled
``estimated`` and their notes repeat the figures used, so nobody mistakes them for a measurement.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError, read_text

ALLREDUCE_LATENCY_S = 8e-6
"""Assumed fixed cost of one small all-reduce (8 µs): the order of NCCL's and vLLM's custom
all-reduce latency for small messages over NVLink; not measured here. Override per GPU with
``allreduce_latency_us`` in a spec file."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet numbers."""

    name: str
    bf16_flops: float
    """Dense BF16 tensor-core FLOP/s (FP16 is the same on these parts)."""
    memory_bandwidth: float
    """Bytes per second."""
    memory_bytes: int
    source: str
    """Which datasheet the figures come from."""
    aliases: tuple[str, ...] = ()
    interconnect_bandwidth: float = 0.0
    """GPU-to-GPU bytes per second, one direction, per GPU (NVLink; PCIe when none); 0: unknown,
    so tensor parallelism cannot be estimated."""
    allreduce_latency_s: float = ALLREDUCE_LATENCY_S
    """Fixed cost of one all-reduce, whatever its size (assumed unless a spec file says)."""
    fp8_flops: float = 0.0
    """Dense FP8 tensor-core FLOP/s; 0: the GPU has no FP8 tensor cores (A100)."""
    fp4_flops: float = 0.0
    """Dense FP4 tensor-core FLOP/s; 0: none (before Blackwell)."""

    def __post_init__(self) -> None:
        if self.bf16_flops <= 0 or self.memory_bandwidth <= 0 or self.memory_bytes <= 0:
            raise ValueError(f"GpuSpec {self.name}: figures must be positive")
        if self.interconnect_bandwidth < 0 or self.allreduce_latency_s < 0:
            raise ValueError(f"GpuSpec {self.name}: interconnect figures must be >= 0")

    def dtypes(self) -> tuple[str, ...]:
        """Weight dtypes this GPU multiplies on its tensor cores."""
        return ("bf16", "fp16") + (("fp8",) if self.fp8_flops else ()) + (("fp4",) if self.fp4_flops else ())

    def flops(self, dtype: str) -> float:
        """Dense FLOP/s at ``dtype``; one line naming the GPU's dtypes when it has none."""
        rate = {"bfloat16": self.bf16_flops, "float16": self.bf16_flops, "fp8": self.fp8_flops,
                "fp4": self.fp4_flops}.get(dtype, 0.0)
        if not rate:
            raise SpecplanError(f"--dtype {dtype}: {self.name} has no {dtype} tensor cores "
                                f"(valid on {self.name}: {', '.join(self.dtypes())})")
        return rate


GB = 10**9
GIB = 2**30

GPUS: dict[str, GpuSpec] = {
    # Interconnect: the datasheets' NVLink figure is both directions summed (A100 600 GB/s,
    # H100/H200 900 GB/s, B200 1.8 TB/s); an all-reduce ring sends one way, so half is used.
    # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): BF16 312 TFLOPS dense (624 with
    # sparsity), HBM2e 2,039 GB/s, 80 GB.
    "A100-80GB": GpuSpec("A100-80GB", 312e12, 2039 * GB, 80 * GIB,
                         "NVIDIA A100 datasheet, 80GB SXM: 312 TFLOPS BF16 dense, 2,039 GB/s",
                         ("A100", "A100-SXM4-80GB", "A100 80GB"), 300 * GB),  # no FP8 tensor cores
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): BF16 1,979 TFLOPS *with sparsity*, i.e.
    # 989.5 dense; FP8 3,958 with sparsity (1,979 dense); HBM3 3.35 TB/s; 80 GB.
    "H100-SXM": GpuSpec("H100-SXM", 989.5e12, 3350 * GB, 80 * GIB,
                        "NVIDIA H100 datasheet, SXM: 1,979 TFLOPS BF16 with sparsity (989.5 dense), "
                        "3,958 FP8 (1,979 dense), 3.35 TB/s",
                        ("H100", "H100 80GB HBM3", "H100-SXM5-80GB"), 450 * GB, fp8_flops=1979e12),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): BF16 1,979 TFLOPS with sparsity (989.5
    # dense), FP8 3,958 with sparsity (1,979 dense), HBM3e 4.8 TB/s, 141 GB.
    "H200": GpuSpec("H200", 989.5e12, 4800 * GB, 141 * GB,
                    "NVIDIA H200 datasheet, SXM: 1,979 TFLOPS BF16 with sparsity (989.5 dense), 3,958 FP8 "
                    "(1,979 dense), 4.8 TB/s, 141 GB",
                    ("H200-SXM", "H200 141GB"), 450 * GB, fp8_flops=1979e12),
    # NVIDIA L40S datasheet: BF16 733 TFLOPS with sparsity (366 dense), FP8 1,466 with sparsity
    # (733 dense), GDDR6 864 GB/s, 48 GB.
    "L40S": GpuSpec("L40S", 366e12, 864 * GB, 48 * GB,
                    "NVIDIA L40S datasheet: 733 TFLOPS BF16 with sparsity (366 dense), 1,466 FP8 (733 dense), "
                    "864 GB/s, 48 GB; no NVLink: PCIe Gen4 x16, 64 GB/s both ways", (), 32 * GB, fp8_flops=733e12),
    # NVIDIA DGX B200 datasheet: 8 GPUs, 72 PFLOPS FP8 training and 144 PFLOPS FP4 inference
    # (both with sparsity) and 1,440 GB HBM3e at 64 TB/s, i.e. per GPU 2.25 PFLOPS BF16 dense,
    # 4.5 FP8 dense, 9 FP4 dense, 8 TB/s, 180 GB.
    "B200": GpuSpec("B200", 2.25e15, 8000 * GB, 180 * GB,
                    "NVIDIA DGX B200 datasheet per GPU: 2.25 PFLOPS BF16 dense, 4.5 FP8 dense, 9 FP4 dense, "
                    "8 TB/s, 180 GB", ("B200-SXM", "HGX B200"), 900 * GB, fp8_flops=4.5e15, fp4_flops=9e15),
}


def gpu_spec(name: str) -> GpuSpec:
    """Look a GPU up by name or alias (case-insensitive)."""
    key = name.strip().lower()
    for spec in GPUS.values():
        if key == spec.name.lower() or key in (a.lower() for a in spec.aliases):
            return spec
    raise SpecplanError(f"--gpu {name!r}: unknown GPU; known: {', '.join(GPUS)}, or a GPU spec file "
                        "(FILE.toml or FILE.json: docs/profile-format.md, \"GPU spec files\")")


def match_device_name(device_name: str) -> GpuSpec | None:
    """The spec for a device name as CUDA reports it (``NVIDIA H100 80GB HBM3``), if known."""
    text = device_name.lower()
    for key in ("h200", "h100", "a100", "l40s", "b200"):
        if key in text:
            return {"h200": GPUS["H200"], "h100": GPUS["H100-SXM"], "a100": GPUS["A100-80GB"],
                    "l40s": GPUS["L40S"], "b200": GPUS["B200"]}[key]
    return None


_SPEC_KEYS = {
    "name": "a name for the GPU (text)",
    "bf16_tflops": "dense BF16/FP16 tensor TFLOP/s (no sparsity), > 0",
    "memory_bandwidth_gb_s": "memory bandwidth in GB/s (10^9 bytes/s), > 0",
    "memory_gib": "device memory in GiB (2^30 bytes), > 0; or memory_bytes",
    "memory_bytes": "device memory in bytes, > 0; or memory_gib",
    "interconnect_gb_s": "GPU-to-GPU GB/s one direction per GPU (0: no tensor parallelism)",
    "allreduce_latency_us": f"fixed µs per all-reduce (default {ALLREDUCE_LATENCY_S * 1e6:g}, assumed)",
    "fp8_tflops": "dense FP8 tensor TFLOP/s (absent or 0: no FP8 tensor cores)",
    "fp4_tflops": "dense FP4 tensor TFLOP/s (absent or 0: no FP4 tensor cores)",
    "source": "where the figures come from (datasheet, URL), required",
}


def load_gpu_spec(path: str | Path) -> GpuSpec:
    """A GPU described in a TOML (``.toml``) or JSON file; one-line errors name file and key."""
    p = Path(path)
    text = read_text(p, "GPU spec")
    try:
        data = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON (or name the file .toml)"
        raise SpecplanError(f"{p}: not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise SpecplanError(f"{p}: expected a table of GPU figures, got {type(data).__name__}")
    for key in data:
        if key not in _SPEC_KEYS:
            raise SpecplanError(f"{p}: {key}: unknown key; valid: {', '.join(_SPEC_KEYS)}")
    for key in ("name", "bf16_tflops", "memory_bandwidth_gb_s", "source"):
        if key not in data:
            raise SpecplanError(f"{p}: {key}: required ({_SPEC_KEYS[key]})")
    if ("memory_gib" in data) == ("memory_bytes" in data):
        raise SpecplanError(f"{p}: memory_gib: give exactly one of memory_gib or memory_bytes")
    for key in ("name", "source"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise SpecplanError(f"{p}: {key}: expected non-empty text ({_SPEC_KEYS[key]})")

    def num(key: str, default: float | None = None, *, positive: bool = True) -> float:
        v: Any = data.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                or (v <= 0 if positive else v < 0):
            raise SpecplanError(f"{p}: {key}: {'must be > 0' if positive else 'must be >= 0'}, got {v!r} "
                                f"({_SPEC_KEYS[key]})")
        return float(v)

    mem = int(num("memory_gib") * 2**30) if "memory_gib" in data else int(num("memory_bytes"))
    return GpuSpec(
        name=data["name"].strip(), bf16_flops=num("bf16_tflops") * 1e12,
        memory_bandwidth=num("memory_bandwidth_gb_s") * GB, memory_bytes=mem,
        source=f"{data['source'].strip()} (spec file {p.name})",
        interconnect_bandwidth=num("interconnect_gb_s", 0.0, positive=False) * GB,
        allreduce_latency_s=num("allreduce_latency_us", ALLREDUCE_LATENCY_S * 1e6, positive=False) * 1e-6,
        fp8_flops=num("fp8_tflops", 0.0, positive=False) * 1e12,
        fp4_flops=num("fp4_tflops", 0.0, positive=False) * 1e12,
    )


def resolve_gpu(name_or_file: str) -> GpuSpec:
    """``--gpu``: a built-in name, or a path to a ``.toml`` / ``.json`` spec file."""
    if name_or_file.lower().endswith((".toml", ".json")) or Path(name_or_file).is_file():
        return load_gpu_spec(name_or_file)
    return gpu_spec(name_or_file)
