"""The free terms `specplan calibrate` may fit, and how each one changes the profile or scenario.

Why a module of its own: the fit must not reach into the simulator's rules. Every term here is
a value the profile (or the scenario's ``fleet.request_overhead``) already carries; calibrating
rewrites that value and the simulator is re-run as a black box (docs/fidelity.md, "Calibrating
from your own runs").

- ``acceptance_scale`` s: every unconditional per-position survival rate p_i becomes
  min(1, s·p_i) (so mean acceptance length − 1 scales by s until a position saturates); on the
  profile's counters (``accepted_per_pos`` of every segment and per-request row, rounded to whole
  drafts) or on the candidate's ``assumed_acceptance``.
- ``step_overhead_ms``: ``timing.step_overhead.seconds``, host time every engine step pays.
- ``request_overhead_ms``: ``fleet.request_overhead.fixed_ms``, time outside the engine added to
  TTFT and E2EL (a scenario value: the profile describes the engine only).
- ``spec_host_us_per_row``: host time per decoding row per speculative step (spec-decode input
  preparation and bookkeeping), added to the proposer's overhead grid H(b, k) as ``h·b``
  (exact at every grid point and under the grid's linear interpolation in ``b``).
- ``draft_host_scale`` s: the proposer's overhead grid H(b, k) × s, before the per-row cost is
  added. An import's H is *assumed* (0.5 ms of host time per draft pass, docs/profile-format.md),
  and it decides whether speculation pays wherever verification is cheap (docs/fidelity-gpu.md
  §5, §6): this is the term that replaces the assumption with the deployment's own time.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.scenario import Scenario


@dataclass(frozen=True, slots=True)
class TermSpec:
    """One free term: its unit, the box the search stays in, and what it changes."""

    name: str
    unit: str
    low: float
    high: float
    changes: str


TERM_SPECS: dict[str, TermSpec] = {
    "acceptance_scale": TermSpec("acceptance_scale", "×", 0.25, 2.0,
                                 "every per-position survival rate × s (capped at 1)"),
    "step_overhead_ms": TermSpec("step_overhead_ms", "ms", 0.0, 10.0, "timing.step_overhead.seconds"),
    "request_overhead_ms": TermSpec("request_overhead_ms", "ms", 0.0, 2000.0, "fleet.request_overhead.fixed_ms"),
    "spec_host_us_per_row": TermSpec("spec_host_us_per_row", "µs", 0.0, 200.0,
                                     "proposer overhead H(b, k) + h·b while speculating"),
    "draft_host_scale": TermSpec("draft_host_scale", "×", 0.0, 8.0,
                                 "proposer overhead H(b, k) × s (an import's assumed host time per draft pass)"),
}
TERMS: tuple[str, ...] = tuple(TERM_SPECS)


@dataclass(frozen=True, slots=True)
class Terms:
    """Values of the free terms: the profile's and scenario's own (uncalibrated) or fitted."""

    acceptance_scale: float = 1.0
    step_overhead_ms: float = 0.0
    request_overhead_ms: float = 0.0
    spec_host_us_per_row: float = 0.0
    draft_host_scale: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise SpecplanError(f"calibration term {f.name}: must be a finite number >= 0, got {v!r}")
        if self.acceptance_scale <= 0:
            raise SpecplanError(f"calibration term acceptance_scale: must be > 0, got {self.acceptance_scale}")

    def get(self, name: str) -> float:
        return float(getattr(self, name))

    def with_value(self, name: str, value: float) -> Terms:
        return Terms(**{**{f.name: getattr(self, f.name) for f in fields(self)}, name: float(value)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


def parse_fit(text: str) -> tuple[str, ...]:
    """``--fit a,b``: the terms to fit, each known, none twice."""
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in TERM_SPECS]
    if not names or bad:
        raise SpecplanError(f"--fit: unknown term(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(TERMS)}")
    if len(set(names)) != len(names):
        raise SpecplanError(f"--fit: a term is named twice in {text!r}")
    return names


def starting_terms(profile_doc: dict[str, Any], scenario: Scenario) -> Terms:
    """The uncalibrated values: what the profile and scenario say today (scale 1, no extra host cost)."""
    so = (profile_doc.get("timing") or {}).get("step_overhead") or {}
    ro = scenario.fleet.request_overhead
    return Terms(
        step_overhead_ms=float(so.get("seconds", 0.0)) * 1000.0,
        request_overhead_ms=float(ro.fixed_ms) if ro is not None else 0.0,
    )


def _provenance(note: str) -> dict[str, Any]:
    return {"method": "calibrated", "notes": note}


def _scale_counts(per_pos: list[int], drafts: int, s: float) -> list[int]:
    """``accepted_per_pos`` with survival × s (capped at 1), rounded to whole drafts; stays non-increasing."""
    return [int(round(min(float(drafts), s * a))) for a in per_pos]


def scale_acceptance_entry(entry: dict[str, Any], s: float, note: str) -> dict[str, Any]:
    """A profile acceptance entry (plain JSON) with every survival rate × s, capped at 1."""
    out = copy.deepcopy(entry)
    for seg in out["segments"]:
        for row in seg.get("per_request") or []:
            row["accepted_per_pos"] = _scale_counts(row["accepted_per_pos"], int(row["num_drafts"]), s)
        seg["accepted_per_pos"] = _scale_counts(seg["accepted_per_pos"], int(seg["num_drafts"]), s)
        seg["num_accepted_tokens"] = sum(seg["accepted_per_pos"])
    prov = out.get("provenance") or {}
    out["provenance"] = _provenance(f"{note}; scaled from {prov.get('method', '?')} acceptance"
                                    + (f" ({prov['notes']})" if prov.get("notes") else ""))
    return out


def add_host_cost(proposer_timing: dict[str, Any], us_per_row: float, note: str,
                  scale: float = 1.0) -> dict[str, Any]:
    """A proposer's timing entry with every overhead cell × ``scale``, then ``us_per_row`` µs ×
    batch added (the per-row cost is the deployment's, not a share of the grid, so it is not scaled)."""
    out = copy.deepcopy(proposer_timing)
    grid = out["overhead"]
    batches = grid["axes"]["batch"]
    for key in ("median", "p10", "p90"):
        if grid.get(key) is None:
            continue
        grid[key] = [[None if v is None else scale * float(v) + us_per_row * 1e-6 * float(b) for v in row]
                     for b, row in zip(batches, grid[key], strict=True)]
    old = out.get("overhead_provenance") or {}
    what = " + ".join(([f"H(b, k) × {scale:.4g}"] if scale != 1.0 else ["H(b, k)"])
                      + ([f"{us_per_row:.4g} µs × b"] if us_per_row else []))
    out["overhead_provenance"] = _provenance(
        f"{note}; {what} from the {old.get('method', 'timing section')} overhead grid"
        + (f" ({old['notes']})" if old.get("notes") else ""))
    return out


def apply_terms(profile_doc: dict[str, Any], scenario: Scenario, candidate: str, terms: Terms,
                note: str, fitted: tuple[str, ...] = ()) -> tuple[dict[str, Any], Scenario]:
    """The profile document and scenario with ``terms`` written in (``note``: the provenance
    text). A term is written where it differs from the uncalibrated value, or is in ``fitted``
    (a fit that kept the old value still says so in the provenance)."""
    doc = copy.deepcopy(profile_doc)
    cand = scenario.candidate(candidate)
    over: dict[str, object] = {}
    timing = doc["timing"]
    base = starting_terms(profile_doc, scenario)
    if terms.step_overhead_ms != base.step_overhead_ms or "step_overhead_ms" in fitted:
        timing["step_overhead"] = {"seconds": terms.step_overhead_ms / 1000.0,
                                   "provenance": _provenance(f"{note}; was {base.step_overhead_ms:.4g} ms")}
    if terms.request_overhead_ms != base.request_overhead_ms or "request_overhead_ms" in fitted:
        ro = scenario.fleet.request_overhead
        over["fleet.request_overhead"] = {
            "fixed_ms": terms.request_overhead_ms,
            "per_prompt_token_ms": ro.per_prompt_token_ms if ro is not None else 0.0,
            "source": "calibrated", "citation": note}
    if cand.speculates and cand.proposer is not None:
        host = [t for t in ("spec_host_us_per_row", "draft_host_scale")
                if terms.get(t) != Terms().get(t) or t in fitted]
        if host:
            props = timing.get("proposers") or {}
            if cand.proposer not in props:
                raise SpecplanError(f"{scenario.origin}: candidate {candidate!r}: proposer {cand.proposer!r} has no "
                                    f"timing in the profile, so {' and '.join(host)} have nothing to change")
            props[cand.proposer] = add_host_cost(props[cand.proposer], terms.spec_host_us_per_row, note,
                                                 terms.draft_host_scale)
        if terms.acceptance_scale != 1.0 or "acceptance_scale" in fitted:
            if cand.assumed_acceptance is not None:
                over[f"candidates[{candidate}].assumed_acceptance"] = [
                    min(1.0, terms.acceptance_scale * p) for p in cand.assumed_acceptance]
            elif cand.acceptance_trace is not None:
                raise SpecplanError(f"{scenario.origin}: candidate {candidate!r} replays an acceptance trace; "
                                    "acceptance_scale cannot scale a trace (leave it out of --fit)")
            else:
                entry = (doc.get("acceptance") or {}).get(cand.proposer)
                if entry is None:
                    raise SpecplanError(f"{scenario.origin}: candidate {candidate!r}: the profile has no acceptance "
                                        f"for proposer {cand.proposer!r} to scale")
                doc["acceptance"][cand.proposer] = scale_acceptance_entry(entry, terms.acceptance_scale, note)
    elif terms.spec_host_us_per_row > 0 or terms.acceptance_scale != 1.0 or terms.draft_host_scale != 1.0:
        raise SpecplanError(f"candidate {candidate!r} does not speculate: acceptance_scale, spec_host_us_per_row "
                            "and draft_host_scale have nothing to change (fit them on a speculative candidate)")
    return doc, (scenario.with_overrides(over) if over else scenario)
