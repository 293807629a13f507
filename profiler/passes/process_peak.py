"""The profiling process's peak memory, measured: what a box must hold beside the weights and KV.

Why: weights and KV are a third of what a CPU server holds while it serves (SmolLM2-135M: 513 MiB
of weights, 1.0–1.6 GB of process). A home server sizing its headroom needs the measured peak,
said beside the weights, with how it was read. On a CPU it is the kernel's high-water mark of
the resident set (``getrusage`` ``ru_maxrss``: every page ever resident at once, whatever
Python, torch and the allocator kept); on CUDA the allocator's peak (``max_memory_allocated``,
kept across the resets the activation measurement makes) and NVML's count for this process
(CUDA context and the allocator's cache included).
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

import torch


def rss_peak_bytes() -> int:
    """This process's peak resident set size (Linux reports KiB, macOS bytes)."""
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def _nvml_process_bytes(device: torch.device) -> int | None:
    """GPU memory NVML counts for this process on ``device``; None without NVML."""
    try:
        import pynvml

        from profiler.passes.device import _nvml_handle

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handle = _nvml_handle(pynvml, device.index or 0)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return None  # in a container NVML may not see our pid
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


class ProcessPeak:
    """Running peak over a run: ``sample()`` before anything resets the CUDA counter,
    ``section()`` at the end."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda_peak = 0

    def sample(self) -> None:
        if self.device.type == "cuda":
            self.cuda_peak = max(self.cuda_peak, int(torch.cuda.max_memory_allocated(self.device)))

    def section(self, *, resumed: bool = False) -> dict[str, Any]:
        """``memory.process_peak``: each number with how it was read, or why it is missing."""
        self.sample()
        how = ["rss_bytes: getrusage ru_maxrss, the process's high-water resident set over the whole run "
               "(Python, torch, allocator slack, every phase)"]
        out: dict[str, Any] = {"rss_bytes": rss_peak_bytes(), "cuda_max_allocated_bytes": None,
                               "nvml_process_bytes": None}
        if self.device.type == "cuda":
            out["cuda_max_allocated_bytes"] = self.cuda_peak
            how.append("cuda_max_allocated_bytes: torch.cuda.max_memory_allocated, highest over the run")
            out["nvml_process_bytes"] = _nvml_process_bytes(self.device)
            how.append("nvml_process_bytes: NVML's count for this process at the end (CUDA context and "
                       "allocator cache included)" if out["nvml_process_bytes"] is not None else
                       "nvml_process_bytes: not available (nvidia-ml-py missing or the process not visible)")
        else:
            how.append("no GPU: cuda_max_allocated_bytes and nvml_process_bytes not applicable")
        if resumed:
            how.append("a resumed run: the peaks of this process only, not of the interrupted one")
        out["how"] = "; ".join(how)
        return out
