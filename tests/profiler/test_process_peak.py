"""The GPU memory fields of ``memory.process_peak`` without a GPU: the CUDA allocator's peak and
NVML's count are faked at the seam the profiler reads them (``torch.cuda.max_memory_allocated``,
the ``pynvml`` module, ``device._nvml_handle``), so the recorded numbers and their labels are
checked; on a CPU both are absent with the reason said."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from profiler.passes import device as devmod
from profiler.passes.process_peak import ProcessPeak
from sim.contracts.profile import load_profile

CUDA = torch.device("cuda", 0)


class Allocator:
    """A CUDA allocator's peak counter: ``reset`` (what the activation measurement does) drops
    it to the current allocation."""

    def __init__(self) -> None:
        self.peak = 0
        self.asked: list[torch.device] = []

    def max_memory_allocated(self, device: torch.device) -> int:
        self.asked.append(device)
        return self.peak


def fake_nvml(monkeypatch, procs: list[types.SimpleNamespace] | None, *, init_fails: bool = False) -> list[str]:
    """A ``pynvml`` module reporting ``procs`` on the device; returns the calls it saw."""
    calls: list[str] = []
    mod = types.ModuleType("pynvml")

    def init() -> None:
        calls.append("init")
        if init_fails:
            raise RuntimeError("NVML Shared Library Not Found")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlDeviceGetComputeRunningProcesses = lambda handle: (calls.append(f"procs {handle}"), procs)[1]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monkeypatch.setattr(devmod, "_nvml_handle", lambda pynvml, index: f"gpu{index}")
    return calls


@pytest.fixture
def allocator(monkeypatch) -> Allocator:
    alloc = Allocator()
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", alloc.max_memory_allocated)
    return alloc


def test_the_cuda_peak_is_the_highest_over_the_run_across_counter_resets(allocator, monkeypatch):
    fake_nvml(monkeypatch, [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=7 * 2**30)])
    peaks = ProcessPeak(CUDA)
    allocator.peak = 5 * 2**30
    peaks.sample()  # before the activation pass resets the counter
    allocator.peak = 2 * 2**30  # after the reset: a smaller peak since
    out = peaks.section()
    assert out["cuda_max_allocated_bytes"] == 5 * 2**30
    assert out["nvml_process_bytes"] == 7 * 2**30
    assert set(allocator.asked) == {CUDA}
    assert "cuda_max_allocated_bytes: torch.cuda.max_memory_allocated, highest over the run" in out["how"]
    assert "nvml_process_bytes: NVML's count for this process at the end" in out["how"]
    assert "rss_bytes: getrusage ru_maxrss" in out["how"] and out["rss_bytes"] > 0


def test_nvml_reads_only_this_process_and_shuts_down(allocator, monkeypatch):
    calls = fake_nvml(monkeypatch, [types.SimpleNamespace(pid=os.getpid() + 1, usedGpuMemory=9 * 2**30),
                                    types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=3 * 2**30)])
    assert ProcessPeak(CUDA).section()["nvml_process_bytes"] == 3 * 2**30
    assert calls == ["init", "procs gpu0", "shutdown"]


@pytest.mark.parametrize(("procs", "init_fails"), [
    ([types.SimpleNamespace(pid=-1, usedGpuMemory=2**30)], False),  # a container: our pid not visible
    ([types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=None)], False),  # NVML knows no number
    ([], True),  # no NVML library
])
def test_without_an_nvml_number_the_field_is_null_and_says_why(allocator, monkeypatch, procs, init_fails):
    fake_nvml(monkeypatch, procs, init_fails=init_fails)
    allocator.peak = 2**30
    out = ProcessPeak(CUDA).section()
    assert out["nvml_process_bytes"] is None and out["cuda_max_allocated_bytes"] == 2**30
    assert "nvml_process_bytes: not available (nvidia-ml-py missing or the process not visible)" in out["how"]


def test_without_pynvml_installed_the_field_is_null(allocator, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    out = ProcessPeak(CUDA).section()
    assert out["nvml_process_bytes"] is None and "not available" in out["how"]


def test_on_a_cpu_the_gpu_fields_are_absent_with_the_reason_and_cuda_is_never_asked(monkeypatch):
    def no_cuda(*_a, **_k):
        raise AssertionError("a CPU run must not ask CUDA")

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", no_cuda)
    peaks = ProcessPeak(torch.device("cpu"))
    peaks.sample()
    out = peaks.section(resumed=True)
    assert out["cuda_max_allocated_bytes"] is None and out["nvml_process_bytes"] is None
    assert "no GPU: cuda_max_allocated_bytes and nvml_process_bytes not applicable" in out["how"]
    assert "a resumed run: the peaks of this process only" in out["how"]


def test_the_gpu_fields_round_trip_through_the_profile_contract(allocator, monkeypatch, tmp_path: Path):
    fake_nvml(monkeypatch, [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=6 * 2**30)])
    allocator.peak = 4 * 2**30
    section = ProcessPeak(CUDA).section()
    doc = json.loads(Path("profiles/smollm2-135m-cpu.json").read_text(encoding="utf-8"))
    doc["memory"]["process_peak"] = section
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    got = load_profile(path).memory.process_peak
    assert got.cuda_max_allocated_bytes == 4 * 2**30 and got.nvml_process_bytes == 6 * 2**30
    assert got.rss_bytes == section["rss_bytes"] and got.how == section["how"]
