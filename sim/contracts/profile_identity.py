"""Who and where a profile's numbers come from: provenance, device, model and proposer identity."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sim.contracts.errors import echo, join_path
from sim.contracts.json_reader import JsonReader, json_type, names_or_none

Method = Literal["measured", "estimated", "imported", "published", "assumed", "calibrated"]
METHODS: tuple[str, ...] = ("measured", "estimated", "imported", "published", "assumed", "calibrated")
"""``calibrated``: fitted by ``specplan calibrate`` to the user's own measured runs (``notes`` says
from which files, which terms and the held-out error; required)."""
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

PROFILE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


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
    memory_bandwidth: float | None = None
    """One device's memory bandwidth in bytes/s (``memory_bandwidth_bytes_per_s``, datasheet
    peak), when the writer knew it: the step-time bandwidth floor needs it
    (sim/contracts/timing_sanity.py)."""
    host_cpu: str | None = None
    """The host's CPU model beside a GPU (a CPU device names it in ``name``): host-side
    work (the n-gram lookup, the scheduler) runs on it (sim/contracts/machine_identity.py)."""


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
class MoeShape:
    """A mixture-of-experts model's expert layers (absent: a dense model)."""

    num_experts: int
    """Routed experts per MoE layer."""
    experts_per_token: int
    """Routed experts each token goes through (``num_experts_per_tok``)."""
    expert_intermediate_size: int
    """Gated-MLP width of one routed expert."""
    shared_intermediate_size: int = 0
    """Width of the shared expert(s) every token goes through (0: none)."""
    dense_layers: int = 0
    """Leading layers with a dense MLP instead of experts (DeepSeek's ``first_k_dense_replace``)."""


@dataclass(frozen=True)
class MlaShape:
    """DeepSeek's multi-head latent attention: low-rank projections, a latent KV cache."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0
    """0: a full-rank query projection."""


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
    moe: MoeShape | None = None
    mla: MlaShape | None = None


@dataclass(frozen=True)
class ModelIdentity:
    """Which model (weights) a section belongs to."""

    id: str
    source: ModelSource
    path: str | None
    sha256: str | None
    architecture: Architecture
    max_model_len: int | None = None
    """The model's context length in tokens (its config's ``max_position_embeddings``, what vLLM
    derives ``max_model_len`` from); None: the profile does not say (older profiles)."""

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


class IdentityReader(JsonReader):
    """Reads models, proposers and provenance blocks (every section has a provenance)."""

    def model(self, v: Any, path: str) -> ModelIdentity:
        v = self.obj(v, path, ("id", "source", "sha256", "architecture"), ("path", "max_model_len"))
        source = self.choice(v["source"], join_path(path, "source"), MODEL_SOURCES)
        sha = self.str_(v["sha256"], join_path(path, "sha256"), nullable=True, pattern=SHA256_RE)
        if source == "config-only" and sha is not None:
            raise self.fail(join_path(path, "sha256"), "must be null for a config-only model (no weights)")
        mpath = self.str_(v.get("path"), join_path(path, "path"), nullable=True)
        if mpath is not None and (mpath.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", mpath)):
            raise self.fail(join_path(path, "path"), f"must be relative, not a machine path: {echo(mpath, 60)}")
        return ModelIdentity(
            id=self.str_(v["id"], join_path(path, "id")),
            source=source,  # type: ignore[arg-type]
            path=mpath,
            sha256=sha,
            architecture=self.architecture(v["architecture"], join_path(path, "architecture")),
            max_model_len=self.int_(v.get("max_model_len"), join_path(path, "max_model_len"), minimum=2,
                                    nullable=True),
        )

    def architecture(self, v: Any, path: str) -> Architecture:
        ints = (
            "num_layers", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_kv_heads", "head_dim", "vocab_size", "num_parameters",
        )  # fmt: skip
        v = self.obj(v, path, ("family", *ints), ("moe", "mla"))
        # intermediate_size is 0 for families without a separate MLP width in their config
        vals = {
            k: self.int_(v[k], join_path(path, k), minimum=0 if k in ("intermediate_size", "num_parameters") else 1)
            for k in ints
        }
        moe = mla = None
        if v.get("moe") is not None:
            mp = join_path(path, "moe")
            m = self.obj(v["moe"], mp, ("num_experts", "experts_per_token", "expert_intermediate_size"),
                         ("shared_intermediate_size", "dense_layers"))
            moe = MoeShape(**{k: self.int_(m[k], join_path(mp, k), minimum=1) for k in
                              ("num_experts", "experts_per_token", "expert_intermediate_size")},
                           **{k: self.int_(m.get(k, 0), join_path(mp, k), minimum=0) for k in
                              ("shared_intermediate_size", "dense_layers")})
            if moe.experts_per_token > moe.num_experts:
                raise self.fail(join_path(mp, "experts_per_token"),
                                f"must be <= num_experts ({moe.num_experts}), got {moe.experts_per_token}")
        if v.get("mla") is not None:
            lp = join_path(path, "mla")
            m = self.obj(v["mla"], lp, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
                         ("q_lora_rank",))
            mla = MlaShape(**{k: self.int_(m[k], join_path(lp, k), minimum=1) for k in
                              ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")},
                           q_lora_rank=self.int_(m.get("q_lora_rank", 0), join_path(lp, "q_lora_rank"), minimum=0))
        return Architecture(family=self.str_(v["family"], join_path(path, "family")), **vals, moe=moe, mla=mla)

    def proposers(self, v: Any, path: str) -> dict[str, ProposerIdentity]:
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object of proposers, got {json_type(v)}")
        out: dict[str, ProposerIdentity] = {}
        for name, spec in v.items():
            p = join_path(path, name)
            if not PROFILE_NAME_RE.match(name):
                raise self.fail(p, f"proposer name must match {PROFILE_NAME_RE.pattern}")
            if not isinstance(spec, dict):
                raise self.fail(p, f"expected an object, got {json_type(spec)}")
            kind = self.choice(spec.get("kind"), join_path(p, "kind"), PROPOSER_KINDS)
            if kind == "ngram":
                spec = self.obj(spec, p, ("kind",), ("prompt_lookup_min", "prompt_lookup_max", "note"))
                lo = self.int_(spec.get("prompt_lookup_min"), join_path(p, "prompt_lookup_min"), minimum=1, nullable=True)
                hi = self.int_(spec.get("prompt_lookup_max"), join_path(p, "prompt_lookup_max"), minimum=1, nullable=True)
                if lo is not None and hi is not None and hi < lo:
                    raise self.fail(join_path(p, "prompt_lookup_max"), f"must be >= prompt_lookup_min ({lo}), got {hi}")
                out[name] = ProposerIdentity(name, "ngram", lo, hi, note=self._note(spec, p))
            elif kind == "self_draft":
                spec = self.obj(spec, p, ("kind", "layers"), ("note",))
                layers = spec["layers"]
                if not isinstance(layers, list) or not layers:
                    raise self.fail(join_path(p, "layers"), "expected a non-empty list of target layer indices")
                for i, layer in enumerate(layers):
                    self.int_(layer, f"{join_path(p, 'layers')}[{i}]", minimum=0)
                out[name] = ProposerIdentity(name, "self_draft", layers=tuple(layers), note=self._note(spec, p))
            elif kind == "suffix":
                spec = self.obj(spec, p, ("kind",), ("note",))
                out[name] = ProposerIdentity(name, "suffix", note=self._note(spec, p))
            elif kind in ("mtp", "eagle", "eagle3", "medusa") and spec.get("model") is None:
                # mtp: the target's own layers; eagle/medusa heads known only by name (a published
                # entry): the note names the checkpoint, the snippet asks for it
                spec = self.obj(spec, p, ("kind",), ("model", "note"))
                model = self.model(spec["model"], join_path(p, "model")) if spec.get("model") is not None else None
                out[name] = ProposerIdentity(name, kind, model=model, note=self._note(spec, p))
            else:  # draft_model, eagle, eagle3, medusa: a separate draft checkpoint (or heads)
                spec = self.obj(spec, p, ("kind", "model"), ("note",))
                model = self.model(spec["model"], join_path(p, "model"))
                out[name] = ProposerIdentity(name, kind, model=model, note=self._note(spec, p))
        return out

    def proposer_entries(self, v: Mapping[str, Any], path: str,
                         proposers: Mapping[str, ProposerIdentity]) -> Iterator[tuple[str, str, Any]]:
        """(name, JSON path, spec) of each entry of a section's ``proposers`` object, every name
        one of the profile's proposers (checked as each entry is reached)."""
        pp = join_path(path, "proposers")
        praw = v.get("proposers", {})
        if not isinstance(praw, dict):
            raise self.fail(pp, f"expected an object, got {json_type(praw)}")
        for name, spec in praw.items():
            p = join_path(pp, name)
            if name not in proposers:
                raise self.fail(p, f"unknown proposer (profile proposers: {names_or_none(proposers)})")
            yield name, p, spec

    def _note(self, spec: dict, path: str) -> str | None:
        return self.str_(spec.get("note"), join_path(path, "note"), nullable=True)

    def provenance(self, v: Any, path: str) -> Provenance:
        v = self.obj(
            v,
            path,
            ("method",),
            ("device", "dtype", "libraries", "models", "date", "command", "citation", "notes"),
        )
        method = self.choice(v["method"], join_path(path, "method"), METHODS)
        device = None
        if v.get("device") is not None:
            dp = join_path(path, "device")
            dv = self.obj(v["device"], dp, ("kind", "name"),
                          ("memory_bytes", "driver", "count", "memory_bandwidth_bytes_per_s", "host_cpu"))
            device = Device(
                kind=self.str_(dv["kind"], join_path(dp, "kind")),
                name=self.str_(dv["name"], join_path(dp, "name")),
                memory_bytes=self.int_(dv.get("memory_bytes"), join_path(dp, "memory_bytes"), nullable=True),
                driver=self.str_(dv.get("driver"), join_path(dp, "driver"), nullable=True),
                count=self.int_(dv.get("count", 1), join_path(dp, "count"), minimum=1),
                memory_bandwidth=(None if dv.get("memory_bandwidth_bytes_per_s") is None else self.num(
                    dv["memory_bandwidth_bytes_per_s"], join_path(dp, "memory_bandwidth_bytes_per_s"), minimum=1.0)),
                host_cpu=self.str_(dv.get("host_cpu"), join_path(dp, "host_cpu"), nullable=True),
            )
        date = self.str_(v.get("date"), join_path(path, "date"), nullable=True)
        if date is not None:
            try:
                datetime.fromisoformat(date)
            except ValueError:
                raise self.fail(join_path(path, "date"), f"expected ISO 8601 (2026-11-29T18:30:00Z), got {echo(date, 60)}") from None
        citation = self.str_(v.get("citation"), join_path(path, "citation"), nullable=True)
        if method == "measured":
            if device is None:
                raise self.fail(join_path(path, "device"), "required when method is 'measured' (which device?)")
            if date is None:
                raise self.fail(join_path(path, "date"), "required when method is 'measured'")
        if method == "calibrated" and not (v.get("notes") or "").strip():
            raise self.fail(join_path(path, "notes"), "required when method is 'calibrated' (fitted to which runs?)")
        if method == "published" and not citation:
            raise self.fail(join_path(path, "citation"), "required when method is 'published' (where are the numbers from?)")
        return Provenance(
            method=method,  # type: ignore[arg-type]
            device=device,
            dtype=self.str_(v.get("dtype"), join_path(path, "dtype"), nullable=True),
            libraries=self.str_map(v.get("libraries"), join_path(path, "libraries")),
            models=self.str_map(v.get("models"), join_path(path, "models")),
            date=date,
            command=self.str_(v.get("command"), join_path(path, "command"), nullable=True),
            citation=citation,
            notes=self.str_(v.get("notes"), join_path(path, "notes"), nullable=True),
        )
