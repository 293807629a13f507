"""Datasheet figures of the GPUs a roofline estimate can target.

Dense (no structured sparsity) tensor-core throughput, memory bandwidth and capacity, one GPU
each, as printed in NVIDIA's datasheets. Estimates built from them are labelled ``estimated`` and
their notes repeat the figures used, so nobody mistakes them for a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.contracts.errors import SpecplanError


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

    def __post_init__(self) -> None:
        if self.bf16_flops <= 0 or self.memory_bandwidth <= 0 or self.memory_bytes <= 0:
            raise ValueError(f"GpuSpec {self.name}: figures must be positive")

    def flops(self, dtype: str) -> float:
        if dtype in ("bfloat16", "float16"):
            return self.bf16_flops
        raise SpecplanError(f"--dtype {dtype}: the roofline estimate covers bfloat16 and float16 only")


GB = 10**9
GIB = 2**30

GPUS: dict[str, GpuSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): BF16 312 TFLOPS dense (624 with
    # sparsity), HBM2e 2,039 GB/s, 80 GB.
    "A100-80GB": GpuSpec("A100-80GB", 312e12, 2039 * GB, 80 * GIB,
                         "NVIDIA A100 datasheet, 80GB SXM: 312 TFLOPS BF16 dense, 2,039 GB/s",
                         ("A100", "A100-SXM4-80GB", "A100 80GB")),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): BF16 1,979 TFLOPS *with sparsity*, i.e.
    # 989.5 dense; HBM3 3.35 TB/s; 80 GB.
    "H100-SXM": GpuSpec("H100-SXM", 989.5e12, 3350 * GB, 80 * GIB,
                        "NVIDIA H100 datasheet, SXM: 1,979 TFLOPS BF16 with sparsity (989.5 dense), 3.35 TB/s",
                        ("H100", "H100 80GB HBM3", "H100-SXM5-80GB")),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): BF16 1,979 TFLOPS with sparsity (989.5
    # dense), HBM3e 4.8 TB/s, 141 GB.
    "H200": GpuSpec("H200", 989.5e12, 4800 * GB, 141 * GB,
                    "NVIDIA H200 datasheet, SXM: 1,979 TFLOPS BF16 with sparsity (989.5 dense), 4.8 TB/s, 141 GB",
                    ("H200-SXM", "H200 141GB")),
    # NVIDIA L40S datasheet: BF16 733 TFLOPS with sparsity (366 dense), GDDR6 864 GB/s, 48 GB.
    "L40S": GpuSpec("L40S", 366e12, 864 * GB, 48 * GB,
                    "NVIDIA L40S datasheet: 733 TFLOPS BF16 with sparsity (366 dense), 864 GB/s, 48 GB"),
    # NVIDIA DGX B200 datasheet: 8 GPUs, 72 PFLOPS FP8 training (sparse) and 1,440 GB HBM3e at
    # 64 TB/s, i.e. per GPU 2.25 PFLOPS BF16 dense, 8 TB/s, 180 GB.
    "B200": GpuSpec("B200", 2.25e15, 8000 * GB, 180 * GB,
                    "NVIDIA DGX B200 datasheet per GPU: 2.25 PFLOPS BF16 dense, 8 TB/s, 180 GB",
                    ("B200-SXM", "HGX B200")),
}


def gpu_spec(name: str) -> GpuSpec:
    """Look a GPU up by name or alias (case-insensitive)."""
    key = name.strip().lower()
    for spec in GPUS.values():
        if key == spec.name.lower() or key in (a.lower() for a in spec.aliases):
            return spec
    raise SpecplanError(f"--gpu {name!r}: unknown GPU; known: {', '.join(GPUS)}")


def match_device_name(device_name: str) -> GpuSpec | None:
    """The spec for a device name as CUDA reports it (``NVIDIA H100 80GB HBM3``), if known."""
    text = device_name.lower()
    for key in ("h200", "h100", "a100", "l40s", "b200"):
        if key in text:
            return {"h200": GPUS["H200"], "h100": GPUS["H100-SXM"], "a100": GPUS["A100-80GB"],
                    "l40s": GPUS["L40S"], "b200": GPUS["B200"]}[key]
    return None
