"""The acceptance the decision needs, as one chart: load on x, acceptance length on y.

A pure builder like ``dashboard.figures`` (kept apart: that module is at its size limit). It
draws the frame of ``sim.decisions.acceptance_needed_text.need_frame``; nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from dashboard.colors import color_for
from dashboard.figure_style import Figure, new_figure, no_data

TITLE = "Acceptance length speculation needs to pay, by load"


def _rgba(color: str, alpha: float) -> str:
    """``#1f77b4`` → ``rgba(31,119,180,0.2)`` (other colour forms pass through)."""
    c = color.lstrip("#")
    if len(c) != 6:
        return color
    r, g, b = (int(c[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def shaded_bounds(frame: pl.DataFrame, candidate: str) -> tuple[list[float], list[float], list[float]]:
    """(load, lower, upper) of the region where ``candidate``'s speculation pays: from the
    break-even acceptance length up to the family's top; zero height where it never pays."""
    r = frame.filter(pl.col("candidate") == candidate).sort("rate")
    top = r["top"].to_list()
    low = [t if n is None else n for n, t in zip(r["needed"].to_list(), top, strict=True)]
    return r["rate"].to_list(), low, top


def acceptance_needed_chart(frame: pl.DataFrame, colors: Mapping[str, str], *, title: str = TITLE) -> Figure:
    """Per speculative candidate: the break-even acceptance length at each load point (line), the
    region above it where speculation pays (shaded), and the candidate's own acceptance as a band
    (its 95 % spread when the profile has one), labelled with its provenance.

    ``frame`` columns: ``candidate``, ``rate`` (offered fleet req/s), ``needed`` (null: never
    pays up to ``top``), ``top``, ``assumed``, ``spread_low``, ``spread_high``, ``provenance``.
    """
    fig = new_figure(title, "offered load (requests/s, whole fleet)", "mean acceptance length (tokens per step)",
                     height=440, subtitle="shaded: speculation pays (E2EL p50 below the baseline's); "
                                          "band: the candidate's own acceptance")
    if frame.height == 0:
        return no_data(fig, "no speculative candidate, or the acceptance needed was not computed")
    data: list[dict[str, Any]] = fig["data"]
    for cand in dict.fromkeys(frame["candidate"].to_list()):
        color = color_for(colors, cand)
        x, low, top = shaded_bounds(frame, cand)
        data.append({"type": "scatter", "x": x, "y": low, "mode": "lines+markers", "name": f"{cand}: needs ≥",
                     "legendgroup": cand, "line": {"color": color, "width": 3},
                     "hovertemplate": f"{cand} pays at %{{x:g}} req/s if acceptance length ≥ %{{y:.2f}}<extra></extra>"})
        data.append({"type": "scatter", "x": x, "y": top, "mode": "lines", "name": f"{cand}: pays",
                     "legendgroup": cand, "line": {"color": color, "width": 0}, "fill": "tonexty",
                     "fillcolor": _rgba(color, 0.18), "hoverinfo": "skip", "meta": "pays"})
        r = frame.filter(pl.col("candidate") == cand).row(0, named=True)
        lo, hi, own = r["spread_low"], r["spread_high"], r["assumed"]
        span = [min(x), max(x)] if len(x) > 1 else [x[0] * 0.9, x[0] * 1.1]
        label = f"{cand}: {r['provenance']} acceptance {own:.2f}" + (f" (95 % {lo:.2f}–{hi:.2f})" if hi > lo else "")
        data.append({"type": "scatter", "x": span, "y": [lo, lo], "mode": "lines", "showlegend": False,
                     "legendgroup": cand, "line": {"color": color, "width": 0}, "hoverinfo": "skip"})
        data.append({"type": "scatter", "x": span, "y": [hi, hi], "mode": "lines", "name": label,
                     "legendgroup": cand, "line": {"color": color, "width": 0}, "fill": "tonexty",
                     "fillcolor": _rgba(color, 0.35), "hoverinfo": "skip", "meta": "band"})
        data.append({"type": "scatter", "x": span, "y": [own, own], "mode": "lines", "showlegend": False,
                     "legendgroup": cand, "line": {"color": color, "width": 2, "dash": "dash"},
                     "hovertemplate": f"{label}<extra></extra>"})
    return fig
