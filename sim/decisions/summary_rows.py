"""Rows of a summary frame as the decision rules read them: by candidate, segment and load.

A summary holds one row per candidate × segment (× load level in a ``rate`` column); the rules
ask for single rows a few hundred times per table, so the rows are indexed once per frame.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl


def load_rates(df: pl.DataFrame) -> list[float | None]:
    """The load levels (``rate`` column) in ascending order; ``[None]`` for a frame without one."""
    if "rate" not in df.columns:
        return [None]
    return sorted({float(r) for r in df["rate"].to_list() if r is not None})


def row_at(df: pl.DataFrame, candidate: str, segment: str = "all", rate: float | None = None) -> dict | None:
    """The first row of ``candidate`` and ``segment`` (at ``rate``, within rounding), or None."""
    rows = _row_index(df).get((candidate, segment), ())
    if rate is None or "rate" not in df.columns:
        return rows[0] if rows else None
    tol = 1e-9 * max(1.0, abs(rate))
    return next((r for r in rows if r["rate"] is not None and abs(r["rate"] - rate) <= tol), None)


_INDEXED: list = [(None, {})]  # (the last frame looked up, its rows by (candidate, segment))


def _row_index(df: pl.DataFrame) -> dict[tuple[str, str], list[dict]]:
    """``df``'s rows grouped by (candidate, segment) in frame order, built once per frame: the
    rules look a summary up a few hundred times, and a polars filter each time was most of a
    dashboard redraw's decision table. One tuple swapped whole, so threads never mix frames."""
    frame, index = _INDEXED[0]
    if frame is not df:
        index = {}
        for row in df.iter_rows(named=True):
            index.setdefault((row["candidate"], row["segment"]), []).append(row)
        _INDEXED[0] = (df, index)
    return index


def value_of(row: Mapping | None, col: str) -> float:
    """``row[col]`` as a float, NaN where the row or the value is missing."""
    if row is None:
        return math.nan
    v = row.get(col)
    return float(v) if v is not None else math.nan


def ci_of(row: Mapping | None, col: str) -> float:
    """The ``_ci95`` half-width of ``col`` in ``row``, 0 where there is none (one seed)."""
    v = value_of(row, f"{col}_ci95")
    return 0.0 if math.isnan(v) else v
