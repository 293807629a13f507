"""A profile's ``acceptance`` section: vLLM-style counters per proposer and segment.

``AcceptanceKey`` (task, language, temperature) is how a workload segment finds its entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.contracts.errors import join_path
from sim.contracts.json_reader import json_type, names_or_none
from sim.contracts.profile_identity import (
    IdentityReader,
    ModelIdentity,
    ProposerIdentity,
    Provenance,
)


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


class AcceptanceReader(IdentityReader):
    """Reads the acceptance section (counts consistent with k_max, survival non-increasing)."""

    def acceptance(
        self, v: Any, path: str, proposers: Mapping[str, ProposerIdentity], target: ModelIdentity
    ) -> dict[str, AcceptanceEntry]:
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object of proposer name -> entry, got {json_type(v)}")
        out: dict[str, AcceptanceEntry] = {}
        for name, entry in v.items():
            p = join_path(path, name)
            if name not in proposers:
                raise self.fail(p, f"unknown proposer (profile proposers: {names_or_none(proposers)})")
            entry = self.obj(entry, p, ("provenance", "k_max", "segments"))
            prov = self.provenance(entry["provenance"], join_path(p, "provenance"))
            draft_model = proposers[name].model
            random_weights = target.config_only or (draft_model is not None and draft_model.config_only)
            if random_weights and prov.method in ("measured", "estimated"):
                who = "target" if target.config_only else f"proposer {name}'s draft model"
                raise self.fail(
                    join_path(join_path(p, "provenance"), "method"),
                    f"{prov.method} acceptance refused: the {who} is config-only (random weights accept "
                    "nothing real); use 'imported' or 'published' (with a citation), or 'assumed'",
                )
            k_max = self.int_(entry["k_max"], join_path(p, "k_max"), minimum=1)
            sp = join_path(p, "segments")
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
        kp = join_path(path, "segment")
        key = self.obj(v["segment"], kp, ("task", "language", "temperature"))
        akey = AcceptanceKey(
            task=self.str_(key["task"], join_path(kp, "task")),
            language=self.str_(key["language"], join_path(kp, "language")),
            temperature=self.num(key["temperature"], join_path(kp, "temperature"), minimum=0.0),
        )
        steps = self._num_steps(v, path)
        drafts = self.int_(v["num_drafts"], join_path(path, "num_drafts"), minimum=0 if steps else 1)
        if steps is not None and drafts > steps:
            raise self.fail(join_path(path, "num_steps"), f"must be >= num_drafts ({drafts}), got {steps}")
        draft_tokens = self.int_(v["num_draft_tokens"], join_path(path, "num_draft_tokens"))
        accepted = self.int_(v["num_accepted_tokens"], join_path(path, "num_accepted_tokens"))
        per_pos = self.per_pos(v["accepted_per_pos"], join_path(path, "accepted_per_pos"), k_max, drafts)
        if draft_tokens != drafts * k_max:
            raise self.fail(
                join_path(path, "num_draft_tokens"),
                f"must equal num_drafts * k_max = {drafts} * {k_max} = {drafts * k_max}, got {draft_tokens}",
            )
        if accepted != sum(per_pos):
            raise self.fail(
                join_path(path, "num_accepted_tokens"),
                f"must equal sum(accepted_per_pos) = {sum(per_pos)}, got {accepted}",
            )
        rows = []
        rraw = v.get("per_request", [])
        rp = join_path(path, "per_request")
        if not isinstance(rraw, list):
            raise self.fail(rp, f"expected a list, got {json_type(rraw)}")
        for i, row in enumerate(rraw):
            p = f"{rp}[{i}]"
            row = self.obj(row, p, ("num_drafts", "accepted_per_pos"), ("num_steps",))
            n = self.int_(row["num_drafts"], join_path(p, "num_drafts"))
            rs = self._num_steps(row, p)
            if rs is not None and n > rs:
                raise self.fail(join_path(p, "num_steps"), f"must be >= num_drafts ({n}), got {rs}")
            ap = self.per_pos(row["accepted_per_pos"], join_path(p, "accepted_per_pos"), k_max, n)
            rows.append(RequestAcceptance(n, ap, rs))
        return AcceptanceSegment(akey, drafts, draft_tokens, accepted, per_pos, tuple(rows), steps)

    def _num_steps(self, v: Mapping[str, Any], path: str) -> int | None:
        """Optional ``num_steps`` (steps with or without a proposal); None when absent."""
        if v.get("num_steps") is None:
            return None
        return self.int_(v["num_steps"], join_path(path, "num_steps"), minimum=1)

    def per_pos(self, v: Any, path: str, k_max: int, drafts: int) -> tuple[int, ...]:
        if not isinstance(v, list) or len(v) != k_max:
            got = f"length {len(v)}" if isinstance(v, list) else json_type(v)
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
