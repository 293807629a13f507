"""What the trace readers share: CSV columns as strings with their file lines, token counts and
times checked column-wise, JSONL lines, and one wording for every bad-row error.

Every error is one line ``file:line: field value is not …; valid: …`` with the value cut short
(sim.contracts.errors.echo), so a 5,000-digit number cannot break it.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError, echo
from sim.contracts.input_limits import MAX_INT, check_file, read_text_limited
from sim.contracts.json_reader import decode_failure

COUNT_RE = r"^\d{1,15}$"
NUMBER_RE = r"^\d{1,15}(\.\d{0,12})?$"
COUNT_VALID = "integers ≥ 0 (at most 15 digits)"
NUMBER_VALID = "numbers ≥ 0 written as digits[.fraction] (at most 15 integer digits)"
LINE = "_line"


def bad(p: Path, line: int, field: str, value: object, what: str, valid: str) -> SpecplanError:
    """The one-line error of a bad value: file, line, field, the value (cut short), what is valid."""
    return SpecplanError(f"{p}:{line}: {field} {echo(value)} is not {what}; valid: {valid}")


def first_line(p: Path) -> str:
    """The file's first line (BOM stripped), for header checks and format detection."""
    check_file(p, "trace")
    try:
        with p.open("rb") as fh:
            return fh.readline(1 << 20).decode("utf-8-sig", errors="replace").strip()
    except OSError as exc:
        raise SpecplanError(f"{p}: cannot read trace: {exc}") from None


def header_of(p: Path) -> tuple[str, ...]:
    """The CSV header's names, stripped."""
    try:
        return tuple(h.strip() for h in next(csv.reader([first_line(p)]), []))
    except csv.Error as exc:
        raise SpecplanError(f"{p}:1: header is not CSV: {exc}") from None


def read_csv_strings(p: Path, needed: Sequence[str], valid: str) -> pl.DataFrame:
    """The ``needed`` columns of a headed CSV as strings, plus ``_line`` (the 1-based file line of
    each row); blank lines skipped. A missing column, ragged row or empty file is one line."""
    header = header_of(p)
    if not header or header == ("",):
        raise SpecplanError(f"{p}:1: empty trace file; valid: a header line ({valid}) and one row per request")
    for name in needed:
        if name not in header:
            raise SpecplanError(f"{p}:1: missing column {echo(name)} (header has {echo(','.join(header), 80)}); "
                                f"valid: {valid}")
    try:
        # bytes that are not UTF-8 become U+FFFD, which no check below accepts: the error names the row
        df = pl.read_csv(p, has_header=True, infer_schema=False, ignore_errors=False, truncate_ragged_lines=False,
                         encoding="utf8-lossy")
    except Exception:  # polars raises several types for ragged/garbled rows: Python's csv finds the line
        df = _python_csv(p, header)
    else:
        everything = pl.col(df.columns)
        short = pl.any_horizontal(everything.is_null()) & ~pl.all_horizontal(everything.is_null())
        if df.width != len(header) or df.select(short.any()).item():
            _raise_first_ragged_line(p, len(header))  # polars pads a short row with nulls
        # the header as read above (stripped); polars keeps a blank line as an all-null row, so
        # the row index maps to the file line
        df = df.rename(dict(zip(df.columns, _names(header), strict=True))).with_row_index(LINE, offset=2)
    df = df.select(LINE, *needed).filter(~pl.all_horizontal(pl.col(list(needed)).is_null()))
    if df.height == 0:
        raise SpecplanError(f"{p}:2: trace has a header but no rows")
    return df.with_columns(pl.col(list(needed)).str.strip_chars())


def _python_csv(p: Path, header: tuple[str, ...]) -> pl.DataFrame:
    """The slow reading of what polars refused: string columns and file lines, or the error of
    the first ragged or unreadable row."""
    _raise_first_ragged_line(p, len(header))
    cols: list[list[str]] = [[] for _ in header]
    lines: list[int] = []
    with p.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for row in reader:
            if row and any(c.strip() for c in row):
                lines.append(reader.line_num)
                for c, v in zip(cols, row, strict=True):
                    c.append(v)
    names = _names(header)
    return pl.DataFrame({LINE: lines, **dict(zip(names, cols, strict=True))},
                        schema={LINE: pl.Int64, **{n: pl.String for n in names}})


def _names(header: tuple[str, ...]) -> list[str]:
    """Unique column names (a repeated name after its first use is ``_<index>``; polars needs them)."""
    return [f"_{i}" if h in header[:i] else h for i, h in enumerate(header)]


def _raise_first_ragged_line(p: Path, width: int) -> None:
    with p.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        try:
            next(reader, None)
            for row in reader:
                if row and any(c.strip() for c in row) and len(row) != width:
                    raise SpecplanError(f"{p}:{reader.line_num}: expected {width} fields as in the header, "
                                        f"got {len(row)}")
        except csv.Error as exc:
            raise SpecplanError(f"{p}:{reader.line_num}: not CSV: {exc}") from None


def first_bad(df: pl.DataFrame, col: str, ok: pl.Series) -> tuple[int, str] | None:
    """(file line, raw value) of the first row where ``ok`` is false, or None."""
    ok = ok.fill_null(False)
    if ok.all():
        return None
    i = int((~ok).arg_max() or 0)
    return int(df[LINE][i]), df[col][i] or ""


def check_rows(df: pl.DataFrame, p: Path, checks: Sequence[tuple[str, pl.Series, str, str]]) -> None:
    """Refuse the earliest row (then the leftmost column) failing any check ``(column, ok,
    what it must be, what is valid)``, with the one-line error of :func:`bad`."""
    best: tuple[int, int, str] | None = None
    for j, (col, ok, _, _) in enumerate(checks):
        hit = first_bad(df, col, ok)
        if hit and (best is None or (hit[0], j) < best[:2]):
            best = (hit[0], j, hit[1])
    if best is not None:
        line, j, raw = best
        col, _, what, valid = checks[j]
        raise bad(p, line, col, raw, what, valid)


def count_check(df: pl.DataFrame, col: str) -> tuple[str, pl.Series, str, str]:
    """The :func:`check_rows` entry of a token-count column."""
    return col, df[col].str.contains(COUNT_RE), "a token count", COUNT_VALID


def number_check(df: pl.DataFrame, col: str, what: str) -> tuple[str, pl.Series, str, str]:
    """The :func:`check_rows` entry of a column of non-negative decimal numbers (times)."""
    return col, df[col].str.contains(NUMBER_RE), what, NUMBER_VALID


def as_counts(df: pl.DataFrame, col: str) -> np.ndarray:
    """A checked token-count column as int64."""
    return df[col].cast(pl.Int64).to_numpy().astype(np.int64)


def as_numbers(df: pl.DataFrame, col: str) -> np.ndarray:
    """A checked number column as float64."""
    return df[col].cast(pl.Float64).to_numpy().astype(np.float64)


def offsets(times: np.ndarray, lines: Sequence[int] | np.ndarray, raw: Sequence[Any], p: Path, field: str,
            scale: float = 1.0) -> np.ndarray:
    """Seconds after the first row (``times`` in units of ``1/scale`` s), refusing a row that goes
    back in time (naming it and the previous row's value)."""
    diffs = np.diff(times)
    if len(diffs) and (diffs < 0).any():
        row = int(np.argmax(diffs < 0)) + 1
        raise SpecplanError(
            f"{p}:{int(lines[row])}: {field} {echo(raw[row])} is earlier than the previous row's "
            f"{echo(raw[row - 1])}; valid: rows sorted by time (non-decreasing)")
    return (times - times[0]).astype(np.float64) / scale


def jsonl_objects(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of each non-blank line of a JSON Lines file; one-line errors otherwise."""
    text = read_text_limited(p, "trace")
    found = False
    for i, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (RecursionError, ValueError) as exc:
            raise decode_failure(exc, p, i, "token counts and times within 2**53") from None
        if not isinstance(obj, dict):
            raise SpecplanError(f"{p}:{i}: expected one JSON object per line, got {type(obj).__name__}")
        found = True
        yield i, obj
    if not found:
        raise SpecplanError(f"{p}:1: empty trace file; valid: one JSON object per line, one line per request")


def json_count(obj: dict[str, Any], key: str, p: Path, line: int) -> int:
    """An integer token count ≥ 0 from a JSON object (1.0 counts as 1)."""
    v = obj[key] if key in obj else _get(obj, key, p, line)
    if type(v) is int and 0 <= v <= MAX_INT:  # the common case, cheaply
        return v
    if not _in_range(v, MAX_INT) or int(v) != v:
        raise bad(p, line, key, v, "a token count", "integers ≥ 0 (within 2**53)")
    return int(v)


def _in_range(v: object, top: float) -> bool:
    """A JSON number (not a boolean) in [0, top]; integers compared exactly (no float overflow)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    if isinstance(v, float) and not math.isfinite(v):
        return False
    return 0 <= v <= top


def json_number(obj: dict[str, Any], key: str, p: Path, line: int, what: str) -> float:
    """A finite number ≥ 0 (a time) from a JSON object."""
    v = obj[key] if key in obj else _get(obj, key, p, line)
    if not _in_range(v, 1e18):
        raise bad(p, line, key, v, what, "numbers ≥ 0 (at most 1e18)")
    return float(v)


def json_ids(obj: dict[str, Any], key: str, p: Path, line: int) -> list[int]:
    """A list of block ids (integers ≥ 0 within 2**53)."""
    v = obj[key] if key in obj else _get(obj, key, p, line)
    if not isinstance(v, list):
        raise bad(p, line, key, v, "a list of block ids", "a JSON list of integers ≥ 0")
    if all(type(x) is int for x in v) and (not v or (min(v) >= 0 and max(v) <= MAX_INT)):
        return v
    for j, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_INT:
            raise bad(p, line, f"{key}[{j}]", x, "a block id", "integers ≥ 0 (within 2**53)")
    return v


def check_id_count(ids: Sequence[int], prompt: int, block_tokens: int, p: Path, line: int, key: str,
                   prompt_key: str) -> None:
    """Refuse a row whose block ids do not cover its prompt exactly: one id per
    ``block_tokens``-token block, the last partial block included (Mooncake's traces hold
    ceil(input_length / 512) ids a row). A row out of step would share or cache blocks its
    prompt does not have, or leave shared ones unmatched, without a word."""
    want = -(-prompt // block_tokens)
    if len(ids) != want:
        raise SpecplanError(
            f"{p}:{line}: {key} has {len(ids):,} block ids, expected {want:,} for {prompt_key} {prompt:,}; "
            f"valid: one id per {block_tokens}-token block, the last partial block included "
            f"(ceil({prompt_key} / {block_tokens}))")


def _get(obj: dict[str, Any], key: str, p: Path, line: int) -> Any:
    if key not in obj:
        keys = ", ".join(sorted(map(str, obj)))
        raise SpecplanError(f"{p}:{line}: missing key {echo(key)} (the line has {echo(keys, 80)})")
    return obj[key]


def ragged_ids(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-row id lists as (flat int64 ids, int64 row offsets of length rows + 1)."""
    lengths = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    offs = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(lengths, out=offs[1:])
    flat = np.fromiter((v for x in lists for v in x), np.int64, int(offs[-1]))
    return flat, offs
