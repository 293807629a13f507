"""Mooncake's JSON Lines request trace (kvcache-ai/Mooncake ``FAST25-release/traces``, Apache-2.0),
the replay format of AIPerf and Dynamo.

One object per line: ``{"timestamp": 27482, "input_length": 6955, "output_length": 52,
"hash_ids": [46, 47, 2, …]}``: arrival in milliseconds, prompt and output tokens, and one id
per 512-token prompt block, the last partial block included, so ceil(input_length / 512) ids
(equal ids at equal positions = a shared prefix). ``hash_ids`` is kept for prefix caching; a
file whose first line has none is read without; a row with another count is refused (its
line, expected and found counts). Rows of 0 tokens are replayed as 1 and noted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.contracts.trace_formats import read_notes, rows
from sim.contracts.trace_formats.parsed import Trace

KEYS = ("timestamp", "input_length", "output_length")
BLOCK_TOKENS = 512


def read(p: Path) -> Trace:
    """Read and validate a Mooncake JSONL trace."""
    lines: list[int] = []
    ts: list[float] = []
    raw_ts: list[object] = []
    prompt: list[int] = []
    output: list[int] = []
    ids: list[list[int]] = []
    with_ids: bool | None = None
    for line, obj in rows.jsonl_objects(p):
        if with_ids is None:
            with_ids = "hash_ids" in obj
        lines.append(line)
        ts.append(rows.json_number(obj, "timestamp", p, line, "a time in milliseconds"))
        raw_ts.append(obj["timestamp"])
        prompt.append(rows.json_count(obj, "input_length", p, line))
        output.append(rows.json_count(obj, "output_length", p, line))
        if with_ids:
            ids.append(rows.json_ids(obj, "hash_ids", p, line))
            rows.check_id_count(ids[-1], prompt[-1], BLOCK_TOKENS, p, line, "hash_ids", "input_length")
    off = rows.offsets(np.asarray(ts, np.float64), lines, raw_ts, p, "timestamp", scale=1e3)
    flat, offs = rows.ragged_ids(ids) if with_ids else (None, None)
    prompts, outputs = np.asarray(prompt, np.int64), np.asarray(output, np.int64)
    notes = read_notes.zero_length_notes(p.name, [("input_length", "prompt", prompts),
                                                  ("output_length", "output", outputs)],
                                         lambda i: f"line {lines[i]}")
    return Trace(path=p, offsets_s=off, prompt_tokens=prompts, output_tokens=outputs, format="mooncake",
                 hash_ids=flat, hash_offsets=offs, hash_block_tokens=BLOCK_TOKENS if with_ids else None,
                 notes=notes)
