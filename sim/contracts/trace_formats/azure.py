"""The Azure LLM inference trace CSV, 2023 and 2024 (Azure/AzurePublicDataset, CC-BY-4.0).

A header ``TIMESTAMP,ContextTokens,GeneratedTokens`` and one row per request:
2023 writes ``2023-11-16 18:17:03.9799600,374,44`` (7 fractional digits, no zone), 2024
``2024-05-10 00:00:00.009930+00:00,2162,5`` (a UTC offset, which is applied).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError, echo
from sim.contracts.trace_formats import read_notes, rows
from sim.contracts.trace_formats.parsed import Trace

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
DATETIME_VALID = ("YYYY-MM-DD HH:MM:SS[.fraction up to 9 digits], with a +HH:MM or Z offset on every row "
                  "or on none")
_NAIVE_RE = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,9})?$"
_ZONED_RE = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:?\d{2})$"
_FORMAT = "%Y-%m-%d %H:%M:%S%.f"


def datetime_check(df: pl.DataFrame, col: str) -> tuple[pl.Series, pl.Series]:
    """(ok mask for ``rows.check_rows``, epoch nanoseconds in UTC) of a datetime column. The
    first row decides whether rows carry a UTC offset (2024) or not (2023); a row is ok when it
    has that form and names a real time (no hour 25)."""
    s = df[col]
    zoned = bool(s.head(1).str.contains(_ZONED_RE).fill_null(False).any())
    parsed = s.str.to_datetime(_FORMAT + ("%#z" if zoned else ""), time_unit="ns", strict=False)
    ok = s.str.contains(_ZONED_RE if zoned else _NAIVE_RE).fill_null(False) & parsed.is_not_null()
    return ok, parsed.dt.epoch("ns")


def read(p: Path) -> Trace:
    """Read and validate an Azure-schema CSV (2023 or 2024)."""
    first = rows.first_line(p)
    if rows.header_of(p) != HEADER:
        raise SpecplanError(
            f"{p}:1: bad header {echo(first, 80)}; valid: {','.join(HEADER)} (Azure LLM trace schema)"
        )
    df = rows.read_csv_strings(p, HEADER, ",".join(HEADER))
    ok, ns = datetime_check(df, "TIMESTAMP")
    rows.check_rows(df, p, [
        ("TIMESTAMP", ok, "a time", DATETIME_VALID),
        rows.count_check(df, "ContextTokens"),
        rows.count_check(df, "GeneratedTokens"),
    ])
    t = ns.to_numpy().astype(np.int64)
    off = rows.offsets(t, df[rows.LINE].to_numpy(), df["TIMESTAMP"].to_list(), p, "TIMESTAMP", scale=1e9)
    start = pl.Series([int(t[0])]).cast(pl.Datetime("ns"))[0]  # UTC when the file gave an offset
    prompt, output = rows.as_counts(df, "ContextTokens"), rows.as_counts(df, "GeneratedTokens")
    line = df[rows.LINE].to_numpy()
    notes = read_notes.zero_length_notes(p.name, [("ContextTokens", "prompt", prompt),
                                                  ("GeneratedTokens", "output", output)],
                                         lambda i: f"line {int(line[i])}")
    return Trace(path=p, offsets_s=off, prompt_tokens=prompt, output_tokens=output, start=start,
                 format="azure", notes=notes)
