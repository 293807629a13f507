"""Mooncake's JSON Lines request trace (kvcache-ai/Mooncake ``FAST25-release/traces``, Apache-2.0),
the replay format of AIPerf and Dynamo.

One object per line: ``{"timestamp": 27482, "input_length": 6955, "output_length": 52,
"hash_ids": [46, 47, 2, …]}``: arrival in milliseconds, prompt and output tokens, and one id
per 512-token prompt block (equal ids at equal positions = a shared prefix). ``hash_ids`` is
kept for prefix caching; a file whose first line has none is read without.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.contracts.trace_formats import rows
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
    off = rows.offsets(np.asarray(ts, np.float64), lines, raw_ts, p, "timestamp", scale=1e3)
    flat, offs = rows.ragged_ids(ids) if with_ids else (None, None)
    return Trace(path=p, offsets_s=off, prompt_tokens=np.asarray(prompt, np.int64),
                 output_tokens=np.asarray(output, np.int64), format="mooncake", hash_ids=flat,
                 hash_offsets=offs, hash_block_tokens=BLOCK_TOKENS if with_ids else None)
