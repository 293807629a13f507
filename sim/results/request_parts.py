"""A scenario result's per-request records, one part per candidate × seed, large parts compressed.

Why: a result holds every request of every candidate × seed, and the decision reads them. At
10^6 req/s for one second that is 12 × 10^6 rows, ~160 B each as a frame (~1.9 GB for the default
scenario's four candidates × three seeds, more as seeds are added). Kept as one frame, peak memory
grew with candidates × seeds; kept as parts, a part of ``COMPRESS_ROWS`` rows or more is held as
zstd Parquet bytes (~17 B a row for mostly refused requests, ~10× smaller) and read back one part
at a time (``frames``), so peak memory follows the largest single run. Small parts (every shipped
scenario's) stay frames: nothing to decode on a dashboard redraw. The round trip is exact (same
values, nulls and dtypes), so the concatenated ``frame()`` is the frame a single concat gave.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import polars as pl

COMPRESS_ROWS = 65_536
"""Parts with at least this many rows are kept compressed (~10 MB as a frame)."""


def pack(frame: pl.DataFrame) -> pl.DataFrame | bytes:
    """One part as kept: ``frame`` itself when small, else its zstd Parquet bytes."""
    if frame.height < COMPRESS_ROWS:
        return frame
    buf = io.BytesIO()
    frame.write_parquet(buf, compression="zstd", statistics=False)
    return buf.getvalue()


def _unpack(part: pl.DataFrame | bytes) -> pl.DataFrame:
    return part if isinstance(part, pl.DataFrame) else pl.read_parquet(io.BytesIO(part))


@dataclass(frozen=True)
class RequestParts:
    """Per-request frames, in the order the result lists its runs (same schema each)."""

    parts: tuple[pl.DataFrame | bytes, ...]
    schema: pl.Schema | None = None
    """The frames' schema (for an empty frame when there are no parts)."""

    @classmethod
    def of_frames(cls, frames: Iterable[pl.DataFrame]) -> RequestParts:
        """Parts from frames, the large ones compressed (each frame may be dropped afterwards)."""
        parts, schema = [], None
        for f in frames:
            schema = schema or f.schema
            parts.append(pack(f))
        return cls(tuple(parts), schema)

    def frames(self) -> Iterator[pl.DataFrame]:
        """Each part as a frame, decoded one at a time (hold one, not all)."""
        for p in self.parts:
            yield _unpack(p)

    def frame(self) -> pl.DataFrame:
        """All parts as one frame in one chunk (sums over pooled seeds then do not depend on how
        the frames were split): decodes everything, so it is as large as the records are."""
        if not self.parts:
            return pl.DataFrame(schema=self.schema)
        if len(self.parts) == 1:
            return _unpack(self.parts[0]).rechunk()
        return pl.concat(list(self.frames()), how="vertical", rechunk=True)

    def merged(self, more: RequestParts) -> RequestParts:
        """These parts, then ``more``'s."""
        return RequestParts((*self.parts, *more.parts), self.schema or more.schema)

    @property
    def nbytes(self) -> int:
        """Bytes held (frames by their estimated size)."""
        return sum(len(p) if isinstance(p, bytes) else int(p.estimated_size()) for p in self.parts)
