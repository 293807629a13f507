"""Any CSV or JSON Lines file of requests, read through the scenario's column mapping
(``workload.trace.columns``: which header name or key holds the time, prompt and output
tokens, in which time unit)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from sim.contracts.trace_config import TraceColumns
from sim.contracts.trace_formats import azure, read_notes, rows
from sim.contracts.trace_formats.parsed import Trace

UNIT_SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "datetime": 1e9}
"""Timestamp units per second (a datetime column is read as epoch nanoseconds)."""


def read_csv(p: Path, cols: TraceColumns) -> Trace:
    """A headed CSV whose columns ``cols`` names."""
    names = (cols.timestamp, cols.prompt_tokens, cols.output_tokens)
    valid = f"a header with the mapped columns {', '.join(map(repr, dict.fromkeys(names)))}"
    df = rows.read_csv_strings(p, tuple(dict.fromkeys(names)), valid)
    what = f"a time in {cols.timestamp_unit}"
    if cols.timestamp_unit == "datetime":
        ok, ns = azure.datetime_check(df, cols.timestamp)
        ts_check = (cols.timestamp, ok, "a time", azure.DATETIME_VALID)
    else:
        ts_check = rows.number_check(df, cols.timestamp, what)
    rows.check_rows(df, p, [ts_check, rows.count_check(df, cols.prompt_tokens),
                            rows.count_check(df, cols.output_tokens)])
    if cols.timestamp_unit == "datetime":
        t: np.ndarray = ns.to_numpy().astype(np.int64)
    else:
        t = rows.as_numbers(df, cols.timestamp)
    off = rows.offsets(t, df[rows.LINE].to_numpy(), df[cols.timestamp].to_list(), p, cols.timestamp,
                       scale=UNIT_SCALE[cols.timestamp_unit])
    prompt, output = rows.as_counts(df, cols.prompt_tokens), rows.as_counts(df, cols.output_tokens)
    line = df[rows.LINE].to_numpy()
    return Trace(path=p, offsets_s=off, prompt_tokens=prompt, output_tokens=output, format="csv",
                 notes=_zero_notes(p, cols, prompt, output, lambda i: f"line {int(line[i])}"))


def read_jsonl(p: Path, cols: TraceColumns) -> Trace:
    """One JSON object per line with the keys ``cols`` names (numbers; a datetime as a string)."""
    lines: list[int] = []
    ts: list[float] = []
    raw_ts: list[object] = []
    prompt: list[int] = []
    output: list[int] = []
    ids: list[list[int]] = []
    unit = cols.timestamp_unit
    for line, obj in rows.jsonl_objects(p):
        lines.append(line)
        if unit != "datetime":
            ts.append(rows.json_number(obj, cols.timestamp, p, line, f"a time in {unit}"))
        elif cols.timestamp not in obj:
            rows.json_number(obj, cols.timestamp, p, line, "a time")  # the missing-key error
        raw_ts.append(obj[cols.timestamp])
        prompt.append(rows.json_count(obj, cols.prompt_tokens, p, line))
        output.append(rows.json_count(obj, cols.output_tokens, p, line))
        if cols.hash_ids is not None:
            ids.append(rows.json_ids(obj, cols.hash_ids, p, line))
            rows.check_id_count(ids[-1], prompt[-1], cols.hash_block_tokens, p, line, cols.hash_ids,
                                cols.prompt_tokens)
    t = _datetimes(raw_ts, lines, cols.timestamp, p) if unit == "datetime" else np.asarray(ts, np.float64)
    off = rows.offsets(t, lines, raw_ts, p, cols.timestamp, scale=UNIT_SCALE[unit])
    flat, offs = rows.ragged_ids(ids) if cols.hash_ids is not None else (None, None)
    prompts, outputs = np.asarray(prompt, np.int64), np.asarray(output, np.int64)
    return Trace(path=p, offsets_s=off, prompt_tokens=prompts, output_tokens=outputs, format="jsonl",
                 hash_ids=flat, hash_offsets=offs,
                 hash_block_tokens=cols.hash_block_tokens if flat is not None else None,
                 notes=_zero_notes(p, cols, prompts, outputs, lambda i: f"line {lines[i]}"))


def _zero_notes(p: Path, cols: TraceColumns, prompt: np.ndarray, output: np.ndarray,
                where: Callable[[int], str]) -> tuple[str, ...]:
    return read_notes.zero_length_notes(p.name, [(cols.prompt_tokens, "prompt", prompt),
                                                 (cols.output_tokens, "output", output)], where)


def _datetimes(raw: list[object], lines: list[int], key: str, p: Path) -> np.ndarray:
    """Epoch nanoseconds (UTC) of a JSONL datetime column; the first bad one names its line."""
    for line, v in zip(lines, raw, strict=True):
        if not isinstance(v, str):
            raise rows.bad(p, line, key, v, "a time", azure.DATETIME_VALID)
    frame = pl.DataFrame({key: [str(v).strip() for v in raw], rows.LINE: lines})
    ok, ns = azure.datetime_check(frame, key)
    rows.check_rows(frame, p, [(key, ok, "a time", azure.DATETIME_VALID)])
    return ns.to_numpy().astype(np.int64)
