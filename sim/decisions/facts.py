"""The facts of a question, per candidate and seed: what the one decision is computed from.

Why a module of its own: the terminal, JSON, report and dashboard must judge the same numbers,
and a peak or restart window must be judged by the same rule as the whole run, so every fact
is read here, once, from the simulated requests of the window asked about.

Goodput here is SLO-conformant answers per second of the window's *arrivals* (the nominal
window, ``t1 - t0``), so two candidates that serve the same requests equally well have the same
goodput and, at a fixed fleet, the same cost per good answer, however long each one's backlog
took to drain. The summary's ``request_goodput`` keeps vLLM's definition (good answers over
the time to the last answer, drain included) and can differ by that much; its cost is billed
over the same arrival window as here, so the two costs agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from sim.decisions.carry import Carry, carry_of, carry_of_flags
from sim.decisions.sustain import SustainCriteria
from sim.results import metric_names as mn
from sim.results.metrics import good_array, latency_arrays, linear_percentiles

Question = Literal["fleet", "capacity"]


@dataclass(frozen=True)
class CandidateFacts:
    """One candidate, one window: per-seed values in the order of ``Facts.seeds``."""

    name: str
    baseline: bool
    goodput: tuple[float, ...] = ()
    """SLO-conformant answers per second of arrivals, per seed (fleet question)."""
    attainment: tuple[float, ...] = ()
    """Share of the window's requests meeting every SLO, per seed."""
    carries: tuple[bool, ...] = ()
    """Per seed: the window's requests met the SLO percentiles with few enough losses
    (``SustainCriteria``, the same rule a capacity probe passes)."""
    carry_reason: tuple[str, ...] = ()
    """Per seed: the binding check (``ttft_ms_p95=1210ms vs 1000``)."""
    slo_ratios: tuple[Mapping[str, float] | None, ...] = ()
    """Per seed: each sustain check as observed ÷ limit (``SustainCriteria.ratios``; None: too
    few requests to judge). Read across seeds by ``carry``; empty: judged by ``carries``."""
    latency_ms: tuple[float, ...] = ()
    """Per seed: E2EL p50 (ms), the latency a user feels, compared last."""
    shown: Mapping[str, float] = field(default_factory=dict)
    """Means over seeds of the numbers each surface shows (SLO percentiles, acceptance)."""
    hourly_usd: float | None = None
    """What this candidate's fleet costs per hour (None: no price in the scenario)."""
    capacity: tuple[float, ...] = ()
    """Capacity per replica (req/s) per seed (capacity question)."""
    capacity_resolution: float = 0.0
    """Half the search bracket's mean width (req/s per replica): seeds that agree within it
    still leave this much uncertainty, so the interval is never narrower."""
    replicas: int | None = None
    """Fewest replicas that carry the target when simulated, across the seeds
    (``sim.decisions.carry``: the rule a fixed fleet is judged by)."""
    replicas_mean: int | None = None
    """Fewest replicas that cover the target at the mean capacity (shown, not banked)."""
    replicas_low: int | None = None
    """``replicas − 1`` when that count is still undetermined at these seeds ("3 or 4 replicas");
    else ``replicas``."""

    @property
    def replicas_undetermined(self) -> bool:
        return self.replicas is not None and self.replicas_low is not None and self.replicas_low < self.replicas
    replicas_per_hour_usd: float | None = None
    """Price of one replica per hour (GPUs and draft hardware)."""
    gpus_per_replica: int = 1
    """GPUs one replica of this candidate's fleet occupies (its tensor parallel size)."""
    device: str | None = None
    """What one replica of this candidate's fleet is ("4× H100"); None: the Facts' device."""
    prefix_caching: bool = False
    """Whether it caches prompt prefixes (``sim.decisions.attribution`` splits its gain)."""
    twin: str | None = None
    """The candidate that is this one with prefix caching off, when the scenario has it."""
    acceptance: str = ""
    """What its acceptance rests on (sim/results/acceptance_basis.py); "" when it does not speculate."""
    draft_host: str = ""
    """"ASSUMED (…)" when its draft's host time H(b, k) is assumed (acceptance_basis.py); else ""."""
    runnable: bool = True
    """False: the named engine cannot run its policy (an idealised in-engine policy,
    ``sim.decisions.engine_config.deployability``); it never wins over a runnable equal."""
    deployable: str = ""
    """Its deployable twin where it is not runnable: a candidate, a two-route option, or a form
    in words."""
    engine: str = ""
    """The engine it was judged for ("vLLM (GPU)"), where not runnable."""

    @property
    def carry(self) -> Carry:
        """Whether it carries the load at the SLO, judged across seeds (``sim.decisions.carry``)."""
        if self.slo_ratios:
            return carry_of(self.slo_ratios)
        return carry_of_flags(self.carries)

    def cost_per_1k(self, i: int) -> float:
        """$ per 1,000 SLO-conformant answers on seed ``i`` (inf: no good answers)."""
        g = self.goodput[i]
        if self.hourly_usd is None:
            return math.nan
        return math.inf if g <= 0 else 1000.0 * self.hourly_usd / 3600.0 / g


@dataclass(frozen=True)
class Facts:
    """Everything the decision reads, for one window of one question."""

    question: Question
    candidates: tuple[CandidateFacts, ...]
    seeds: tuple[int, ...]
    baseline: str
    has_slo: bool
    rate: float | None
    """Offered fleet req/s (fleet question) or the target rate (capacity question)."""
    replicas: int
    """The scenario's fleet (fleet question)."""
    device: str = "replica"
    """What one replica is, for the answer's words ("H200", "4× H100")."""
    window: str = "whole run"
    """Which part of the run: "whole run", "peak 600–900 s", "restart 600–660 s", …"""
    max_seeds: int = 0
    """The replication budget the answer was allowed (0: not sequential)."""
    indifference: float = 0.02
    """Relative difference below which two candidates are equivalent (goodput, cost, capacity)."""
    latency_indifference: float = 0.05

    def candidate(self, name: str) -> CandidateFacts:
        return next(c for c in self.candidates if c.name == name)

    @property
    def mixed_fleets(self) -> bool:
        """True when candidates run on different hardware (replica shapes or devices)."""
        return len({(c.gpus_per_replica, c.device or self.device) for c in self.candidates}) > 1

    def device_of(self, name: str) -> str:
        """What one replica of ``name``'s fleet is."""
        return self.candidate(name).device or self.device

    @property
    def fleet_text(self) -> str:
        """The fleet in words: "2 × H200"; with candidates on their own hardware, "1 replica of
        each one's own fleet (4× H100 | 2× H200)"."""
        if not self.mixed_fleets:
            return fleet_words(self.replicas, self.device)
        kinds = " | ".join(dict.fromkeys(self.device_of(c.name) for c in self.candidates))
        return f"{self.replicas} replica(s) of each one's own fleet ({kinds})"

    def gpus_text(self, name: str, replicas: int, low: int | None = None) -> str:
        """``replicas`` of ``name``'s fleet in words: "3 replica(s)"; on mixed hardware
        "3 × (2× H200) = 6 GPUs", so fleets of different shapes read in GPUs; with ``low`` below
        it (the count under it still undetermined): "3 or 4 replica(s)"."""
        g = self.candidate(name).gpus_per_replica
        if low is not None and low < replicas:
            if not self.mixed_fleets:
                return f"{low} or {replicas} replica(s)"
            return (f"{low} or {fleet_words(replicas, self.device_of(name), always_times=True)} = "
                    f"{low * g} or {replicas * g} GPU(s)")
        if not self.mixed_fleets:
            return f"{replicas} replica(s)"
        return f"{fleet_words(replicas, self.device_of(name), always_times=True)} = {replicas * g} GPU(s)"


def window_rows(requests: pl.DataFrame, limits_ms: Mapping[str, float], t0: float,
                t1: float) -> dict[tuple[str, int], dict[str, Any]]:
    """One row per (candidate, seed) over the requests arriving in ``[t0, t1)``: the counts and
    percentiles ``SustainCriteria.judge`` reads, plus good answers and E2EL p50."""
    sel = requests.filter((pl.col("arrival_s") >= t0) & (pl.col("arrival_s") < t1))
    outcome = sel["outcome"].to_numpy()
    done = outcome == mn.COMPLETED
    ttft, tpot, e2el = latency_arrays(sel)
    a = {"ttft_s": ttft, "tpot_s": tpot, "e2el_s": e2el,
         "max_pause_s": sel["max_pause_s"].cast(pl.Float64).fill_null(np.nan).to_numpy()}
    good = good_array(done, a, limits_ms) if limits_ms else np.zeros(len(done), bool)
    counts = {c: sel[c].fill_null(0).to_numpy() for c in ("num_drafts", "accepted_tokens")}
    too_long = (sel[mn.TOO_LONG].fill_null(False).to_numpy() if mn.TOO_LONG in sel.columns
                else np.zeros(sel.height, bool))
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for key, ix in _groups(sel):
        d = done[ix]
        row: dict[str, Any] = {
            mn.COMPLETED: int(d.sum()), mn.REJECTED: int((outcome[ix] == mn.REJECTED).sum()),
            mn.TIMED_OUT: int((outcome[ix] == mn.TIMED_OUT).sum()),
            mn.REJECTED_TOO_LONG: int(too_long[ix].sum()),
            "unfinished": int((outcome[ix] == mn.UNFINISHED).sum()),
            "good": int(good[ix].sum()), "requests": len(ix),
        }
        for metric, col in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2el_s"), ("pause", "max_pause_s")):
            v = a[col][ix][d]
            v = v[~np.isnan(v)] * 1000.0
            qs = linear_percentiles(v.copy(), (0.5, 0.95, 0.99)) if v.size else [None, None, None]
            row.update({f"{metric}_ms_{s}": x for s, x in zip(("median", "p95", "p99"), qs, strict=True)})
        drafts = int(counts["num_drafts"][ix].sum())
        row[mn.MEAN_ACCEPTANCE_LENGTH] = 1.0 + int(counts["accepted_tokens"][ix].sum()) / drafts if drafts else None
        out[(str(key[0]), int(key[1]))] = row
    return out


def _request_frames(result: Any) -> Any:
    """A result's per-request records part by part (``ScenarioResult.request_parts``), or its
    one frame (results that only have ``requests``)."""
    parts = getattr(result, "request_parts", None)
    return parts.frames() if parts is not None else [result.requests]


def _groups(sel: pl.DataFrame) -> list[tuple[tuple[str, int], np.ndarray]]:
    """Row indices of each (candidate, seed) in order of first appearance, without a Python
    object per row (a 10^6 req/s run has millions of rows)."""
    keys = sel.select(mn.CANDIDATE, mn.SEED)
    uniq = keys.unique(maintain_order=True)
    if uniq.height <= 1:
        return [(k, np.arange(sel.height)) for k in uniq.iter_rows()]
    code = keys.join(uniq.with_row_index("_g"), on=[mn.CANDIDATE, mn.SEED], how="left",
                     maintain_order="left")["_g"].to_numpy()
    return [(k, np.flatnonzero(code == g)) for g, k in enumerate(uniq.iter_rows())]


def fleet_facts(result: Any, criteria: SustainCriteria | None, *, t0: float | None = None,
                t1: float | None = None, window: str = "whole run", rate: float | None = None,
                max_seeds: int = 0) -> Facts:
    """Facts of a fixed-fleet question from a ``ScenarioResult`` (every candidate × seed), over
    the arrivals in ``[t0, t1)`` (default: after warm-up to the end of arrivals)."""
    sc = result.scenario
    off = _spec_off(result) if t0 is None and t1 is None else {}
    t0 = sc.run.warmup_s if t0 is None else t0
    t1 = sc.run.duration_s if t1 is None else t1
    limits = dict(sc.slo.limits)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for part in _request_frames(result):  # one candidate × seed at a time: never all at once
        rows.update(window_rows(part, limits, t0, t1))
    span = max(t1 - t0, 1e-9)
    out = []
    for name in result.candidates:
        cand = sc.candidate(name)
        fl = sc.fleet_for(cand)
        hourly = None
        if fl.price_per_gpu_hour is not None:
            per = fl.price_per_gpu_hour * fl.gpus_per_replica + (fl.draft_price_per_hour if cand.speculates else 0.0)
            hourly = per * fl.replicas
        per_seed = [rows.get((name, s)) or _empty_row() for s in result.seeds]
        judged = [criteria.judge(r, rate or 0.0) if criteria is not None else None for r in per_seed]
        shown: dict[str, float] = {}
        for col in ("ttft_ms_p95", "tpot_ms_p95", "e2el_ms_p95", "pause_ms_p95", "ttft_ms_p99",
                    "tpot_ms_p99", "e2el_ms_median", mn.MEAN_ACCEPTANCE_LENGTH):
            vals = [float(r[col]) for r in per_seed if r.get(col) is not None]
            if vals:
                shown[col] = float(np.mean(vals))
        shown["requests"] = float(np.mean([r["requests"] for r in per_seed]))
        if name in off:
            shown[mn.SPEC_OFF_TIME] = off[name]
        out.append(CandidateFacts(
            name=name, baseline=cand.is_baseline,
            goodput=tuple(r["good"] / span for r in per_seed),
            attainment=tuple(r["good"] / r["requests"] if r["requests"] else 0.0 for r in per_seed),
            carries=tuple(bool(j is not None and j.sustained) for j in judged),
            carry_reason=tuple(j.reason if j is not None else "" for j in judged),
            slo_ratios=tuple(_ratios(criteria, r) for r in per_seed) if criteria is not None else (),
            latency_ms=tuple(float(r["e2el_ms_median"]) if r.get("e2el_ms_median") is not None else math.inf
                             for r in per_seed),
            shown=shown, hourly_usd=hourly, gpus_per_replica=fl.gpus_per_replica,
            prefix_caching=cand.prefix_caching_on(fl.engine.prefix_caching),
            twin=_twin(sc, cand) if cand.prefix_caching_on(fl.engine.prefix_caching) else None,
            acceptance=_basis(cand, (getattr(result, "profiles", None) or {}).get(name)),
            draft_host=_host_basis(cand, (getattr(result, "profiles", None) or {}).get(name)),
        ))
    return Facts("fleet", tuple(out), tuple(result.seeds), sc.baseline.name, bool(limits), rate,
                 int(sc.fleet.replicas), device=device_name(result), window=window, max_seeds=max_seeds)


def _spec_off(result: Any) -> dict[str, float]:
    """Mean over seeds of each speculating candidate's share of decoding time without
    speculation (the whole run's summary rows; ``sim.results.spec_off``)."""
    ps = getattr(result, "per_seed", None)
    if ps is None or mn.SPEC_OFF_TIME not in ps.columns:
        return {}
    rows = ps.filter((pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS) & pl.col(mn.SPEC_OFF_TIME).is_not_null())
    means = rows.group_by(mn.CANDIDATE).agg(pl.col(mn.SPEC_OFF_TIME).mean())
    return {str(n): float(v) for n, v in means.iter_rows()}


def _ratios(criteria: SustainCriteria, row: Mapping[str, Any]) -> Mapping[str, float] | None:
    """One seed's sustain checks as observed ÷ limit; None when too few requests to judge."""
    return None if criteria.measured(row) < criteria.min_measured else criteria.ratios(row)


def _basis(cand: Any, profile: Any) -> str:
    from sim.results.acceptance_basis import acceptance_basis

    return (acceptance_basis(cand, profile) or "") if profile is not None else ""


def _host_basis(cand: Any, profile: Any) -> str:
    from sim.results.acceptance_basis import draft_host_basis

    return (draft_host_basis(cand, profile) or "") if profile is not None else ""


def _twin(sc: Any, cand: Any) -> str | None:
    """The candidate of ``sc`` that is ``cand`` with prefix caching off (None: not run)."""
    import dataclasses

    default = sc.fleet.engine.prefix_caching
    bare = dataclasses.replace(cand, name="_", prefix_caching=None)
    for other in sc.candidates:
        if other.name != cand.name and not other.prefix_caching_on(default) and (
                dataclasses.replace(other, name="_", prefix_caching=None) == bare):
            return other.name
    return None


def _empty_row() -> dict[str, Any]:
    return {mn.COMPLETED: 0, mn.REJECTED: 0, mn.TIMED_OUT: 0, "unfinished": 0, "good": 0, "requests": 0}


def device_name(result: Any) -> str:
    """"H200", "4× H100", or "replica" when the profile does not say."""
    return replica_words(getattr(result, "profile_device", None), result.scenario.fleet.gpus_per_replica)


def fleet_words(replicas: int, device: str, always_times: bool = False) -> str:
    """"1 H200", "2 × H200", "1 × (8× H200)", "2 replicas": a replica of several GPUs is
    bracketed, so its count never runs into the GPU count ("1 8× H200")."""
    if device == "replica":
        return "1 replica" if replicas == 1 else f"{replicas} replicas"
    if "×" in device:
        return f"{replicas} × ({device})"
    return f"{replicas} {device}" if replicas == 1 and not always_times else f"{replicas} × {device}"


def replica_words(device: str | None, gpus: int) -> str:
    short = (device or "").replace("NVIDIA ", "").split(" ")[0]
    if not any(ch.isdigit() for ch in short):  # a CPU's maker ("AMD EPYC …"), or nothing: no model name
        return "replica"
    return short if gpus == 1 else f"{gpus}× {short}"


def capacity_facts(report: Any, *, has_slo: bool = True, max_seeds: int = 0,
                   device: str = "replica", devices: Mapping[str, str] | None = None) -> Facts:
    """Facts of a capacity question from a ``CapacityReport``: capacity per replica per seed
    (the same seeds for every candidate: paired), replicas for the target as simulated."""
    out = []
    seeds = report.candidates[0].seeds if report.candidates else ()
    for c in report.candidates:
        caps = tuple(float(x) for x in c.capacities)
        widths = [(s.upper - s.lower) / 2.0 / c.fleet_replicas for s in c.per_seed
                  if s.status == "bracketed" and math.isfinite(s.upper)]
        res = float(np.mean(widths)) if widths else 0.0
        mean = float(np.mean(caps)) if caps else 0.0
        n_mean = math.ceil(c.target_rate / mean - 1e-9) if mean > 0 else None
        out.append(CandidateFacts(
            name=c.candidate, baseline=c.candidate == report.baseline, capacity=caps,
            capacity_resolution=res, replicas=c.replicas, replicas_mean=n_mean,
            replicas_low=getattr(c, "replicas_low", None) or c.replicas,
            replicas_per_hour_usd=report.replica_hourly.get(c.candidate) if report.replica_hourly else None,
            shown=_operating(c), latency_ms=_operating_latency(c),
            gpus_per_replica=(report.candidate_gpus or {}).get(c.candidate, report.gpus_per_replica),
            device=(devices or {}).get(c.candidate),
            acceptance=(getattr(report, "acceptance", None) or {}).get(c.candidate, ""),
            draft_host=(getattr(report, "draft_host", None) or {}).get(c.candidate, ""),
        ))
    return Facts("capacity", tuple(out), tuple(seeds), report.baseline, has_slo,
                 report.candidates[0].target_rate if report.candidates else None,
                 report.candidates[0].fleet_replicas if report.candidates else 1, device=device,
                 max_seeds=max_seeds, indifference=max(0.02, report.rel_tol / 2.0))


def _operating_latency(c: Any) -> tuple[float, ...]:
    """E2EL p50 per seed at the target rate on the candidate's replicas (empty: none found)."""
    rows = list(c.operating_seeds)
    if len(rows) != len(c.seeds):
        return ()
    return tuple(float(r["e2el_ms_median"]) if r.get("e2el_ms_median") is not None else math.inf
                 for r in rows)


def _operating(c: Any) -> dict[str, float]:
    row = c.operating_row or {}
    return {k: float(row[k]) for k in ("ttft_ms_p95", "tpot_ms_p95", "e2el_ms_median",
                                      mn.MEAN_ACCEPTANCE_LENGTH, mn.SLO_ATTAINMENT)
            if row.get(k) is not None and math.isfinite(float(row[k]))}


def seeds_of(facts: Facts) -> Sequence[int]:
    return facts.seeds
