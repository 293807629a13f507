"""What the timing run measures: the grids (axes per quantity), their points (one cell each), a
cell's measurement across rounds, and the tasks that group points over one prefilled cache."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from profiler.passes.clock import Timing
from profiler.passes.model_types import LoadedModel, max_positions
from sim.contracts.errors import SpecplanError

SMALL_BATCHES = (1, 2, 3, 4)
"""Batch sizes every grid measures, quick or full, and no budget cut drops: a home server runs at
these most of the time, and a CPU's step time is not smooth here (the GEMM kernel is chosen by
row count): a quick grid of batch 1 and 4 priced batch-2 and batch-3 steps 1.43–1.54× too cheap
(issue 41)."""

OOM_REASON = "out of memory"
WINDOW_REASON = "beyond the model's context window"


# ---------------------------------------------------------------------------------------------
# grids


@dataclass(frozen=True)
class TimingGrids:
    """Which grid cells to measure and how often; see ``default_grids``."""

    batch: tuple[int, ...]
    """Decode batch sizes for target_forward."""
    tokens_per_seq: tuple[int, ...]
    """New tokens per sequence in one forward (1 = decode T, k+1 = verification V(k))."""
    context: tuple[int, ...]
    """Cached tokens per sequence before the timed pass."""
    prefill_tokens: tuple[int, ...]
    prefill_context: tuple[int, ...]
    draft_batch: tuple[int, ...]
    k_max: int
    """Draft grids cover k = 1..k_max (one cumulative run gives every k)."""
    draft_context: tuple[int, ...]
    overhead_batch: tuple[int, ...]
    overhead_k: tuple[int, ...]
    overhead_context: int
    """Context at which whole speculative cycles are timed for H(k)."""
    warmup: int = 1
    repeats: int = 5
    prefill_repeats: int = 3

    def __post_init__(self) -> None:
        mins = {"batch": 1, "tokens_per_seq": 1, "context": 0, "prefill_tokens": 1,
                "prefill_context": 0, "draft_batch": 1, "draft_context": 0,
                "overhead_batch": 1, "overhead_k": 1}  # fmt: skip
        for name, low in mins.items():
            vals = getattr(self, name)
            if not vals or any(int(v) != v for v in vals):
                raise SpecplanError(f"timing grid {name}: expected a non-empty list of integers")
            if list(vals) != sorted(set(vals)) or vals[0] < low:
                raise SpecplanError(f"timing grid {name}={list(vals)}: must be strictly increasing and >= {low}")
        if self.k_max < 1:
            raise SpecplanError(f"k_max={self.k_max}: must be at least 1")
        if self.overhead_k[-1] > self.k_max:
            raise SpecplanError(f"timing grid overhead_k={list(self.overhead_k)}: must not exceed k_max={self.k_max}")
        if self.repeats < 1 or self.prefill_repeats < 1 or self.warmup < 0:
            raise SpecplanError("timing repeats must be >= 1 and warmup >= 0")

    @property
    def draft_k(self) -> tuple[int, ...]:
        return tuple(range(1, self.k_max + 1))

    def as_dict(self) -> dict[str, Any]:
        return {f: (list(v) if isinstance(v, tuple) else v) for f, v in self.__dict__.items()}


def default_grids(
    target: LoadedModel, *, quick: bool, k_max: int
) -> TimingGrids:
    """Grids that fit the device: CPU grids stay small (minutes), GPU grids reach large batches
    and long contexts; everything stays inside the model's context window.
    """
    window = max_positions(target.config) or 4096
    if target.device.type == "cuda":
        batch = (1, 2, 4, 8, 16, 32, 64, 128)
        context = (128, 512, 2048, 8192, 32768)
        prefill_tokens, prefill_context = (16, 64, 256, 1024, 4096, 8192), (0, 512, 2048, 8192)
        draft_batch, draft_context = (1, 4, 16, 64), (128, 2048, 8192)
        overhead_batch = (1, 4, 16, 64)
        warmup, repeats, prefill_repeats = 3, 10, 5
        if quick:
            batch, context = (*SMALL_BATCHES, 16, 64), (128, 2048)
            prefill_tokens, prefill_context = (64, 512, 4096), (0, 2048)
            draft_batch, draft_context, overhead_batch = (1, 16), (128, 2048), (1, 16)
            warmup, repeats, prefill_repeats = 2, 5, 3
    elif quick:
        batch, context = SMALL_BATCHES, (64, 512)
        prefill_tokens, prefill_context = (16, 128), (0, 256)
        draft_batch, draft_context, overhead_batch = (1, 4), (64, 512), (1, 4)
        warmup, repeats, prefill_repeats = 1, 3, 2
    else:
        # Every batch to 8: a CPU GEMM's kernel choice depends on its row count (batch × tokens),
        # so time is not smooth in batch either (measured: batch 3 takes 84 ms, batch 2 65 ms,
        # batch 4 53 ms; interpolating 2..4 gave 60 ms for batch 3, 28 % short).
        batch, context = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16), (64, 256, 1024)
        prefill_tokens, prefill_context = (16, 64, 256, 512), (0, 256, 1024)
        draft_batch, draft_context, overhead_batch = (1, 4, 16), (64, 256, 1024), (1, 4, 16)
        warmup, repeats, prefill_repeats = 1, 5, 3
    batch = tuple(sorted({*SMALL_BATCHES, *batch}))
    longest_new = max(k_max + 1, max(prefill_tokens))
    fits = [c for c in context if c + longest_new <= window] or [min(context[0], window // 2)]
    # Every verification width k+1 is measured, never interpolated: step time is not smooth in
    # it (on this CPU a 4-token pass is faster than a 3-token one: 56 vs 91 ms, kernel choice).
    tokens = tuple(range(1, k_max + 2))
    overhead_k = tuple(k for k in sorted({1, 2, max(1, k_max // 2), k_max}) if k <= k_max)
    return TimingGrids(
        batch=batch,
        tokens_per_seq=tokens,
        context=tuple(fits),
        prefill_tokens=tuple(t for t in prefill_tokens if t < window) or (min(16, window // 2),),
        prefill_context=tuple(c for c in prefill_context if c + max(prefill_tokens) <= window) or (0,),
        draft_batch=draft_batch,
        k_max=k_max,
        draft_context=tuple(c for c in draft_context if c + k_max <= window) or (fits[0],),
        overhead_batch=overhead_batch,
        overhead_k=overhead_k,
        overhead_context=fits[0],
        warmup=warmup,
        repeats=repeats,
        prefill_repeats=prefill_repeats,
    )


# ---------------------------------------------------------------------------------------------
# points and measurements


@dataclass(frozen=True)
class Point:
    """One grid cell: ``quantity`` is target_forward, target_prefill, draft:NAME or overhead:NAME."""

    quantity: str
    coords: tuple[tuple[str, int], ...]

    def as_dict(self) -> dict[str, int]:
        return dict(self.coords)

    def key(self, fingerprint: str) -> str:
        """Checkpoint key: hash of the run's configuration fingerprint and this cell."""
        raw = json.dumps([fingerprint, self.quantity, list(self.coords)], sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:20]


def point(quantity: str, **coords: int) -> Point:
    return Point(quantity, tuple((k, int(v)) for k, v in coords.items()))


@dataclass(frozen=True)
class Measured:
    """The result at one point: a median with spread, or a limit saying why there is none."""

    point: Point
    median: float | None
    p10: float | None = None
    p90: float | None = None
    repeats: int | None = None
    limit: str | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, pt: Point, t: Timing, **extra: float) -> Measured:
        return cls(pt, t.median, t.p10, t.p90, t.repeats, None, dict(extra))

    @classmethod
    def limited(cls, pt: Point, reason: str) -> Measured:
        return cls(pt, None, limit=reason)

    def to_json(self) -> dict[str, Any]:
        return {
            "quantity": self.point.quantity, "point": self.point.as_dict(), "median": self.median,
            "p10": self.p10, "p90": self.p90, "repeats": self.repeats, "limit": self.limit,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Measured:
        pt = Point(d["quantity"], tuple((k, int(v)) for k, v in d["point"].items()))
        return cls(pt, d["median"], d.get("p10"), d.get("p90"), d.get("repeats"), d.get("limit"),
                   dict(d.get("extra") or {}))


def combine_rounds(rounds: list[Measured]) -> Measured:
    """One cell from its rounds: the median of the round medians, the p10/p90 envelope.

    Why rounds: on a shared machine the speed drifts over minutes, so one burst of repeats per
    cell catches each cell at a different moment (a grid that is not even monotone). Rounds
    spread over the whole run give every cell the machine's typical speed. A cell any round
    could not measure keeps that round's limit.
    """
    if len(rounds) == 1:
        return rounds[0]
    limited = next((m for m in rounds if m.limit is not None), None)
    if limited is not None:
        return limited
    meds = [m.median for m in rounds if m.median is not None]
    p10s = [m.p10 for m in rounds if m.p10 is not None]
    p90s = [m.p90 for m in rounds if m.p90 is not None]
    extra = {k: float(np.median([m.extra[k] for m in rounds if k in m.extra])) for k in rounds[0].extra}
    return Measured(rounds[0].point, float(np.median(meds)), min(p10s) if p10s else None,
                    max(p90s) if p90s else None, sum(m.repeats or 0 for m in rounds), None, extra)


@dataclass(frozen=True)
class Task:
    """Points that share one setup (a prefilled cache); ``run(todo)`` yields their results."""

    label: str
    points: tuple[Point, ...]
    run: Callable[[Sequence[Point]], Iterator[Measured]]


@dataclass(frozen=True)
class DraftRuntime:
    """What timing needs from a proposer: a causal LM to step (draft/self-draft) or a lookup."""

    name: str
    kind: str
    model: torch.nn.Module | None = None
    lookup: Callable[[list[int], int], list[int]] | None = None
