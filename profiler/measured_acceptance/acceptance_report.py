"""What a measured acceptance entry says, in words: acceptance length per segment, how precise
each is (bootstrap over prompts), and the intervals added to a profile written before they were
stored. No torch: the CLI prints these for any profile."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sim.contracts.acceptance_interval import segment_uncertainty
from sim.model.acceptance import FEW_REQUESTS, mean_length_interval


def mean_acceptance_length(segment: dict[str, Any]) -> float:
    """vLLM's convention: 1 + accepted tokens / drafts (bonus token included)."""
    drafts = segment["num_drafts"]
    return 1.0 + segment["num_accepted_tokens"] / drafts if drafts else math.nan


def describe(entry: dict[str, Any]) -> list[str]:
    """One line per segment: key, drafts, mean acceptance length (with its bootstrap interval
    over prompts when there is one, else its 95 % half-width across requests), survival rates,
    prompts. A segment where no prompt drafted anything says so, not ``nan ± inf``."""
    lines = []
    for seg in entry["segments"]:
        key = seg["segment"]
        d = seg["num_drafts"]
        unc = seg.get("uncertainty") or {}
        prompts = unc.get("prompts", len(seg.get("per_request", [])))
        if not d:
            lines.append(f"{_label(key)}: no draft in {prompts} prompt(s) ({seg.get('num_steps', 0)} steps "
                         "without a proposal): acceptance unknown, simulated without speculation")
            continue
        rates = ", ".join(f"{a / d:.2f}" for a in seg["accepted_per_pos"])
        if unc.get("length_low") is not None:
            half = f" (95 % {unc['length_low'][-1]:.2f}–{unc['length_high'][-1]:.2f}, bootstrap over prompts)"
        else:
            interval = _segment_interval(seg)
            half = ("" if interval is None else f" ± {interval[1]:.2f}" if math.isfinite(interval[1])
                    else " (one prompt: no interval)")
        lines.append(
            f"{_label(key)}: {d} drafts, mean acceptance length {mean_acceptance_length(seg):.2f}{half}, "
            f"survival [{rates}], {prompts} prompts"
        )
    return lines


def _label(key: dict[str, Any]) -> str:
    return f"{key['task']}/{key['language']}/T={key['temperature']:g}"


def _segment_interval(seg: dict[str, Any]) -> tuple[float, float, int] | None:
    """mean_length_interval at k_max over a segment's per-request rows; None without rows."""
    rows = seg.get("per_request", [])
    if not rows:
        return None
    return mean_length_interval(
        [r["num_drafts"] for r in rows], np.array([r["accepted_per_pos"] for r in rows]),
        len(seg["accepted_per_pos"]),
    )


def precision_summary(entry: dict[str, Any]) -> str | None:
    """One line on how much data is behind the entry: fewest prompts in a segment, the segment
    whose mean acceptance length (at k_max) is least certain, and how many segments had no
    draft at all; None without rows."""
    worst: tuple[float, str] | None = None
    fewest: int | None = None
    no_draft = 0
    for seg in entry["segments"]:
        interval = _segment_interval(seg)
        if interval is None:
            continue
        _, h, n = interval
        fewest = n if fewest is None else min(fewest, n)
        if not seg["num_drafts"]:
            no_draft += 1
        elif worst is None or h > worst[0]:
            worst = (h, _label(seg["segment"]))
    if fewest is None:
        return None
    thin = "" if fewest >= FEW_REQUESTS else f" (under {FEW_REQUESTS}: raise --prompts-per-segment)"
    out = f"fewest requests in a segment {fewest}{thin}"
    if worst is not None:
        out += ("; one prompt in some segment: no interval, verdicts that depend on its acceptance "
                "are undetermined" if not math.isfinite(worst[0]) else
                f"; least certain mean acceptance length ± {worst[0]:.2f} (95%, {worst[1]})")
    if no_draft:
        out += f"; {no_draft} of {len(entry['segments'])} segments had no draft at all"
    return out


def add_intervals(doc: dict[str, Any], seed: int = 0) -> tuple[dict[str, Any], int]:
    """A copy of profile ``doc`` whose measured segments carry ``uncertainty`` computed from their
    own ``per_request`` rows (one row per prompt), for profiles written before issue 41; segments
    that have it, or have no rows (imported, published), are left as they are. Returns the copy
    and how many segments gained one."""
    import copy

    out = copy.deepcopy(doc)
    added = 0
    for entry in (out.get("acceptance") or {}).values():
        rng = np.random.default_rng(np.random.SeedSequence([seed, 41]).spawn(1)[0])
        n = 0
        for seg in entry.get("segments", []):
            if seg.get("uncertainty") is None and seg.get("per_request"):
                seg["uncertainty"] = segment_uncertainty(seg, rng)
                n += 1
        if n:
            entry["provenance"] = with_notes(entry["provenance"], (
                f"uncertainty: bootstrap over the stored per_request rows (one per prompt) added "
                f"afterwards by specplan profile interval (seed {seed}) to {n} segment(s)"))
        added += n
    return out, added


def with_notes(provenance: dict[str, Any], note: str) -> dict[str, Any]:
    out = dict(provenance)
    prev = out.get("notes")
    out["notes"] = f"{prev}; {note}" if prev else note
    return out
