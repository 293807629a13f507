"""Words, JSON and the chart's frame of the acceptance each candidate needs
(``sim.decisions.acceptance_needed``): every surface renders these, none recomputes them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from sim.decisions.acceptance_needed import AcceptanceNeeded
from sim.results.plain_numbers import rate


def _rate(r: float) -> str:
    return rate(r)


def assumed_words(n: AcceptanceNeeded) -> str:
    """"2.55 (95 % 2.34–2.75)": the candidate's own acceptance length, with its spread when the
    profile has per-request rows (the sentence names its provenance before it)."""
    spread = f" (95 % {n.spread[0]:.2f}–{n.spread[1]:.2f})" if n.spread is not None else ""
    return f"{n.assumed:.2f}{spread}"


def sentence(n: AcceptanceNeeded) -> str:
    """"pays up to X req/s if acceptance length ≥ Y; at your assumed Z it pays up to W req/s"."""
    if n.skipped:
        return f"not computed: {n.skipped}"
    pts = sorted(n.points, key=lambda p: p.rate)
    paying = [p for p in pts if p.needed is not None]
    if not paying:
        return (f"does not pay at {_rate(pts[0].rate)}" + (" or above" if len(pts) > 1 else "")
                + f", even at acceptance length {n.top:.2f} (the family's top)")
    reach = n.pays_up_to(math.inf)
    if reach is None:  # the lowest point never pays; a higher one does
        first = paying[0]
        head = f"pays at {_rate(first.rate)} if acceptance length ≥ {first.needed:.2f}"
    else:
        need = max(p.needed for p in pts if p.rate <= reach and p.needed is not None)
        head = f"pays up to {_rate(reach)} if acceptance length ≥ {need:.2f}"
    own = n.pays_assumed_up_to()
    tail = (f"at your {n.provenance} {assumed_words(n)} it pays up to {_rate(own)}" if own is not None else
            f"at your {n.provenance} {assumed_words(n)} it does not pay at {_rate(pts[0].rate)}")
    return f"{head}; {tail}"


def point_words(n: AcceptanceNeeded) -> str:
    """"needs ≥ 1.43 at 2 req/s, ≥ 1.97 at 8 req/s, never at 40 req/s"."""
    parts = []
    for p in sorted(n.points, key=lambda p: p.rate):
        if p.needed is None:
            parts.append(f"never at {_rate(p.rate)} (not even {n.top:.2f})")
        else:
            step = (" (the SLO sets it)" if p.slo_bound else "" if p.resolved
                    else f" (paid at every length tried; the family reaches down to {n.floor:.2f})"
                    if p.below <= n.floor else
                    f" (E2EL changes by more than ±5 % between {p.below:.2f} and it)")
            parts.append(f"≥ {p.needed:.2f} at {_rate(p.rate)}{step}")
    return "needs " + ", ".join(parts) if parts else ""


def cost_words(n: AcceptanceNeeded) -> str:
    """What the search cost, as the budget it ran under."""
    return (f"{n.runs} simulator run(s): ≤ {n.budget} evaluation(s) per load point, one run per seed "
            f"each, bisection on acceptance length (survival rates raised to a power), the SLO and E2EL p50 vs "
            f"{n.baseline}, cached")


def need_lines(needs: Sequence[AcceptanceNeeded]) -> list[str]:
    """One line per candidate (the verdict block's), then its per-point needs and cost."""
    out = []
    for n in needs:
        out.append(f"acceptance needed: {n.candidate} (k={n.k}): {sentence(n)}")
        if not n.skipped:
            out.append(f"  {point_words(n)}; {cost_words(n)}")
    return out


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def need_json(needs: Sequence[AcceptanceNeeded]) -> list[dict[str, Any]]:
    """Plain JSON (no inf or NaN) with the sentence every surface prints."""
    return [{"candidate": n.candidate, "baseline": n.baseline, "k": n.k, "said": sentence(n),
             "assumed_acceptance_length": _num(n.assumed), "provenance": n.provenance,
             "spread95": None if n.spread is None else [n.spread[0], n.spread[1]],
             "family_top": _num(n.top), "family_floor": _num(n.floor), "pays_up_to_rps_at_assumed": n.pays_assumed_up_to(),
             "runs": n.runs, "budget_per_point": n.budget, "seeds": list(n.seeds), "skipped": n.skipped or None,
             "points": [{"rate_rps": p.rate, "status": p.status, "needed": _num(p.needed), "below": _num(p.below),
                         "e2el_p50_ratio_at_needed": _num(p.ratio), "e2el_p50_ratio_at_assumed": _num(p.ratio_assumed),
                         "pays_at_assumed": p.pays_at_assumed, "resolved": p.resolved, "slo_bound": p.slo_bound,
                         "evaluations": p.evaluations}
                        for p in n.points]}
            for n in needs]


NEED_SCHEMA = {"candidate": pl.String, "rate": pl.Float64, "needed": pl.Float64, "top": pl.Float64,
               "assumed": pl.Float64, "spread_low": pl.Float64, "spread_high": pl.Float64,
               "provenance": pl.String}
"""The chart's frame: one row per candidate and load point; ``needed`` null where it never pays
(up to ``top``, the family's highest acceptance length)."""


def need_frame(needs: Sequence[AcceptanceNeeded]) -> pl.DataFrame:
    """Tidy frame for ``dashboard.figures.acceptance_needed_chart``."""
    rows = []
    for n in needs:
        if n.skipped:
            continue
        lo, hi = n.spread if n.spread is not None else (n.assumed, n.assumed)
        for p in sorted(n.points, key=lambda p: p.rate):
            rows.append({"candidate": n.candidate, "rate": p.rate, "needed": p.needed, "top": n.top,
                         "assumed": n.assumed, "spread_low": lo, "spread_high": hi, "provenance": n.provenance})
    return pl.DataFrame(rows, schema=NEED_SCHEMA)
