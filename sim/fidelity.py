"""How far the simulator's predictions are from measured serving: the error table and its plots.

Both sides are reduced to the same numbers by the same functions (``sim.metrics``): a
prediction comes from ``simulate_once`` on exactly the requests the real run served (same
arrival times, lengths, segments), a measurement from the real run's records (the real serving
loop of ``profiler/serving.py``) or from a `vllm bench serve` result file. The error of a
metric is ``(predicted - measured) / measured``.

No torch here: the live serving path lives in ``profiler/serving.py`` and is imported by
``sim/cmd_validate.py`` only when a live run is asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sim import metric_names as mn
from sim.errors import SpecplanError
from sim.machine_speed import SpeedTimeline
from sim.metrics import good_mask, latency_stats, pause_stats, with_latencies
from sim.profile import Profile
from sim.scenario import Scenario
from sim.workload import RequestSpec

# (label, summary column) in table order: what the brief and docs/fidelity.md call "every
# prediction". Percentiles are linear (numpy), as sim.metrics and vLLM's benchmark compute them.
COMPARED: tuple[tuple[str, str], ...] = (
    ("TTFT p50 (ms)", "ttft_ms_median"),
    ("TTFT p95 (ms)", "ttft_ms_p95"),
    ("TTFT p99 (ms)", "ttft_ms_p99"),
    ("TPOT p50 (ms)", "tpot_ms_median"),
    ("TPOT p95 (ms)", "tpot_ms_p95"),
    ("TPOT p99 (ms)", "tpot_ms_p99"),
    ("E2EL p50 (ms)", "e2el_ms_median"),
    ("E2EL p95 (ms)", "e2el_ms_p95"),
    ("E2EL p99 (ms)", "e2el_ms_p99"),
    ("ITL p50 (ms)", "itl_ms_median"),
    ("ITL p95 (ms)", "itl_ms_p95"),
    ("pause p50 (ms)", "pause_ms_median"),
    ("pause p95 (ms)", "pause_ms_p95"),
    ("pause p99 (ms)", "pause_ms_p99"),
    ("throughput (req/s)", mn.REQUEST_THROUGHPUT),
    ("output throughput (tok/s)", mn.OUTPUT_THROUGHPUT),
    ("goodput (req/s)", mn.REQUEST_GOODPUT),
    ("mean acceptance length", mn.MEAN_ACCEPTANCE_LENGTH),
    ("step time p50 (ms)", "step_ms_median"),
    ("step time p95 (ms)", "step_ms_p95"),
    ("decode-only step p50 (ms)", "decode_step_ms_median"),
    ("step with prefill p50 (ms)", "prefill_step_ms_median"),
)

# The bar docs/fidelity.md reports against: these columns within 10 % below 85 % load.
BAR_COLUMNS: tuple[str, ...] = ("ttft_ms_median", "ttft_ms_p95", "e2el_ms_median", "e2el_ms_p95")
BAR_RELATIVE_ERROR = 0.10
BAR_MAX_LOAD = 0.85

TABLE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "load": pl.Float64(),
    "rate": pl.Float64(),
    "candidate": pl.String(),
    "metric": pl.String(),
    "column": pl.String(),
    "predicted": pl.Float64(),
    "measured": pl.Float64(),
    "measured_min": pl.Float64(),
    "measured_max": pl.Float64(),
    "real_runs": pl.Int64(),
    "abs_error": pl.Float64(),
    "rel_error": pl.Float64(),
}


def pause_median_ms(requests: pl.DataFrame) -> float | None:
    """Median over completed, in-window requests of their longest stream pause (ms).

    ``sim.metrics`` carries p95/p99/max of pauses; the median is added here the same way.
    """
    done = requests.filter(pl.col("in_window") & (pl.col("outcome") == mn.COMPLETED))
    vals = done["max_pause_s"].drop_nulls().to_numpy()
    return float(np.percentile(vals * 1000.0, 50)) if vals.size else None


def values_from_run(summary: pl.DataFrame, requests: pl.DataFrame) -> dict[str, float | None]:
    """The compared numbers of one run: its ``all`` summary row plus the pause median."""
    row = summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    if row.height != 1:
        raise ValueError(f"summary has {row.height} 'all' rows; expected exactly one")
    r = row.row(0, named=True)
    out: dict[str, float | None] = {}
    for _, col in COMPARED:
        if col == "pause_ms_median":
            out[col] = pause_median_ms(requests)
        else:
            v = r.get(col)
            out[col] = None if v is None else float(v)
    return out


def _finite(runs: Sequence[Mapping[str, float | None]], col: str) -> list[float]:
    return [float(v) for r in runs if (v := r.get(col)) is not None and math.isfinite(float(v))]


def mean_values(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Mean of each compared number over replications (None where every replication had none)."""
    return {col: float(np.mean(v)) if (v := _finite(runs, col)) else None for _, col in COMPARED}


def median_values(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Median of each compared number over repeated real runs: robust to one disturbed run."""
    return {col: float(np.median(v)) if (v := _finite(runs, col)) else None for _, col in COMPARED}


def spread_values(runs: Sequence[Mapping[str, float | None]]) -> dict[str, tuple[float, float]]:
    """(min, max) of each compared number over repeated real runs."""
    return {col: (min(v), max(v)) for _, col in COMPARED if (v := _finite(runs, col))}


def error_rows(
    source: str,
    load: float | None,
    rate: float,
    candidate: str,
    predicted: Mapping[str, float | None],
    measured: Mapping[str, float | None],
    spread: Mapping[str, tuple[float, float]] | None = None,
    runs: int = 1,
) -> list[dict[str, Any]]:
    """One row per compared metric; relative error is null when the measurement is 0 or absent.

    ``measured`` is one run's number or the median of ``runs`` repeated runs, ``spread`` their
    (min, max).
    """
    rows = []
    for label, col in COMPARED:
        p, m = predicted.get(col), measured.get(col)
        if p is None and m is None:
            continue
        abs_err = None if p is None or m is None else p - m
        rel = None if abs_err is None or not m else abs_err / m
        lo, hi = (spread or {}).get(col, (m, m))
        rows.append({
            "source": source, "load": load, "rate": rate, "candidate": candidate,
            "metric": label, "column": col, "predicted": p, "measured": m,
            "measured_min": lo, "measured_max": hi, "real_runs": runs,
            "abs_error": abs_err, "rel_error": rel,
        })
    return rows


def error_table(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """The tidy error table (columns ``TABLE_SCHEMA``), one row per load × candidate × metric."""
    return pl.DataFrame(list(rows), schema=TABLE_SCHEMA, orient="row")


def bar_check(table: pl.DataFrame) -> pl.DataFrame:
    """Rows the bar covers (p50/p95 TTFT and E2EL below 85 % load) with ``within_bar``."""
    t = table.filter(pl.col("column").is_in(list(BAR_COLUMNS)))
    if "load" in t.columns:
        t = t.filter(pl.col("load").is_null() | (pl.col("load") < BAR_MAX_LOAD))
    return t.with_columns(
        (pl.col("rel_error").abs() <= BAR_RELATIVE_ERROR).fill_null(False).alias("within_bar")
    )


def format_table(table: pl.DataFrame) -> str:
    """Plain-text table for the terminal: predicted, measured, relative error per metric."""
    lines = []
    for (source, load, rate, cand), grp in table.group_by(
        ["source", "load", "rate", "candidate"], maintain_order=True
    ):
        where = f"load {load:.0%} of capacity, " if load is not None else ""
        lines.append(f"\n{cand} — {where}{rate:.3g} req/s ({source})")
        runs = int(grp["real_runs"].max() or 1)
        span = f"  range of {runs} real runs" if runs > 1 else ""
        lines.append(f"  {'metric':<27}{'predicted':>12}{'measured':>12}{'rel. error':>12}{span}")
        for r in grp.iter_rows(named=True):
            p = "—" if r["predicted"] is None else f"{r['predicted']:.4g}"
            m = "—" if r["measured"] is None else f"{r['measured']:.4g}"
            e = "—" if r["rel_error"] is None else f"{r['rel_error']:+.1%}"
            rng = ""
            if runs > 1 and r["measured_min"] is not None:
                rng = f"  {r['measured_min']:.4g}–{r['measured_max']:.4g}"
            lines.append(f"  {r['metric']:<27}{p:>12}{m:>12}{e:>12}{rng}")
    return "\n".join(lines)


def format_bar(table: pl.DataFrame) -> str:
    """One line per candidate: how many bar metrics are within 10 %, and the worst one."""
    bar = bar_check(table)
    if bar.height == 0:
        return "bar: no rows below 85% load to check"
    out = []
    for (cand,), grp in bar.group_by(["candidate"], maintain_order=True):
        ok = int(grp["within_bar"].sum())
        worst = grp.sort(pl.col("rel_error").abs(), descending=True, nulls_last=True).row(0, named=True)
        we = "n/a" if worst["rel_error"] is None else f"{worst['rel_error']:+.1%}"
        wl = "" if worst["load"] is None else f" at load {worst['load']:.0%}"
        out.append(
            f"bar (|error| <= {BAR_RELATIVE_ERROR:.0%} for p50/p95 TTFT and E2EL below "
            f"{BAR_MAX_LOAD:.0%} load) {cand}: {ok}/{grp.height} within; worst {worst['metric']} "
            f"{we}{wl}"
        )
    return "\n".join(out)


def compact_notes(notes: Sequence[str]) -> list[str]:
    """Notes once each; repeated extrapolation notes (one per simulated run) folded into one
    line per quantity with the largest share of steps seen."""
    out: dict[str, str] = {}
    worst: dict[str, float] = {}
    for n in notes:
        if n.startswith("extrapolated: ") and "% of steps" in n:
            head, _, tail = n.partition(" in ")
            try:
                share = float(tail.split("%", 1)[0])
            except ValueError:
                out.setdefault(n, n)
                continue
            if share >= worst.get(head, -1.0):
                worst[head] = share
                out[head] = f"{head} in up to {share:.1f}% of steps of a simulated run"
        else:
            out.setdefault(n, n)
    return list(out.values())


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
    from sim.workload import generate_requests

    work_ss, _ = np.random.SeedSequence(seed).spawn(2)
    return generate_requests(scenario, rng=work_ss)


@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """A candidate's capacity that loads are fractions of, and how it was obtained."""

    rate: float
    method: str
    """One line for the report: what this number is (simulated, from which profile)."""


LIVE_KV_LAYOUT = "padded"
"""validate's real loop (profiler/serving.py) batches decode rows left-padded, without paged
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
    scenario's SLOs (sim/capacity.py).

    This is the simulator's own capacity search on the measured profile (SLO percentile and
    limits from the scenario). Without SLOs it falls back to the saturation rate estimated
    from the profile: the baseline's batch-1 service time per request (prefill + decode steps
    at its mean context), i.e. 1 / mean service time — conservative, since batching raises capacity.
    """
    from sim.capacity import SimulatedLoad, criteria_from_scenario, find_capacity

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
                f"p{criteria.percentile:g}; sim/capacity.py on profile {profile.name}, seed {seed}, "
                f"{search.status}, ±{search.relative_width:.0%})",
            )
    return _service_time_capacity(scenario, profile)


def _service_time_capacity(scenario: Scenario, profile: Profile) -> CapacityEstimate:
    from sim.step_time import ProfileStepTimer, StepShape

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
    from sim.simulation import simulate_once
    from sim.step_time import ProfileStepTimer

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
    from sim.metrics import summarize

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
    from sim.step_time import ProfileStepTimer

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


# ---------------------------------------------------------------------------------------------
# drift: how far this machine's speed is from the profile's, now


@dataclass(frozen=True)
class DriftCell:
    """A profile grid cell to time again: ``quantity`` target_forward or target_prefill."""

    quantity: str
    coords: tuple[tuple[str, int], ...]
    profile_s: float

    @property
    def label(self) -> str:
        return f"{self.quantity}(" + ", ".join(f"{k}={v}" for k, v in self.coords) + ")"

    @property
    def kind(self) -> str:
        """``decode`` (a target_forward cell) or ``prefill``: the step part it speaks for."""
        return "decode" if self.quantity == "target_forward" else "prefill"


def _nearest(axis: Sequence[float], x: float) -> int:
    return int(min(axis, key=lambda a: (abs(a - x), a)))


def _bracket(axis: Sequence[float], x: float) -> list[int]:
    """The grid points just below and just above ``x`` (one when ``x`` is on or outside the grid)."""
    below = [int(a) for a in axis if a <= x] or [int(axis[0])]
    above = [int(a) for a in axis if a >= x] or [int(axis[-1])]
    return sorted({below[-1], above[0]})


def drift_cells(profile: Profile, *, decode_seqs: int, context: float, tokens_per_seq: int,
                prompt_tokens: float) -> list[DriftCell]:
    """Measured profile cells around a run's typical shapes: batches 1, 2, 4, … up to
    ``decode_seqs``, one and ``tokens_per_seq`` tokens, at the grid contexts bracketing
    ``context``; and fresh prefills at the grid sizes bracketing ``prompt_tokens``.

    Why these: cells the run's steps actually lean on, so their ratio now/profile says how much
    of an error is the machine having changed; and a dozen or more of them, because each cell's
    own profile value and re-timing carry ±5–10 % of noise on a shared VM (measured: one cell
    re-timed 1.01–1.39 within 40 minutes) that a median over few cells does not average out.
    """
    out: list[DriftCell] = []
    tf = profile.timing.target_forward
    ax = dict(zip(tf.axis_names, tf.axes, strict=True))
    batches = sorted({_nearest(ax["batch"], 2**i) for i in range(max(1, int(decode_seqs)).bit_length())})
    for b in batches:
        for c in _bracket(ax["context"], context):
            for t in sorted({_nearest(ax["tokens_per_seq"], 1), _nearest(ax["tokens_per_seq"], tokens_per_seq)}):
                coords = {"batch": b, "tokens_per_seq": t, "context": c}
                idx = tuple(ax[n].index(coords[n]) for n in tf.axis_names)
                v = float(tf.median[idx])
                if math.isfinite(v):
                    out.append(DriftCell("target_forward", tuple(coords.items()), v))
    tp = profile.timing.target_prefill
    ax = dict(zip(tp.axis_names, tp.axes, strict=True))
    # prefill drifts apart from decode on a CPU (compute-bound GEMMs against memory-bound
    # ones), so it gets cells, and a scale, of its own
    for tokens in _bracket(ax["tokens"], prompt_tokens):
        coords = {"tokens": tokens, "context": _nearest(ax["context"], 0)}
        v = float(tp.median[tuple(ax[n].index(coords[n]) for n in tp.axis_names)])
        if math.isfinite(v):
            out.append(DriftCell("target_prefill", tuple(coords.items()), v))
    return out


def drift_summary(cells: Sequence[DriftCell], measured_s: Sequence[float | None], when: str) -> dict[str, Any]:
    """Per-cell and median ratio of the time measured now to the profile's (>1: slower now)."""
    per = [{"cell": c.label, "profile_ms": c.profile_s * 1e3, "now_ms": m * 1e3, "ratio": m / c.profile_s}
           for c, m in zip(cells, measured_s, strict=True) if m is not None and c.profile_s > 0]
    ratios = [p["ratio"] for p in per]

    def part(prefix: str) -> float | None:
        r = [p["ratio"] for p in per if p["cell"].startswith(prefix)]
        return float(np.median(r)) if r else None

    return {
        "when": when, "cells": per,
        "median_ratio": float(np.median(ratios)) if ratios else None,
        "min_ratio": min(ratios) if ratios else None, "max_ratio": max(ratios) if ratios else None,
        "decode_ratio": part("target_forward"), "prefill_ratio": part("target_prefill"),
    }


def drift_scales(d: Mapping[str, Any]) -> tuple[float, float]:
    """(decode, prefill) step-time multipliers for ``--drift-correct`` from one drift check."""
    med = d.get("median_ratio") or 1.0
    return float(d.get("decode_ratio") or med), float(d.get("prefill_ratio") or med)


def drift_lines(drifts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Report lines for a run's drift checks: each one when there are few, else a summary and
    the check furthest from the profile."""
    done = [d for d in drifts if d.get("median_ratio") is not None]
    if len(drifts) <= 3 or not done:
        return [format_drift(d) for d in drifts]
    dec = [d["decode_ratio"] for d in done if d.get("decode_ratio") is not None]
    pre = [d["prefill_ratio"] for d in done if d.get("prefill_ratio") is not None]

    def rng(v: list[float]) -> str:
        return f"median {np.median(v):.2f} (range {min(v):.2f}–{max(v):.2f})" if v else "n/a"

    worst = max(done, key=lambda d: abs(d["median_ratio"] - 1.0))
    return [f"drift: {len(drifts)} checks (before every real run and after the last), now/profile "
            f"decode cells {rng(dec)}, prefill cells {rng(pre)}; >1 = slower now",
            f"furthest from the profile: {format_drift(worst)}"]


DRIFT_WARN = 0.15
"""A machine this much slower or faster than at profiling time is, for the step-time model, a
different machine: validating against it measures the drift, not the simulator (this VM ran
1.65x slower two days after its profile was measured)."""


def format_drift(d: Mapping[str, Any]) -> str:
    """One line: how this machine compares with the profile now, and what to do if it moved."""
    if d.get("median_ratio") is None:
        return f"drift {d['when']}: no cell could be timed"
    line = (f"drift {d['when']}: {len(d['cells'])} profile cells re-timed, now/profile median "
            f"{d['median_ratio']:.2f} (range {d['min_ratio']:.2f}–{d['max_ratio']:.2f}; >1 = slower now)")
    if abs(d["median_ratio"] - 1.0) > DRIFT_WARN:
        way = "slower" if d["median_ratio"] > 1 else "faster"
        line += (f"; WARNING: the machine is {abs(d['median_ratio'] - 1):.0%} {way} than when the profile "
                 "was measured, so step-time errors mostly measure that: re-measure the timing "
                 "(specplan profile --no-acceptance --rounds 3) and merge it (specplan profile merge)")
    return line


# ---------------------------------------------------------------------------------------------
# vLLM benchmark results


def vllm_measured_values(result: Any, slo_ms: Mapping[str, float] | None = None) -> dict[str, float | None]:
    """The compared numbers of a `vllm bench serve` result, computed like the simulator's.

    Latencies over successful requests; ITL samples are vLLM's inter-chunk gaps; a request's
    pause is its longest gap; throughput is completions over vLLM's measured duration; goodput
    uses the scenario's SLOs (TTFT, TPOT, E2EL and pause), not vLLM's ``--goodput`` flags.
    """
    f = result.requests_frame().filter(pl.col("success"))
    out: dict[str, float | None] = {}
    stats: dict[str, float | None] = {}
    stats.update(latency_stats(f["ttft_s"].drop_nulls().to_numpy(), mn.TTFT))
    stats.update(latency_stats(f["tpot_s"].drop_nulls().to_numpy(), mn.TPOT))
    stats.update(latency_stats(f["e2el_s"].drop_nulls().to_numpy(), mn.E2EL))
    stats.update(latency_stats(result.itl_values_s(), mn.ITL))
    pauses = f.filter(pl.col("num_chunks") > 1)["max_pause_s"].drop_nulls().to_numpy()
    stats.update(pause_stats(pauses))
    stats["pause_ms_median"] = float(np.percentile(pauses * 1000.0, 50)) if pauses.size else None
    dur = result.duration_s
    stats[mn.REQUEST_THROUGHPUT] = f.height / dur if dur > 0 else None
    stats[mn.OUTPUT_THROUGHPUT] = float(f["output_tokens"].sum()) / dur if dur > 0 else None
    if slo_ms:
        frame = f.with_columns(pl.lit(mn.COMPLETED).alias("outcome"),
                               pl.col("output_tokens").alias("generated_tokens"))
        good = good_mask(frame, slo_ms)
        stats[mn.REQUEST_GOODPUT] = int(good.sum()) / dur if dur > 0 else None
    else:
        stats[mn.REQUEST_GOODPUT] = None
    stats[mn.MEAN_ACCEPTANCE_LENGTH] = None  # not in vLLM's benchmark output
    for _, col in COMPARED:
        out[col] = stats.get(col)
    return out


def vllm_requests(result: Any, segment: str, timeout_s: float | None, rng: np.random.Generator) -> list[RequestSpec]:
    """The vLLM run's requests for the simulator: its lengths in send order, arrivals drawn as
    vLLM draws them (it saves none). Failed requests are left out (their output is unknown)."""
    t = result.arrival_times(rng)
    ok = result.succeeded
    out = []
    for i in range(result.num_requests):
        if not ok[i] or result.output_lens[i] < 1:
            continue
        out.append(RequestSpec(len(out), float(t[i]), max(1, int(result.input_lens[i])),
                               int(result.output_lens[i]), segment, timeout_s))
    return out


def simulate_vllm(
    result: Any,
    scenario: Scenario,
    profile: Profile,
    candidate: str,
    seeds: Sequence[int],
) -> Prediction:
    """Simulate the vLLM run's load: same rate, burstiness and per-request lengths.

    Each seed draws a new arrival sequence (vLLM keeps none) and a new acceptance stream;
    numbers are averaged over seeds. Throughput uses the simulated span the same way vLLM's
    ``duration`` does (first send to last completion).
    """
    from sim.simulation import simulate_once

    seg = scenario.workload.segments[0]
    runs, vals = [], []
    for s in seeds:
        rng = np.random.default_rng(np.random.SeedSequence(int(s)).spawn(3)[2])
        reqs = vllm_requests(result, seg.name, scenario.workload.client_timeout_s, rng)
        if not reqs:
            raise SpecplanError(f"{result.source}: no successful requests to replay")
        span = max(r.arrival_s for r in reqs)
        sc = scenario.with_overrides({
            "workload.arrival": "gamma" if result.burstiness != 1.0 else "poisson",
            "workload.rate": float(result.request_rate) if math.isfinite(result.request_rate) else 1.0,
            "workload.burstiness": float(result.burstiness),
            "run.duration_s": max(span, 1e-3),
            "run.warmup_s": 0.0,
            "run.drain": True,
            "fleet.replicas": 1,
            "fleet.restart": None,
        })
        run = simulate_once(sc, profile, candidate, int(s), requests=reqs)
        v = values_from_run(run.summary, run.requests)
        done = run.requests.filter(pl.col("outcome") == mn.COMPLETED)
        end = done["finish_s"].max()
        if end is not None and end > 0:  # vLLM's duration: first send (t=0) to last completion
            v[mn.REQUEST_THROUGHPUT] = done.height / float(end)
            v[mn.OUTPUT_THROUGHPUT] = float(done["generated_tokens"].sum()) / float(end)
            if sc.slo.limits:
                good = good_mask(with_latencies(done), sc.slo.limits)
                v[mn.REQUEST_GOODPUT] = int(good.sum()) / float(end)
        runs.append(run)
        vals.append(v)
    notes = tuple(dict.fromkeys(n for r in runs for n in r.notes))
    sources = tuple(dict.fromkeys(s for r in runs for s in r.sources))
    return Prediction(mean_values(vals), tuple(runs), notes, sources)


# ---------------------------------------------------------------------------------------------
# plots


def figures(table: pl.DataFrame) -> list[Any]:
    """Plotly figures: predicted vs measured (one point per load × candidate × metric, with
    the y = x line and ±10 % band), and per-metric error against load."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figs = []
    t = table.filter(pl.col("predicted").is_not_null() & pl.col("measured").is_not_null())
    groups = [
        ("Latency percentiles (ms)", [c for _, c in COMPARED if c.endswith(("_median", "_p95", "_p99"))]),
        ("Throughput and goodput", [mn.REQUEST_THROUGHPUT, mn.OUTPUT_THROUGHPUT, mn.REQUEST_GOODPUT]),
    ]
    for title, cols in groups:
        sub = t.filter(pl.col("column").is_in(cols))
        if sub.height == 0:
            continue
        fig = go.Figure()
        for (cand,), grp in sub.group_by(["candidate"], maintain_order=True):
            loads = grp["load"].to_list()
            fig.add_trace(go.Scatter(
                x=grp["measured"].to_list(), y=grp["predicted"].to_list(), mode="markers",
                name=str(cand),
                text=[f"{m} @ {'' if ld is None else f'{ld:.0%} load'}" for m, ld in zip(grp["metric"].to_list(), loads, strict=True)],
                hovertemplate="%{text}<br>measured %{x:.4g}<br>predicted %{y:.4g}<extra>%{fullData.name}</extra>",
            ))
        lo = float(min(sub["measured"].min(), sub["predicted"].min()))  # type: ignore[arg-type]
        hi = float(max(sub["measured"].max(), sub["predicted"].max()))  # type: ignore[arg-type]
        lo = max(lo, 1e-6)
        xs = [lo, hi]
        fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", name="predicted = measured",
                                 line={"color": "black", "dash": "dash"}))
        fig.add_trace(go.Scatter(x=xs, y=[x * 1.1 for x in xs], mode="lines", name="+10 %",
                                 line={"color": "grey", "dash": "dot"}))
        fig.add_trace(go.Scatter(x=xs, y=[x * 0.9 for x in xs], mode="lines", name="−10 %",
                                 line={"color": "grey", "dash": "dot"}))
        log = hi / lo > 50
        fig.update_layout(title=f"{title}: predicted vs measured", xaxis_title="measured",
                          yaxis_title="predicted (simulator)")
        if log:
            fig.update_xaxes(type="log")
            fig.update_yaxes(type="log")
        figs.append(fig)
    with_load = t.filter(pl.col("load").is_not_null())
    if with_load.height:
        metrics = [c for c in BAR_COLUMNS + ("tpot_ms_median", "tpot_ms_p95", "pause_ms_p95", mn.REQUEST_THROUGHPUT)
                   if with_load.filter(pl.col("column") == c).height]
        cols = 2
        rows = max(1, math.ceil(len(metrics) / cols))
        labels = dict((c, lbl) for lbl, c in COMPARED)
        fig = make_subplots(rows=rows, cols=cols, subplot_titles=[labels[c] for c in metrics])
        for i, col in enumerate(metrics):
            r, c = i // cols + 1, i % cols + 1
            sub = with_load.filter(pl.col("column") == col).sort("load")
            for j, ((cand,), grp) in enumerate(sub.group_by(["candidate"], maintain_order=True)):
                color = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"][j % 4]
                fig.add_trace(go.Scatter(x=grp["load"].to_list(), y=grp["predicted"].to_list(),
                                         mode="lines+markers", name=f"{cand} predicted",
                                         line={"color": color}, showlegend=i == 0), row=r, col=c)
                fig.add_trace(go.Scatter(x=grp["load"].to_list(), y=grp["measured"].to_list(),
                                         mode="markers", name=f"{cand} measured",
                                         marker={"color": color, "symbol": "x", "size": 10},
                                         showlegend=i == 0), row=r, col=c)
        fig.update_layout(title="Predicted (lines) and measured (×) against load (fraction of capacity)",
                          height=320 * rows)
        figs.append(fig)
    return figs


def write_html(figs: Sequence[Any], path: Path, title: str, preamble: str = "") -> Path:
    """One self-contained HTML file with every figure (plotly.js embedded once)."""
    import html

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    if preamble:
        parts.append(f"<pre>{html.escape(preamble)}</pre>")
    for i, fig in enumerate(figs):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("</body></html>")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(path)
    return path
