"""A profile's ``memory`` section: weights, KV bytes per token, activations, KV capacities, the
profiler process's measured peak and the memory reserved for other applications."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.contracts.errors import echo, join_path
from sim.contracts.json_reader import json_type, names_or_none
from sim.contracts.profile_identity import IdentityReader, ProposerIdentity, Provenance


@dataclass(frozen=True)
class ProposerMemory:
    weight_bytes: int
    kv_bytes_per_token: int
    activation_peak_bytes: int


@dataclass(frozen=True)
class KvCapacityRow:
    """A KV capacity the profiler measured or computed (for reporting and checking)."""

    memory_utilization: float
    proposer: str | None
    kv_tokens: int


@dataclass(frozen=True)
class KvCheck:
    target_kv_bytes_per_token_measured: float | None
    relative_error: float | None


@dataclass(frozen=True)
class ProcessPeak:
    """The profiling process's peak memory, measured (what the box had to hold beside weights
    and KV while it served: Python, torch, allocator slack, the largest pass's activations)."""

    rss_bytes: int | None
    """Peak resident set size of the whole process (``getrusage`` ``ru_maxrss``); None: unknown."""
    cuda_max_allocated_bytes: int | None = None
    """``torch.cuda.max_memory_allocated`` over the run (GPU runs only)."""
    nvml_process_bytes: int | None = None
    """GPU memory NVML counted for the process at the end (allocator reserve and CUDA context
    included); None without NVML or on a CPU."""
    how: str = ""
    """How each number was read, and what was unavailable."""


@dataclass(frozen=True)
class Reserve:
    """Memory held back for other applications: the KV cache never takes it."""

    bytes: int
    """Bytes subtracted from the KV budget, the replica's total."""
    rule: str
    """How it was chosen (``--reserve-gb 2``, ``--reserve-fraction 0.25 of 16.0 GiB``)."""


@dataclass(frozen=True)
class Memory:
    """Memory numbers that decide KV capacity (sizes in bytes)."""

    provenance: Provenance
    device_memory_bytes: int
    target_weight_bytes: int
    target_kv_bytes_per_token: int
    activation_peak_bytes: int
    proposers: Mapping[str, ProposerMemory] = field(default_factory=dict)
    kv_capacity: tuple[KvCapacityRow, ...] = ()
    kv_check: KvCheck | None = None
    process_peak: ProcessPeak | None = None
    """Absent in profiles written before it was recorded (and in estimates: nothing ran)."""
    reserve: Reserve | None = None
    """None: nothing reserved (the KV budget is ``u · device_memory_bytes`` less weights and
    activations)."""

    @property
    def reserve_bytes(self) -> int:
        return 0 if self.reserve is None else self.reserve.bytes


class MemoryReader(IdentityReader):
    """Reads the memory section."""

    def memory(self, v: Any, path: str, proposers: Mapping[str, ProposerIdentity]) -> Memory:
        v = self.obj(
            v,
            path,
            ("provenance", "device_memory_bytes", "target_weight_bytes", "target_kv_bytes_per_token", "activation_peak_bytes"),
            ("proposers", "kv_capacity", "kv_check", "process_peak", "reserve"),
        )
        prov = self.provenance(v["provenance"], join_path(path, "provenance"))
        pm: dict[str, ProposerMemory] = {}
        for name, p, spec in self.proposer_entries(v, path, proposers):
            spec = self.obj(spec, p, ("weight_bytes", "kv_bytes_per_token", "activation_peak_bytes"))
            pm[name] = ProposerMemory(**{k: self.int_(spec[k], join_path(p, k)) for k in spec if not k.startswith("x-")})
        rows = []
        kraw = v.get("kv_capacity", [])
        kp = join_path(path, "kv_capacity")
        if not isinstance(kraw, list):
            raise self.fail(kp, f"expected a list, got {json_type(kraw)}")
        for i, row in enumerate(kraw):
            rp = f"{kp}[{i}]"
            row = self.obj(row, rp, ("memory_utilization", "proposer", "kv_tokens"))
            u = self.num(row["memory_utilization"], join_path(rp, "memory_utilization"))
            if not 0 < u <= 1:
                raise self.fail(join_path(rp, "memory_utilization"), f"must be in (0, 1], got {u}")
            prop = self.str_(row["proposer"], join_path(rp, "proposer"), nullable=True)
            if prop is not None and prop not in proposers:
                raise self.fail(join_path(rp, "proposer"), f"unknown proposer {echo(prop, 60)} (profile proposers: {names_or_none(proposers)})")
            rows.append(KvCapacityRow(u, prop, self.int_(row["kv_tokens"], join_path(rp, "kv_tokens"))))
        check = None
        if v.get("kv_check") is not None:
            cp = join_path(path, "kv_check")
            c = self.obj(v["kv_check"], cp, (), ("target_kv_bytes_per_token_measured", "relative_error"))
            check = KvCheck(
                self.num(c.get("target_kv_bytes_per_token_measured"), join_path(cp, "target_kv_bytes_per_token_measured"), minimum=0, nullable=True),
                self.num(c.get("relative_error"), join_path(cp, "relative_error"), nullable=True),
            )
        device = self.int_(v["device_memory_bytes"], join_path(path, "device_memory_bytes"), minimum=1)
        peak = self._process_peak(v.get("process_peak"), join_path(path, "process_peak"))
        reserve = self._reserve(v.get("reserve"), join_path(path, "reserve"), device)
        return Memory(
            provenance=prov,
            device_memory_bytes=device,
            target_weight_bytes=self.int_(v["target_weight_bytes"], join_path(path, "target_weight_bytes")),
            target_kv_bytes_per_token=self.int_(v["target_kv_bytes_per_token"], join_path(path, "target_kv_bytes_per_token"), minimum=1),
            activation_peak_bytes=self.int_(v["activation_peak_bytes"], join_path(path, "activation_peak_bytes")),
            proposers=pm,
            kv_capacity=tuple(rows),
            kv_check=check,
            process_peak=peak,
            reserve=reserve,
        )

    def _process_peak(self, v: Any, path: str) -> ProcessPeak | None:
        if v is None:
            return None
        keys = ("rss_bytes", "cuda_max_allocated_bytes", "nvml_process_bytes")
        v = self.obj(v, path, (), (*keys, "how"))
        nums = {k: self.int_(v.get(k), join_path(path, k), minimum=0, nullable=True) for k in keys}
        return ProcessPeak(**nums, how=self.str_(v.get("how", ""), join_path(path, "how")))

    def _reserve(self, v: Any, path: str, device: int) -> Reserve | None:
        if v is None:
            return None
        v = self.obj(v, path, ("bytes", "rule"))
        n = self.int_(v["bytes"], join_path(path, "bytes"), minimum=0)
        if n >= device:
            raise self.fail(join_path(path, "bytes"), f"must be < device_memory_bytes ({device}), got {n}")
        return Reserve(n, self.str_(v["rule"], join_path(path, "rule")))
