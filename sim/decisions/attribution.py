"""Which cause a candidate's latency change comes from: prefix caching or speculation.

Why: a planning guide asks for prefix-cache settings to be fixed separately from speculation,
so that a faster prefill is never taken for faster decoding. When a scenario runs a candidate
with prefix caching on beside its *twin* (the same candidate with caching off: the baseline for
"cache on, speculation off"), the change against the baseline splits exactly in two:
``candidate - baseline = (candidate - twin) + (twin - baseline)``, the first part caching's, the
second speculation's. Means over the seeds of each one's SLO percentiles (``Facts``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.decisions.facts import Facts

METRICS = ("ttft_ms_p95", "tpot_ms_p95")
"""The SLO percentiles split: caching acts on TTFT, speculation mostly on TPOT."""


@dataclass(frozen=True)
class Cause:
    """One metric's change of one candidate against the baseline, split by cause (ms)."""

    candidate: str
    metric: str
    total: float
    caching: float
    speculation: float


def causes(facts: Facts) -> tuple[Cause, ...]:
    """The split for every candidate with prefix caching on whose twin ran (none otherwise)."""
    names = {c.name for c in facts.candidates}
    if facts.baseline not in names:
        return ()
    base = facts.candidate(facts.baseline)
    out = []
    for c in facts.candidates:
        if not c.prefix_caching or c.twin is None or c.twin not in names:
            continue
        twin = facts.candidate(c.twin)
        for metric in METRICS:
            x, y, b = c.shown.get(metric), twin.shown.get(metric), base.shown.get(metric)
            if x is None or y is None or b is None or not all(map(math.isfinite, (x, y, b))):
                continue
            out.append(Cause(c.name, metric, x - b, x - y, y - b))
    return tuple(out)
