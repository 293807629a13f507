"""What every chart shares: labels, line styles, the layout, the SLO line, candidate order.

Charts are built as plain Plotly JSON (``Figure``: a dict with ``data`` and ``layout``), the
form ``dcc.Graph`` and plotly.js take. Building them through ``plotly.graph_objects`` validated
every property on every redraw and cost most of a what-if's chart time; ``go.Figure(fig)``
validates a chart where that is wanted (the tests and the HTML report do).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from dashboard.colors import SLO_COLOR, color_for

Figure = dict[str, Any]
"""A chart as Plotly JSON: ``{"data": [trace, ...], "layout": {...}}``."""

LOAD_AXIS = "offered load (requests/s)"

METRIC_LABELS: dict[str, tuple[str, str]] = {
    # metric -> (long name, short name)
    "ttft": ("Time to first token", "TTFT"),
    "tpot": ("Time per output token", "TPOT"),
    "itl": ("Inter-token latency", "ITL"),
    "e2el": ("End-to-end latency", "E2E latency"),
    "pause": ("Longest stream pause", "stream pause"),
}

STAT_LABELS: dict[str, str] = {"median": "p50", "mean": "mean", "p95": "p95", "p99": "p99", "max": "max"}
STAT_DASH: dict[str, str] = {"median": "dot", "mean": "dashdot", "p95": "solid", "p99": "dash", "max": "longdash"}
DEFAULT_STATS: dict[str, tuple[str, ...]] = {
    "ttft": ("median", "p95", "p99"),
    "tpot": ("median", "p95", "p99"),
    "itl": ("median", "p95", "p99"),
    "e2el": ("median", "p95", "p99"),
    "pause": ("p95", "p99", "max"),
}


@functools.cache
def template() -> Mapping[str, Any]:
    """Plotly's ``plotly_white`` template as JSON, built once and shared by every chart (read-only)."""
    import plotly.io as pio

    return pio.templates["plotly_white"].to_plotly_json()


def axis(title: str, **extra: Any) -> dict[str, Any]:
    """An axis with its title and the shared line style."""
    return {"title": {"text": title}, "showline": True, "linecolor": "#888", "zeroline": False, **extra}


def new_figure(title: str, x_title: str, y_title: str, *, height: int = 420,
               subtitle: str | None = None) -> Figure:
    """An empty chart: title (and subtitle), axis titles, the template and the legend below the plot."""
    return {"data": [], "layout": {
        "template": template(),
        "title": {"text": title_text(title, subtitle), "x": 0.01, "xanchor": "left", "font": {"size": 16}},
        "height": height,
        "margin": {"l": 64, "r": 20, "t": 64 if subtitle else 48, "b": 40},
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0.0,
                   "font": {"size": 11}},
        "hovermode": "closest",
        "xaxis": axis(x_title),
        "yaxis": axis(y_title),
    }}


def title_text(title: str, subtitle: str | None = None) -> str:
    return title if not subtitle else f"{title}<br><sup>{subtitle}</sup>"


def subplot_title(text: str, x: float, y: float, size: int = 16) -> dict[str, Any]:
    """A panel's title above it, in paper coordinates (what ``make_subplots`` writes)."""
    return {"text": text, "x": x, "y": y, "xref": "paper", "yref": "paper", "xanchor": "center",
            "yanchor": "bottom", "showarrow": False, "font": {"size": size}}


def no_data(fig: Figure, why: str) -> Figure:
    """An empty chart that says why it is empty."""
    fig["layout"].setdefault("annotations", []).append(
        {"text": why, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
         "font": {"size": 14, "color": "#777"}})
    return fig


def hline(fig: Figure, y: float, *, color: str, dash: str, width: float, text: str | None = None,
          axes: tuple[str, str] = ("x", "y"), log: bool = False) -> Figure:
    """A horizontal line across a panel, its label at the left end above it (``log``: the y axis
    is logarithmic, where plotly.js places a shape by value but an annotation by log10 value)."""
    xa, ya = axes
    lay = fig["layout"]
    lay.setdefault("shapes", []).append(
        {"type": "line", "x0": 0, "x1": 1, "xref": f"{xa} domain", "y0": y, "y1": y, "yref": ya,
         "line": {"color": color, "dash": dash, "width": width}})
    if text:
        lay.setdefault("annotations", []).append(
            {"text": text, "x": 0, "xanchor": "left", "xref": f"{xa} domain",
             "y": math.log10(y) if log and y > 0 else y, "yanchor": "bottom",
             "yref": ya, "showarrow": False, "font": {"color": color}})
    return fig


def vline(fig: Figure, x: float, *, color: str, dash: str, width: float, opacity: float | None = None,
          text: str | None = None) -> Figure:
    """A vertical line up a panel, its label at the top right of it."""
    lay = fig["layout"]
    shape: dict[str, Any] = {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1,
                             "yref": "y domain", "line": {"color": color, "dash": dash, "width": width}}
    if opacity is not None:
        shape["opacity"] = opacity
    lay.setdefault("shapes", []).append(shape)
    if text:
        lay.setdefault("annotations", []).append(
            {"text": text, "x": x, "xanchor": "left", "xref": "x", "y": 1, "yanchor": "top",
             "yref": "y domain", "showarrow": False, "font": {"color": color}})
    return fig


def candidate_order(frame: pl.DataFrame, colors: Mapping[str, str]) -> list[str]:
    """Candidates in colour-map (scenario) order, then any others in frame order."""
    present = list(dict.fromkeys(frame.get_column("candidate").to_list())) if frame.height else []
    known = [c for c in colors if c in present]
    return known + [c for c in present if c not in colors]


def add_slo_line(fig: Figure, slo_ms: float | None, label: str, *, axes: tuple[str, str] = ("x", "y"),
                 log: bool = False) -> Figure:
    """Draw an SLO limit as a horizontal red dotted line with its value written on it."""
    if slo_ms is None:
        return fig
    return hline(fig, float(slo_ms), color=SLO_COLOR, dash="dot", width=2, text=f"SLO {label} {slo_ms:g} ms",
                 axes=axes, log=log)


def log_ticks(values: list[float]) -> dict[str, Any]:
    """Tick values and labels for a log axis over ``values``: 1-2-5 steps per decade (1-1.5-2-3-5-7
    on a narrow range) labelled in plain numbers, instead of plotly's bare minor digits ("2, 5,
    100, 2") that read as the wrong magnitudes. Empty when there is nothing to place."""
    vals = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if not vals:
        return {}
    lo, hi = min(vals) / 1.15, max(vals) * 1.15
    for steps in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in steps if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= 3:
            break
    if len(ticks) < 2:
        return {}
    return {"tickvals": ticks, "ticktext": [f"{t:,.0f}" if t >= 10 else f"{t:g}" for t in ticks]}


CAPACITY_KEY = "solid verticals: capacity estimated from the load points"


def capacity_note(capacities: Mapping[str, float | None] | None) -> str | None:
    """The subtitle line naming each marked capacity (the lines themselves carry no text: close
    capacities would print over each other)."""
    marked = [f"{c} {r:.3g}" for c, r in (capacities or {}).items() if r is not None and r > 0]
    if not marked:
        return None
    listed = ", ".join(marked)
    return f"{CAPACITY_KEY} (req/s):{'<br>' if len(listed) > 50 else ' '}{listed}"


def mark_capacities(fig: Figure, capacities: Mapping[str, float | None] | None,
                    colors: Mapping[str, str]) -> Figure:
    """Each candidate's capacity (fleet req/s) as a solid vertical line in its colour (named in
    the subtitle, ``capacity_note``)."""
    for cand, rate in (capacities or {}).items():
        if rate is None or not rate > 0:
            continue
        vline(fig, rate, color=color_for(colors, cand), dash="solid", width=1.5, opacity=0.8)
    return fig
