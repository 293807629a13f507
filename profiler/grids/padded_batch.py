"""What a padded engine pays when rows join or leave its decode batch: ``timing.padded_batch``.

Why it is measured: a padded engine (``fleet.engine.kv_layout = "padded"``, the real loop of
``specplan validate``) keeps its decoding requests' KV as one left-padded tensor per layer, and
every change of the decode set edits it — a joiner's cache is appended (one concatenation per
layer, a copy of the whole batch), a leaver's slot is refilled from the tail. On a 2-core CPU at
batch 6 and width 320 that was 6–11 ms against a ~130 ms step, once per request arriving and
once per request finishing, which the forward-pass grids do not contain. It is timed with the
serving loop's own ``BatchExecutor`` on random KV of the model's shape (the values do not matter
to a copy), so the grid prices exactly the code that runs.

- ``join(batch, context)``: one row appended to a batch of ``batch − 1`` rows (``batch = 1``:
  the batch built from one request) whose longest row holds ``context`` tokens.
- ``leave(batch, context)``: one finished row removed from a batch of ``batch + 1`` rows, leaving
  ``batch``; the longest row stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from profiler.grids.timing_assembly import _grid
from profiler.grids.timing_grids import Measured, Point, combine_rounds, point
from profiler.passes.batch_executor import BatchExecutor
from profiler.passes.batch_state import SeqState, ServingRequest
from profiler.passes.clock import Timing, time_op
from profiler.passes.kv_cache import cache_from
from profiler.passes.memory import kv_bytes_per_token
from profiler.passes.model_types import LoadedModel
from profiler.passes.warm_up import keep_freed_memory

CELL_KV_LIMIT = 2 << 30
"""Cells whose batch KV is larger are left unmeasured (``null``): random KV that size takes
longer to make than the whole grid, and the simulator fills them from the nearest cell."""


class _Rows:
    """Random compact KV caches of the model's shape, one per request id, reused across repeats."""

    def __init__(self, target: LoadedModel, seed: int) -> None:
        arch = target.identity["architecture"]
        self.config = target.model.config
        self.layers, self.heads, self.dim = arch["num_layers"], arch["num_kv_heads"], arch["head_dim"]
        self.dtype, self.device = target.dtype, target.device
        self.gen = torch.Generator().manual_seed(seed)

    def lengths(self, rows: int, context: int) -> list[int]:
        """The longest row at ``context``, the others spread over its upper half (as in a run)."""
        lo = max(1, context // 2)
        rest = torch.randint(lo, context + 1, (max(rows - 1, 0),), generator=self.gen).tolist()
        return [context, *rest][:rows]

    def executor(self, target: LoadedModel, lengths: Sequence[int]) -> BatchExecutor:
        ex = BatchExecutor(target.model, device=self.device)
        for rid, n in enumerate(lengths):
            seq = SeqState(ServingRequest(rid, 0.0, (0,) * n, 1), None)
            shape = (1, self.heads, n, self.dim)
            seq.cache = cache_from(self.config, [
                (torch.randn(shape, generator=self.gen).to(self.device, self.dtype),
                 torch.randn(shape, generator=self.gen).to(self.device, self.dtype))
                for _ in range(self.layers)
            ])
            ex.seqs[rid] = seq
        return ex


def _snapshot(ex: BatchExecutor) -> dict[int, Any]:
    return {rid: s.cache for rid, s in ex.seqs.items()}


def _restore(ex: BatchExecutor, caches: dict[int, Any]) -> None:
    ex.batch = None
    for rid, c in caches.items():
        ex.seqs[rid].cache = c
        ex.seqs[rid].done = False


@torch.inference_mode()
def measure_join(target: LoadedModel, batch: int, context: int, *, warmup: int, repeats: int,
                 rows: _Rows) -> Timing:
    """One row joining ``batch − 1`` batched rows (``batch = 1``: the batch built from it)."""
    lengths = rows.lengths(batch, context)
    joiner = len(lengths) - 1 if batch > 1 else 0
    ex = rows.executor(target, lengths)
    caches = _snapshot(ex)
    before = [rid for rid in range(len(lengths)) if rid != joiner]
    after = list(range(len(lengths)))

    def setup() -> None:
        _restore(ex, caches)
        if before:
            ex._ensure_batch(before)

    return time_op(lambda: ex._ensure_batch(after), warmup=warmup, repeats=repeats,
                   device=rows.device, setup=setup)


@torch.inference_mode()
def measure_leave(target: LoadedModel, batch: int, context: int, *, warmup: int, repeats: int,
                  rows: _Rows) -> Timing:
    """One finished row (not the longest) leaving a batch of ``batch + 1`` rows."""
    lengths = rows.lengths(batch + 1, context)
    ex = rows.executor(target, lengths)
    caches = _snapshot(ex)
    leaver = len(lengths) // 2 or 1  # a middle row: its slot is refilled from the tail
    every = list(range(len(lengths)))
    kept = [rid for rid in every if rid != leaver]

    def setup() -> None:
        _restore(ex, caches)
        ex._ensure_batch(every)
        ex.seqs[leaver].done = True

    return time_op(lambda: ex._ensure_batch(kept), warmup=warmup, repeats=repeats,
                   device=rows.device, setup=setup)


def measure_padded_batch(target: LoadedModel, batches: Sequence[int], contexts: Sequence[int], *,
                         warmup: int = 1, repeats: int = 7, rounds: int = 1, seed: int = 0) -> dict[str, Any]:
    """``{"section": join and leave grids (no provenance), "limits": why cells are null}``.

    With ``rounds > 1`` the whole grid is timed that many times, one pass after another, and
    combined as the profile's forward grids are (``combine_rounds``: median of the round medians,
    lowest p10, highest p90): on a VM these memory-bound copies move by 2× between moments.
    """
    if not batches or not contexts or min(batches) < 1 or min(contexts) < 1 or rounds < 1:
        raise ValueError(f"padded_batch: batches {list(batches)} and contexts {list(contexts)} must be >= 1, "
                         f"rounds {rounds} >= 1")
    keep_freed_memory()  # as the real loop runs: freed KV buffers are reused, not page-faulted in again
    rows = _Rows(target, seed)
    per_token = kv_bytes_per_token(target.identity["architecture"], target.dtype)
    kinds = {"join": measure_join, "leave": measure_leave}
    rounds_of: dict[Point, list[Measured]] = {}
    todo: list[tuple[str, Point]] = []
    for name in kinds:
        for b in batches:
            for c in contexts:
                pt = point(f"padded_batch.{name}", batch=b, context=c)
                if (b + 1) * c * per_token > CELL_KV_LIMIT:
                    rounds_of[pt] = [Measured.limited(pt, f"batch KV over {CELL_KV_LIMIT >> 30} GiB: not measured")]
                else:
                    todo.append((name, pt))
    for _ in range(rounds):
        for name, pt in todo:
            done = rounds_of.setdefault(pt, [])
            if any(m.limit for m in done):
                continue
            b, c = pt.as_dict()["batch"], pt.as_dict()["context"]
            try:
                done.append(Measured.of(pt, kinds[name](target, b, c, warmup=warmup, repeats=repeats, rows=rows)))
            except (torch.cuda.OutOfMemoryError, MemoryError):
                done.append(Measured.limited(pt, "out of memory"))
    cells = {pt: combine_rounds(ms) for pt, ms in rounds_of.items()}
    if any(all(m.median is None for pt, m in cells.items() if pt.quantity == f"padded_batch.{name}")
           for name in kinds):
        raise ValueError("padded_batch: no cell could be measured (every batch KV over the limit)")
    axes = {"batch": batches, "context": contexts}
    out = {name: _grid(f"padded_batch.{name}", axes, cells, repeats * rounds) for name in kinds}
    limits = [{"quantity": pt.quantity, "point": pt.as_dict(), "reason": m.limit}
              for pt, m in cells.items() if m.limit is not None]
    return {"section": out, "limits": limits}


NOTE = ("padded_batch: the serving loop's own BatchExecutor editing a left-padded batch of random KV "
        "(join: one row appended, one concatenation per layer; leave: one finished middle row removed, "
        "its slot refilled from the tail); rows' lengths: the longest at the context, the rest uniform "
        "over its upper half; glibc told to keep freed memory, as the real loop runs")


def add_to_profile(base: dict[str, Any], origin: str, target: LoadedModel, *, command: str,
                   seed: int = 0, warmup: int = 1, repeats: int = 7, rounds: int = 1) -> dict[str, Any]:
    """A copy of profile ``base`` with ``timing.padded_batch`` measured now on ``target``.

    Why: a profile measured before these grids existed (or on a paged engine's behalf) can get
    them in a minute, without re-timing its forward passes; the section carries its own
    provenance, since it is measured at another moment than the rest of the timing. Cells are
    the base's ``target_forward`` batch and context axes.
    """
    import copy

    from profiler.passes import device as devmod
    from profiler.passes.model_types import dtype_name
    from profiler.profile_io import provenance
    from sim.contracts.errors import SpecplanError

    want = base["target"]["architecture"]
    have = target.identity["architecture"]
    for key in ("num_layers", "num_kv_heads", "head_dim", "hidden_size"):
        if key in want and key in have and want[key] != have[key]:
            raise SpecplanError(f"{origin}: target.architecture.{key} is {want[key]}, the loaded target has "
                                f"{have[key]}: measure with the profile's own target")
    tf = base["timing"]["target_forward"]["axes"]
    got = measure_padded_batch(target, tf["batch"], tf["context"], warmup=warmup, repeats=repeats,
                               rounds=rounds, seed=seed)
    out = copy.deepcopy(base)
    timing = out["timing"]
    timing["padded_batch"] = {
        "provenance": provenance(
            "measured", device=devmod.device_facts(target.device), dtype=dtype_name(target.dtype),
            libraries=devmod.library_versions(), models={"target": target.label}, command=command,
            notes="; ".join([devmod.device_notes(target.device), *target.notes,
                             f"{NOTE} (warmup {warmup}, repeats {repeats}, {rounds} rounds: a cell's "
                             "median is the median of its round medians)",
                             "measured after the rest of this timing section, at another moment"]),
        ),
        **got["section"],
    }
    timing["limits"] = [lim for lim in timing.get("limits", [])
                        if not str(lim.get("quantity", "")).startswith("padded_batch.")] + got["limits"]
    return out
