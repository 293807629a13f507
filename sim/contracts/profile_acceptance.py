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
class AcceptanceUncertainty:
    """How sure the segment's acceptance is: how many prompts were measured and, when two or
    more drafted anything, a bootstrap interval over them (``sim.model.acceptance_interval``)."""

    prompts: int
    """Prompts measured for this segment (the bootstrap's unit)."""
    level: float = 0.95
    resamples: int = 0
    survival_low: tuple[float, ...] | None = None
    """Per position: the interval's low end of the aggregate survival rate (None: no interval,
    fewer than two prompts drafted anything)."""
    survival_high: tuple[float, ...] | None = None
    length_low: tuple[float, ...] | None = None
    """Per k = 1..k_max: the low end of the mean acceptance length (1 + Σ_{i≤k} s_i)."""
    length_high: tuple[float, ...] | None = None

    @property
    def has_interval(self) -> bool:
        return self.length_low is not None


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
    uncertainty: AcceptanceUncertainty | None = None
    """Sample size and interval; None in profiles written before issue 41 and in imported or
    published entries (sample size unknown)."""

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
            ("per_request", "num_steps", "uncertainty"),
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
        unc = None
        if v.get("uncertainty") is not None:
            unc = self.uncertainty(v["uncertainty"], join_path(path, "uncertainty"), k_max)
        return AcceptanceSegment(akey, drafts, draft_tokens, accepted, per_pos, tuple(rows), steps, unc)

    def uncertainty(self, v: Any, path: str, k_max: int) -> AcceptanceUncertainty:
        """The optional ``uncertainty`` object: prompts, and the interval ends (all four or none)."""
        ends = ("survival_low", "survival_high", "length_low", "length_high")
        v = self.obj(v, path, ("prompts",), ("method", "level", "resamples", *ends))
        prompts = self.int_(v["prompts"], join_path(path, "prompts"), minimum=1)
        level = 0.95 if v.get("level") is None else self.num(v["level"], join_path(path, "level"), minimum=0.0)
        if not 0.0 < level < 1.0:
            raise self.fail(join_path(path, "level"), f"must be in (0, 1), got {level}")
        resamples = 0 if v.get("resamples") is None else self.int_(v["resamples"], join_path(path, "resamples"))
        given = [e for e in ends if v.get(e) is not None]
        if not given:
            return AcceptanceUncertainty(prompts, level, resamples)
        if len(given) != len(ends):
            missing = ", ".join(e for e in ends if e not in given)
            raise self.fail(path, f"give all of {', '.join(ends)} or none; missing {missing}")
        vals = {}
        for e in ends:
            p = join_path(path, e)
            raw = v[e]
            if not isinstance(raw, list) or len(raw) != k_max:
                got = f"length {len(raw)}" if isinstance(raw, list) else json_type(raw)
                raise self.fail(p, f"expected a list of k_max = {k_max} numbers, got {got}")
            top = 1.0 if e.startswith("survival") else None
            vals[e] = tuple(self.num(x, f"{p}[{i}]", minimum=0.0 if top else 1.0) for i, x in enumerate(raw))
            if top is not None and any(x > top for x in vals[e]):
                raise self.fail(p, f"survival rates must be <= 1, got {list(vals[e])}")
        for lo, hi in (("survival_low", "survival_high"), ("length_low", "length_high")):
            bad = next((i for i, (a, b) in enumerate(zip(vals[lo], vals[hi], strict=True)) if a > b), None)
            if bad is not None:
                raise self.fail(f"{join_path(path, lo)}[{bad}]", f"must be <= {hi}[{bad}] "
                                f"({vals[hi][bad]}), got {vals[lo][bad]}")
        return AcceptanceUncertainty(prompts, level, resamples, vals["survival_low"], vals["survival_high"],
                                     vals["length_low"], vals["length_high"])

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
