"""An acceptance model moved, segment by segment, to a chosen mean acceptance length.

Why not the ``s_i^γ`` family (``AcceptanceModel.powered``): it leaves positions that always (1)
or never (0) accepted where they are, and a segment measured on one prompt often has exactly
those, so it cannot reach the ends of that segment's interval (1 to 1 + k). Here each segment is
moved linearly: down by scaling every survival rate by ``t`` (toward no acceptance), up by
``t + (1 − t)·s`` (toward full acceptance). Both keep rates in [0, 1] and non-increasing by
position, keep the per-request spread's order, act on the aggregate and every measured
request's rows alike (so the drafts-weighted aggregate stays their mean), and leave the proposal
rate alone (a segment that proposed nothing still proposes nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from sim.model.acceptance import AcceptanceModel, SegmentAcceptance


def shifted(model: AcceptanceModel, targets: Mapping[str, float], k: int) -> AcceptanceModel:
    """``model`` with each segment in ``targets`` moved so its aggregate mean acceptance length
    at ``k`` (``1 + Σ_{i≤k} s_i``) is the target, clamped to 1..1+k; other segments as they are."""
    if model.traces is not None:
        raise ValueError("a replayed acceptance trace cannot be moved")

    def move(seg: SegmentAcceptance, target: float) -> SegmentAcceptance:
        point = 1.0 + float(seg.aggregate[:k].sum())
        target = min(max(target, 1.0), 1.0 + k)
        if target < point:
            t = (target - 1.0) / (point - 1.0)
            agg, rows = seg.aggregate * t, seg.rows * t
        elif target > point:
            t = (target - point) / (1.0 + k - point)
            agg, rows = t + (1.0 - t) * seg.aggregate, t + (1.0 - t) * seg.rows
        else:
            return seg
        agg, rows = np.clip(agg, 0.0, 1.0), np.clip(rows, 0.0, 1.0)
        agg.setflags(write=False)
        rows.setflags(write=False)
        return dataclasses.replace(seg, aggregate=agg, rows=rows)

    segs = {n: (move(s, targets[n]) if n in targets else s) for n, s in model.segments.items()}
    said = ", ".join(f"{n} {v:.2f}" for n, v in targets.items())
    return AcceptanceModel(model.proposer, model.k_max, segs, f"{model.source}, moved to {said} at k={k}")
