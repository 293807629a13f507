"""Pure figure builders: polars frames in, Plotly figures out.

No simulation happens here and nothing is read from disk: callbacks, the HTML report and the
tests hand in frames with the columns documented on each builder (the result frames of
docs/architecture.md, a load sweep made of summary rows, or small frames derived from a
profile) and get a figure back as Plotly JSON (``figure_style.Figure``). Every chart has a title, axis titles with units, one colour
per candidate (``dashboard.colors``) and, on latency charts, the SLO limit as a red dotted line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from dashboard.colors import SLO_COLOR, color_for
from dashboard.figure_style import (
    DEFAULT_STATS,
    LOAD_AXIS,
    METRIC_LABELS,
    STAT_DASH,
    STAT_LABELS,
    Figure,
    add_slo_line,
    axis,
    candidate_order,
    capacity_note,
    hline,
    log_ticks,
    mark_capacities,
    new_figure,
    no_data,
    subplot_title,
    title_text,
    vline,
)
from sim.results import metric_names as mn
from sim.results.intervals import clip_interval


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


def _scatter(x: list, y: list, name: str, color: str, *, mode: str = "lines+markers", width: float = 2,
             dash: str | None = None, group: str | None = None, legend: bool = True, hover: str | None = None,
             **extra: Any) -> dict[str, Any]:
    """A line trace in a candidate's colour (``legend=False``: grouped under that candidate's entry)."""
    line: dict[str, Any] = {"color": color, "width": width}
    if dash is not None:
        line["dash"] = dash
    tr: dict[str, Any] = {"type": "scatter", "x": x, "y": y, "mode": mode, "name": name, "line": line}
    if group is not None:
        tr["legendgroup"] = group
    if not legend:
        tr["showlegend"] = False
    if hover is None:
        tr["hoverinfo"] = "skip"
    else:
        tr["hovertemplate"] = hover
    tr.update(extra)
    return tr


def _legend_entry(name: str, color: str, *, group: str, mode: str = "lines+markers", width: float = 2,
                  dash: str | None = None, **extra: Any) -> dict[str, Any]:
    """An invisible trace whose only job is one legend entry for a candidate's group of lines."""
    return _scatter([None], [None], name, color, mode=mode, width=width, dash=dash, group=group, **extra)


def latency_vs_load(
    sweep: pl.DataFrame,
    metric: str,
    colors: Mapping[str, str],
    *,
    slo_ms: float | None = None,
    stats: Sequence[str] | None = None,
    mark_crossover: str | None = "p95",
    capacities: Mapping[str, float | None] | None = None,
    log: bool = True,
) -> Figure:
    """Latency percentiles of every candidate against offered load, SLO limit drawn.

    ``sweep``: one row per (candidate, load point) with ``candidate``, ``offered_rate`` (req/s)
    and the summary columns ``{metric}_ms_{stat}`` (``pause_ms_{p95,p99,max}`` for pauses).
    Line style encodes the percentile, colour the candidate. ``mark_crossover`` marks where a
    speculative candidate's percentile meets the baseline's: beyond it speculation stops paying.
    ``capacities``: each candidate's capacity (fleet req/s), marked as a solid vertical line.
    ``log``: latency on a log scale, so 100 ms and 50 s share the axis and the region under
    the SLO stays readable.
    """
    long, short = METRIC_LABELS[metric]
    stats = tuple(stats or DEFAULT_STATS[metric])
    styles = {"dot": "dotted", "solid": "solid", "dash": "dashed", "longdash": "long dashes", "dashdot": "dash-dot"}
    key = " · ".join(f"{styles[STAT_DASH[st]]} {STAT_LABELS[st]}" for st in stats)
    lines = [f"line style: {key}", *([capacity_note(capacities)] if capacity_note(capacities) else [])]
    fig = new_figure(f"{long} vs offered load", LOAD_AXIS, f"{short} (ms){', log scale' if log else ''}",
                     subtitle="<br>".join(lines))
    fig["layout"]["margin"]["t"] = 48 + 18 * sum(1 + ln.count("<br>") for ln in lines)
    if log:
        fig["layout"]["yaxis"]["type"] = "log"
    cols = [f"{metric}_ms_{s}" for s in stats]
    if sweep.height == 0 or not any(c in sweep.columns for c in cols):
        return no_data(fig, "no load points yet")
    data = fig["data"]
    for cand, rows in _by_candidate(sweep, colors, "offered_rate"):
        color = color_for(colors, cand)
        x = rows["offered_rate"].to_list()
        # one legend entry per candidate (clicking it hides all its percentiles)
        data.append(_legend_entry(cand, color, group=cand))
        for stat, col in zip(stats, cols, strict=True):
            if col not in rows.columns:
                continue
            label = STAT_LABELS[stat]
            data.append(_scatter(
                x, rows[col].to_list(), f"{cand} {label}", color, dash=STAT_DASH[stat], group=cand,
                legend=False, marker={"size": 6},
                hover=f"{cand} {label}: %{{y:.1f}} ms at %{{x:.2f}} req/s<extra></extra>"))
    add_slo_line(fig, slo_ms, short, log=log)
    if log:
        ys = [y for tr in data for y in (tr["y"] or []) if y is not None]
        fig["layout"]["yaxis"].update(log_ticks([*ys, *([float(slo_ms)] if slo_ms else [])]))
    fig["layout"]["legend"]["y"] = -0.26  # below the axis title, under a two-line subtitle too
    mark_capacities(fig, capacities, colors)
    crossings: list[str] = []
    if mark_crossover and f"{metric}_ms_{mark_crossover}" in sweep.columns:
        col = f"{metric}_ms_{mark_crossover}"
        for cand, rate in crossover_rates(sweep, col).items():
            if rate is None:
                continue
            vline(fig, rate, color=color_for(colors, cand), dash="dash", width=1, opacity=0.6)
            crossings.append(f"{cand} {rate:.2f}")
        if crossings:
            lines.append(f"{STAT_LABELS[mark_crossover]} meets the baseline's (thin dashed line, req/s): "
                         f"{', '.join(crossings)}")
            fig["layout"]["title"]["text"] = title_text(f"{long} vs offered load", "<br>".join(lines))
            fig["layout"]["margin"]["t"] = 48 + 18 * sum(1 + ln.count("<br>") for ln in lines)
    return fig


def _by_candidate(frame: pl.DataFrame, colors: Mapping[str, str], sort: str | None = None):
    """(candidate, its rows) in colour-map order: one partition instead of a filter per candidate."""
    parts = frame.partition_by("candidate", as_dict=True, maintain_order=True)
    for cand in candidate_order(frame, colors):
        rows = parts[(cand,)]
        yield cand, (rows.sort(sort) if sort else rows)


def goodput_vs_load(sweep: pl.DataFrame, colors: Mapping[str, str], *,
                    capacities: Mapping[str, float | None] | None = None) -> Figure:
    """SLO-conformant requests/s against offered load; the offered load itself as a grey diagonal,
    each candidate's capacity (``capacities``, fleet req/s) as a solid vertical line.

    ``sweep`` columns: ``candidate``, ``offered_rate``, ``request_goodput`` (req/s).
    """
    note = capacity_note(capacities)
    fig = new_figure("Goodput vs offered load", LOAD_AXIS, "goodput (SLO-conformant requests/s)", subtitle=note)
    if note:
        fig["layout"]["margin"]["t"] = 48 + 18 * (1 + note.count("<br>"))
    if sweep.height == 0 or "request_goodput" not in sweep.columns:
        return no_data(fig, "no load points yet")
    rates = sorted(set(sweep.get_column("offered_rate").to_list()))
    fig["data"].append(_scatter(rates, rates, "offered load", "#aaaaaa", mode="lines", dash="dot", width=1))
    for cand, rows in _by_candidate(sweep, colors, "offered_rate"):
        fig["data"].append(_load_line(rows, cand, colors, rows["request_goodput"].to_list(),
                                      f"{cand}: %{{y:.2f}} good req/s at %{{x:.2f}} req/s<extra></extra>"))
    return mark_capacities(fig, capacities, colors)


def cost_vs_load(sweep: pl.DataFrame, colors: Mapping[str, str], *, per: int = 1000) -> Figure:
    """Fleet cost per SLO-conformant answer against offered load (USD per ``per`` answers).

    ``sweep`` columns: ``candidate``, ``offered_rate``, ``cost_per_good_answer_usd``. Load
    points with no good answer (cost undefined) are left out rather than drawn as infinity.
    """
    fig = new_figure("Cost per SLO-conformant answer vs offered load", LOAD_AXIS,
                     f"cost (USD per {per:,} good answers)")
    col = "cost_per_good_answer_usd"
    if sweep.height == 0 or col not in sweep.columns:
        return no_data(fig, "no load points yet")
    for cand, rows in _by_candidate(sweep, colors, "offered_rate"):
        rows = rows.filter(pl.col(col).is_not_null() & pl.col(col).is_finite())
        fig["data"].append(_load_line(
            rows, cand, colors, [v * per for v in rows[col].to_list()],
            f"{cand}: $%{{y:.3f}} per {per:,} good answers at %{{x:.2f}} req/s<extra></extra>"))
    return fig


def _load_line(rows: pl.DataFrame, cand: str, colors: Mapping[str, str], y: list, hover: str) -> dict[str, Any]:
    """One candidate's line against offered load, in its colour."""
    return _scatter(rows["offered_rate"].to_list(), y, cand, color_for(colors, cand), group=cand, hover=hover)


def latency_cdf(
    values: pl.DataFrame,
    metric: str,
    colors: Mapping[str, str],
    *,
    slo_ms: float | None = None,
    max_points: int = 400,
) -> Figure:
    """Empirical CDF of one per-request latency per candidate, SLO limit as a vertical line.

    ``values`` columns: ``candidate`` and ``value_ms`` (one row per measured request). Long
    frames are reduced to ``max_points`` evenly spaced quantiles per candidate so the page
    stays light; the curve's shape is unchanged at screen resolution.
    """
    long, short = METRIC_LABELS[metric]
    fig = new_figure(f"{long}: distribution over requests", f"{short} (ms)", "fraction of requests ≤ x")
    if values.height == 0:
        return no_data(fig, "no completed requests")
    for cand, rows in _by_candidate(values, colors):
        v = rows.get_column("value_ms").drop_nulls().sort()
        n = v.len()
        if n == 0:
            continue
        if n > max_points:
            idx = [round(i * (n - 1) / (max_points - 1)) for i in range(max_points)]
            xs = v.gather(idx).to_list()
            ys = [(i + 1) / n for i in idx]
        else:
            xs = v.to_list()
            ys = [(i + 1) / n for i in range(n)]
        fig["data"].append(_scatter(
            xs, ys, cand, color_for(colors, cand), mode="lines", group=cand,
            hover=f"{cand}: %{{y:.1%}} of requests ≤ %{{x:.1f}} ms<extra></extra>"))
        fig["data"][-1]["line"]["shape"] = "hv"
    if slo_ms is not None:
        vline(fig, float(slo_ms), color=SLO_COLOR, dash="dot", width=2, text=f"SLO {short} {slo_ms:g} ms")
    fig["layout"]["yaxis"].update(range=[0, 1.02], tickformat=".0%")
    return fig


def acceptance_by_position(acc: pl.DataFrame, colors: Mapping[str, str]) -> Figure:
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
    fig = new_figure("Acceptance per draft position (from the profile)", "draft position (1 = first draft token)",
                     "survival rate (share of drafts)",
                     subtitle=f"share of drafts whose first i tokens were all accepted · markers: {key}")
    if acc.height == 0:
        return no_data(fig, "no speculative candidate")
    data = fig["data"]
    for cand, rows in _by_candidate(acc, colors):
        color = color_for(colors, cand)
        methods = sorted(set(rows.get_column("method").to_list()))
        data.append(_legend_entry(f"{cand} ({', '.join(methods)})", color, group=cand, mode="lines",
                                  dash="dash" if methods == ["assumed"] else "solid"))
        by_seg = rows.partition_by("segment", as_dict=True)
        for si, seg in enumerate(segments):
            r = by_seg.get((seg,))
            if r is None or r.height == 0:
                continue
            r = r.sort("position")
            method = r.get_column("method")[0]
            assumed = method == "assumed"
            data.append(_scatter(
                r["position"].to_list(), r["rate"].to_list(),
                f"{cand} · {seg}" + (" (assumed)" if assumed else f" ({method})"), color,
                dash="dash" if assumed else "solid", group=cand, legend=False,
                marker={"symbol": symbols[si % len(symbols)][0], "size": 8},
                hover=f"{cand} · {seg} ({method}): position %{{x}} accepted in %{{y:.1%}} of drafts<extra></extra>"))
    fig["layout"]["xaxis"]["dtick"] = 1
    fig["layout"]["yaxis"].update(range=[0, 1.02], tickformat=".0%")
    return fig


def acceptance_by_segment(summary: pl.DataFrame, colors: Mapping[str, str]) -> Figure:
    """Simulated mean acceptance length (1 + accepted/drafts) per segment and candidate.

    ``summary`` columns: ``candidate``, ``segment``, ``mean_acceptance_length`` and optionally
    ``mean_acceptance_length_ci95`` (error bars). Rows for the baseline or with no drafts
    (null) are skipped.
    """
    fig = new_figure("Mean acceptance length per segment (simulated)", "workload segment",
                     "tokens per target pass (1 + accepted/drafts)")
    col = "mean_acceptance_length"
    if summary.height == 0 or col not in summary.columns:
        return no_data(fig, "no speculative candidate")
    rows_all = summary.filter(pl.col(col).is_not_null() & pl.col(col).is_finite())
    for cand, r in _by_candidate(rows_all, colors):
        if r.height == 0 or cand == "baseline":
            continue
        bar: dict[str, Any] = {
            "type": "bar", "x": r["segment"].to_list(), "y": r[col].to_list(), "name": cand,
            "marker": {"color": color_for(colors, cand)}, "legendgroup": cand,
            "hovertemplate": f"{cand} · %{{x}}: %{{y:.2f}} tokens per pass<extra></extra>"}
        if f"{col}_ci95" in r.columns:
            ci = r.get_column(f"{col}_ci95").fill_null(0.0).fill_nan(0.0).to_list()
            if any(ci):  # clipped to the metric's range (an acceptance length is at least 1)
                ends = [clip_interval(m, h, *mn.metric_range(col)) for m, h in zip(r[col].to_list(), ci, strict=True)]
                bar["error_y"] = {"type": "data", "symmetric": False, "visible": True,
                                  "array": [hi - m for (_, hi, _), m in zip(ends, r[col].to_list(), strict=True)],
                                  "arrayminus": [m - lo for (lo, _, _), m in zip(ends, r[col].to_list(), strict=True)]}
        fig["data"].append(bar)
    fig["layout"]["barmode"] = "group"
    if not fig["data"]:
        return no_data(fig, "no speculative candidate drafted")
    return fig


def breakeven_chart(be: pl.DataFrame, colors: Mapping[str, str], *,
                    title: str = "Break-even of speculation vs k (from the profile)") -> Figure:
    """D(k), V(k), H(k) and time per committed token against k, with the break-even line.

    ``be`` columns: ``candidate``, ``k``, ``draft_ms``, ``verify_ms``, ``overhead_ms``,
    ``per_token_ms`` (time per committed token with speculation) and ``baseline_ms`` (the plain
    decode step T: time per token without speculation). Below the break-even line speculation
    is faster per token; above it, slower.
    """
    fig = new_figure(title, "", "", height=440)
    k_axis = "draft length k (tokens)"
    fig["layout"].update(  # two panels side by side (make_subplots' layout, spacing 0.1)
        xaxis=axis(k_axis, dtick=1, anchor="y", domain=[0.0, 0.45]),
        yaxis=axis("time per step (ms)", anchor="x", domain=[0.0, 1.0]),
        xaxis2=axis(k_axis, dtick=1, anchor="y2", domain=[0.55, 1.0]),
        yaxis2=axis("time per committed token (ms)", anchor="x2", domain=[0.0, 1.0]),
        annotations=[
            subplot_title("step parts: dotted D(k) draft · solid V(k) verify · dashed H(k) overhead", 0.225, 1.0, 12),
            subplot_title("time per committed token (D+V+H)/M(k)", 0.775, 1.0, 12)])
    if be.height == 0:
        return no_data(fig, "no speculative candidate")
    dashes = {"draft_ms": ("D(k)", "dot"), "verify_ms": ("V(k)", "solid"), "overhead_ms": ("H(k)", "dash")}
    right = {"xaxis": "x2", "yaxis": "y2"}
    data = fig["data"]
    for cand, r in _by_candidate(be, colors, "k"):
        color = color_for(colors, cand)
        ks = r["k"].to_list()
        data.append(_legend_entry(cand, color, group=cand, width=3, **right))
        for col, (label, dash) in dashes.items():
            if col not in r.columns:
                continue
            data.append(_scatter(ks, r[col].to_list(), f"{cand} {label}", color, dash=dash, group=cand,
                                 legend=False, hover=f"{cand} {label}: %{{y:.2f}} ms at k=%{{x}}<extra></extra>"))
        data.append(_scatter(ks, r["per_token_ms"].to_list(), f"{cand} per token", color, width=3, group=cand,
                             legend=False, hover=f"{cand}: %{{y:.2f}} ms per committed token at k=%{{x}}<extra></extra>",
                             **right))
    base = be.get_column("baseline_ms").drop_nulls()
    if base.len():
        t = float(base.mean())  # type: ignore[arg-type]
        hline(fig, t, color=SLO_COLOR, dash="dot", width=2, text=f"break-even: no speculation {t:.2f} ms/token",
              axes=("x2", "y2"))
    return fig


def kv_queue_over_time(levels: pl.DataFrame, colors: Mapping[str, str], *,
                       title: str = "KV use and queue length over time") -> Figure:
    """KV cache use and waiting-queue length over simulated time, one line per candidate.

    ``levels`` is :func:`dashboard.chart_frames.levels_over_time`'s output.
    """
    fig = new_figure(title, "", "", height=520)
    fig["layout"].update(  # two panels stacked, one shared time axis (make_subplots' layout, spacing 0.08)
        xaxis=axis("", anchor="y", domain=[0.0, 1.0], matches="x2", showticklabels=False),
        yaxis=axis("KV blocks in use (fraction)", tickformat=".0%", anchor="x", domain=[0.54, 1.0]),
        xaxis2=axis("simulated time (s)", anchor="y2", domain=[0.0, 1.0]),
        yaxis2=axis("waiting requests", anchor="x2", domain=[0.0, 0.46]),
        annotations=[subplot_title("KV cache in use", 0.5, 1.0),
                     subplot_title("requests waiting in the queue", 0.5, 0.46)])
    if levels.height == 0:
        return no_data(fig, "no engine steps")
    for cand, r in _by_candidate(levels, colors, "t_s"):
        color = color_for(colors, cand)
        t = r["t_s"].to_list()
        fig["data"].append(_scatter(t, r["kv_use"].to_list(), cand, color, mode="lines", width=1.5, group=cand,
                                    hover=f"{cand}: %{{y:.1%}} KV at %{{x:.0f}} s<extra></extra>"))
        fig["data"].append(_scatter(t, r["queue_len"].to_list(), cand, color, mode="lines", width=1.5,
                                    group=cand, legend=False, xaxis="x2", yaxis="y2",
                                    hover=f"{cand}: %{{y:.1f}} waiting at %{{x:.0f}} s<extra></extra>"))
    return fig
