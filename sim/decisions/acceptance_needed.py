"""The acceptance the decision needs: per speculative candidate and load point, the acceptance
length at which it stops paying against the baseline.

Why: acceptance is the least certain input of a plan (assumed, published or measured on other
traffic), so an answer that holds only above some acceptance must say which.

How (docs/decisions.md, "The acceptance the decision needs"):

- **The family.** The candidate's acceptance is scaled by one parameter γ > 0: every survival
  rate (aggregate and each measured request's) becomes ``s_i^γ`` (``AcceptanceModel.powered``).
  γ = 1 is the profile's (or the scenario's assumed) acceptance; the family is monotone (a
  smaller γ accepts more at every position), keeps rates non-increasing by position, keeps the
  per-request spread's shape, and leaves positions that always (1) or never (0) accept alone.
  Its acceptance length is ``L(γ) = Σ_segments share · mean over the segment's requests of
  (1 + Σ_{i≤k} s_i^γ)`` — what a request of the mix drafts on average per drafted step.
- **The rule.** The decision's first and last steps at a fixed fleet: the candidate must carry
  the load at the SLO (the capacity probe's rule, ``SustainCriteria``) on every seed where the
  baseline does, and its E2EL p50 (the latency step: what decides between candidates that carry
  the load at the same cost) must be below the baseline's, as the mean per-seed ratio over the
  run's own seeds (common random numbers: the same requests, the same acceptance stream). The
  cost step is not re-judged: a priced draft (``draft_price_per_hour``) or another fleet's price
  is in the decision, not in this search.
- **The search.** Simulation, not the break-even model (that ignores queueing and batching, so
  it is exact at no load point of a run). The run at γ = 1 is the run the decision already has;
  then bisection on L between the family's floor (1 unless some requests always accept a
  position; taken not to pay: assumed, not simulated) and the assumed L when it pays there, or between the assumed L and the family's top (γ = 0.001)
  after one run shows it pays there at all. Each evaluation simulates the candidate on every
  seed; ``budget`` evaluations per load point at most, every run counted and cached.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sim.contracts.errors import SpecplanError

GAMMA_TOP = 1e-3
"""The family's most accepting member searched (every non-zero survival rate ≈ 1)."""
GAMMA_BOTTOM = 1e3
"""Its least accepting member (every rate below 1 ≈ 0)."""
DEFAULT_BUDGET = 6
"""Evaluations (one simulator run per seed each) per candidate and load point."""
INDIFFERENCE = 0.05
"""The decision's latency indifference amount (``sim.decisions.facts``): a search whose paying
end is within it of the baseline's E2EL p50 has found the break-even; it stops there."""

Status = Literal["needs", "never"]


@dataclass(frozen=True)
class NeedPoint:
    """One load point: the acceptance length the candidate needs there."""

    rate: float
    """Offered fleet load (req/s)."""
    status: Status
    """``needs``: pays at acceptance length ≥ ``needed``; ``never``: not even at the family's top."""
    needed: float | None
    """Lowest acceptance length found to pay (the bracket's upper end); None when ``never``."""
    below: float
    """Highest acceptance length found not to pay (1.0 when only assumed: no run there)."""
    ratio: float | None
    """Candidate / baseline E2EL p50 (mean of per-seed ratios) at ``needed``."""
    ratio_assumed: float
    """The same ratio at the assumed acceptance (the decision's own run)."""
    slo_bound: bool
    """At ``below`` its E2EL was lower but it missed the SLO on some seed: the SLO, not latency,
    sets the break-even (the decision's load step)."""
    evaluations: int
    """Simulated evaluations at this point (the assumed one not counted: it is the decision's run)."""
    pays_at_assumed: bool = False
    """It pays at the assumed acceptance (the decision's own run: E2EL below and the SLO met)."""

    @property
    def resolved(self) -> bool:
        """At ``needed`` the two are within the indifference amount, or the SLO sets the bound
        (else the budget ran out first, or E2EL steps there: the break-even lies between
        ``below`` and ``needed``)."""
        return self.ratio is not None and (self.ratio >= 1.0 - INDIFFERENCE or self.slo_bound)


@dataclass(frozen=True)
class AcceptanceNeeded:
    """One speculative candidate's break-even acceptance over the load points."""

    candidate: str
    baseline: str
    k: int
    assumed: float
    """Acceptance length L(1): the candidate's own acceptance at its k."""
    spread: tuple[float, float] | None
    """95 % interval of ``assumed`` from the profile's per-request rows (None: no spread known)."""
    provenance: str
    """``measured`` | ``published`` | ``imported`` | ``estimated`` | ``assumed``: where ``assumed`` comes from."""
    top: float
    """The family's highest acceptance length searched, L(GAMMA_TOP)."""
    floor: float = 1.0
    """The family's lowest acceptance length, L(GAMMA_BOTTOM): above 1 where measured requests
    accepted a position every time (those stay at 1); the search starts there, unsimulated."""
    points: tuple[NeedPoint, ...] = ()
    runs: int = 0
    """Simulator runs spent (cached ones not counted)."""
    budget: int = DEFAULT_BUDGET
    seeds: tuple[int, ...] = ()
    skipped: str = ""
    """Why nothing was computed (a replayed trace, closed-loop clients), else empty."""

    def pays_up_to(self, length: float) -> float | None:
        """Highest load point up to which (every point from the lowest) speculation pays at
        acceptance length ``length``; None when it does not pay at the lowest."""
        top = None
        for p in sorted(self.points, key=lambda p: p.rate):
            if p.needed is None or p.needed > length:
                break
            top = p.rate
        return top

    def pays_assumed_up_to(self) -> float | None:
        """As :meth:`pays_up_to` at the assumed acceptance, read off the decision's own runs."""
        top = None
        for p in sorted(self.points, key=lambda p: p.rate):
            if not p.pays_at_assumed:
                break
            top = p.rate
        return top


def length_of(model: Any, shares: Sequence[tuple[str, float]], k: int, gamma: float) -> float:
    """``L(γ)`` (module doc) of an ``AcceptanceModel`` over the workload's (segment, share)."""
    total = 0.0
    for name, share in shares:
        seg = model.segment(name)
        rows = seg.rows[:, :k] if seg.rows.shape[0] else seg.aggregate[None, :k]
        total += share * (1.0 + float(np.power(rows, gamma).sum(axis=1).mean()))
    return total / sum(s for _, s in shares)


def gamma_for(model: Any, shares: Sequence[tuple[str, float]], k: int, length: float) -> float:
    """The γ with ``L(γ) = length`` (bisection on log γ; L falls as γ rises), clamped to the family."""
    lo, hi = math.log(GAMMA_TOP), math.log(GAMMA_BOTTOM)
    for _ in range(60):
        mid = (lo + hi) / 2
        if length_of(model, shares, k, math.exp(mid)) > length:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def spread_of(model: Any, shares: Sequence[tuple[str, float]], k: int) -> tuple[float, float] | None:
    """95 % interval of the assumed acceptance length: the segments' half-widths, share-weighted
    (``AcceptanceModel.precision``); None when no segment has per-request rows."""
    half, known = 0.0, False
    for name, share in shares:
        _, h, n = model.precision(name, k)
        if n > 1 and math.isfinite(h):
            half += share * h
            known = True
    if not known:
        return None
    mid = length_of(model, shares, k, 1.0)
    return (max(1.0, mid - half), mid + half)


Probe = tuple[float, bool]
"""(mean per-seed E2EL p50 ratio candidate / baseline, whether the candidate carries the load
at the SLO on every seed where that is asked of it)."""


def pays(p: Probe) -> bool:
    return p[0] < 1.0 and p[1]


def search_point(rate: float, assumed: float, at_assumed: Probe, top: float, budget: int,
                 probe: Callable[[float], Probe], floor: float = 1.0) -> NeedPoint:
    """Bisection on acceptance length at one load point (module doc); ``probe(L)`` simulates.
    It stops early once the paying end is within the indifference amount of the baseline."""
    evals, slo = 0, False
    if pays(at_assumed):
        lo, hi, r_hi = min(floor, assumed), assumed, at_assumed[0]
    else:
        if budget < 1:
            return NeedPoint(rate, "never", None, assumed, None, at_assumed[0], False, 0)
        r_top = probe(top)
        evals = 1
        if not pays(r_top):
            return NeedPoint(rate, "never", None, top, r_top[0], at_assumed[0], False, evals)
        lo, hi, r_hi = assumed, top, r_top[0]
        slo = at_assumed[0] < 1.0
    while evals < budget and r_hi < 1.0 - INDIFFERENCE:
        mid = (lo + hi) / 2
        r = probe(mid)
        evals += 1
        if pays(r):
            hi, r_hi = mid, r[0]
        else:
            lo, slo = mid, r[0] < 1.0
    return NeedPoint(rate, "needs", hi, lo, r_hi, at_assumed[0], slo, evals, pays(at_assumed))


Seed = tuple[float, bool]
"""One seed's (E2EL p50 in ms, inf when nothing finished; whether it carries the load at the SLO)."""


def _seed(summary: Any, name: str, seed: int, criteria: Any) -> Seed:
    """A candidate's E2EL p50 on one seed and whether it passes the capacity probe's rule
    (``SustainCriteria``; True without an SLO) on that seed's summary row."""
    import polars as pl

    from sim.results import metric_names as mn

    rows = summary.filter((pl.col(mn.CANDIDATE) == name) & (pl.col(mn.SEED) == seed)
                          & (pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS))
    if not rows.height:
        return math.inf, False
    row = rows.row(0, named=True)
    v = row.get("e2el_ms_median")
    e2el = math.inf if v is None or not math.isfinite(float(v)) else float(v)
    return e2el, bool(criteria is None or criteria.judge(row, 0.0).sustained)


def _probe(cand: Sequence[Seed], base: Sequence[Seed]) -> Probe:
    """Mean of per-seed E2EL ratios (a seed where neither finished counts as 1, only one as inf),
    and whether the candidate carries the load on every seed where the baseline does."""
    out = []
    for (c, _), (b, _) in zip(cand, base, strict=True):
        if math.isinf(c) and math.isinf(b):
            out.append(1.0)
        elif math.isinf(c) or b <= 0:
            out.append(math.inf)
        else:
            out.append(c / b)
    return float(np.mean(out)), all(c_ok or not b_ok for (_, c_ok), (_, b_ok) in zip(cand, base, strict=True))


def _key(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def check_budget(budget: int) -> None:
    """One line when the budget is not a small whole number of evaluations."""
    if not 0 <= budget <= 20:
        raise SpecplanError(f"--acceptance-needed: budget must be 0..20 evaluations per load point, got {budget}")


def acceptance_needed(points: Sequence[tuple[float, Any]], profile: Any, *, budget: int = DEFAULT_BUDGET,
                      candidates: Sequence[str] | None = None,
                      cache: Any = None, cache_salt: str = "",
                      progress: Callable[[int, int, str], None] | None = None) -> tuple[AcceptanceNeeded, ...]:
    """Break-even acceptance per speculative candidate over ``points`` ((offered fleet rate,
    ``ScenarioResult``) per load point, each already simulated at the assumed acceptance).
    ``cache``: evaluations kept (``get``/``[]=``: a dict or the dashboard's run cache) by
    scenario, profile (``cache_salt``: its content's key; default its name and file), candidate,
    load, γ and seed, so a rerun simulates nothing twice."""
    check_budget(budget)
    if not points:
        return ()
    pts = sorted(points, key=lambda p: p[0])
    sc0 = pts[0][1].scenario
    base = sc0.baseline.name
    names = [n for n in (candidates or pts[0][1].candidates) if n != base and sc0.candidate(n).speculates]
    search = _Search(pts, profile, budget, {} if cache is None else cache, cache_salt, progress,
                     total=budget * len(names) * len(pts) * len(pts[0][1].seeds))
    return tuple(search.candidate(name) for name in names)


@dataclass
class _Search:
    """One call's state: the load points, the cache and the runs spent so far."""

    pts: Sequence[tuple[float, Any]]
    profile: Any
    budget: int
    cache: Any
    salt: str
    progress: Callable[[int, int, str], None] | None
    total: int
    runs: int = 0

    def candidate(self, name: str) -> AcceptanceNeeded:
        from sim.decisions.answer import criteria_or_none
        from sim.model.assembly import acceptance_model
        from sim.results.runner import candidate_profiles

        sc0 = self.pts[0][1].scenario
        cand = sc0.candidate(name)
        prof = candidate_profiles(sc0, self.pts[0][1].profiles or self.profile, [cand])[name]
        head: dict[str, Any] = dict(candidate=name, baseline=sc0.baseline.name, k=cand.max_k)
        if sc0.workload.arrival == "concurrency":
            return AcceptanceNeeded(**head, assumed=math.nan, spread=None, provenance="", top=math.nan,
                                    skipped="closed-loop clients have no offered load to scale")
        model = acceptance_model(sc0.for_candidate(cand), prof, cand)
        if model is None or model.traces is not None:
            return AcceptanceNeeded(**head, assumed=math.nan, spread=None, provenance="", top=math.nan,
                                    skipped="its acceptance trace is replayed as recorded: not scaled")
        shares = [(s.name, s.share) for s in sc0.workload.segments]
        k = cand.max_k
        assumed, top = length_of(model, shares, k, 1.0), length_of(model, shares, k, GAMMA_TOP)
        floor = length_of(model, shares, k, GAMMA_BOTTOM)
        prov = ("assumed" if cand.assumed_acceptance is not None else
                "measured" if cand.acceptance_trace is not None else
                str(prof.acceptance[cand.proposer].provenance.method))
        spent = self.runs
        found = []
        for rate, res in self.pts:
            crit = criteria_or_none(res.scenario)
            base_s = [_seed(res.per_seed, sc0.baseline.name, s, crit) for s in res.seeds]
            r1 = _probe([_seed(res.per_seed, name, s, crit) for s in res.seeds], base_s)
            salt = self.salt or (prof.name, prof.origin)
            digest = _key("needs", res.scenario.to_toml(), salt, name, rate)

            def probe(length: float, res: Any = res, base_s: list[Seed] = base_s, digest: str = digest,
                      crit: Any = crit) -> Probe:
                g = gamma_for(model, shares, k, length)
                vals = [self.seed(res.scenario, prof, cand, s, g, crit, f"needs:{_key(digest, round(g, 9), s)}")
                        for s in res.seeds]
                return _probe(vals, base_s)

            found.append(search_point(rate, assumed, r1, top, self.budget, probe, floor))
        return AcceptanceNeeded(**head, assumed=assumed, spread=spread_of(model, shares, k), provenance=prov,
                                top=top, floor=floor, points=tuple(found), runs=self.runs - spent, budget=self.budget,
                                seeds=tuple(self.pts[0][1].seeds))

    def seed(self, sc: Any, prof: Any, cand: Any, seed: int, gamma: float, crit: Any, key: str) -> Seed:
        """``_seed`` of ``cand`` on ``seed`` with acceptance ^``gamma``: cached, else one run."""
        from sim.results.simulation import simulate_once

        v = self.cache.get(key)
        if v is None:
            run = simulate_once(sc.for_candidate(cand), prof, cand, seed, acceptance_power=gamma)
            v = self.cache[key] = _seed(run.summary, cand.name, seed, crit)
            self.runs += 1
            if self.progress is not None:
                self.progress(self.runs, self.total, f"acceptance needed: {cand.name}")
        return float(v[0]), bool(v[1])
