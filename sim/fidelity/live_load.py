"""Validation workloads: the scenario at a load, each candidate's capacity, the prediction for
the exact requests a real run served, and the per-step residuals of the step-time model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.fidelity.comparison import mean_values, values_from_run
from sim.model.machine_speed import SpeedTimeline
from sim.results import metric_names as mn
from sim.workload.workload import RequestSpec

# ---------------------------------------------------------------------------------------------
# workloads at a load, capacity, prediction


def scenario_at(scenario: Scenario, rate: float, n_requests: int, seed: int) -> Scenario:
    """The scenario at ``rate`` req/s with arrivals over ``n_requests / rate`` seconds, no warm-up.

    No warm-up: both sides serve the identical request list from an empty system, so the
    comparison needs no steady state; every request is measured.
    """
    if scenario.workload.arrival not in ("poisson", "gamma"):
        raise SpecplanError(
            f"{scenario.origin or 'scenario'}: workload.arrival: validate sets the rate, so it "
            f"needs 'poisson' or 'gamma', got {scenario.workload.arrival!r}"
        )
    if n_requests < 1:
        raise SpecplanError(f"--requests: must be >= 1, got {n_requests}")
    return scenario.with_overrides({
        "workload.rate": float(rate),
        "run.duration_s": float(n_requests) / float(rate),
        "run.warmup_s": 0.0,
        "run.seeds": [int(seed)],
        "run.drain": True,
        "fleet.replicas": 1,
        "fleet.restart": None,
    })


def workload_requests(scenario: Scenario, seed: int) -> list[RequestSpec]:
    """The requests ``simulate_once(scenario, ..., seed)`` would generate itself."""
    from sim.workload.workload import generate_requests

    work_ss, _ = np.random.SeedSequence(seed).spawn(2)
    return generate_requests(scenario, rng=work_ss)


@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """A candidate's capacity that loads are fractions of, and how it was obtained."""

    rate: float
    method: str
    """One line for the report: what this number is (simulated, from which profile)."""


LIVE_KV_LAYOUT = "padded"
"""validate's real loop (profiler/passes/serving.py) batches decode rows left-padded, without paged
attention; the simulator must be told so, or it compares a paged prediction with a padded run."""


def live_scenario(scenario: Scenario) -> tuple[Scenario, str | None]:
    """The scenario as validate's real loop runs it (a padded engine), and a note if that changed it."""
    have = scenario.fleet.engine.kv_layout
    if have == LIVE_KV_LAYOUT:
        return scenario, None
    return scenario.with_overrides({"fleet.engine.kv_layout": LIVE_KV_LAYOUT}), (
        f"fleet.engine.kv_layout: the scenario says {have!r}, but the real loop pads every decode row to the "
        f"longest one, so both sides ran {LIVE_KV_LAYOUT!r}"
    )


LOAD_BASES = ("own", "baseline")
"""What validate's loads are fractions of: each candidate's ``own`` capacity (85 % load then
means 85 % of what that configuration can carry, the load a team would run it at), or the
``baseline``'s for every candidate (the same traffic for all: a speculative candidate whose
capacity is lower is then run closer to, or past, its own saturation)."""


def capacity_of(scenario: Scenario, profile: Profile, seed: int, candidate: str | None = None) -> CapacityEstimate:
    """Highest rate at which the simulated candidate (default: the baseline) holds the
    scenario's SLOs (sim/decisions/simulated_load.py).

    This is the simulator's own capacity search on the measured profile (SLO percentile and
    limits from the scenario). Without SLOs it falls back to the saturation rate estimated
    from the profile: the baseline's batch-1 service time per request (prefill + decode steps
    at its mean context), i.e. 1 / mean service time — conservative, since batching raises capacity.
    """
    from sim.decisions.capacity_search import find_capacity
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.decisions.sustain import criteria_from_scenario

    base = candidate or scenario.baseline.name
    if scenario.slo.limits:
        criteria = criteria_from_scenario(scenario)
        load = SimulatedLoad(scenario, profile, criteria)
        search = find_capacity(lambda r: load.probe(base, r, seed, 1), float(scenario.workload.rate or 1.0),
                               rel_tol=0.05, max_evals=12)
        if search.rate > 0:
            return CapacityEstimate(
                search.rate,
                f"simulated capacity of {base} (highest rate holding the scenario's SLOs at "
                f"p{criteria.percentile:g}; sim/decisions/capacity.py on profile {profile.name}, seed {seed}, "
                f"{search.status}, ±{search.relative_width:.0%})",
            )
    return _service_time_capacity(scenario, profile)


def capacities(scenario: Scenario, profile: Profile, seed: int, candidates: Sequence[str], basis: str,
               given: float | None = None, say: Callable[[str], None] = lambda _m: None,
               ) -> dict[str, CapacityEstimate]:
    """What each candidate's loads are fractions of: ``given`` (req/s) for all, the baseline's
    simulated capacity for all (``basis="baseline"``) or each one's own (see ``LOAD_BASES``)."""
    if given is not None:
        cap = CapacityEstimate(given, "given with --capacity")
        return {c: cap for c in candidates}
    if basis == "baseline":
        say("searching the baseline's capacity in the simulator …")
        base = capacity_of(scenario, profile, seed)
        return {c: base for c in candidates}
    caps = {}
    for c in candidates:
        say(f"searching {c}'s capacity in the simulator …")
        caps[c] = capacity_of(scenario, profile, seed, c)
    return caps


def _service_time_capacity(scenario: Scenario, profile: Profile) -> CapacityEstimate:
    from sim.model.step_time import ProfileStepTimer, StepShape

    reqs = workload_requests(scenario.with_overrides({"run.duration_s": 200.0 / float(scenario.workload.rate or 1.0)}), 0)
    timer = ProfileStepTimer(profile)
    total = 0.0
    for r in reqs:
        t = timer(StepShape(0, 0.0, 0, None, r.prompt_tokens, 0.0))
        t += (r.output_tokens - 1) * timer(StepShape(1, r.prompt_tokens + r.output_tokens / 2, 0, None))
        total += t
    mean = total / max(len(reqs), 1)
    return CapacityEstimate(
        1.0 / mean,
        f"estimated: 1 / mean batch-1 service time ({mean * 1000:.0f} ms) from profile {profile.name} "
        "(no SLOs in the scenario for a capacity search; batching makes the real capacity higher)",
    )


@dataclass(frozen=True)
class Prediction:
    """The simulator's numbers for one candidate on one request list."""

    values: dict[str, float | None]
    """Mean over acceptance replications of the compared numbers."""
    runs: tuple[Any, ...]
    """``RunResult`` of each replication (frames for plots and Parquet)."""
    notes: tuple[str, ...]
    sources: tuple[str, ...]


def predict(
    scenario: Scenario,
    profile: Profile,
    candidate: str,
    requests: Sequence[RequestSpec],
    seed: int,
    replications: int = 1,
    scales: tuple[float, float] = (1.0, 1.0),
    speed: SpeedTimeline | None = None,
) -> Prediction:
    """Simulate ``requests`` (the exact list the real side served) with the profile.

    A speculative candidate is simulated ``replications`` times with different acceptance
    streams (seeds ``seed, seed+1, …``; arrivals and lengths are the given ones every time)
    and the numbers are averaged: the real run is one draw, the prediction should not be.
    ``scales`` multiply the decode and the prefill part of every step time (``--drift-correct``:
    the machine's speed now relative to the profile, re-timed just before the real run);
    ``speed`` multiplies them further by the machine's speed at each step's start time.
    """
    from sim.model.step_time import ProfileStepTimer
    from sim.results.simulation import simulate_once

    cand = scenario.candidate(candidate)
    reps = 1 if cand.is_baseline else max(1, int(replications))
    layout = scenario.fleet.engine.kv_layout

    def timer() -> ProfileStepTimer | None:
        if scales == (1.0, 1.0) and speed is None:
            return None
        return ProfileStepTimer(profile, kv_layout=layout, scale=scales[0], prefill_scale=scales[1], speed=speed)

    runs = [simulate_once(scenario, profile, cand, seed + i, timer(), requests=requests) for i in range(reps)]
    vals = mean_values([values_from_run(r.summary, r.requests) for r in runs])
    notes = tuple(dict.fromkeys(n for r in runs for n in r.notes))
    sources = tuple(dict.fromkeys(s for r in runs for s in r.sources))
    return Prediction(vals, tuple(runs), notes, sources)


def measured_values(
    requests: pl.DataFrame, steps: pl.DataFrame, itl: pl.DataFrame, scenario: Scenario
) -> dict[str, float | None]:
    """The compared numbers of a real run's frames, by the simulator's own summary function."""
    from sim.results.metrics import summarize

    summary = summarize(
        requests, steps, itl, segments=scenario.workload.segment_names,
        slo_ms=scenario.slo.limits, warmup_s=scenario.run.warmup_s,
        duration_s=scenario.run.duration_s, replicas=1, cost_total_usd=None,
        keys={mn.CANDIDATE: "measured", mn.SEED: 0},
    )
    return values_from_run(summary, requests)


def profile_step_times(shapes: Sequence[Any], profile: Profile, kv_layout: str = "paged",
                       scales: tuple[float, float] = (1.0, 1.0), speed: SpeedTimeline | None = None,
                       ) -> np.ndarray:
    """The profile's time (seconds) for each step shape: what the simulator charges for it."""
    from sim.model.step_time import ProfileStepTimer

    timer = ProfileStepTimer(profile, kv_layout=kv_layout, scale=scales[0], prefill_scale=scales[1], speed=speed)
    return np.array([timer(s) for s in shapes], dtype=float)


def step_time_values(real_durations_s: Sequence[float], predicted_s: Sequence[float], shapes: Sequence[Any],
                     ) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """(predicted, measured) step-time percentiles over the *real* run's steps.

    ``predicted_s`` is the profile's time for each step shape the real loop executed
    (``profile_step_times``); comparing with the measured wall time isolates the step-time model
    from queueing (which amplifies its errors). Split by kind too — decode-only steps (T, V(k),
    D(k), H(k)) and steps with prefill (plus P(n)) — so an error points at the grid it comes from.
    """
    if not shapes:
        return {}, {}
    pred = np.asarray(predicted_s, dtype=float) * 1000.0
    real = np.asarray(real_durations_s, dtype=float) * 1000.0
    has_prefill = np.array([s.prefill_tokens > 0 for s in shapes])
    p_out: dict[str, float | None] = {}
    m_out: dict[str, float | None] = {}
    wanted = (  # (column prefix, steps, percentiles): the COMPARED step-time rows
        ("step_ms", slice(None), (("median", 50), ("p95", 95))),
        ("decode_step_ms", ~has_prefill, (("median", 50),)),
        ("prefill_step_ms", has_prefill, (("median", 50),)),
    )
    for col, sel, quantiles in wanted:
        ps, ms = pred[sel], real[sel]
        if ps.size == 0:
            continue
        for suffix, q in quantiles:
            p_out[f"{col}_{suffix}"] = float(np.percentile(ps, q))
            m_out[f"{col}_{suffix}"] = float(np.percentile(ms, q))
    return p_out, m_out


RESIDUAL_SCHEMA: dict[str, pl.DataType] = {
    "t_start_s": pl.Float64(),
    "kind": pl.String(),
    "decode_seqs": pl.Int64(),
    "tokens_per_seq": pl.Int64(),
    "token_rows": pl.Int64(),
    "prefill_tokens": pl.Int64(),
    "measured_s": pl.Float64(),
    "predicted_s": pl.Float64(),
    "ratio": pl.Float64(),
}

TOKEN_ROW_BUCKETS: tuple[int, ...] = (4, 8, 16, 32, 64)
"""Upper bounds of the decode-pass size buckets of ``residual_lines`` (token rows = sequences ×
tokens per sequence: the M of the pass's weight GEMMs, where CPU kernels change regime)."""


def step_residuals(real_s: Sequence[float], predicted_s: Sequence[float], shapes: Sequence[Any],
                   ) -> pl.DataFrame:
    """Each real step's measured time beside the time the simulator charges for its shape.

    Why: a TTFT or E2EL error is the step-time model's error amplified by queueing; this says
    which pass shapes the model misprices and by how much (on this VM, 2026-12-01: verification
    passes of more than 16 token rows ran 1.3–1.5× their drift-corrected prediction while smaller
    ones ran 1.0× — page faults in the real loop, since fixed). ``kind`` is ``decode``
    (decode-only) or ``prefill`` (the step computes prompt tokens, with or without decoding).
    """
    if not (len(real_s) == len(predicted_s) == len(shapes)):
        raise ValueError(f"step_residuals: {len(real_s)} real, {len(predicted_s)} predicted, {len(shapes)} shapes")
    rows = {
        "t_start_s": [float(s.start_s) for s in shapes],
        "kind": ["prefill" if s.prefill_tokens > 0 else "decode" for s in shapes],
        "decode_seqs": [int(s.decode_seqs) for s in shapes],
        "tokens_per_seq": [int(s.k) + 1 if s.decode_seqs else 0 for s in shapes],
        "token_rows": [int(s.decode_seqs) * (int(s.k) + 1) for s in shapes],
        "prefill_tokens": [int(s.prefill_tokens) for s in shapes],
        "measured_s": [float(x) for x in real_s],
        "predicted_s": [float(x) for x in predicted_s],
    }
    frame = pl.DataFrame(rows, schema={k: RESIDUAL_SCHEMA[k] for k in rows})
    ratio = pl.when(pl.col("predicted_s") > 0).then(pl.col("measured_s") / pl.col("predicted_s"))
    return frame.with_columns(ratio.otherwise(None).alias("ratio"))


def residual_lines(frame: pl.DataFrame, what: str) -> list[str]:
    """One report line: median measured/predicted step time by decode-pass size, and for steps
    with prefill; ``what`` says which prediction (raw profile or drift-corrected)."""
    if frame.is_empty():
        return []
    parts: list[str] = []
    dec = frame.filter(pl.col("kind") == "decode")
    bounds = (0, *TOKEN_ROW_BUCKETS)
    for lo, hi in zip(bounds, (*TOKEN_ROW_BUCKETS, None), strict=True):
        sel = dec.filter(pl.col("token_rows").is_between(lo + 1, hi or 2**62))
        if sel.height:
            parts.append(f"{lo + 1}{f'–{hi}' if hi else '+'} rows {sel['ratio'].median():.2f} ({sel.height})")
    pre = frame.filter(pl.col("kind") == "prefill")
    tail = f"; steps with prefill {pre['ratio'].median():.2f} ({pre.height})" if pre.height else ""
    return [f"step time measured/predicted ({what}), median (steps) — decode passes by token rows: "
            + (", ".join(parts) or "none") + tail]
