"""Which device we measure on, and the facts about it every profile section records.

A profile is only meaningful next to the machine it was measured on, so device name, memory,
driver and library versions travel with every measured section (docs/profile-format.md).
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import torch

from sim.contracts.errors import SpecplanError
from sim.contracts.machine_identity import COMPARED_LIBRARIES, cpu_name

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(device: str = "auto") -> torch.device:
    """Turn ``auto``/``cpu``/``cuda``/``cuda:N`` into a torch device that exists here."""
    name = (device or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise SpecplanError(f"--device {device}: no CUDA device is available here; use cpu or auto")
        dev = torch.device("cuda:0" if name == "cuda" else name)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise SpecplanError(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
        return dev
    raise SpecplanError(f"--device {device!r}: expected one of auto, cpu, cuda, cuda:N")


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so the host clock reads finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def system_memory_bytes() -> int:
    """Memory usable by this process on a CPU: the cgroup limit if one is set, else physical RAM."""
    total = 0
    try:
        import psutil

        total = int(psutil.virtual_memory().total)
    except Exception:  # psutil is optional; sysconf is the POSIX fallback
        try:
            total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            total = 0
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file, encoding="utf-8") as fh:
                raw = fh.read().strip()
            if raw.isdigit() and 0 < int(raw) < total:
                total = int(raw)
        except OSError:
            continue
    return total


def _nvml_handle(pynvml: Any, index: int) -> Any:
    """NVML numbers all GPUs, CUDA only the visible ones: match by PCI address when we can."""
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        address = f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:{getattr(props, 'pci_device_id', 0):02X}.0"
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(address)
        except Exception:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _nvml_facts(index: int) -> dict[str, Any]:
    """Name, total memory and driver from NVML; empty when NVML is unavailable."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            handle = _nvml_handle(pynvml, index)
            name = pynvml.nvmlDeviceGetName(handle)
            driver = pynvml.nvmlSystemGetDriverVersion()
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return {
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
                "memory_bytes": int(mem.total),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return {}


def device_memory_bytes(device: torch.device) -> int:
    """Total memory of the device the model lives on (system RAM for a CPU)."""
    if device.type == "cuda":
        index = device.index or 0
        facts = _nvml_facts(index)
        if facts.get("memory_bytes"):
            return int(facts["memory_bytes"])
        return int(torch.cuda.get_device_properties(index).total_memory)
    return system_memory_bytes()


def device_facts(device: torch.device) -> dict[str, Any]:
    """The provenance ``device`` object: kind, name, memory_bytes, driver, count."""
    if device.type == "cuda":
        index = device.index or 0
        facts = _nvml_facts(index)
        props = torch.cuda.get_device_properties(index)
        return {
            "kind": "cuda",
            "name": facts.get("name") or props.name,
            "memory_bytes": int(facts.get("memory_bytes") or props.total_memory),
            "driver": facts.get("driver"),
            "count": 1,
            "host_cpu": cpu_name(),
        }
    return {
        "kind": "cpu",
        "name": cpu_name(),
        "memory_bytes": system_memory_bytes(),
        "driver": None,
        "count": 1,
    }


def device_notes(device: torch.device) -> str:
    """Extra facts that change timings (threads on CPU, CUDA runtime on GPU)."""
    if device.type == "cuda":
        return f"cuda={torch.version.cuda}"
    return f"threads={torch.get_num_threads()} cpus={os.cpu_count()}"


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose behaviour the numbers depend on."""
    out: dict[str, str] = {"torch": torch.__version__}
    for dist in ("transformers", *(lib for lib in COMPARED_LIBRARIES if lib != "torch")):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out
