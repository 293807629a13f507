"""Acceptance typed in from a paper or blog post: a profile entry with method ``published``.

Papers report acceptance in different shapes, so the kind of number is explicit:

- ``survival``: unconditional per-position rates ``P(position i accepted)`` — vLLM's
  ``accepted_per_pos / drafts`` — non-increasing in ``i``;
- ``conditional``: ``P(position i accepted | position i−1 accepted)``; survival is their
  running product;
- ``alpha``: a single per-token acceptance rate α assumed equal and independent at every position
  (survival ``α^i``), as in Leviathan et al.'s analysis; the notes say it is an assumption.

Counts are the rates times a **nominal** number of drafts (default 1000), rounded: they set the
resolution, not a sample size, and the notes say so. A citation is required.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from typing import Any, Literal

from sim.contracts.errors import SpecplanError

RateKind = Literal["survival", "conditional", "alpha"]
RATE_KINDS: tuple[str, ...] = ("survival", "conditional", "alpha")
DEFAULT_NOMINAL_DRAFTS = 1000


def survival_rates(rates: Sequence[float], kind: RateKind, k_max: int | None = None) -> list[float]:
    """Convert published rates of the given kind to unconditional survival rates."""
    if kind not in RATE_KINDS:
        raise SpecplanError(f"kind {kind!r}: expected one of {', '.join(RATE_KINDS)}")
    values = [float(r) for r in rates]
    if not values:
        raise SpecplanError("rates: expected at least one rate")
    for i, r in enumerate(values):
        if not math.isfinite(r) or not 0.0 <= r <= 1.0:
            raise SpecplanError(f"rates[{i}]={r}: rates are probabilities in [0, 1]")
    if kind == "alpha":
        if len(values) != 1:
            raise SpecplanError("rates: kind 'alpha' takes exactly one rate (α)")
        if k_max is None or k_max < 1:
            raise SpecplanError("k_max: required (>= 1) with kind 'alpha'")
        return [values[0] ** (i + 1) for i in range(k_max)]
    if k_max is not None and k_max != len(values):
        raise SpecplanError(f"k_max={k_max}: differs from the {len(values)} rates given")
    if kind == "conditional":
        out, acc = [], 1.0
        for r in values:
            acc *= r
            out.append(acc)
        return out
    for i in range(1, len(values)):
        if values[i] > values[i - 1]:
            raise SpecplanError(
                f"rates[{i}]={values[i]} > rates[{i - 1}]={values[i - 1]}: survival rates must be "
                "non-increasing; were these conditional rates? (use kind 'conditional')"
            )
    return values


def published_entry(
    rates: Sequence[float],
    *,
    citation: str | None,
    kind: RateKind = "survival",
    k_max: int | None = None,
    num_drafts: int = DEFAULT_NOMINAL_DRAFTS,
    task: str = "any",
    language: str = "any",
    temperature: float = 0.0,
    segment: dict[str, Any] | None = None,
    models: dict[str, str] | None = None,
    command: str | None = None,
    notes: str | None = None,
) -> dict[str, Any]:
    """A profile acceptance entry from published rates; ``citation`` is required.

    ``segment`` (``{"task", "language", "temperature"}``), when given, replaces the three
    separate keyword arguments.
    """
    if segment is not None:
        task = str(segment.get("task", task))
        language = str(segment.get("language", language))
        temperature = float(segment.get("temperature", temperature))
    if citation is None or not str(citation).strip():
        raise SpecplanError(
            "citation: required for published acceptance (paper, table and URL the rates come from)"
        )
    if num_drafts < 1:
        raise SpecplanError(f"num_drafts={num_drafts}: the nominal number of drafts must be >= 1")
    if temperature < 0 or not math.isfinite(temperature):
        raise SpecplanError(f"temperature={temperature}: must be a number >= 0")
    survival = survival_rates(rates, kind, k_max)
    per_pos = [int(round(s * num_drafts)) for s in survival]  # round is monotone: stays ordered
    k = len(per_pos)
    mal = 1 + sum(survival)
    parts = [
        f"published {kind} rates {[round(float(r), 4) for r in rates]}"
        + (" (assumed equal and independent per position)" if kind == "alpha" else ""),
        f"survival {[round(s, 4) for s in survival]}, mean acceptance length {mal:.2f}",
        f"num_drafts={num_drafts} is nominal (counts = rates x {num_drafts}), not observations",
        "no per-request rows: spread across requests unknown",
    ]
    if notes:
        parts.append(notes)
    return {
        "provenance": {
            "method": "published",
            "models": dict(models or {}),
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": command,
            "citation": str(citation).strip(),
            "notes": "; ".join(parts),
        },
        "k_max": k,
        "segments": [
            {
                "segment": {"task": task, "language": language, "temperature": float(temperature)},
                "num_drafts": num_drafts,
                "num_draft_tokens": num_drafts * k,
                "num_accepted_tokens": sum(per_pos),
                "accepted_per_pos": per_pos,
                "per_request": [],
            }
        ],
    }
