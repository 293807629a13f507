"""A bursty request trace built in code, in Mooncake's JSONL format, for tests and examples.

Why: the question "does capacity size a bursty trace as `simulate` confirms it?" needs a trace
whose requests arrive in groups on a coarse grid, as Mooncake's FAST'25 traces do (about ten
requests at a time on a 3-second grid). The project may not ship copies of public traces, so
this writes one with that shape. Every row is *generated*, never a recording: use it for
checks and examples, not as traffic data, and name the files it writes as synthetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

BLOCK_TOKENS = 512
"""Mooncake's tokens per ``hash_ids`` block (sim/contracts/trace_formats/mooncake.py)."""


def bursty_rows(rng: np.random.Generator, ticks: int, *, per_tick: float = 10.0, grid_ms: int = 3000,
                prompt_median: float = 2000.0, output_median: float = 200.0,
                max_prompt: int = 32000) -> list[dict[str, object]]:
    """Rows of a Mooncake-style trace: on each of ``ticks`` grid points ``grid_ms`` apart a
    Poisson(``per_tick``) group of requests arrives at the same millisecond; prompt and output
    lengths are lognormal around the medians (σ 0.6 and 0.7 in log space, heavy-tailed as
    recorded chat traffic is); ``hash_ids`` are distinct per request (no shared prefixes)."""
    rows: list[dict[str, object]] = []
    next_id = 0
    for tick in range(int(ticks)):
        for _ in range(int(rng.poisson(per_tick))):
            prompt = int(np.clip(round(rng.lognormal(np.log(prompt_median), 0.6)), 16, max_prompt))
            output = int(np.clip(round(rng.lognormal(np.log(output_median), 0.7)), 1, 8192))
            blocks = -(-prompt // BLOCK_TOKENS)
            rows.append({"timestamp": tick * int(grid_ms), "input_length": prompt, "output_length": output,
                         "hash_ids": list(range(next_id, next_id + blocks))})
            next_id += blocks
    return rows


def write_jsonl(rows: list[dict[str, object]], path: Path) -> Path:
    """Write ``rows`` one JSON object per line (the Mooncake reader's format) and return ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


__all__ = ["bursty_rows", "write_jsonl"]
