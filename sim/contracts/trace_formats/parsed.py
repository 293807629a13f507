"""A parsed trace, whatever file format it came from: arrival offsets, lengths, prefix-block ids."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class Trace:
    """Arrival offsets and token lengths of a trace's requests, in file order."""

    path: Path
    """Where it was read from (for messages and provenance)."""
    offsets_s: np.ndarray
    """Arrival time of each row in seconds after the file's first row (float64, non-decreasing;
    a row a reader leaves out still sets the origin)."""
    prompt_tokens: np.ndarray
    """Prompt tokens per row (int64, ≥ 0)."""
    output_tokens: np.ndarray
    """Generated tokens per row (int64, ≥ 0)."""
    start: datetime | None = None
    """Wall-clock time of the first row when the file gives one (naive; UTC when the file
    gave an offset), else None."""
    format: str = "azure"
    """The reader that parsed it (sim/contracts/trace_config.py FORMATS)."""
    hash_ids: np.ndarray | None = None
    """Prefix-block ids of all rows, concatenated (int64; Mooncake's ``hash_ids``), or None."""
    hash_offsets: np.ndarray | None = None
    """Row i's ids are ``hash_ids[hash_offsets[i]:hash_offsets[i + 1]]`` (int64, rows + 1)."""
    hash_block_tokens: int | None = None
    """Tokens per hash-id block (Mooncake: 512), or None without ids."""
    notes: tuple[str, ...] = ()
    """What reading changed or assumed (rows left out, drawn send times); printed with results."""
    max_concurrency: int | None = None
    """A client-side cap on requests in flight the recording ran under (vLLM --max-concurrency)."""

    def __post_init__(self) -> None:
        n = len(self.offsets_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("offsets, prompt and output tokens must have one entry per row")
        if (self.hash_ids is None) != (self.hash_offsets is None):
            raise ValueError("hash_ids and hash_offsets come together")
        if self.hash_offsets is not None and len(self.hash_offsets) != n + 1:
            raise ValueError("hash_offsets needs rows + 1 entries")

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

    def hash_ids_of(self, row: int) -> np.ndarray:
        """Row ``row``'s prefix-block ids (empty when the trace has none)."""
        if self.hash_ids is None or self.hash_offsets is None:
            return np.empty(0, np.int64)
        return self.hash_ids[self.hash_offsets[row]:self.hash_offsets[row + 1]]
