"""What "sustains" means on one summary row: every SLO'd metric's percentile within its limit and
losses within max_loss_fraction (see sim/decisions/capacity.py's docstring for the full rule)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.decisions.capacity_search import Probe

SLO_METRICS: tuple[str, ...] = ("ttft", "tpot", "e2el", "pause")
LOST = "lost"
"""The losses check's name among a row's ``ratios``."""


@dataclass(frozen=True, slots=True)
class SustainCriteria:
    """SLO limits (ms) held at ``percentile``, plus the tolerated share of lost requests."""

    limits_ms: Mapping[str, float]
    percentile: float = 95.0
    max_loss_fraction: float = 0.01

    @property
    def min_measured(self) -> int:
        """Fewest measured requests a probe needs: two above the percentile (40 for p95)."""
        return math.ceil(2.0 / (1.0 - self.percentile / 100.0) - 1e-9)

    def __post_init__(self) -> None:
        if not self.limits_ms:
            raise SpecplanError("slo: capacity needs at least one SLO limit (ttft_ms, tpot_ms, "
                                "e2el_ms or pause_ms)")
        for m, v in self.limits_ms.items():
            if m not in SLO_METRICS:
                raise SpecplanError(f"slo: unknown SLO metric {m!r}; valid: {', '.join(SLO_METRICS)}")
            if not v > 0:
                raise SpecplanError(f"slo.{m}_ms: must be > 0, got {v}")
        if self.percentile not in (50, 95, 99):
            raise SpecplanError(f"--percentile: must be 50, 95 or 99 (the percentiles the summary "
                                f"carries), got {self.percentile:g}")
        if not 0 <= self.max_loss_fraction < 1:
            raise SpecplanError(f"--max-loss: must be in [0, 1), got {self.max_loss_fraction}")

    def column(self, metric: str) -> str:
        """Summary column holding ``metric`` at this percentile (architecture.md names)."""
        suffix = {50: "median", 95: "p95", 99: "p99"}[int(self.percentile)]
        if metric == "pause" and suffix == "median":
            return "pause_ms_p95"  # the summary has no median pause; p95 is the stricter bound
        return f"{metric}_ms_{suffix}"

    def measured(self, row: Mapping[str, Any]) -> float:
        """Requests a row measured (completed, rejected, timed out or unfinished)."""
        return sum(float(row.get(c) or 0) for c in ("completed", "rejected", "timed_out", "unfinished"))

    def ratios(self, row: Mapping[str, Any]) -> dict[str, float]:
        """Each check of one row as observed ÷ limit (≤ 1 passes): every SLO'd metric's
        percentile column, and ``lost`` (share lost ÷ ``max_loss_fraction``). The one home of
        what is checked: ``judge`` (one seed) and ``sim.decisions.carry`` (across seeds) read it."""
        out: dict[str, float] = {}
        for m, limit in self.limits_ms.items():
            v = row.get(self.column(m))
            obs = math.inf if v is None or not math.isfinite(float(v)) else float(v)
            out[self.column(m)] = obs / limit
        loss = loss_fraction(row)
        if self.max_loss_fraction > 0:
            out[LOST] = loss / self.max_loss_fraction
        elif loss > 0:
            out[LOST] = math.inf
        return out

    def words(self, check: str, ratio: float) -> str:
        """One check as the sustain rule says it: ``ttft_ms_p95=1210ms vs 1000``, ``lost=2.0% vs 1.0%``."""
        if check == LOST:
            return f"lost={ratio * self.max_loss_fraction:.1%} vs {self.max_loss_fraction:.1%}"
        limit = self.limits_ms[check.split("_ms_")[0]]
        return f"{check}={ratio * limit:.0f}ms vs {limit:g}"

    def judge(self, row: Mapping[str, Any], rate: float) -> Probe:
        """Pass/fail and margin of one summary row (one candidate, segment ``all``)."""
        measured = self.measured(row)
        if measured < self.min_measured:
            return Probe(rate, False, None, f"only {measured:.0f} measured requests; p{self.percentile:g} "
                                           f"needs ≥ {self.min_measured} (lengthen the run)",
                         conclusive=False)
        ratios = self.ratios(row)
        check = max(ratios, key=lambda k: ratios[k])
        margin = ratios[check]
        why = self.words(check, margin) if math.isfinite(margin) or check != LOST else "lost>0% vs 0"
        if check == LOST and self.max_loss_fraction == 0:
            why = f"lost={loss_fraction(row):.1%} vs 0"
        return Probe(rate=rate, sustained=margin <= 1.0, margin=margin, reason=why)


def loss_fraction(row: Mapping[str, Any]) -> float:
    """Share of measured requests rejected or timed out (0 when none were measured). Requests
    rejected for their length (prompt + output over ``max_model_len``: ``rejected_too_long``)
    are left out of both counts: no fleet size serves them, so they say nothing about whether
    this one carries the load; the run's notes and the summary count them."""
    done = float(row.get("completed") or 0)
    lost = sum(float(row.get(c) or 0) for c in ("rejected", "timed_out", "unfinished"))
    lost -= float(row.get("rejected_too_long") or 0)
    total = done + lost
    return lost / total if total > 0 else 1.0


def criteria_from_scenario(scenario: Any, percentile: float | None = None,
                           max_loss_fraction: float = 0.01) -> SustainCriteria:
    """SLO limits from ``scenario.slo`` (fields ``ttft_ms`` … ``pause_ms``)."""
    slo = scenario.slo
    limits = {m: float(getattr(slo, f"{m}_ms")) for m in SLO_METRICS
              if getattr(slo, f"{m}_ms", None) is not None}
    pct = float(percentile if percentile is not None else getattr(slo, "percentile", 95))
    return SustainCriteria(limits_ms=limits, percentile=pct, max_loss_fraction=max_loss_fraction)
