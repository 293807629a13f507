"""The validation plots: predicted vs measured per metric, and one self-contained HTML page."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sim.fidelity.comparison import BAR_COLUMNS, COMPARED
from sim.results import metric_names as mn

# ---------------------------------------------------------------------------------------------
# plots


def figures(table: pl.DataFrame) -> list[Any]:
    """Plotly figures: predicted vs measured (one point per load × candidate × metric, with
    the y = x line and ±10 % band), and per-metric error against load."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figs = []
    t = table.filter(pl.col("predicted").is_not_null() & pl.col("measured").is_not_null())
    groups = [
        ("Latency percentiles (ms)", [c for _, c in COMPARED if c.endswith(("_median", "_p95", "_p99"))]),
        ("Throughput and goodput", [mn.REQUEST_THROUGHPUT, mn.OUTPUT_THROUGHPUT, mn.REQUEST_GOODPUT]),
    ]
    for title, cols in groups:
        sub = t.filter(pl.col("column").is_in(cols))
        if sub.height == 0:
            continue
        fig = go.Figure()
        for (cand,), grp in sub.group_by(["candidate"], maintain_order=True):
            loads = grp["load"].to_list()
            fig.add_trace(go.Scatter(
                x=grp["measured"].to_list(), y=grp["predicted"].to_list(), mode="markers",
                name=str(cand),
                text=[f"{m} @ {'' if ld is None else f'{ld:.0%} load'}" for m, ld in zip(grp["metric"].to_list(), loads, strict=True)],
                hovertemplate="%{text}<br>measured %{x:.4g}<br>predicted %{y:.4g}<extra>%{fullData.name}</extra>",
            ))
        lo = float(min(sub["measured"].min(), sub["predicted"].min()))  # type: ignore[arg-type]
        hi = float(max(sub["measured"].max(), sub["predicted"].max()))  # type: ignore[arg-type]
        lo = max(lo, 1e-6)
        xs = [lo, hi]
        fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", name="predicted = measured",
                                 line={"color": "black", "dash": "dash"}))
        fig.add_trace(go.Scatter(x=xs, y=[x * 1.1 for x in xs], mode="lines", name="+10 %",
                                 line={"color": "grey", "dash": "dot"}))
        fig.add_trace(go.Scatter(x=xs, y=[x * 0.9 for x in xs], mode="lines", name="−10 %",
                                 line={"color": "grey", "dash": "dot"}))
        log = hi / lo > 50
        fig.update_layout(title=f"{title}: predicted vs measured", xaxis_title="measured",
                          yaxis_title="predicted (simulator)")
        if log:
            fig.update_xaxes(type="log")
            fig.update_yaxes(type="log")
        figs.append(fig)
    with_load = t.filter(pl.col("load").is_not_null())
    if with_load.height:
        metrics = [c for c in BAR_COLUMNS + ("tpot_ms_median", "tpot_ms_p95", "pause_ms_p95", mn.REQUEST_THROUGHPUT)
                   if with_load.filter(pl.col("column") == c).height]
        cols = 2
        rows = max(1, math.ceil(len(metrics) / cols))
        labels = dict((c, lbl) for lbl, c in COMPARED)
        fig = make_subplots(rows=rows, cols=cols, subplot_titles=[labels[c] for c in metrics])
        for i, col in enumerate(metrics):
            r, c = i // cols + 1, i % cols + 1
            sub = with_load.filter(pl.col("column") == col).sort("load")
            for j, ((cand,), grp) in enumerate(sub.group_by(["candidate"], maintain_order=True)):
                color = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"][j % 4]
                fig.add_trace(go.Scatter(x=grp["load"].to_list(), y=grp["predicted"].to_list(),
                                         mode="lines+markers", name=f"{cand} predicted",
                                         line={"color": color}, showlegend=i == 0), row=r, col=c)
                fig.add_trace(go.Scatter(x=grp["load"].to_list(), y=grp["measured"].to_list(),
                                         mode="markers", name=f"{cand} measured",
                                         marker={"color": color, "symbol": "x", "size": 10},
                                         showlegend=i == 0), row=r, col=c)
        fig.update_layout(title="Predicted (lines) and measured (×) against load (fraction of capacity)",
                          height=320 * rows)
        figs.append(fig)
    return figs


def write_html(figs: Sequence[Any], path: Path, title: str, preamble: str = "") -> Path:
    """One self-contained HTML file with every figure (plotly.js embedded once)."""
    import html

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    if preamble:
        parts.append(f"<pre>{html.escape(preamble)}</pre>")
    for i, fig in enumerate(figs):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("</body></html>")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(path)
    return path
