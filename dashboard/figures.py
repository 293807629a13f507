"""Pure figure builders: polars frames in, Plotly figures out.

No simulation happens here and nothing is read from disk: callbacks, the HTML report and the
tests hand in frames with the columns documented on each builder (the result frames of
docs/architecture.md, a load sweep made of summary rows, or small frames derived from a
profile) and get a figure back. Every chart has a title, axis titles with units, one colour
per candidate (``dashboard.colors``) and, on latency charts, the SLO limit as a red dotted line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from dashboard.colors import SLO_COLOR, color_for
from dashboard.figure_style import (
    DEFAULT_STATS,
    LOAD_AXIS,
    METRIC_LABELS,
    STAT_DASH,
    STAT_LABELS,
    add_slo_line,
    candidate_order,
    no_data,
    style_figure,
)


def crossover_rates(sweep: pl.DataFrame, column: str, baseline: str = "baseline") -> dict[str, float | None]:
    """Offered load where each candidate's ``column`` first rises to the baseline's.

    Linear interpolation between the two load points around the sign change of
    (candidate − baseline); ``None`` when the curves do not cross inside the sweep. Below the
    crossing speculation lowers this latency, above it speculation costs latency.
    """
    out: dict[str, float | None] = {}
    if sweep.height == 0 or column not in sweep.columns:
        return out
    base = (sweep.filter(pl.col("candidate") == baseline).select("offered_rate", column)
            .rename({column: "_base"}))
    if base.height == 0:
        return out
    for cand in sweep.get_column("candidate").unique(maintain_order=True).to_list():
        if cand == baseline:
            continue
        j = (sweep.filter(pl.col("candidate") == cand).select("offered_rate", column)
             .join(base, on="offered_rate", how="inner").drop_nulls().sort("offered_rate"))
        rates = j.get_column("offered_rate").to_list()
        diff = (j.get_column(column) - j.get_column("_base")).to_list()
        out[cand] = None
        for i in range(1, len(rates)):
            if diff[i - 1] < 0 <= diff[i]:
                span = diff[i] - diff[i - 1]
                frac = -diff[i - 1] / span if span else 0.0
                out[cand] = rates[i - 1] + frac * (rates[i] - rates[i - 1])
                break
    return out


def latency_vs_load(
    sweep: pl.DataFrame,
    metric: str,
    colors: Mapping[str, str],
    *,
    slo_ms: float | None = None,
    stats: Sequence[str] | None = None,
    mark_crossover: str | None = "p95",
) -> go.Figure:
    """Latency percentiles of every candidate against offered load, SLO limit drawn.

    ``sweep``: one row per (candidate, load point) with ``candidate``, ``offered_rate`` (req/s)
    and the summary columns ``{metric}_ms_{stat}`` (``pause_ms_{p95,p99,max}`` for pauses).
    Line style encodes the percentile, colour the candidate. ``mark_crossover`` marks where a
    speculative candidate's percentile meets the baseline's: beyond it speculation stops paying.
    """
    long, short = METRIC_LABELS[metric]
    stats = tuple(stats or DEFAULT_STATS[metric])
    styles = {"dot": "dotted", "solid": "solid", "dash": "dashed", "longdash": "long dashes", "dashdot": "dash-dot"}
    key = " · ".join(f"{styles[STAT_DASH[st]]} {STAT_LABELS[st]}" for st in stats)
    fig = go.Figure()
    style_figure(fig, f"{long} vs offered load", LOAD_AXIS, f"{short} (ms)", subtitle=f"line style: {key}")
    cols = [f"{metric}_ms_{s}" for s in stats]
    if sweep.height == 0 or not any(c in sweep.columns for c in cols):
        return no_data(fig, "no load points yet")
    for cand in candidate_order(sweep, colors):
        rows = sweep.filter(pl.col("candidate") == cand).sort("offered_rate")
        # one legend entry per candidate (clicking it hides all its percentiles)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", name=cand, legendgroup=cand,
                                 line={"color": color_for(colors, cand), "width": 2}, hoverinfo="skip"))
        for stat, col in zip(stats, cols, strict=True):
            if col not in rows.columns:
                continue
            fig.add_trace(go.Scatter(
                x=rows.get_column("offered_rate").to_list(), y=rows.get_column(col).to_list(),
                mode="lines+markers", name=f"{cand} {STAT_LABELS[stat]}", legendgroup=cand,
                showlegend=False,
                line={"color": color_for(colors, cand), "dash": STAT_DASH[stat], "width": 2},
                marker={"size": 6},
                hovertemplate=f"{cand} {STAT_LABELS[stat]}: %{{y:.1f}} ms at %{{x:.2f}} req/s<extra></extra>",
            ))
    add_slo_line(fig, slo_ms, short)
    crossings: list[str] = []
    if mark_crossover and f"{metric}_ms_{mark_crossover}" in sweep.columns:
        col = f"{metric}_ms_{mark_crossover}"
        for cand, rate in crossover_rates(sweep, col).items():
            if rate is None:
                continue
            fig.add_vline(x=rate, line_dash="dash", line_color=color_for(colors, cand), line_width=1,
                          opacity=0.6)
            crossings.append(f"{cand} {rate:.2f}")
        if crossings:
            fig.update_layout(title_text=f"{long} vs offered load<br><sup>line style: {key}<br>"
                              f"{STAT_LABELS[mark_crossover]} meets the baseline's (thin dashed line, req/s): "
                              f"{', '.join(crossings)}</sup>", margin_t=84)
    return fig


def goodput_vs_load(sweep: pl.DataFrame, colors: Mapping[str, str]) -> go.Figure:
    """SLO-conformant requests/s against offered load; the offered load itself as a grey diagonal.

    ``sweep`` columns: ``candidate``, ``offered_rate``, ``request_goodput`` (req/s).
    """
    fig = go.Figure()
    style_figure(fig, "Goodput vs offered load", LOAD_AXIS, "goodput (SLO-conformant requests/s)")
    if sweep.height == 0 or "request_goodput" not in sweep.columns:
        return no_data(fig, "no load points yet")
    rates = sorted(set(sweep.get_column("offered_rate").to_list()))
    fig.add_trace(go.Scatter(x=rates, y=rates, mode="lines", name="offered load",
                             line={"color": "#aaaaaa", "dash": "dot", "width": 1}, hoverinfo="skip"))
    for cand in candidate_order(sweep, colors):
        rows = sweep.filter(pl.col("candidate") == cand).sort("offered_rate")
        _load_line(fig, rows, cand, colors, rows.get_column("request_goodput").to_list(),
                   f"{cand}: %{{y:.2f}} good req/s at %{{x:.2f}} req/s<extra></extra>")
    return fig


def cost_vs_load(sweep: pl.DataFrame, colors: Mapping[str, str], *, per: int = 1000) -> go.Figure:
    """Fleet cost per SLO-conformant answer against offered load (USD per ``per`` answers).

    ``sweep`` columns: ``candidate``, ``offered_rate``, ``cost_per_good_answer_usd``. Load
    points with no good answer (cost undefined) are left out rather than drawn as infinity.
    """
    fig = go.Figure()
    style_figure(fig, "Cost per SLO-conformant answer vs offered load", LOAD_AXIS,
                 f"cost (USD per {per:,} good answers)")
    col = "cost_per_good_answer_usd"
    if sweep.height == 0 or col not in sweep.columns:
        return no_data(fig, "no load points yet")
    for cand in candidate_order(sweep, colors):
        rows = (sweep.filter(pl.col("candidate") == cand)
                .filter(pl.col(col).is_not_null() & pl.col(col).is_finite()).sort("offered_rate"))
        _load_line(fig, rows, cand, colors, [v * per for v in rows.get_column(col).to_list()],
                   f"{cand}: $%{{y:.3f}} per {per:,} good answers at %{{x:.2f}} req/s<extra></extra>")
    return fig


def _load_line(fig: go.Figure, rows: pl.DataFrame, cand: str, colors: Mapping[str, str], y: list,
               hover: str) -> None:
    """One candidate's line against offered load, in its colour."""
    fig.add_trace(go.Scatter(
        x=rows.get_column("offered_rate").to_list(), y=y,
        mode="lines+markers", name=cand, legendgroup=cand,
        line={"color": color_for(colors, cand), "width": 2},
        hovertemplate=hover,
    ))


def latency_cdf(
    values: pl.DataFrame,
    metric: str,
    colors: Mapping[str, str],
    *,
    slo_ms: float | None = None,
    max_points: int = 400,
) -> go.Figure:
    """Empirical CDF of one per-request latency per candidate, SLO limit as a vertical line.

    ``values`` columns: ``candidate`` and ``value_ms`` (one row per measured request). Long
    frames are reduced to ``max_points`` evenly spaced quantiles per candidate so the page
    stays light; the curve's shape is unchanged at screen resolution.
    """
    long, short = METRIC_LABELS[metric]
    fig = go.Figure()
    style_figure(fig, f"{long}: distribution over requests", f"{short} (ms)", "fraction of requests ≤ x")
    if values.height == 0:
        return no_data(fig, "no completed requests")
    for cand in candidate_order(values, colors):
        v = values.filter(pl.col("candidate") == cand).get_column("value_ms").drop_nulls().sort()
        n = v.len()
        if n == 0:
            continue
        if n > max_points:
            idx = [round(i * (n - 1) / (max_points - 1)) for i in range(max_points)]
            xs = [v[i] for i in idx]
            ys = [(i + 1) / n for i in idx]
        else:
            xs = v.to_list()
            ys = [(i + 1) / n for i in range(n)]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", name=cand, legendgroup=cand, line_shape="hv",
            line={"color": color_for(colors, cand), "width": 2},
            hovertemplate=f"{cand}: %{{y:.1%}} of requests ≤ %{{x:.1f}} ms<extra></extra>",
        ))
    if slo_ms is not None:
        fig.add_vline(x=float(slo_ms), line_dash="dot", line_color=SLO_COLOR, line_width=2,
                      annotation_text=f"SLO {short} {slo_ms:g} ms", annotation_font_color=SLO_COLOR)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    return fig


def acceptance_by_position(acc: pl.DataFrame, colors: Mapping[str, str]) -> go.Figure:
    """Unconditional survival rate per draft position, per candidate and segment.

    ``acc`` columns: ``candidate``, ``segment``, ``position`` (1-based), ``rate`` in [0, 1],
    ``method`` (provenance: measured, assumed, ...). Colour is the candidate, the marker the
    segment. Assumed rates are drawn dashed and say so in the legend, so a chosen number never
    passes for a measurement.
    """
    symbols = [("circle", "●"), ("square", "■"), ("diamond", "◆"), ("triangle-up", "▲"), ("x", "✕"),
               ("star", "★"), ("cross", "✚"), ("pentagon", "⬟")]
    segments = list(dict.fromkeys(acc.get_column("segment").to_list())) if acc.height else []
    key = " ".join(f"{symbols[i % len(symbols)][1]} {seg}" for i, seg in enumerate(segments))
    fig = go.Figure()
    style_figure(fig, "Acceptance per draft position (from the profile)", "draft position (1 = first draft token)",
                 "survival rate (share of drafts)",
                 subtitle=f"share of drafts whose first i tokens were all accepted · markers: {key}")
    if acc.height == 0:
        return no_data(fig, "no speculative candidate")
    for cand in candidate_order(acc, colors):
        rows = acc.filter(pl.col("candidate") == cand)
        methods = sorted(set(rows.get_column("method").to_list()))
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", legendgroup=cand,
                                 name=f"{cand} ({', '.join(methods)})", hoverinfo="skip",
                                 line={"color": color_for(colors, cand), "width": 2,
                                       "dash": "dash" if methods == ["assumed"] else "solid"}))
        for si, seg in enumerate(segments):
            r = rows.filter(pl.col("segment") == seg).sort("position")
            if r.height == 0:
                continue
            method = r.get_column("method")[0]
            assumed = method == "assumed"
            fig.add_trace(go.Scatter(
                x=r.get_column("position").to_list(), y=r.get_column("rate").to_list(),
                mode="lines+markers", legendgroup=cand, showlegend=False,
                name=f"{cand} · {seg}" + (" (assumed)" if assumed else f" ({method})"),
                line={"color": color_for(colors, cand), "dash": "dash" if assumed else "solid", "width": 2},
                marker={"symbol": symbols[si % len(symbols)][0], "size": 8},
                hovertemplate=f"{cand} · {seg} ({method}): position %{{x}} accepted in %{{y:.1%}} of drafts"
                              "<extra></extra>",
            ))
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    return fig


def acceptance_by_segment(summary: pl.DataFrame, colors: Mapping[str, str]) -> go.Figure:
    """Simulated mean acceptance length (1 + accepted/drafts) per segment and candidate.

    ``summary`` columns: ``candidate``, ``segment``, ``mean_acceptance_length`` and optionally
    ``mean_acceptance_length_ci95`` (error bars). Rows for the baseline or with no drafts
    (null) are skipped.
    """
    fig = go.Figure()
    style_figure(fig, "Mean acceptance length per segment (simulated)", "workload segment",
                 "tokens per target pass (1 + accepted/drafts)")
    col = "mean_acceptance_length"
    if summary.height == 0 or col not in summary.columns:
        return no_data(fig, "no speculative candidate")
    rows_all = summary.filter(pl.col(col).is_not_null() & pl.col(col).is_finite())
    for cand in candidate_order(rows_all, colors):
        r = rows_all.filter(pl.col("candidate") == cand)
        if r.height == 0 or cand == "baseline":
            continue
        err = None
        if f"{col}_ci95" in r.columns:
            ci = r.get_column(f"{col}_ci95").fill_null(0.0).fill_nan(0.0).to_list()
            if any(ci):
                err = {"type": "data", "array": ci, "visible": True}
        fig.add_trace(go.Bar(
            x=r.get_column("segment").to_list(), y=r.get_column(col).to_list(), name=cand,
            marker_color=color_for(colors, cand), error_y=err, legendgroup=cand,
            hovertemplate=f"{cand} · %{{x}}: %{{y:.2f}} tokens per pass<extra></extra>",
        ))
    fig.update_layout(barmode="group")
    if not fig.data:
        return no_data(fig, "no speculative candidate drafted")
    return fig


def breakeven_chart(be: pl.DataFrame, colors: Mapping[str, str]) -> go.Figure:
    """D(k), V(k), H(k) and time per committed token against k, with the break-even line.

    ``be`` columns: ``candidate``, ``k``, ``draft_ms``, ``verify_ms``, ``overhead_ms``,
    ``per_token_ms`` (time per committed token with speculation) and ``baseline_ms`` (the plain
    decode step T: time per token without speculation). Below the break-even line speculation
    is faster per token; above it, slower.
    """
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "step parts: dotted D(k) draft · solid V(k) verify · dashed H(k) overhead",
        "time per committed token (D+V+H)/M(k)"))
    style_figure(fig, "Break-even of speculation vs k (from the profile)", "", "", height=440)
    fig.update_annotations(font_size=12)
    fig.update_xaxes(title_text="draft length k (tokens)", dtick=1)
    fig.update_yaxes(title_text="time per step (ms)", row=1, col=1)
    fig.update_yaxes(title_text="time per committed token (ms)", row=1, col=2)
    if be.height == 0:
        return no_data(fig, "no speculative candidate")
    dashes = {"draft_ms": ("D(k)", "dot"), "verify_ms": ("V(k)", "solid"), "overhead_ms": ("H(k)", "dash")}
    for cand in candidate_order(be, colors):
        r = be.filter(pl.col("candidate") == cand).sort("k")
        ks = r.get_column("k").to_list()
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", name=cand, legendgroup=cand,
                                 line={"color": color_for(colors, cand), "width": 3}, hoverinfo="skip"),
                      row=1, col=2)
        for col, (label, dash) in dashes.items():
            if col not in r.columns:
                continue
            fig.add_trace(go.Scatter(
                x=ks, y=r.get_column(col).to_list(), mode="lines+markers", name=f"{cand} {label}",
                legendgroup=cand, line={"color": color_for(colors, cand), "dash": dash, "width": 2},
                showlegend=False,
                hovertemplate=f"{cand} {label}: %{{y:.2f}} ms at k=%{{x}}<extra></extra>",
            ), row=1, col=1)
        fig.add_trace(go.Scatter(
            x=ks, y=r.get_column("per_token_ms").to_list(), mode="lines+markers",
            name=f"{cand} per token", legendgroup=cand, showlegend=False,
            line={"color": color_for(colors, cand), "width": 3},
            hovertemplate=f"{cand}: %{{y:.2f}} ms per committed token at k=%{{x}}<extra></extra>",
        ), row=1, col=2)
    base = be.get_column("baseline_ms").drop_nulls()
    if base.len():
        t = float(base.mean())
        fig.add_hline(y=t, line_dash="dot", line_color=SLO_COLOR, line_width=2, row=1, col=2,
                      annotation_text=f"break-even: no speculation {t:.2f} ms/token",
                      annotation_font_color=SLO_COLOR, annotation_position="top left")
    return fig


def kv_queue_over_time(levels: pl.DataFrame, colors: Mapping[str, str]) -> go.Figure:
    """KV cache use and waiting-queue length over simulated time, one line per candidate.

    ``levels`` is :func:`dashboard.chart_frames.levels_over_time`'s output.
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("KV cache in use", "requests waiting in the queue"))
    style_figure(fig, "KV use and queue length over time", "", "", height=520)
    fig.update_xaxes(title_text="simulated time (s)", row=2, col=1)
    fig.update_yaxes(title_text="KV blocks in use (fraction)", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="waiting requests", row=2, col=1)
    if levels.height == 0:
        return no_data(fig, "no engine steps")
    for cand in candidate_order(levels, colors):
        r = levels.filter(pl.col("candidate") == cand).sort("t_s")
        t = r.get_column("t_s").to_list()
        fig.add_trace(go.Scatter(x=t, y=r.get_column("kv_use").to_list(), mode="lines", name=cand,
                                 legendgroup=cand, line={"color": color_for(colors, cand), "width": 1.5},
                                 hovertemplate=f"{cand}: %{{y:.1%}} KV at %{{x:.0f}} s<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=t, y=r.get_column("queue_len").to_list(), mode="lines", name=cand,
                                 legendgroup=cand, showlegend=False,
                                 line={"color": color_for(colors, cand), "width": 1.5},
                                 hovertemplate=f"{cand}: %{{y:.1f}} waiting at %{{x:.0f}} s<extra></extra>"),
                      row=2, col=1)
    return fig
