"""What a capacity plan found: per candidate, per seed, and the frames decisions read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.decisions.capacity_search import CapacitySearch
from sim.decisions.sustain import SustainCriteria
from sim.results.intervals import ci95_halfwidth


@dataclass(frozen=True)
class CandidateCapacity:
    """Capacity of one candidate: per seed, mean ± CI, replicas for the target, and its cost."""

    candidate: str
    per_seed: tuple[CapacitySearch, ...]
    seeds: tuple[int, ...]
    target_rate: float
    replicas: int | None
    replicas_status: str
    operating_row: Mapping[str, Any] | None = field(default=None, compare=False)

    fleet_replicas: int = 1
    """Replicas of the fleet the search ran on (the scenario's); capacities are per replica."""
    profile_band: tuple[float, float] | None = None
    """Capacity per replica (first seed) with every step at the profile's p90 and p10 step
    times (``timing_spread``): the model's own uncertainty, next to the seeds' interval."""
    operating_seeds: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    """The summary row of each seed at the target rate on ``replicas`` (same order as seeds)."""
    replicas_low: int | None = None
    """``replicas − 1`` when that count's "carries" is still undetermined at these seeds (the
    answer is then "low or replicas"); else ``replicas``."""
    replicas_below: str = ""
    """What ``replicas − 1`` showed, in words ("3: cannot carry (TTFT p95 1.3–1.5 × its limit …)")."""

    @property
    def replicas_undetermined(self) -> bool:
        """True when the budget left ``replicas − 1`` undetermined ("3 or 4 replicas")."""
        return self.replicas is not None and self.replicas_low is not None and self.replicas_low < self.replicas

    @property
    def capacities(self) -> list[float]:
        """Capacity per replica, one per seed (the fleet's divided by its replicas)."""
        return [s.rate / self.fleet_replicas for s in self.per_seed]

    @property
    def fleet_mean(self) -> float:
        return float(np.mean([s.rate for s in self.per_seed]))

    @property
    def mean(self) -> float:
        return float(np.mean(self.capacities))

    @property
    def ci95(self) -> float:
        return ci95_halfwidth(self.capacities)

    @property
    def evaluations(self) -> int:
        return sum(len(s.probes) for s in self.per_seed)

    @property
    def bounded(self) -> str:
        """'' when every seed bracketed; else which seeds hit a search limit."""
        odd = []
        for sd, s in zip(self.seeds, self.per_seed, strict=True):
            if s.status in ("below_min", "below_probes"):
                judged = [p for p in s.probes if p.conclusive]
                unjudged = [p for p in s.probes if not p.conclusive]
                msg = f"seed {sd}: not sustained at any rate probed"
                if judged:
                    low = min(judged, key=lambda p: p.rate)
                    msg += f", down to {low.rate:.3g} req/s ({low.reason})"
                if unjudged:
                    msg += (f"; at {max(p.rate for p in unjudged):.3g} req/s and below a run holds "
                            f"too few requests to judge")
                odd.append(msg)
            elif s.status == "above_max":
                odd.append(f"seed {sd}: sustained up to the search limit {s.rate:.3g} req/s")
            elif s.status == "above_probes":
                odd.append(f"seed {sd}: at least {s.rate:.3g} req/s (probe budget spent)")
        return "; ".join(odd)


@dataclass(frozen=True)
class CapacityReport:
    """Everything `specplan capacity` prints: per-candidate capacity plus frames for decisions."""

    scenario_name: str
    criteria: SustainCriteria
    candidates: tuple[CandidateCapacity, ...]
    load_summary: Any  # pl.DataFrame: candidate, segment, rate (per replica), fleet_rate, replicas, k, metrics
    operating_summary: Any  # pl.DataFrame at the target rate with each candidate's replicas
    sources: tuple[str, ...]
    rel_tol: float
    max_evals: int
    duration_s: float
    bottlenecks: tuple[Any, ...] = ()
    notes: tuple[str, ...] = ()
    baseline: str = "baseline"
    price_source: str = ""
    gpus_per_replica: int = 1
    """GPUs one replica spans (fleet.tensor_parallel_size): replicas count instances, cost GPUs."""
    replica_hourly: Mapping[str, float] | None = None
    """$ per hour of one replica of each candidate (None: the scenario sets no price)."""
    devices: Mapping[str, str] | None = None
    """What one replica of each candidate's own fleet is ("2× H200"); None: all on [fleet]."""
    candidate_gpus: Mapping[str, int] | None = None
    """GPUs per replica of each candidate's own fleet ([fleets.NAME]); None: all ``gpus_per_replica``."""
    start_seeds: int = 0
    """Seeds the plan started with; more were added while the comparison was undetermined."""
    max_seeds: int = 0
    """The replication budget (run.max_seeds or --max-seeds)."""
    acceptance: Mapping[str, str] | None = None
    """What each candidate's acceptance rests on (sim/results/acceptance_basis.py)."""
    draft_host: Mapping[str, str] | None = None
    """"ASSUMED (…)" for each candidate whose draft's host time is assumed (acceptance_basis.py)."""
    searched_fleet: str = "the scenario's"
    """Whose fleet the capacities were searched on, in words: "the scenario's", or "a" when a
    recorded trace needed more replicas than the scenario states (sim/decisions/trace_sizing.py)."""

