"""Assembling the profile's timing section from the measured cells: one grid per quantity, null
cells (out of memory, beyond the context window) marked with their reason."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from profiler.grids.timing_grids import Measured, Point, TimingGrids

# ---------------------------------------------------------------------------------------------
# assembling the section


def _grid(quantity: str, axes: dict[str, Sequence[int]], results: dict[Point, Measured],
          repeats: int, spread: bool = True) -> dict[str, Any]:
    names = list(axes)

    def build(attr: str) -> Any:
        def rec(depth: int, coords: list[tuple[str, int]]) -> Any:
            if depth == len(names):
                m = results.get(Point(quantity, tuple(coords)))
                val = None if m is None else getattr(m, attr)
                return None if val is None or not math.isfinite(val) else float(val)
            return [rec(depth + 1, coords + [(names[depth], int(v))]) for v in axes[names[depth]]]
        return rec(0, [])

    out: dict[str, Any] = {"axes": {n: [int(v) for v in axes[n]] for n in names}, "median": build("median")}
    if spread:
        out["p10"], out["p90"] = build("p10"), build("p90")
    out["repeats"] = repeats
    return out


def assemble_timing(grids: TimingGrids, proposer_names: Sequence[str],
                    measured: Sequence[Measured], rounds: int = 1) -> dict[str, Any]:
    """The ``timing`` section (without provenance) from every measured point; ``repeats`` of a
    grid counts every timed pass of a cell over all ``rounds``."""
    results = {m.point: m for m in measured}
    g = replace(grids, repeats=grids.repeats * rounds, prefill_repeats=grids.prefill_repeats * rounds)
    section: dict[str, Any] = {
        "target_forward": _grid("target_forward", {"batch": g.batch, "tokens_per_seq": g.tokens_per_seq,
                                                   "context": g.context}, results, g.repeats),
        "target_prefill": _grid("target_prefill", {"tokens": g.prefill_tokens, "context": g.prefill_context},
                                results, g.prefill_repeats),
        "proposers": {},
    }
    for name in proposer_names:
        section["proposers"][name] = {
            "draft": _grid(f"draft:{name}", {"batch": g.draft_batch, "k": g.draft_k, "context": g.draft_context},
                           results, g.repeats),
            "overhead": _grid(f"overhead:{name}", {"batch": g.overhead_batch, "k": g.overhead_k},
                              results, g.repeats),
        }
    limits = []
    for m in measured:
        if m.limit is not None:
            kind, colon, name = m.point.quantity.partition(":")  # draft:NAME → proposers.NAME.draft
            q = f"proposers.{name}.{kind}" if colon else m.point.quantity
            limits.append({"quantity": q, "point": m.point.as_dict(), "reason": m.limit})
    section["limits"] = limits
    return section


def batch_origin(planned: TimingGrids, final: TimingGrids) -> dict[str, list[int]]:
    """``timing.batch_origin``: the batch sizes the run planned (after any budget cut) and those
    the grid checks added; validate's per-batch errors name each row's origin from it."""
    return {"measured": [int(b) for b in final.batch if b in planned.batch],
            "refined": [int(b) for b in final.batch if b not in planned.batch]}
