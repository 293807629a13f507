"""What every chart shares: labels, line styles, the layout, the SLO line, candidate order."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
import polars as pl

from dashboard.colors import SLO_COLOR

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

_TEMPLATE = "plotly_white"


def style_figure(fig: go.Figure, title: str, x_title: str, y_title: str, *, height: int = 420,
                 subtitle: str | None = None) -> go.Figure:
    """Title (and subtitle), axis titles, the template and the legend below the plot."""
    text = title if not subtitle else f"{title}<br><sup>{subtitle}</sup>"
    fig.update_layout(
        template=_TEMPLATE,
        title={"text": text, "x": 0.01, "xanchor": "left", "font": {"size": 16}},
        height=height,
        margin={"l": 64, "r": 20, "t": 64 if subtitle else 48, "b": 40},
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0.0,
                "font": {"size": 11}},
        hovermode="closest",
    )
    fig.update_xaxes(title_text=x_title, showline=True, linecolor="#888", zeroline=False)
    fig.update_yaxes(title_text=y_title, showline=True, linecolor="#888", zeroline=False)
    return fig


def no_data(fig: go.Figure, why: str) -> go.Figure:
    """An empty chart that says why it is empty."""
    fig.add_annotation(text=why, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 14, "color": "#777"})
    return fig


def candidate_order(frame: pl.DataFrame, colors: Mapping[str, str]) -> list[str]:
    """Candidates in colour-map (scenario) order, then any others in frame order."""
    present = list(dict.fromkeys(frame.get_column("candidate").to_list())) if frame.height else []
    known = [c for c in colors if c in present]
    return known + [c for c in present if c not in colors]


def add_slo_line(fig: go.Figure, slo_ms: float | None, label: str, *, row: int | None = None,
                 col: int | None = None) -> go.Figure:
    """Draw an SLO limit as a horizontal red dotted line with its value written on it."""
    if slo_ms is None:
        return fig
    kwargs = {} if row is None else {"row": row, "col": col}
    fig.add_hline(
        y=float(slo_ms), line_dash="dot", line_color=SLO_COLOR, line_width=2,
        annotation_text=f"SLO {label} {slo_ms:g} ms", annotation_position="top left",
        annotation_font_color=SLO_COLOR, **kwargs,
    )
    return fig
