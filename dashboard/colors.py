"""One colour per candidate, the same in every chart and in the report.

Colours are assigned by the candidate's position in the scenario (baseline first), never by
the order a frame happens to list them in, so a candidate keeps its colour across charts,
load points and reruns of the same scenario.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

BASELINE_COLOR = "#3b3b3b"
"""The baseline (no speculation) is drawn in near-black: the reference every curve is read against."""

# Okabe-Ito colour-blind-safe palette (minus black), then Tableau extras for long candidate lists.
PALETTE: tuple[str, ...] = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#d55e00",
    "#56b4e9",
    "#f0e442",
    "#8c564b",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#9467bd",
)

SLO_COLOR = "#c0392b"
"""SLO limits and break-even lines: red, dotted."""

ASSUMED_SUFFIX = " (assumed)"


def candidate_colors(candidates: Iterable[str], baseline: str | None = "baseline") -> dict[str, str]:
    """Map candidate names (in scenario order) to colours; the baseline gets BASELINE_COLOR.

    Speculative candidates cycle through PALETTE in the order given, skipping the baseline,
    so adding a candidate at the end never recolours the ones before it.
    """
    out: dict[str, str] = {}
    i = 0
    for name in candidates:
        if name in out:
            continue
        if baseline is not None and name == baseline:
            out[name] = BASELINE_COLOR
            continue
        out[name] = PALETTE[i % len(PALETTE)]
        i += 1
    return out


def color_for(colors: Mapping[str, str], candidate: str) -> str:
    """The candidate's colour; one not in the map (a frame from elsewhere) gets a neutral grey."""
    return colors.get(candidate, "#999999")
