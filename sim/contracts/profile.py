"""Load and validate a calibration profile (docs/profile-format.md) into frozen dataclasses.

The profile is the only way measured numbers reach the simulator, so every violation of the
contract is refused here with one line naming the file, the JSON path and what is valid; a
profile that loads is safe to interpolate and sample from without further checks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sim.contracts.errors import SpecplanError, read_text, where
from sim.contracts.input_limits import check_nesting, check_tree
from sim.contracts.timing_extras import (
    FusedTiming,
    StepOverhead,
    describe_composition,
    parse_extras,
    parse_proposer_extras,
)

SCHEMA = "specplan.profile"
SCHEMA_VERSION = 1

Method = Literal["measured", "estimated", "imported", "published", "assumed"]
METHODS: tuple[str, ...] = ("measured", "estimated", "imported", "published", "assumed")
ModelSource = Literal["hf", "local", "gguf", "config-only"]
MODEL_SOURCES: tuple[str, ...] = ("hf", "local", "gguf", "config-only")
ProposerKind = Literal["draft_model", "eagle", "eagle3", "medusa", "mtp", "ngram", "suffix", "self_draft"]
PROPOSER_KINDS: tuple[str, ...] = ("draft_model", "eagle", "eagle3", "medusa", "mtp", "ngram", "suffix", "self_draft")
"""Proposer kinds by vLLM's ``speculative_config.method`` names (``vllm/config/speculative.py``
``SpeculativeMethod``: ngram, draft_model, suffix, eagle, eagle3, medusa, mtp, …), plus ``self_draft``
(the target's first layers, specplan's own; vLLM has no such method). ``draft_model``,
``eagle``, ``eagle3`` and ``medusa`` name their draft checkpoint (``model``; the latter three
may instead name it in ``note`` when its architecture is unknown, e.g. a published entry); ``mtp`` uses the target's own
multi-token-prediction layers (``model`` optional); ``ngram`` and ``suffix`` need no model and
may have no proposal at a step (the request then verifies one token)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")

# quantity -> axis names in canonical order (the array is transposed to this order on load)
TARGET_FORWARD_AXES = ("batch", "tokens_per_seq", "context")
TARGET_PREFILL_AXES = ("tokens", "context")
DRAFT_AXES = ("batch", "k", "context")
OVERHEAD_AXES = ("batch", "k")
PADDED_BATCH_AXES = ("batch", "context")
# smallest valid value per axis name
_AXIS_MIN = {"batch": 1, "tokens_per_seq": 1, "context": 0, "tokens": 1, "k": 1}


# ----------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class Device:
    """The hardware a section was measured on."""

    kind: str
    """``cpu``, ``cuda``, ``rocm``, ``mps``, ... (free text, shown to users)."""
    name: str
    """Marketing name, e.g. ``NVIDIA H200`` or ``AMD EPYC 7B13``."""
    memory_bytes: int | None = None
    """Device memory (system memory usable by the process on a CPU)."""
    driver: str | None = None
    """Driver version, when there is one."""
    count: int = 1
    """How many such devices the measurement used."""


@dataclass(frozen=True)
class Provenance:
    """Where one section's numbers come from; printed next to every result that uses them."""

    method: Method
    """``measured`` | ``estimated`` | ``imported`` | ``published`` | ``assumed``."""
    device: Device | None = None
    """Required for ``measured``."""
    dtype: str | None = None
    """Numeric type of the weights/activations, e.g. ``float32``."""
    libraries: Mapping[str, str] = field(default_factory=dict)
    """Library name -> version used."""
    models: Mapping[str, str] = field(default_factory=dict)
    """Role -> model identity string."""
    date: str | None = None
    """ISO 8601 time of the measurement (required for ``measured``)."""
    command: str | None = None
    """The command that produced the section."""
    citation: str | None = None
    """Required for ``published``: where the numbers were read."""
    notes: str | None = None
    """Free text (threads, efficiency assumptions, ...)."""

    def describe(self) -> str:
        """One human line, e.g. ``measured on cpu 'AMD EPYC 7B13' float32, 2026-11-29 (torch 2.13.0+cpu)``."""
        parts = [self.method]
        if self.device is not None:
            count = f"{self.device.count}x " if self.device.count > 1 else ""
            parts.append(f"on {count}{self.device.kind} '{self.device.name}'")
        text = " ".join(parts)
        if self.dtype:
            text += f" {self.dtype}"
        if self.date:
            text += f", {self.date[:10]}"
        libs = ", ".join(f"{k} {v}" for k, v in self.libraries.items() if k != "specplan")
        if libs:
            text += f" ({libs})"
        if self.citation:
            text += f" (citation: {self.citation})"
        if self.notes:
            text += f" [{self.notes}]"
        return text


@dataclass(frozen=True)
class Architecture:
    """Shape of a transformer, enough to compute KV bytes and roofline estimates."""

    family: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    num_parameters: int


@dataclass(frozen=True)
class ModelIdentity:
    """Which model (weights) a section belongs to."""

    id: str
    source: ModelSource
    path: str | None
    sha256: str | None
    architecture: Architecture

    @property
    def config_only(self) -> bool:
        """Random weights: timing and memory are meaningful, acceptance never is."""
        return self.source == "config-only"


@dataclass(frozen=True)
class ProposerIdentity:
    """A proposer of draft tokens; which fields are set depends on ``kind``."""

    name: str
    kind: ProposerKind
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    layers: tuple[int, ...] | None = None
    model: ModelIdentity | None = None
    note: str | None = None


@dataclass(frozen=True, eq=False)
class TimingGrid:
    """One timing quantity: axes (strictly increasing) and read-only arrays in axis order.

    ``null`` cells of the file are NaN here; ``sim.contracts.grid`` fills them before interpolating.
    """

    quantity: str
    """JSON path of the quantity, e.g. ``timing.proposers.ngram.draft``."""
    axis_names: tuple[str, ...]
    axes: tuple[tuple[float, ...], ...]
    median: np.ndarray
    p10: np.ndarray | None = None
    p90: np.ndarray | None = None
    repeats: int | None = None

    @property
    def null_cells(self) -> int:
        """Cells the profiler could not measure."""
        return int(np.isnan(self.median).sum())


@dataclass(frozen=True)
class ProposerTiming:
    """D(k) and H(k) grids of one proposer."""

    draft: TimingGrid
    overhead: TimingGrid
    prefill: TimingGrid | None = None
    """Optional: the proposer's pass over ``tokens`` prompt tokens of a step (axes tokens,
    context); engines run a draft model or an EAGLE head over every scheduled token."""
    overhead_provenance: Provenance | None = None
    """Where ``overhead`` comes from when not from the timing section's own run."""


@dataclass(frozen=True)
class Limit:
    """Why a grid cell is null (out of memory, beyond the context window, ...)."""

    quantity: str
    point: Mapping[str, float]
    reason: str


@dataclass(frozen=True)
class PaddedBatchTiming:
    """What a padded engine pays when rows join or leave its batched KV (J(b, w), L(b, w))."""

    join: TimingGrid
    leave: TimingGrid
    provenance: Provenance | None = None
    """Where these two grids come from when not from the timing section's own run."""


@dataclass(frozen=True)
class Timing:
    """Step-time grids: target forward (T, V(k)), prefill P(n) and per-proposer D(k), H(k)."""

    provenance: Provenance
    target_forward: TimingGrid
    target_prefill: TimingGrid
    proposers: Mapping[str, ProposerTiming]
    limits: tuple[Limit, ...] = ()
    padded_batch: PaddedBatchTiming | None = None
    """Optional: only a ``kv_layout = "padded"`` engine uses it."""
    step_composition: str = "sum"
    """``sum``: a mixed step costs a decode pass plus a prefill pass; ``fused``: one pass
    priced from ``fused`` (sim/contracts/timing_extras.py)."""
    fused: FusedTiming | None = None
    step_overhead: StepOverhead | None = None
    """Optional host time per step; None: the grids' own wall times already hold it."""

    def describe(self) -> str:
        """The timing sources line: provenance and how a step is composed."""
        extra = describe_composition(self.step_composition, self.fused, self.step_overhead)
        return f"{self.provenance.describe()} [{extra}]"


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


@dataclass(frozen=True)
class AcceptanceKey:
    """Match key of an acceptance segment: task, language (ISO 639-1 or ``any``), temperature."""

    task: str
    language: str
    temperature: float

    def __str__(self) -> str:
        return f"{self.task}:{self.language}:{self.temperature:g}"


@dataclass(frozen=True)
class RequestAcceptance:
    """One measured request's counters (drafting at ``k_max``)."""

    num_drafts: int
    accepted_per_pos: tuple[int, ...]
    num_steps: int | None = None
    """Verification steps, with or without a proposal (None: every step had one)."""

    @property
    def proposal_rate(self) -> float:
        """Fraction of verification steps with a proposal (vLLM drafts / steps)."""
        return 1.0 if not self.num_steps else self.num_drafts / self.num_steps


@dataclass(frozen=True)
class AcceptanceSegment:
    """vLLM-style counters of one segment; ``accepted_per_pos[i] / num_drafts`` is survival."""

    key: AcceptanceKey
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    per_request: tuple[RequestAcceptance, ...] = ()
    num_steps: int | None = None
    """Verification steps, with or without a proposal; ``num_drafts`` then counts only steps
    with one (vLLM's counting). None: every step had a proposal."""

    @property
    def proposal_rate(self) -> float:
        """Fraction of verification steps with a proposal; survival rates are given one."""
        return 1.0 if not self.num_steps else self.num_drafts / self.num_steps

    @property
    def survival(self) -> tuple[float, ...]:
        """Unconditional survival rate per position (aggregate over requests)."""
        if self.num_drafts == 0:
            return tuple(0.0 for _ in self.accepted_per_pos)
        return tuple(a / self.num_drafts for a in self.accepted_per_pos)

    @property
    def mean_acceptance_length(self) -> float:
        """``1 + accepted / drafts`` at ``k_max`` (vLLM's definition)."""
        return 1.0 + (self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0)


@dataclass(frozen=True)
class AcceptanceEntry:
    """Acceptance of one proposer, per segment."""

    proposer: str
    provenance: Provenance
    k_max: int
    segments: tuple[AcceptanceSegment, ...]


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

    @classmethod
    def from_dict(cls, d: Any, origin: str) -> Profile:
        """Validate a parsed profile; ``origin`` names it in error messages."""
        check_tree(d, origin, "profile")
        return _Parser(origin).profile(d)

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
    text = read_text(p, "profile")
    check_nesting(text, p, "JSON", toml=False)
    try:
        data = json.loads(text)
    except RecursionError:
        raise SpecplanError(f"{p}: JSON nested too deeply to parse") from None
    except json.JSONDecodeError as exc:
        raise SpecplanError(
            f"{where(p, line=exc.lineno)}: invalid JSON at column {exc.colno}: {exc.msg}"
        ) from None
    return Profile.from_dict(data, str(p))


# ----------------------------------------------------------------------------- parsing


class _Parser:
    """Walks the JSON tree, raising one-line errors with the JSON path of the bad field."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, path: str, message: str) -> SpecplanError:
        return SpecplanError(f"{where(self.origin, path)}: {message}")

    # -- primitives
    def obj(self, v: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object, got {_jtype(v)}")
        allowed = set(required) | set(optional)
        for key in v:
            if key not in allowed and not (isinstance(key, str) and key.startswith("x-")):
                valid = ", ".join(sorted(allowed))
                raise self.fail(_join(path, key), f"unknown key (valid: {valid}; or x-* for extensions)")
        for key in required:
            if key not in v:
                raise self.fail(_join(path, key), "missing (required)")
        return v

    def str_(self, v: Any, path: str, *, nullable: bool = False, pattern: re.Pattern | None = None) -> Any:
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            raise self.fail(path, f"expected a string{' or null' if nullable else ''}, got {_jtype(v)}")
        if pattern is not None and not pattern.match(v):
            raise self.fail(path, f"{v!r} does not match {pattern.pattern}")
        return v

    def int_(self, v: Any, path: str, *, minimum: int | None = 0, nullable: bool = False) -> Any:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(path, f"expected an integer, got {_jtype(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {v}")
        return v

    def num(self, v: Any, path: str, *, minimum: float | None = None, nullable: bool = False) -> Any:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(path, f"expected a finite number, got {_jtype(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {v}")
        return float(v)

    def choice(self, v: Any, path: str, valid: tuple[str, ...]) -> str:
        if v not in valid:
            raise self.fail(path, f"expected one of {', '.join(valid)}, got {v!r}")
        return v

    def str_map(self, v: Any, path: str) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object of strings, got {_jtype(v)}")
        for key, val in v.items():
            self.str_(val, _join(path, key))
        return dict(v)

    # -- top level
    def profile(self, d: Any) -> Profile:
        d = self.obj(
            d,
            "",
            ("schema", "schema_version", "name", "description", "target", "proposers", "timing", "memory"),
            ("acceptance", "replica"),
        )
        if d["schema"] != SCHEMA:
            raise self.fail("schema", f"expected {SCHEMA!r}, got {d['schema']!r}")
        version = d["schema_version"]
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise self.fail(
                "schema_version",
                f"this reader understands version {SCHEMA_VERSION}, got {version!r}",
            )
        name = self.str_(d["name"], "name", pattern=_NAME_RE)
        description = self.str_(d["description"], "description")
        target = self.model(d["target"], "target")
        proposers = self.proposers(d["proposers"], "proposers")
        timing = self.timing(d["timing"], "timing", proposers)
        memory = self.memory(d["memory"], "memory", proposers)
        acceptance = self.acceptance(d.get("acceptance", {}), "acceptance", proposers, target)
        extras = {k: v for k, v in d.items() if k.startswith("x-")}
        replica = self.replica(d.get("replica"), "replica")
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
        )

    def replica(self, v: Any, path: str) -> ReplicaShape:
        if v is None:
            return ReplicaShape()
        v = self.obj(v, path, ("tensor_parallel_size",))
        return ReplicaShape(self.int_(v["tensor_parallel_size"], _join(path, "tensor_parallel_size"), minimum=1))

    def model(self, v: Any, path: str) -> ModelIdentity:
        v = self.obj(v, path, ("id", "source", "sha256", "architecture"), ("path",))
        source = self.choice(v["source"], _join(path, "source"), MODEL_SOURCES)
        sha = self.str_(v["sha256"], _join(path, "sha256"), nullable=True, pattern=_SHA_RE)
        if source == "config-only" and sha is not None:
            raise self.fail(_join(path, "sha256"), "must be null for a config-only model (no weights)")
        mpath = self.str_(v.get("path"), _join(path, "path"), nullable=True)
        if mpath is not None and (mpath.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", mpath)):
            raise self.fail(_join(path, "path"), f"must be relative, not a machine path: {mpath!r}")
        return ModelIdentity(
            id=self.str_(v["id"], _join(path, "id")),
            source=source,  # type: ignore[arg-type]
            path=mpath,
            sha256=sha,
            architecture=self.architecture(v["architecture"], _join(path, "architecture")),
        )

    def architecture(self, v: Any, path: str) -> Architecture:
        ints = (
            "num_layers", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_kv_heads", "head_dim", "vocab_size", "num_parameters",
        )  # fmt: skip
        v = self.obj(v, path, ("family", *ints))
        # intermediate_size is 0 for families without a separate MLP width in their config
        vals = {
            k: self.int_(v[k], _join(path, k), minimum=0 if k in ("intermediate_size", "num_parameters") else 1)
            for k in ints
        }
        return Architecture(family=self.str_(v["family"], _join(path, "family")), **vals)

    def proposers(self, v: Any, path: str) -> dict[str, ProposerIdentity]:
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object of proposers, got {_jtype(v)}")
        out: dict[str, ProposerIdentity] = {}
        for name, spec in v.items():
            p = _join(path, name)
            if not _NAME_RE.match(name):
                raise self.fail(p, f"proposer name must match {_NAME_RE.pattern}")
            if not isinstance(spec, dict):
                raise self.fail(p, f"expected an object, got {_jtype(spec)}")
            kind = self.choice(spec.get("kind"), _join(p, "kind"), PROPOSER_KINDS)
            if kind == "ngram":
                spec = self.obj(spec, p, ("kind",), ("prompt_lookup_min", "prompt_lookup_max", "note"))
                lo = self.int_(spec.get("prompt_lookup_min"), _join(p, "prompt_lookup_min"), minimum=1, nullable=True)
                hi = self.int_(spec.get("prompt_lookup_max"), _join(p, "prompt_lookup_max"), minimum=1, nullable=True)
                if lo is not None and hi is not None and hi < lo:
                    raise self.fail(_join(p, "prompt_lookup_max"), f"must be >= prompt_lookup_min ({lo}), got {hi}")
                out[name] = ProposerIdentity(name, "ngram", lo, hi, note=self._note(spec, p))
            elif kind == "self_draft":
                spec = self.obj(spec, p, ("kind", "layers"), ("note",))
                layers = spec["layers"]
                if not isinstance(layers, list) or not layers:
                    raise self.fail(_join(p, "layers"), "expected a non-empty list of target layer indices")
                for i, layer in enumerate(layers):
                    self.int_(layer, f"{_join(p, 'layers')}[{i}]", minimum=0)
                out[name] = ProposerIdentity(name, "self_draft", layers=tuple(layers), note=self._note(spec, p))
            elif kind == "suffix":
                spec = self.obj(spec, p, ("kind",), ("note",))
                out[name] = ProposerIdentity(name, "suffix", note=self._note(spec, p))
            elif kind in ("mtp", "eagle", "eagle3", "medusa") and spec.get("model") is None:
                # mtp: the target's own layers; eagle/medusa heads known only by name (a published
                # entry): the note names the checkpoint, the snippet asks for it
                spec = self.obj(spec, p, ("kind",), ("model", "note"))
                model = self.model(spec["model"], _join(p, "model")) if spec.get("model") is not None else None
                out[name] = ProposerIdentity(name, kind, model=model, note=self._note(spec, p))
            else:  # draft_model, eagle, eagle3, medusa: a separate draft checkpoint (or heads)
                spec = self.obj(spec, p, ("kind", "model"), ("note",))
                model = self.model(spec["model"], _join(p, "model"))
                out[name] = ProposerIdentity(name, kind, model=model, note=self._note(spec, p))
        return out

    def _note(self, spec: dict, path: str) -> str | None:
        return self.str_(spec.get("note"), _join(path, "note"), nullable=True)

    def provenance(self, v: Any, path: str) -> Provenance:
        v = self.obj(
            v,
            path,
            ("method",),
            ("device", "dtype", "libraries", "models", "date", "command", "citation", "notes"),
        )
        method = self.choice(v["method"], _join(path, "method"), METHODS)
        device = None
        if v.get("device") is not None:
            dp = _join(path, "device")
            dv = self.obj(v["device"], dp, ("kind", "name"), ("memory_bytes", "driver", "count"))
            device = Device(
                kind=self.str_(dv["kind"], _join(dp, "kind")),
                name=self.str_(dv["name"], _join(dp, "name")),
                memory_bytes=self.int_(dv.get("memory_bytes"), _join(dp, "memory_bytes"), nullable=True),
                driver=self.str_(dv.get("driver"), _join(dp, "driver"), nullable=True),
                count=self.int_(dv.get("count", 1), _join(dp, "count"), minimum=1),
            )
        date = self.str_(v.get("date"), _join(path, "date"), nullable=True)
        if date is not None:
            try:
                datetime.fromisoformat(date)
            except ValueError:
                raise self.fail(_join(path, "date"), f"expected ISO 8601 (2026-11-29T18:30:00Z), got {date!r}") from None
        citation = self.str_(v.get("citation"), _join(path, "citation"), nullable=True)
        if method == "measured":
            if device is None:
                raise self.fail(_join(path, "device"), "required when method is 'measured' (which device?)")
            if date is None:
                raise self.fail(_join(path, "date"), "required when method is 'measured'")
        if method == "published" and not citation:
            raise self.fail(_join(path, "citation"), "required when method is 'published' (where are the numbers from?)")
        return Provenance(
            method=method,  # type: ignore[arg-type]
            device=device,
            dtype=self.str_(v.get("dtype"), _join(path, "dtype"), nullable=True),
            libraries=self.str_map(v.get("libraries"), _join(path, "libraries")),
            models=self.str_map(v.get("models"), _join(path, "models")),
            date=date,
            command=self.str_(v.get("command"), _join(path, "command"), nullable=True),
            citation=citation,
            notes=self.str_(v.get("notes"), _join(path, "notes"), nullable=True),
        )

    # -- timing
    def timing(self, v: Any, path: str, proposers: Mapping[str, ProposerIdentity]) -> Timing:
        v = self.obj(v, path, ("provenance", "target_forward", "target_prefill"),
                     ("proposers", "limits", "padded_batch", "step_composition", "fused", "step_overhead"))
        prov = self.provenance(v["provenance"], _join(path, "provenance"))
        tf = self.grid(v["target_forward"], _join(path, "target_forward"), TARGET_FORWARD_AXES)
        tp = self.grid(v["target_prefill"], _join(path, "target_prefill"), TARGET_PREFILL_AXES)
        ptimes: dict[str, ProposerTiming] = {}
        pp = _join(path, "proposers")
        praw = v.get("proposers", {})
        if not isinstance(praw, dict):
            raise self.fail(pp, f"expected an object, got {_jtype(praw)}")
        for name, spec in praw.items():
            p = _join(pp, name)
            if name not in proposers:
                raise self.fail(p, f"unknown proposer (profile proposers: {_names(proposers)})")
            spec = self.obj(spec, p, ("draft", "overhead"), ("prefill", "overhead_provenance"))
            prefill, oprov = parse_proposer_extras(self, spec, p)
            ptimes[name] = ProposerTiming(
                draft=self.grid(spec["draft"], _join(p, "draft"), DRAFT_AXES),
                overhead=self.grid(spec["overhead"], _join(p, "overhead"), OVERHEAD_AXES),
                prefill=prefill,
                overhead_provenance=oprov,
            )
        limits = []
        lraw = v.get("limits", [])
        if not isinstance(lraw, list):
            raise self.fail(_join(path, "limits"), f"expected a list, got {_jtype(lraw)}")
        for i, lim in enumerate(lraw):
            lp = f"{_join(path, 'limits')}[{i}]"
            lim = self.obj(lim, lp, ("quantity", "point", "reason"))
            point = lim["point"]
            if not isinstance(point, dict):
                raise self.fail(_join(lp, "point"), f"expected an object of axis values, got {_jtype(point)}")
            for key, val in point.items():
                self.num(val, _join(_join(lp, "point"), key))
            limits.append(
                Limit(
                    quantity=self.str_(lim["quantity"], _join(lp, "quantity")),
                    point={k: float(x) for k, x in point.items()},
                    reason=self.str_(lim["reason"], _join(lp, "reason")),
                )
            )
        padded = None
        if "padded_batch" in v:
            pb = _join(path, "padded_batch")
            spec = self.obj(v["padded_batch"], pb, ("join", "leave"), ("provenance",))
            padded = PaddedBatchTiming(
                join=self.grid(spec["join"], _join(pb, "join"), PADDED_BATCH_AXES),
                leave=self.grid(spec["leave"], _join(pb, "leave"), PADDED_BATCH_AXES),
                provenance=(self.provenance(spec["provenance"], _join(pb, "provenance"))
                            if "provenance" in spec else None),
            )
        comp, fused, step_overhead = parse_extras(self, v, path)
        return Timing(prov, tf, tp, ptimes, tuple(limits), padded, comp, fused, step_overhead)

    def grid(self, v: Any, path: str, expected: tuple[str, ...]) -> TimingGrid:
        v = self.obj(v, path, ("axes", "median"), ("p10", "p90", "repeats"))
        ap = _join(path, "axes")
        axes_raw = v["axes"]
        if not isinstance(axes_raw, dict):
            raise self.fail(ap, f"expected an object of axis name -> values, got {_jtype(axes_raw)}")
        if set(axes_raw) != set(expected) or len(axes_raw) != len(expected):
            raise self.fail(ap, f"expected axes {', '.join(expected)}, got {', '.join(map(str, axes_raw)) or 'none'}")
        names = tuple(axes_raw)
        axes: list[tuple[float, ...]] = []
        for name in names:
            vals = axes_raw[name]
            np_ = _join(ap, name)
            if not isinstance(vals, list) or not vals:
                raise self.fail(np_, "expected a non-empty list of increasing numbers")
            out = tuple(self.num(x, f"{np_}[{i}]") for i, x in enumerate(vals))
            for i in range(1, len(out)):
                if not out[i] > out[i - 1]:
                    raise self.fail(f"{np_}[{i}]", f"axis values must be strictly increasing, got {out[i - 1]:g} then {out[i]:g}")
            if out[0] < _AXIS_MIN[name]:
                raise self.fail(f"{np_}[0]", f"must be >= {_AXIS_MIN[name]}, got {out[0]:g}")
            axes.append(out)
        shape = tuple(len(a) for a in axes)
        median = self.array(v["median"], _join(path, "median"), shape)
        if np.isnan(median).all():
            raise self.fail(_join(path, "median"), "every cell is null: nothing was measured")
        arrays: dict[str, np.ndarray | None] = {"p10": None, "p90": None}
        for key in arrays:
            if v.get(key) is not None:
                arrays[key] = self.array(v[key], _join(path, key), shape)
        p10, p90 = arrays["p10"], arrays["p90"]
        tol = 1e-12
        with np.errstate(invalid="ignore"):
            if p10 is not None and bool(np.any(p10 > median + tol)):
                idx = tuple(int(i) for i in np.argwhere(p10 > median + tol)[0])
                raise self.fail(_join(path, "p10") + _idx(idx), "p10 must be <= median")
            if p90 is not None and bool(np.any(p90 < median - tol)):
                idx = tuple(int(i) for i in np.argwhere(p90 < median - tol)[0])
                raise self.fail(_join(path, "p90") + _idx(idx), "p90 must be >= median")
        repeats = self.int_(v.get("repeats"), _join(path, "repeats"), minimum=1, nullable=True)
        # transpose into canonical axis order
        order = [names.index(n) for n in expected]
        if order != list(range(len(expected))):
            median = np.transpose(median, order).copy()
            p10 = None if p10 is None else np.transpose(p10, order).copy()
            p90 = None if p90 is None else np.transpose(p90, order).copy()
            axes = [axes[i] for i in order]
        for arr in (median, p10, p90):
            if arr is not None:
                arr.setflags(write=False)
        return TimingGrid(path, expected, tuple(axes), median, p10, p90, repeats)

    def array(self, v: Any, path: str, shape: tuple[int, ...]) -> np.ndarray:
        """Nested lists of exactly ``shape``, numbers >= 0 or null (NaN)."""
        flat: list[float] = []
        dims = "x".join(map(str, shape))

        def walk(node: Any, depth: int, p: str) -> None:
            if depth == len(shape):
                if node is None:
                    flat.append(math.nan)
                    return
                if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
                    raise self.fail(p, f"expected a number (seconds) or null, got {_jtype(node)}")
                if node < 0:
                    raise self.fail(p, f"times must be >= 0, got {node}")
                flat.append(float(node))
                return
            if not isinstance(node, list) or len(node) != shape[depth]:
                got = f"length {len(node)}" if isinstance(node, list) else _jtype(node)
                raise self.fail(p, f"expected {len(shape)}-d array {dims} (axis {depth + 1} of length {shape[depth]}), got {got}")
            for i, child in enumerate(node):
                walk(child, depth + 1, f"{p}[{i}]")

        walk(v, 0, path)
        return np.array(flat, dtype=float).reshape(shape)

    # -- memory
    def memory(self, v: Any, path: str, proposers: Mapping[str, ProposerIdentity]) -> Memory:
        v = self.obj(
            v,
            path,
            ("provenance", "device_memory_bytes", "target_weight_bytes", "target_kv_bytes_per_token", "activation_peak_bytes"),
            ("proposers", "kv_capacity", "kv_check"),
        )
        prov = self.provenance(v["provenance"], _join(path, "provenance"))
        pm: dict[str, ProposerMemory] = {}
        pp = _join(path, "proposers")
        praw = v.get("proposers", {})
        if not isinstance(praw, dict):
            raise self.fail(pp, f"expected an object, got {_jtype(praw)}")
        for name, spec in praw.items():
            p = _join(pp, name)
            if name not in proposers:
                raise self.fail(p, f"unknown proposer (profile proposers: {_names(proposers)})")
            spec = self.obj(spec, p, ("weight_bytes", "kv_bytes_per_token", "activation_peak_bytes"))
            pm[name] = ProposerMemory(**{k: self.int_(spec[k], _join(p, k)) for k in spec if not k.startswith("x-")})
        rows = []
        kraw = v.get("kv_capacity", [])
        kp = _join(path, "kv_capacity")
        if not isinstance(kraw, list):
            raise self.fail(kp, f"expected a list, got {_jtype(kraw)}")
        for i, row in enumerate(kraw):
            rp = f"{kp}[{i}]"
            row = self.obj(row, rp, ("memory_utilization", "proposer", "kv_tokens"))
            u = self.num(row["memory_utilization"], _join(rp, "memory_utilization"))
            if not 0 < u <= 1:
                raise self.fail(_join(rp, "memory_utilization"), f"must be in (0, 1], got {u}")
            prop = self.str_(row["proposer"], _join(rp, "proposer"), nullable=True)
            if prop is not None and prop not in proposers:
                raise self.fail(_join(rp, "proposer"), f"unknown proposer {prop!r} (profile proposers: {_names(proposers)})")
            rows.append(KvCapacityRow(u, prop, self.int_(row["kv_tokens"], _join(rp, "kv_tokens"))))
        check = None
        if v.get("kv_check") is not None:
            cp = _join(path, "kv_check")
            c = self.obj(v["kv_check"], cp, (), ("target_kv_bytes_per_token_measured", "relative_error"))
            check = KvCheck(
                self.num(c.get("target_kv_bytes_per_token_measured"), _join(cp, "target_kv_bytes_per_token_measured"), minimum=0, nullable=True),
                self.num(c.get("relative_error"), _join(cp, "relative_error"), nullable=True),
            )
        device = self.int_(v["device_memory_bytes"], _join(path, "device_memory_bytes"), minimum=1)
        return Memory(
            provenance=prov,
            device_memory_bytes=device,
            target_weight_bytes=self.int_(v["target_weight_bytes"], _join(path, "target_weight_bytes")),
            target_kv_bytes_per_token=self.int_(v["target_kv_bytes_per_token"], _join(path, "target_kv_bytes_per_token"), minimum=1),
            activation_peak_bytes=self.int_(v["activation_peak_bytes"], _join(path, "activation_peak_bytes")),
            proposers=pm,
            kv_capacity=tuple(rows),
            kv_check=check,
        )

    # -- acceptance
    def acceptance(
        self, v: Any, path: str, proposers: Mapping[str, ProposerIdentity], target: ModelIdentity
    ) -> dict[str, AcceptanceEntry]:
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object of proposer name -> entry, got {_jtype(v)}")
        out: dict[str, AcceptanceEntry] = {}
        for name, entry in v.items():
            p = _join(path, name)
            if name not in proposers:
                raise self.fail(p, f"unknown proposer (profile proposers: {_names(proposers)})")
            entry = self.obj(entry, p, ("provenance", "k_max", "segments"))
            prov = self.provenance(entry["provenance"], _join(p, "provenance"))
            draft_model = proposers[name].model
            random_weights = target.config_only or (draft_model is not None and draft_model.config_only)
            if random_weights and prov.method in ("measured", "estimated"):
                who = "target" if target.config_only else f"proposer {name}'s draft model"
                raise self.fail(
                    _join(_join(p, "provenance"), "method"),
                    f"{prov.method} acceptance refused: the {who} is config-only (random weights accept "
                    "nothing real); use 'imported' or 'published' (with a citation), or 'assumed'",
                )
            k_max = self.int_(entry["k_max"], _join(p, "k_max"), minimum=1)
            sp = _join(p, "segments")
            segs_raw = entry["segments"]
            if not isinstance(segs_raw, list) or not segs_raw:
                raise self.fail(sp, "expected a non-empty list of segments")
            segs = [self.segment(s, f"{sp}[{i}]", k_max) for i, s in enumerate(segs_raw)]
            seen: dict[AcceptanceKey, int] = {}
            for i, s in enumerate(segs):
                if s.key in seen:
                    raise self.fail(f"{sp}[{i}].segment", f"duplicate key {s.key} (also segments[{seen[s.key]}])")
                seen[s.key] = i
            out[name] = AcceptanceEntry(name, prov, k_max, tuple(segs))
        return out

    def segment(self, v: Any, path: str, k_max: int) -> AcceptanceSegment:
        v = self.obj(
            v,
            path,
            ("segment", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos"),
            ("per_request", "num_steps"),
        )
        kp = _join(path, "segment")
        key = self.obj(v["segment"], kp, ("task", "language", "temperature"))
        akey = AcceptanceKey(
            task=self.str_(key["task"], _join(kp, "task")),
            language=self.str_(key["language"], _join(kp, "language")),
            temperature=self.num(key["temperature"], _join(kp, "temperature"), minimum=0.0),
        )
        steps = self._num_steps(v, path)
        drafts = self.int_(v["num_drafts"], _join(path, "num_drafts"), minimum=0 if steps else 1)
        if steps is not None and drafts > steps:
            raise self.fail(_join(path, "num_steps"), f"must be >= num_drafts ({drafts}), got {steps}")
        draft_tokens = self.int_(v["num_draft_tokens"], _join(path, "num_draft_tokens"))
        accepted = self.int_(v["num_accepted_tokens"], _join(path, "num_accepted_tokens"))
        per_pos = self.per_pos(v["accepted_per_pos"], _join(path, "accepted_per_pos"), k_max, drafts)
        if draft_tokens != drafts * k_max:
            raise self.fail(
                _join(path, "num_draft_tokens"),
                f"must equal num_drafts * k_max = {drafts} * {k_max} = {drafts * k_max}, got {draft_tokens}",
            )
        if accepted != sum(per_pos):
            raise self.fail(
                _join(path, "num_accepted_tokens"),
                f"must equal sum(accepted_per_pos) = {sum(per_pos)}, got {accepted}",
            )
        rows = []
        rraw = v.get("per_request", [])
        rp = _join(path, "per_request")
        if not isinstance(rraw, list):
            raise self.fail(rp, f"expected a list, got {_jtype(rraw)}")
        for i, row in enumerate(rraw):
            p = f"{rp}[{i}]"
            row = self.obj(row, p, ("num_drafts", "accepted_per_pos"), ("num_steps",))
            n = self.int_(row["num_drafts"], _join(p, "num_drafts"))
            rs = self._num_steps(row, p)
            if rs is not None and n > rs:
                raise self.fail(_join(p, "num_steps"), f"must be >= num_drafts ({n}), got {rs}")
            ap = self.per_pos(row["accepted_per_pos"], _join(p, "accepted_per_pos"), k_max, n)
            rows.append(RequestAcceptance(n, ap, rs))
        return AcceptanceSegment(akey, drafts, draft_tokens, accepted, per_pos, tuple(rows), steps)

    def _num_steps(self, v: Mapping[str, Any], path: str) -> int | None:
        """Optional ``num_steps`` (steps with or without a proposal); None when absent."""
        if v.get("num_steps") is None:
            return None
        return self.int_(v["num_steps"], _join(path, "num_steps"), minimum=1)

    def per_pos(self, v: Any, path: str, k_max: int, drafts: int) -> tuple[int, ...]:
        if not isinstance(v, list) or len(v) != k_max:
            got = f"length {len(v)}" if isinstance(v, list) else _jtype(v)
            raise self.fail(path, f"expected a list of k_max = {k_max} counts, got {got}")
        vals = tuple(self.int_(x, f"{path}[{i}]") for i, x in enumerate(v))
        if vals[0] > drafts:
            raise self.fail(f"{path}[0]", f"must be <= num_drafts ({drafts}), got {vals[0]}")
        for i in range(1, len(vals)):
            if vals[i] > vals[i - 1]:
                raise self.fail(
                    f"{path}[{i}]",
                    f"must be non-increasing (acceptance stops at the first rejection): {vals[i - 1]} then {vals[i]}",
                )
        return vals


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _idx(idx: tuple[int, ...]) -> str:
    return "".join(f"[{i}]" for i in idx)


def _names(m: Mapping[str, Any]) -> str:
    return ", ".join(m) or "none"


def _jtype(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, int | float):
        return f"number {v}"
    if isinstance(v, str):
        return f"string {v[:40]!r}"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__
