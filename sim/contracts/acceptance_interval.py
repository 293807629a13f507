"""How sure a segment's measured acceptance is: a bootstrap over its prompts, per position.

Why prompts, not drafts: drafts within one answer are not independent (a summary copies its
source for many steps in a row), so the unit that varies is the prompt. Each resample draws the
segment's prompts with replacement and recomputes vLLM's aggregate survival per position
(``accepted_per_pos[i] / drafts``) and the mean acceptance length at every ``k`` (``1 + Σ_{i≤k}
s_i``); the interval is the percentile interval of those. Below two prompts with drafts a
bootstrap has nothing to vary (one prompt resampled is itself), so no interval is given: the
decision treats that as "anything from no acceptance to full acceptance".

The profiler writes the result into the profile (``uncertainty``, docs/profile-format.md); the
decision reads it (``sim.decisions.acceptance_doubt``). One home: both call this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LEVEL = 0.95
"""Two-sided level of the stored interval."""
RESAMPLES = 2000
"""Bootstrap resamples per segment (30 segments × 2000 × ~10 prompts: well under a second)."""
METHOD = "bootstrap over prompts"


def bootstrap_interval(
    drafts: Sequence[int], accepted_per_pos: Sequence[Sequence[int]], rng: np.random.Generator,
    *, resamples: int = RESAMPLES, level: float = LEVEL,
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]] | None:
    """(survival low, survival high, length low, length high), each per position / per k, or
    None when fewer than two prompts drafted anything (no spread to resample).

    ``drafts[j]`` and ``accepted_per_pos[j]`` are prompt j's counters (vLLM's); ``rng`` is
    passed in so the same profile and seed give the same interval.
    """
    d = np.asarray(drafts, dtype=float)
    if int((d > 0).sum()) < 2:
        return None
    acc = np.asarray(accepted_per_pos, dtype=float).reshape(len(d), -1)
    n = len(d)
    picks = rng.integers(0, n, size=(resamples, n))
    tot = d[picks].sum(axis=1)
    ok = tot > 0  # a resample of only no-draft prompts has no survival: left out
    surv = acc[picks].sum(axis=1)[ok] / tot[ok, None]
    length = 1.0 + np.cumsum(surv, axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    lo_s, hi_s = np.percentile(surv, [tail, 100.0 - tail], axis=0)
    lo_l, hi_l = np.percentile(length, [tail, 100.0 - tail], axis=0)
    return (_round(lo_s), _round(hi_s), _round(lo_l), _round(hi_l))


def _round(v: np.ndarray) -> tuple[float, ...]:
    return tuple(round(float(x), 6) for x in v)


def more_prompts(prompts: int, half_width: float, settling_half_width: float) -> int | None:
    """Prompts to add so the half-width (which shrinks with √n) falls to ``settling_half_width``:
    ``n · (h / h*)² − n``, rounded up; None when that cannot be said (no width to scale, or a
    target of zero width: the break-even sits on the estimate itself)."""
    if prompts < 1 or not (half_width > 0 and math.isfinite(half_width)):
        return None
    if not settling_half_width > 0:
        return None
    need = prompts * (half_width / settling_half_width) ** 2
    return max(1, math.ceil(need - prompts - 1e-9))  # (float noise must not add a prompt)


def segment_uncertainty(segment: dict, rng: np.random.Generator, prompts: int | None = None) -> dict:
    """The profile's ``uncertainty`` object for one segment object (its ``per_request`` rows;
    ``prompts``: how many were measured, default one per row)."""
    rows = segment.get("per_request") or []
    n = len(rows) if prompts is None else prompts
    out: dict = {"prompts": n, "method": METHOD, "level": LEVEL, "resamples": RESAMPLES}
    got = bootstrap_interval([r["num_drafts"] for r in rows], [r["accepted_per_pos"] for r in rows], rng)
    if got is not None:
        out.update(zip(("survival_low", "survival_high", "length_low", "length_high"),
                       (list(x) for x in got), strict=True))
    return out
