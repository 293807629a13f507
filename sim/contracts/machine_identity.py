"""Which machine a profile was measured on, which one reads it now, and how they differ.

Why: a measured profile is one machine's step times. Run on another CPU, GPU, driver or library
version, every number the simulator prints silently describes the other machine, so every run
that uses a measured profile says in one line when this machine is not the profile's, and
``validate`` names both. The facts here are read without torch (``sim`` never imports it):
``/proc/cpuinfo``, NVML when ``nvidia-ml-py`` is installed, and installed package versions.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from typing import Any

COMPARED_LIBRARIES = ("torch", "numpy", "specplan")
"""Library versions a step time depends on (the profiler records them; both sides compared)."""


@dataclass(frozen=True)
class Machine:
    """The facts of one machine that change step times."""

    cpu: str | None
    """CPU model name (``/proc/cpuinfo``), None when unknown."""
    gpu: str | None = None
    """GPU name; None: no GPU (or, for this machine, none that NVML sees)."""
    driver: str | None = None
    """GPU driver version."""
    libraries: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    """(library, version) pairs, only those known."""

    def describe(self) -> str:
        """One human phrase: ``cpu 'AMD EPYC 7B13', torch 2.5.1, numpy 2.1.0``."""
        parts = []
        if self.gpu:
            parts.append(f"gpu '{self.gpu}'" + (f" (driver {self.driver})" if self.driver else ""))
        parts.append(f"cpu '{self.cpu or 'unknown'}'")
        parts += [f"{k} {v}" for k, v in self.libraries]
        return ", ".join(parts)


def cpu_name() -> str:
    """The CPU's model name: ``/proc/cpuinfo``'s first ``model name``, else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvml_gpu() -> tuple[str | None, str | None]:
    """(name of GPU 0, driver) from NVML; (None, None) without NVML or a GPU."""
    try:
        import pynvml  # nvidia-ml-py, optional

        pynvml.nvmlInit()
    except Exception:  # not installed, or no driver: no GPU this process can see
        return None, None
    try:
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        driver = pynvml.nvmlSystemGetDriverVersion()
        return _text(name), _text(driver)
    except Exception:
        return None, None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


@lru_cache(maxsize=1)
def this_machine() -> Machine:
    """This machine, read once per process."""
    gpu, driver = _nvml_gpu()
    libs = tuple((lib, v) for lib in COMPARED_LIBRARIES if (v := _version(lib)) is not None)
    return Machine(cpu=cpu_name(), gpu=gpu, driver=driver, libraries=libs)


def profile_machine(profile: Any) -> Machine | None:
    """The machine a profile's timing was measured on; None when it was not measured (an
    estimate, an import, a publication: no machine to compare with)."""
    prov = profile.timing.provenance
    dev = prov.device
    if prov.method != "measured" or dev is None:
        return None
    gpu = dev.name if dev.kind != "cpu" else None
    cpu = dev.name if dev.kind == "cpu" else dev.host_cpu
    libs = tuple((lib, prov.libraries[lib]) for lib in COMPARED_LIBRARIES if lib in prov.libraries)
    return Machine(cpu=cpu, gpu=gpu, driver=dev.driver, libraries=libs)


def differences(profiled: Machine, here: Machine) -> list[str]:
    """What differs, each as ``what: here X, profile Y``; a fact unknown on either side is not
    compared (an old profile has no numpy version; a CPU profile has no driver)."""
    out = []
    if profiled.gpu != here.gpu:
        out.append(f"GPU: here {here.gpu or 'none'}, profile {profiled.gpu or 'none'}")
    elif profiled.gpu and profiled.driver and here.driver and profiled.driver != here.driver:
        out.append(f"driver: here {here.driver}, profile {profiled.driver}")
    if profiled.cpu and here.cpu and profiled.cpu != here.cpu:
        out.append(f"CPU: here '{here.cpu}', profile '{profiled.cpu}'")
    mine = dict(here.libraries)
    for lib, version in profiled.libraries:
        if lib in mine and mine[lib] != version:
            out.append(f"{lib}: here {mine[lib]}, profile {version}")
    return out


def machine_line(profile: Any, here: Machine | None = None) -> str | None:
    """The one line a run prints when this machine is not the profile's; None when they match
    or the profile was not measured on a machine."""
    profiled = profile_machine(profile)
    if profiled is None:
        return None
    diff = differences(profiled, here or this_machine())
    if not diff:
        return None
    return (f"machine: profile {profile.name} was measured on another machine ({'; '.join(diff)}): "
            "its step times describe that machine, not this one (specplan validate checks them here)")


def both_machines(profile: Any, here: Machine | None = None) -> str:
    """``validate``'s line naming both machines, whatever they are."""
    here = here or this_machine()
    profiled = profile_machine(profile)
    if profiled is None:
        return (f"machines: profile {profile.name} is {profile.timing.provenance.method}, not measured on a "
                f"machine; this machine: {here.describe()}")
    diff = differences(profiled, here)
    verdict = "the same machine" if not diff else "different: " + "; ".join(diff)
    return f"machines: profile measured on {profiled.describe()}; this machine: {here.describe()} ({verdict})"


__all__ = ["Machine", "both_machines", "cpu_name", "differences", "machine_line", "profile_machine",
           "this_machine"]
