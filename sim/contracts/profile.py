"""Load and validate a calibration profile (docs/profile-format.md) into frozen dataclasses.

The profile is the only way measured numbers reach the simulator, so every violation of the
contract is refused here with one line naming the file, the JSON path and what is valid; a
profile that loads is safe to interpolate and sample from without further checks.

The sections are their own modules (``profile_identity``, ``profile_timing``,
``profile_memory``, ``profile_acceptance``); this one holds the document and its loader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError, echo, join_path, read_text, where
from sim.contracts.input_limits import check_nesting, check_tree
from sim.contracts.json_reader import decode_failure
from sim.contracts.profile_acceptance import AcceptanceEntry, AcceptanceReader
from sim.contracts.profile_cold_start import ColdStart, ColdStartReader
from sim.contracts.profile_identity import PROFILE_NAME_RE, ModelIdentity, ProposerIdentity
from sim.contracts.profile_memory import Memory, MemoryReader
from sim.contracts.profile_timing import Timing, TimingReader
from sim.contracts.timing_sanity import Sanity, check, repaired_note

SCHEMA = "specplan.profile"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ReplicaShape:
    """The replica the profile describes: how many GPUs one engine instance spans.

    Timing is the whole replica's step (all-reduces included); every ``memory`` number is the
    replica's total over its GPUs: device memory = GPUs × one GPU's, weights and KV as sharded,
    activations summed (docs/profile-format.md, ``replica``).
    """

    tensor_parallel_size: int = 1
    """GPUs sharding the model by tensor parallelism (1: a one-device replica)."""


@dataclass(frozen=True)
class Profile:
    """A validated calibration profile; build with :func:`load_profile` or :meth:`from_dict`."""

    origin: str
    """File (or label) the profile came from; used in error messages."""
    name: str
    description: str
    target: ModelIdentity
    proposers: Mapping[str, ProposerIdentity]
    timing: Timing
    memory: Memory
    acceptance: Mapping[str, AcceptanceEntry]
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Top-level ``x-*`` keys, kept and ignored."""
    replica: ReplicaShape = field(default_factory=ReplicaShape)
    """Replica shape the timing and memory were built for (optional key; default one GPU)."""
    cold_start: ColdStart | None = None
    """Load and first request after it, measured (optional key; absent: not measured)."""

    @classmethod
    def from_dict(cls, d: Any, origin: str) -> Profile:
        """Validate a parsed profile; ``origin`` names it in error messages."""
        check_tree(d, origin, "profile")
        return _ProfileReader(origin).profile(d)

    @cached_property
    def timing_sanity(self) -> Sanity:
        """The step-time rules checked on this profile's grids (sim/contracts/timing_sanity.py),
        at the load tolerance; computed on first use, once."""
        return check(self)

    @property
    def timing_flags(self) -> tuple[str, ...]:
        """Said in every run's notes: one line per grid that breaks a rule (never repaired here),
        after one naming the grids the import repaired, if it did."""
        repaired = repaired_note(self.timing.provenance.notes)
        flags = self.timing_sanity.notes(f"{self.timing.provenance.method} timing, used as is")
        return tuple(([repaired] if repaired else []) + flags)

    def sources(self) -> list[str]:
        """One line per section provenance, for printing next to results."""
        lines = [
            f"timing: {self.timing.describe()}",
            f"memory: {self.memory.provenance.describe()}",
        ]
        for name, entry in self.acceptance.items():
            lines.append(f"acceptance[{name}]: {entry.provenance.describe()}")
        return lines

    def error(self, field_path: str, message: str) -> SpecplanError:
        """A one-line error about a field of this profile (for callers that check references)."""
        return SpecplanError(f"{where(self.origin, field_path)}: {message}")


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile JSON file; any problem is one ``SpecplanError`` line."""
    p = Path(path)
    return parse_profile_text(read_text(p, "profile"), str(p))


def load_profile_document(path: str | Path) -> tuple[dict[str, Any], Profile]:
    """The profile file's JSON document and its validated ``Profile``: for tools that rewrite a
    few values and write the profile back (``specplan calibrate``), validated first."""
    p = Path(path)
    text = read_text(p, "profile")
    profile = parse_profile_text(text, str(p))
    return json.loads(text), profile


def parse_profile_text(text: str, origin: str) -> Profile:
    """Validate profile JSON text (a file's or an upload's); ``origin`` names it in errors."""
    check_nesting(text, origin, "JSON", toml=False)
    try:
        data = json.loads(text)
    except (RecursionError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise decode_failure(exc, origin, 0 if isinstance(exc, json.JSONDecodeError) else 1,
                             "numbers within the field's range") from None
    return Profile.from_dict(data, origin)


class _ProfileReader(TimingReader, MemoryReader, AcceptanceReader, ColdStartReader):
    """The whole document: schema, identity, then each section."""

    def profile(self, d: Any) -> Profile:
        d = self.obj(
            d,
            "",
            ("schema", "schema_version", "name", "description", "target", "proposers", "timing", "memory"),
            ("acceptance", "replica", "cold_start"),
        )
        if d["schema"] != SCHEMA:
            raise self.fail("schema", f"expected {echo(SCHEMA, 60)}, got {echo(d['schema'], 60)}")
        version = d["schema_version"]
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise self.fail(
                "schema_version",
                f"this reader understands version {SCHEMA_VERSION}, got {echo(version, 60)}",
            )
        name = self.str_(d["name"], "name", pattern=PROFILE_NAME_RE)
        description = self.str_(d["description"], "description")
        target = self.model(d["target"], "target")
        proposers = self.proposers(d["proposers"], "proposers")
        timing = self.timing(d["timing"], "timing", proposers)
        memory = self.memory(d["memory"], "memory", proposers)
        acceptance = self.acceptance(d.get("acceptance", {}), "acceptance", proposers, target)
        extras = {k: v for k, v in d.items() if k.startswith("x-")}
        replica = self.replica(d.get("replica"), "replica")
        cold = self.cold_start(d.get("cold_start"), "cold_start")
        return Profile(
            origin=self.origin,
            name=name,
            description=description,
            target=target,
            proposers=proposers,
            timing=timing,
            memory=memory,
            acceptance=acceptance,
            extras=extras,
            replica=replica,
            cold_start=cold,
        )

    def replica(self, v: Any, path: str) -> ReplicaShape:
        if v is None:
            return ReplicaShape()
        v = self.obj(v, path, ("tensor_parallel_size",))
        return ReplicaShape(self.int_(v["tensor_parallel_size"], join_path(path, "tensor_parallel_size"), minimum=1))
