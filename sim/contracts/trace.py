"""Reading an arrival trace in the Azure LLM inference trace schema.

Schema (Azure LLM inference traces 2023, CC-BY): a header ``TIMESTAMP,ContextTokens,
GeneratedTokens`` and one row per request, e.g. ``2023-11-16 18:17:03.9799600,374,44``
(7 fractional digits). Every problem names the 1-based CSV line so a user can fix the file.
Nothing is cached on disk.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.input_limits import check_file

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TS_FORMAT = "%Y-%m-%d %H:%M:%S%.f"
_TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,9})?$")
_INT_RE = re.compile(r"^\d{1,15}$")


@dataclass(frozen=True, slots=True)
class Trace:
    """Arrival offsets and token lengths of a trace, in file order."""

    path: Path
    """Where it was read from (for messages and provenance)."""
    offsets_s: np.ndarray
    """Arrival time of each row in seconds after the first row (float64, non-decreasing)."""
    prompt_tokens: np.ndarray
    """ContextTokens per row (int64, ≥ 0)."""
    output_tokens: np.ndarray
    """GeneratedTokens per row (int64, ≥ 0)."""
    start: datetime
    """Timestamp of the first row (naive, as written in the file)."""

    def __len__(self) -> int:
        return len(self.offsets_s)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last row."""
        return float(self.offsets_s[-1]) if len(self.offsets_s) else 0.0

    @property
    def mean_rate(self) -> float:
        """Rows per second over the trace's span (0 for fewer than two rows)."""
        return (len(self) - 1) / self.span_s if self.span_s > 0 else 0.0


def read_trace(path: str | Path) -> Trace:
    """Read and validate an Azure-schema CSV; SpecplanError naming ``file:line`` on bad input."""
    p, _ = check_file(path, "trace")
    try:
        with p.open("rb") as fh:
            first = fh.readline().decode("utf-8-sig", errors="replace").strip()
    except FileNotFoundError:
        raise SpecplanError(f"{p}: trace file not found") from None
    except OSError as exc:
        raise SpecplanError(f"{p}: cannot read trace: {exc}") from None
    header = tuple(h.strip() for h in first.split(","))
    if header != HEADER:
        raise SpecplanError(
            f"{p}:1: bad header {first!r}; valid: {','.join(HEADER)} (Azure LLM trace schema)"
        )
    try:
        df = pl.read_csv(
            p,
            has_header=True,
            schema={h: pl.String for h in HEADER},
            ignore_errors=False,
        )
    except Exception:  # polars raises several types for ragged/garbled rows; find the line
        _raise_first_bad_line(p)
        raise  # only if the slow scan found nothing: a genuine bug, keep the traceback
    # polars keeps a blank line as an all-null row, so the row index maps to the file line
    df = df.with_row_index("_row")
    df = df.filter(~pl.all_horizontal(pl.col(list(HEADER)).is_null()))
    if df.height == 0:
        raise SpecplanError(f"{p}:2: trace has a header but no rows")

    ts = df["TIMESTAMP"].str.strip_chars().str.to_datetime(
        _TS_FORMAT, time_unit="ns", strict=False
    )
    ctx = df["ContextTokens"].str.strip_chars()
    gen = df["GeneratedTokens"].str.strip_chars()
    bad = (
        ts.is_null()
        | ~ctx.str.contains(r"^\d{1,15}$").fill_null(False)
        | ~gen.str.contains(r"^\d{1,15}$").fill_null(False)
    )
    if bad.any():
        _raise_first_bad_line(p)
        line = int(df["_row"][int(bad.arg_max() or 0)]) + 2
        raise SpecplanError(
            f"{p}:{line}: bad row; valid: TIMESTAMP as YYYY-MM-DD HH:MM:SS[.fraction], "
            "token counts as integers ≥ 0 (at most 15 digits)"
        )
    ns = ts.dt.epoch("ns").to_numpy().astype(np.int64)
    diffs = np.diff(ns)
    if len(diffs) and (diffs < 0).any():
        row = int(np.argmax(diffs < 0)) + 1  # data row that goes back in time
        line = int(df["_row"][row]) + 2
        raise SpecplanError(
            f"{p}:{line}: TIMESTAMP {df['TIMESTAMP'][row]!r} is earlier than the previous row's "
            f"{df['TIMESTAMP'][row - 1]!r}; valid: rows sorted by time (non-decreasing)"
        )
    offsets = (ns - ns[0]).astype(np.float64) / 1e9
    return Trace(
        path=p,
        offsets_s=offsets,
        prompt_tokens=ctx.cast(pl.Int64).to_numpy().astype(np.int64),
        output_tokens=gen.cast(pl.Int64).to_numpy().astype(np.int64),
        start=ts[0],
    )


def _raise_first_bad_line(p: Path) -> None:
    """Scan the file row by row (only on the error path) and raise for the first bad row."""
    with p.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        try:
            next(reader, None)
            _scan_rows(p, reader)
        except csv.Error as exc:
            raise SpecplanError(f"{p}:{reader.line_num}: not CSV: {exc}") from None


def _scan_rows(p: Path, reader: Any) -> None:
    for row in reader:
        line = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 3:
            raise SpecplanError(
                f"{p}:{line}: expected 3 fields ({','.join(HEADER)}), got {len(row)}"
            )
        t, c, g = (x.strip() for x in row)
        if not _TS_RE.match(t) or not _parses(t):
            raise SpecplanError(
                f"{p}:{line}: TIMESTAMP {t!r} is not a time; valid: "
                "YYYY-MM-DD HH:MM:SS[.fraction up to 9 digits]"
            )
        for name, v in (("ContextTokens", c), ("GeneratedTokens", g)):
            if not _INT_RE.match(v):
                raise SpecplanError(
                    f"{p}:{line}: {name} {v!r} is not a token count; valid: integers ≥ 0 (at most 15 digits)"
                )


def _parses(t: str) -> bool:
    base, _, frac = t.partition(".")
    try:
        datetime.strptime(base, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return False
    return frac.isdigit() or frac == ""
