"""How fast the machine ran, over time, relative to its profile: a ``SpeedTimeline``.

Why: a profile is one moment of a machine. A shared VM's speed moves by 5–30 % within minutes,
which is the size of a fidelity bar, so ``specplan validate --drift-correct`` predicts each real
run with the profile's step times multiplied by how fast the machine was *at that moment* —
measured on the profile's own reference cells (never on the run's own steps): in full before and
after the run, and one pass at a time in the run's idle gaps. Piecewise linear between knots and
flat beyond them, separately for decode and prefill (on a CPU the memory-bound decode GEMVs and
the compute-bound prefill GEMMs drift apart).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpeedTimeline:
    """now/profile time ratios (> 1: slower than profiled) at times in seconds from a run's start."""

    decode_t: tuple[float, ...]
    decode_ratio: tuple[float, ...]
    prefill_t: tuple[float, ...]
    prefill_ratio: tuple[float, ...]

    def __post_init__(self) -> None:
        for part in ("decode", "prefill"):
            t, r = getattr(self, f"{part}_t"), getattr(self, f"{part}_ratio")
            if len(t) != len(r) or not t:
                raise ValueError(f"SpeedTimeline {part}: needs as many ratios as times, at least one ({len(t)}, {len(r)})")
            if any(not (math.isfinite(x) and x > 0) for x in r):
                raise ValueError(f"SpeedTimeline {part}_ratio must be finite numbers > 0, got {r}")
            if any(not math.isfinite(x) for x in t) or any(b < a for a, b in zip(t, t[1:], strict=False)):
                raise ValueError(f"SpeedTimeline {part}_t must be finite and non-decreasing, got {t}")

    @classmethod
    def constant(cls, decode: float, prefill: float) -> SpeedTimeline:
        return cls((0.0,), (float(decode),), (0.0,), (float(prefill),))

    def at(self, t: float) -> tuple[float, float]:
        """(decode, prefill) ratio at ``t``: linear between knots, the nearest knot's outside them."""
        return (float(np.interp(t, self.decode_t, self.decode_ratio)),
                float(np.interp(t, self.prefill_t, self.prefill_ratio)))

    def mean(self, t0: float, t1: float) -> tuple[float, float]:
        """Time-average of each ratio over ``[t0, t1]`` (the knots' trapezoids, exactly)."""
        if t1 <= t0:
            return self.at(t0)

        def avg(ts: Sequence[float], rs: Sequence[float]) -> float:
            xs = np.unique(np.clip(np.concatenate([[t0, t1], ts]), t0, t1))
            ys = np.interp(xs, ts, rs)
            return float(np.sum((ys[1:] + ys[:-1]) / 2 * np.diff(xs)) / (t1 - t0))

        return avg(self.decode_t, self.decode_ratio), avg(self.prefill_t, self.prefill_ratio)


@dataclass(frozen=True)
class SpeedSample:
    """One reference measurement: ``ratio`` = measured / profile time of a cell at ``t_s``."""

    t_s: float
    kind: str
    """``decode`` (a target_forward cell) or ``prefill`` (a target_prefill cell)."""
    ratio: float


def speed_timeline(
    before: tuple[float, float],
    after: tuple[float, float],
    end_s: float,
    samples: Sequence[SpeedSample] = (),
    *,
    window_s: float = 20.0,
    min_samples: int = 3,
) -> SpeedTimeline:
    """Knots from full checks at the run's two ends and from in-run samples in between.

    ``before`` and ``after`` are the (decode, prefill) median ratios of the full checks that
    bracket the run, placed at 0 and ``end_s``. In-run samples (single passes, each ±5–10 %
    noisy) are pooled per ``window_s`` window: a window with at least ``min_samples`` of a kind
    adds one knot at their median time and median ratio. With no usable samples this is the
    straight line between the two checks, whose average is their mean.
    """
    if end_s < 0 or not math.isfinite(end_s):
        raise ValueError(f"end_s must be a finite number >= 0, got {end_s}")
    if window_s <= 0 or min_samples < 1:
        raise ValueError(f"window_s must be > 0 and min_samples >= 1, got {window_s}, {min_samples}")
    knots: dict[str, list[tuple[float, float]]] = {}
    for i, kind in enumerate(("decode", "prefill")):
        inner: list[tuple[float, float]] = []
        mine = sorted((s.t_s, s.ratio) for s in samples if s.kind == kind and 0 <= s.t_s <= end_s)
        for w in range(int(end_s // window_s) + 1):
            grp = [(t, r) for t, r in mine if w * window_s <= t < (w + 1) * window_s]
            if len(grp) >= min_samples:
                inner.append((float(np.median([t for t, _ in grp])), float(np.median([r for _, r in grp]))))
        knots[kind] = [(0.0, before[i]), *inner, (float(end_s), after[i])]
    return SpeedTimeline(
        tuple(t for t, _ in knots["decode"]), tuple(r for _, r in knots["decode"]),
        tuple(t for t, _ in knots["prefill"]), tuple(r for _, r in knots["prefill"]),
    )


__all__ = ["SpeedSample", "SpeedTimeline", "speed_timeline"]
