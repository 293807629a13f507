"""Engine levels over simulated time (KV use and queue length), one line per candidate: where a
candidate's queue builds and its KV fills, beside the latency figures of ``dashboard.figures``."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from dashboard.colors import color_for
from dashboard.figure_style import Figure, axis, new_figure, no_data, subplot_title
from dashboard.figures import _by_candidate, _scatter


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
