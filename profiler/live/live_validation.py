"""Live validation: serve a scenario's arrivals for real and simulate the same requests.

Why a module of its own: it is the orchestration of ``specplan validate SCENARIO`` — load the
profile's target, warm it, check how far the machine has drifted from the profile, run every
load point × candidate for real (``profiler/passes/serving.py``) ``real_reps`` times, simulate the same
requests (``sim/fidelity/comparison.py``) and reduce both to the error table. The CLI (``cli/validate``)
only parses arguments and writes what this returns. torch is needed, so it lives in profiler/.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import torch

from profiler.grids.timing import ReferencePasses, remeasure
from profiler.grids.timing_grids import Point
from profiler.live import live_report
from profiler.live.idle_probes import IdleProbes
from profiler.live.live_checkpoints import RunRecord, RunStore, run_key
from profiler.live.live_points import (
    FRAME_NAMES,
    LoadPoint,
    checkpoint_arguments,
    load_points,
    model_spec,
    peak_and_cells,
    run_record,
    run_tag,
    threads_note,
)
from profiler.live.live_settings import LiveValidation
from profiler.passes import serving
from profiler.passes.models import load_model
from profiler.passes.warm_up import PeakShape, keep_freed_memory, touch_peak, warm_up
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.fidelity import comparison, live_load
from sim.fidelity import drift as drift_check
from sim.model.assembly import scheduler_config
from sim.model.engine_defaults import engine_limits
from sim.model.kv_capacity import kv_capacity
from sim.model.machine_speed import speed_timeline
from sim.model.speculation import policy_from_candidate


@dataclass
class LiveResult:
    """The error table so far, its header lines, the per-request/step frames and run facts."""

    table: pl.DataFrame
    header: list[str]
    frames: dict[str, list[pl.DataFrame]]
    meta: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# helpers


def proposer_factory(profile: Profile, name: str, target: Any, n: int) -> Any:
    """One proposer per request (model proposers keep per-sequence KV); built before the run."""
    from profiler.passes.proposers import NgramProposer, SelfDraftProposer

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


# ---------------------------------------------------------------------------------------------
# the run


class _Live:
    """The state of one validation between real runs: the runs so far and their predictions."""

    def __init__(self, v: LiveValidation, say: Callable[[str], None], target: Any, threads: int,
                 points: list[LoadPoint], cells: list[Any], notes: list[str]) -> None:
        self.v, self.say, self.target, self.threads, self.cells = v, say, target, threads, cells
        self.points = {p.key: p for p in points}
        self.notes = notes
        self.sources: set[str] = set(v.profile.sources())
        self.layout = v.scenario.fleet.engine.kv_layout
        self.frames: dict[str, list[pl.DataFrame]] = {k: [] for k in FRAME_NAMES}
        self.drifts: list[dict[str, Any]] = []
        self.measured: dict[tuple[float, str], list[dict[str, float | None]]] = {}
        self.step_preds: dict[tuple[float, str], list[dict[str, float | None]]] = {}
        self.preds: dict[tuple[float, str], Any] = {}
        # --drift-correct: per real run, the prediction (and step-time prediction) at its speed
        self.scaled_preds: dict[tuple[float, str], list[dict[str, float | None]]] = {}
        self.scaled_steps: dict[tuple[float, str], list[dict[str, float | None]]] = {}
        self.corrections: list[dict[str, Any]] = []
        self.started = time.time()

    def check_drift(self, when: str) -> dict[str, Any]:
        got = remeasure(self.target, [Point(c.quantity, c.coords) for c in self.cells], warmup=1, repeats=3)
        d = drift_check.drift_summary(self.cells, [m.median for m in got], when)
        self.add_drift(d)
        self.say(drift_check.format_drift(d))
        return d

    def add_drift(self, d: dict[str, Any]) -> None:
        if not self.drifts or self.drifts[-1] != d:  # a check is the one after a run and before the next
            self.drifts.append(d)

    def serve(self, rep: int, p: LoadPoint, peak: PeakShape, probes: IdleProbes | None,
              checked: Callable[[dict[str, Any]], None]) -> RunRecord:
        """Warm up, check the machine's speed (``checked`` gets the check at once: it is the last
        run's "after"), serve the point's requests for real once."""
        v, target = self.v, self.target
        cand = p.scenario.candidate(p.name)
        policy = policy_from_candidate(cand)
        proposer = cand.proposer if policy.speculates else None
        kv = kv_capacity(v.profile, p.scenario.fleet.engine.memory_utilization, p.scenario.fleet.engine.block_size,
                         proposer)
        cfg = scheduler_config(p.scenario, kv.kv_blocks, engine_limits(p.scenario, v.profile))
        factory = proposer_factory(v.profile, proposer, target.model, len(p.requests)) if proposer else None
        vocab = int(target.identity["architecture"]["vocab_size"])
        warm_up(target.model, vocab, policy=policy, proposer_name=proposer, peak=peak,
                proposer_factory=proposer_factory(v.profile, proposer, target.model, 4) if proposer else None)
        # re-timed before every real run: this VM's speed moves within minutes
        before = self.check_drift(f"before real run {rep + 1} of {p.name} at {p.load:.0%}")
        checked(before)
        if probes is not None:
            probes.start_run(max(drift_check.drift_scales(before)))
        self.say(f"{p.name} at {p.load:.0%} load ({p.rate:.3g} req/s, {len(p.requests)} requests over "
                 f"{p.span:.0f}s), real run {rep + 1}/{v.real_reps}: serving for real …")
        real = serving.serve(p.requests, cfg, target.model, policy=policy, proposer_factory=factory,
                             proposer_name=proposer, candidate=p.name, seed=v.seed,
                             max_wall_s=p.max_wall, progress=self.say, idle_work=probes)
        return run_record(rep, p, real, before, v.profile, self.layout, probes)

    def absorb(self, rec: RunRecord) -> None:
        """Add a finished real run (served now or checkpointed) to the report; simulate its point
        the first time it is seen."""
        p, key = self.points[rec.key], rec.key
        if rec.aborted:
            self.notes.append(f"{p.name} at {p.load:.0%}: real run {rec.rep + 1} stopped at {p.max_wall:.0f}s; "
                              "unfinished requests count as not completed")
        profile_times = rec.steps["profile_duration_s"].to_list()
        step_pred, step_meas = live_load.step_time_values(rec.durations, profile_times, rec.shapes)
        self.measured.setdefault(key, []).append({**rec.measured, **step_meas})
        self.step_preds.setdefault(key, []).append(step_pred)
        self.frames["step_residuals"].append(
            live_load.step_residuals(rec.durations, profile_times, rec.shapes)
            .with_columns(*run_tag(rec), pl.lit(False).alias("drift_corrected")))
        self.frames["measured_requests"].append(rec.requests)
        self.frames["measured_steps"].append(rec.steps)
        if rec.probes is not None:
            self.frames["probes"].append(rec.probes)
        if key not in self.preds:
            self.say(f"{p.name} at {p.load:.0%} load: simulating the same {len(p.specs)} requests …")
            pred = live_load.predict(p.scenario, self.v.profile, p.name, p.specs, self.v.seed, self.v.sim_reps)
            self.preds[key] = pred
            self.notes.extend(pred.notes)
            self.sources.update(pred.sources)
            tag = [pl.lit(p.load).alias("load"), pl.lit(p.rate).alias("rate")]
            self.frames["predicted_requests"].append(pred.runs[0].requests.with_columns(tag))
            self.frames["predicted_steps"].append(pred.runs[0].steps.with_columns(tag))
        cand = p.scenario.candidate(p.name)
        if policy_from_candidate(cand).speculates:
            self.notes.append(
                f"{p.name} at {p.load:.0%}: acceptance measured = what the real {cand.proposer} proposer achieved "
                f"on these prompts (mean acceptance length "
                f"{rec.measured.get('mean_acceptance_length') or float('nan'):.2f}); predicted = the "
                f"profile's acceptance ({self.preds[key].values.get('mean_acceptance_length') or float('nan'):.2f})")

    def settle(self, rec: RunRecord) -> None:
        """--drift-correct: predict a real run with the machine's speed over it — a timeline from
        the drift checks before and after it and the reference passes timed in its idle gaps
        (``sim/model/machine_speed.py``)."""
        if not self.v.drift_correct or rec.after is None:
            return
        p, key, profile = self.points[rec.key], rec.key, self.v.profile
        after = drift_check.drift_scales(rec.after)
        speed = speed_timeline(drift_check.drift_scales(rec.before), after, rec.wall_s, rec.samples)
        avg = speed.mean(0.0, rec.wall_s)
        self.corrections.append({
            "run": rec.label, "decode": avg[0], "prefill": avg[1], "probes": len(rec.samples), "wall_s": rec.wall_s,
            "decode_knots": [list(k) for k in zip(speed.decode_t, speed.decode_ratio, strict=True)],
            "prefill_knots": [list(k) for k in zip(speed.prefill_t, speed.prefill_ratio, strict=True)]})
        self.say(f"{rec.label}: simulating again at the machine's speed over it (decode ×{avg[0]:.2f}, "
                 f"prefill ×{avg[1]:.2f} on average; {len(speed.decode_t)} + {len(speed.prefill_t)} knots) …")
        self.scaled_preds.setdefault(key, []).append(
            live_load.predict(p.scenario, profile, p.name, p.specs, self.v.seed, self.v.sim_reps, speed=speed).values)
        corrected = live_load.profile_step_times(rec.shapes, profile, self.layout, speed=speed)
        self.scaled_steps.setdefault(key, []).append(
            live_load.step_time_values(rec.durations, corrected, rec.shapes)[0])
        self.frames["step_residuals"].append(live_load.step_residuals(rec.durations, corrected, rec.shapes)
                                             .with_columns(*run_tag(rec), pl.lit(True).alias("drift_corrected")))

    def rows_of(self, corrected: bool) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for key, runs in self.measured.items():
            if corrected and key not in self.scaled_preds:
                continue  # its only run is still waiting for the drift check after it
            steps = self.scaled_steps[key] if corrected else self.step_preds[key]
            step = {k: x for k, x in comparison.median_values(steps).items() if x is not None}
            base = comparison.median_values(self.scaled_preds[key]) if corrected else self.preds[key].values
            pred = {**{k: x for k, x in base.items() if x is not None}, **step}
            rows.extend(comparison.error_rows("live", key[0], self.points[key].rate, key[1], pred,
                                            comparison.median_values(runs), comparison.spread_values(runs),
                                            len(runs)))
        return rows

    def result(self, meta: dict[str, Any], complete: bool) -> LiveResult:
        v = self.v
        correction = live_report.correction_lines(comparison.error_table(self.rows_of(False)), v.idle_probes) \
            if v.drift_correct else []
        facts = {"scenario": v.scenario_path, "requests": v.requests, "seed": v.seed, "real_runs": v.real_reps,
                 "model": self.target.label, "device": v.device, "threads": self.threads,
                 "wall_s": time.time() - self.started, "profile": v.profile.name, "layout": self.layout,
                 "drift_correct": v.drift_correct, "timing": v.profile.timing}
        header = live_report.header_lines(facts, v.capacities, v.load_basis, self.drifts, self.frames, correction,
                                          self.sources, self.notes)
        meta = {**meta, "drift": self.drifts, "drift_corrections": self.corrections, "complete": complete}
        return LiveResult(comparison.error_table(self.rows_of(v.drift_correct)), header, self.frames, meta)


def load_target(v: LiveValidation, say: Callable[[str], None]) -> tuple[Any, str, int, bool]:
    """The target model, loaded and warmed up: (target, its spec, torch threads, memory kept)."""
    kept = keep_freed_memory()
    if v.threads:
        torch.set_num_threads(v.threads)
    spec = v.model or model_spec(v.profile)
    say(f"loading target {spec} …")
    target = load_model(spec, device=v.device)
    threads = torch.get_num_threads()
    warn = threads_note(v.profile, threads)
    if warn:
        say(warn)
    warm_up(target.model, int(target.identity["architecture"]["vocab_size"]))
    return target, spec, threads, kept


def run_live(v: LiveValidation, *, say: Callable[[str], None],
             on_progress: Callable[[LiveResult], None] | None = None) -> LiveResult:
    """Run the validation; ``on_progress`` gets the result so far after every real run (so a
    caller can write it), and with ``v.checkpoints`` every real run is checkpointed as it
    finishes: nothing measured is lost if a later run fails or is interrupted."""
    spec = v.model or model_spec(v.profile)
    store = RunStore(v.checkpoints, checkpoint_arguments(v, spec), resume=v.resume) if v.checkpoints else None
    reused = store.open() if store is not None else {}
    target, spec, threads, kept = load_target(v, say)
    notes: list[str] = list(v.notes)
    points = load_points(v, target, spec, notes)
    peak, cells = peak_and_cells(v, points)
    notes.append("real runs warmed up to their peak shapes (batch "
                 f"{peak.decode_seqs} × {peak.tokens_per_seq} tokens at {peak.context} context, a "
                 f"{peak.prefill_tokens}-token prefill) so no memory is first touched mid-run"
                 + ("; freed memory kept in the process (glibc mallopt)" if kept else ""))
    live = _Live(v, say, target, threads, points, cells, notes)
    meta = {"command": v.command, "scenario": v.scenario_path, "profile": v.profile.origin, "model": target.label,
            "device": v.device, "threads": threads, "requests_per_load": v.requests, "seed": v.seed,
            "loads": list(v.loads), "real_runs": v.real_reps, "load_basis": v.load_basis,
            "capacity": {c: {"req_s": cap.rate, "method": cap.method} for c, cap in v.capacities.items()},
            "sim_replications": v.sim_reps, "drift_correct": v.drift_correct, "idle_probes": v.idle_probes}
    touch_peak(target.model, peak)  # the drift check must not pay first-touch costs either
    probes = None
    if v.idle_probes:
        probes = IdleProbes(ReferencePasses(target, [Point(c.quantity, c.coords) for c in cells], seed=v.seed), cells)
    runs = [(rep, p) for rep in range(v.real_reps) for p in points]
    todo = reusable(runs, reused, v, say, store)
    meta["reused_runs"] = len(runs) - len(todo)
    if len(todo) < len(runs):
        notes.append(f"resumed: {len(runs) - len(todo)} of {len(runs)} real runs reused from the checkpoints of an "
                     "interrupted run of the same arguments (the wall time above is this process's)")
    waiting: RunRecord | None = None  # the last run served, waiting for the drift check after it
    for rep, p in runs:
        rec = reused.get(run_key(p.load, p.name, p.rate, rep))
        if (rep, p.key) in todo:
            rec = live.serve(rep, p, peak, probes, lambda d, w=waiting: finish(live, store, w, d))
            if store is not None:
                store.save(rec)
            waiting = rec
            live.absorb(rec)
        else:
            if waiting is not None:
                finish(live, store, waiting, live.check_drift(f"after {waiting.label}"))
                waiting = None
            live.add_drift(rec.before)
            live.absorb(rec)
            if rec.after is not None:
                live.add_drift(rec.after)
                live.settle(rec)
        if on_progress is not None:  # after every run: nothing measured is lost
            on_progress(live.result(meta, complete=False))
    if waiting is not None:
        finish(live, store, waiting, live.check_drift("after the last real run"))
    return live.result(meta, complete=True)


def finish(live: _Live, store: RunStore | None, rec: RunRecord | None, after: dict[str, Any]) -> None:
    """A served run's drift check after it: checkpointed, then its drift-corrected prediction."""
    if rec is None:
        return
    rec.after = after
    if store is not None:
        store.save_after(rec)
    live.settle(rec)


def reusable(runs: list[tuple[int, LoadPoint]], reused: dict[str, RunRecord], v: LiveValidation,
             say: Callable[[str], None], store: RunStore | None) -> set[tuple[int, tuple[float, str]]]:
    """The runs still to serve; says how many checkpointed ones are reused. With --drift-correct
    a run checkpointed without the drift check after it is served again (its speed is unknown)."""
    todo, unsettled = set(), 0
    for rep, p in runs:
        rec = reused.get(run_key(p.load, p.name, p.rate, rep))
        unsettled += rec is not None and v.drift_correct and rec.after is None
        if rec is None or (v.drift_correct and rec.after is None):
            todo.add((rep, p.key))
    if store is not None and len(todo) < len(runs):
        again = f" ({unsettled} served again: no drift check after it, which --drift-correct needs)" \
            if unsettled else ""
        say(f"resuming: {len(runs) - len(todo)} of {len(runs)} real runs reused from {store.folder} "
            f"(not served again); {len(todo)} to serve{again}")
    return todo


__all__ = ["LiveResult", "LiveValidation", "model_spec", "proposer_factory", "run_live", "threads_note"]
