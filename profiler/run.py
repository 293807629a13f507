"""One profile run: load models, measure timing point by point (checkpointed), memory and
acceptance, then write the profile atomically.

Every finished point is appended to ``<out>.partial.jsonl`` and fsynced before the next starts,
keyed by a hash of the run's configuration and the point, so an interrupted run loses nothing it
finished and ``resume=True`` measures only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from profiler.grids.padded_batch import NOTE as PADDED_NOTE
from profiler.grids.padded_batch import measure_padded_batch
from profiler.grids.profile_request import ProfiledProposer, ProfileRequest, build_proposers
from profiler.grids.run_plan import acceptance_plan as _acceptance_plan
from profiler.grids.run_plan import plan_line, run_plan
from profiler.grids.timing_assembly import assemble_timing, batch_origin
from profiler.grids.timing_grids import (
    Measured,
    TimingGrids,
    default_grids,
)
from profiler.grids.timing_run import Passes, RealPasses, TimingPhase, check_notes
from profiler.passes import device as devmod
from profiler.passes.cold_start import measure_cold_start
from profiler.passes.memory import measure_memory, reserve_of, with_reserve
from profiler.passes.model_types import LoadedModel, dtype_name
from profiler.passes.models import load_model
from profiler.passes.process_peak import ProcessPeak
from profiler.profile_io import assemble, check_writable, provenance, safe_name, write_profile
from profiler.run_progress import RunProgress
from sim.contracts.errors import SpecplanError

# ---------------------------------------------------------------------------------------------
# checkpoint


def partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.jsonl")


class Checkpoint:
    """Append-only JSON lines; each line is fsynced so a crash keeps every finished point."""

    def __init__(self, path: Path, fingerprint: str, *, resume: bool) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.records: dict[str, dict[str, Any]] = {}
        if resume and path.exists():
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line torn by the interruption: that point is re-measured
                    if rec.get("fingerprint") == fingerprint:
                        self.records[rec["key"]] = rec["value"]
        elif path.exists():
            path.unlink()
        self.reused = len(self.records)

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def add(self, key: str, value: Any) -> None:
        line = json.dumps({"fingerprint": self.fingerprint, "key": key, "value": value}, allow_nan=False)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records[key] = value

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def fingerprint(target: LoadedModel, proposers: list[ProfiledProposer], grids: TimingGrids,
                req: ProfileRequest, prompts_digest: str) -> str:
    """Hash of everything a measured value depends on: a changed input never reuses old points."""
    doc = {
        "target": {k: target.identity[k] for k in ("id", "sha256", "architecture")},
        "dtype": dtype_name(target.dtype),
        "device": devmod.device_facts(target.device)["name"],
        "torch": torch.__version__,
        "proposers": [[p.name, p.identity()] for p in proposers],
        "grids": grids.as_dict(),
        "k_max": req.k_max,
        "temperatures": list(req.temperatures),
        "prompts": prompts_digest,
        "seed": req.seed,
        "acceptance": [req.prompts_per_segment, req.max_new_tokens, req.quick],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# the run


PointHook = Callable[[int], None]
"""Called with the number of points measured so far (this run) after each checkpointed point."""
Say = Callable[[str], None]


def run_profile(req: ProfileRequest, *, on_point: PointHook | None = None, say: Say | None = None,
                passes: Callable[..., Passes] | None = None) -> dict[str, Any]:
    """Measure and write a profile; returns the profile dict written to ``req.out``.

    Before measuring anything a short probe prices every phase (``profiler.grids.budget``); the total is
    said through ``say``, and with ``req.budget_s`` the grid is shrunk to fit or the run refused
    (``SpecplanError``). ``passes`` builds what measures the timing grid (tests give a fake).
    """
    t_start = time.perf_counter()
    out = check_writable(req.out)
    prompts = _load_prompts(req)  # bad prompt files fail before any model is loaded
    target = load_model(req.target, dtype=req.dtype, device=req.device)
    proposers = build_proposers(target, req.proposers, dtype=req.dtype, device=req.device)
    reserve = reserve_of(req.reserve_gb, req.reserve_fraction, devmod.device_memory_bytes(target.device))
    peaks = ProcessPeak(target.device)
    cold = None if target.random_weights else measure_cold_start(  # before any other pass: the first request
        target, [p.draft for p in proposers if p.draft is not None], seed=req.seed)
    grids = req.grids or default_grids(target, quick=req.quick, k_max=req.k_max)
    if grids.k_max != req.k_max:
        raise SpecplanError(f"timing grids k_max={grids.k_max} differs from --k-max {req.k_max}")
    digest = hashlib.sha256(json.dumps([[p.id, p.task, p.language, p.prompt] for p in prompts]).encode()).hexdigest()[:16] if prompts else "none"
    fp = fingerprint(target, proposers, grids, req, digest)
    ckpt = Checkpoint(partial_path(out), fp, resume=req.resume)
    source = (passes or RealPasses)(target, [p.runtime() for p in proposers], seed=req.seed,
                                    free_bytes=_free_bytes(target))
    names = [p.name for p in proposers]
    plan, cost = run_plan(req, source, grids, names, _acceptance_plan(req, target, proposers, prompts), ckpt,
                          started=t_start)
    if say is not None:
        say(plan_line(plan, cost, reused=ckpt.reused))
    count = [0]
    phase_s: dict[str, float] = {}
    progress = RunProgress(plan.total_s, enabled=req.progress)
    timing = TimingPhase(source, plan, cost, names, ckpt=ckpt, fp=fp, rounds=req.rounds, progress=progress,
                         on_point=on_point, count=count, grid_checks=req.grid_checks)
    progress.advance(timing.done_s() + plan.phases.get("load and probe", 0.0))
    t0 = time.perf_counter()
    load = [_load_average()]
    with torch.inference_mode():
        grids, measured, checks = timing.run()
        phase_s["timing"] = time.perf_counter() - t0
        load.append(_load_average())
        t0 = time.perf_counter()
        progress.phase("memory")
        act_tokens = max(grids.prefill_tokens)
        if "memory" not in ckpt:
            mem, mem_notes = measure_memory(target, [p.memory_input() for p in proposers],
                                            act_batch=max(grids.batch), act_tokens=act_tokens, peaks=peaks)
            ckpt.add("memory", {"section": mem, "notes": mem_notes})
            count[0] += 1
            if on_point is not None:
                on_point(count[0])
        progress.advance(plan.phases["memory"])
        phase_s["memory"] = time.perf_counter() - t0
        if "padded_batch" not in ckpt:  # after memory: it changes how glibc keeps freed memory
            progress.phase("padded batch")
            ckpt.add("padded_batch", measure_padded_batch(target, grids.batch, grids.context, warmup=grids.warmup,
                                                          repeats=grids.repeats, rounds=req.rounds,
                                                          seed=req.seed))
        progress.advance(plan.phases["padded batch"])
    acceptance, acc_s = _acceptance(req, plan, target, proposers, prompts, ckpt, on_point, count, progress, cost)
    progress.close()
    phase_s["acceptance"] = acc_s
    wall = time.perf_counter() - t_start
    budget_notes = [plan_line(plan, cost, reused=ckpt.reused), *check_notes(checks, plan.grids, grids)]
    mem = ckpt.records["memory"]
    mem = {**mem, "section": {**with_reserve(mem["section"], reserve),
                              "process_peak": peaks.section(resumed=ckpt.reused > 0)}}
    profile = _assemble(req, target, proposers, grids, measured, mem, acceptance,
                        wall, phase_s, ckpt.reused, load, ckpt.records["padded_batch"], budget_notes)
    profile["timing"]["batch_origin"] = batch_origin(plan.grids, grids)
    profile["x-run"]["plan"] = {"estimated_s": {k: round(v, 1) for k, v in plan.phases.items()},
                                "budget_s": plan.budget_s, "shrunk": list(plan.shrunk),
                                "grid_checks": [c.line() for c in checks]}
    if cold is not None:
        profile["cold_start"] = {"provenance": _provenance("measured", req, target, proposers, cold["notes"]),
                                 **cold["section"]}
    write_profile(out, profile)
    ckpt.remove()
    return profile


def _load_prompts(req: ProfileRequest) -> list[Any]:
    if not req.measure_acceptance or not req.proposers:
        return []
    from profiler.prompt_sets import builtin_prompts, load_prompts

    if req.prompts:
        return load_prompts(req.prompts)
    if req.target.startswith("config:"):
        return []  # random weights: acceptance is not measured, built-in prompts not needed
    return builtin_prompts()


def _load_average() -> float | None:
    """The host's 1-minute load average: how busy the CPU was while we timed it."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def _free_bytes(target: LoadedModel) -> int | None:
    """Free device memory for the KV-fit pre-check (CUDA only; a CPU run just tries)."""
    if target.device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(target.device)
    return int(free)


def _acceptance(req: ProfileRequest, plan: Any, target: LoadedModel, proposers: list[ProfiledProposer],
                prompts: list[Any], ckpt: Checkpoint, on_point: PointHook | None, count: list[int],
                progress: RunProgress, cost: Any) -> tuple[dict[str, Any], float]:
    """Acceptance entries via P2's measure_acceptance, one checkpoint record per proposer, with
    the prompts and tokens of the plan (fewer than asked when the budget shrank them)."""
    t0 = time.perf_counter()
    entries: dict[str, Any] = {}
    if not req.measure_acceptance or not proposers:
        return entries, 0.0

    from profiler.grids.budget import acceptance_seconds
    from profiler.measured_acceptance import acceptance as acc

    ap = plan.acceptance
    for p in proposers:
        if target.random_weights or (p.draft is not None and p.draft.random_weights):
            p.notes.append("acceptance not measured: config-only weights")
            continue
        key = f"acceptance:{p.name}"
        share = acceptance_seconds(ap, p.name, cost, req.k_max) if ap is not None else 0.0
        if key not in ckpt:
            per_seg = ap.prompts_per_segment if ap is not None else None
            new_tokens = ap.max_new_tokens if ap is not None else acc.DEFAULT_MAX_NEW_TOKENS
            seen = [0]

            def on_progress(done: int, total: int, label: str, seen: list[int] = seen, share: float = share) -> None:
                progress.phase(f"acceptance {label}")
                progress.advance(share * (done - seen[0]) / max(total, 1))
                seen[0] = done

            prov = _provenance("measured", req, target, proposers)
            prov["models"] = {"target": target.label, p.name: p.label()}
            entry = acc.measure_acceptance(
                target, p.impl, prompts, k_max=req.k_max, temperatures=req.temperatures,
                max_new_tokens=new_tokens, prompts_per_segment=per_seg, seed=req.seed,
                progress=on_progress, provenance=prov,
            )
            ckpt.add(key, entry)
            count[0] += 1
            if on_point is not None:
                on_point(count[0])
        else:
            progress.advance(share)
        entries[p.name] = ckpt.records[key]
    return entries, time.perf_counter() - t0


def _provenance(method: str, req: ProfileRequest, target: LoadedModel, proposers: list[ProfiledProposer],
                notes: list[str] | None = None) -> dict[str, Any]:
    return provenance(
        method,
        device=devmod.device_facts(target.device),
        dtype=dtype_name(target.dtype),
        libraries=devmod.library_versions(),
        models={"target": target.label, **{p.name: p.label() for p in proposers}},
        command=req.command,
        notes="; ".join([devmod.device_notes(target.device), *target.notes, *(notes or [])]),
    )


def _assemble(req: ProfileRequest, target: LoadedModel, proposers: list[ProfiledProposer], grids: TimingGrids,
              measured: list[Measured], mem: dict[str, Any], acceptance: dict[str, Any], wall: float,
              phase_s: dict[str, float], reused: int, load: list[float | None],
              padded: dict[str, Any], budget_notes: list[str]) -> dict[str, Any]:
    timing = assemble_timing(grids, [p.name for p in proposers], measured, rounds=req.rounds)
    timing["padded_batch"] = padded["section"]
    timing["limits"] = [*timing["limits"], *padded["limits"]]
    g = grids
    timing_notes = [
        f"warmup {g.warmup}, repeats {g.repeats} (prefill {g.prefill_repeats}), median and p10/p90 per cell"
        if req.rounds == 1 else
        f"{req.rounds} rounds over the whole grid, each with warmup {g.warmup} and repeats {g.repeats} "
        f"(prefill {g.prefill_repeats}) per cell; a cell's median is the median of its round medians, "
        f"p10/p90 the lowest p10 and highest p90 of its rounds",
        "forward passes under torch.inference_mode with a transformers DynamicCache prefilled to the "
        "context and cropped back before each repeat; random token ids; argmax of the logits included",
        "draft D(k): cumulative time after k sequential draft steps (one run gives every k)",
        f"overhead H(k): per whole greedy cycle (draft k, verify k+1, accept, KV crop) its elapsed time "
        f"minus the draft and verify parts of the same cycle (marks on one clock), median over cycles, "
        f"at context {g.overhead_context}, clamped at 0",
    ]
    if any(p.request.kind == "ngram" for p in proposers):
        timing_notes.append("ngram D(k): host lookup over random-token contexts (no match: a full scan)")
    timing_notes.append(f"{PADDED_NOTE} (after the memory section; warmup {g.warmup}, repeats {g.repeats}, "
                        f"{req.rounds} round(s))")
    if target.device.type == "cpu" and None not in load:
        timing_notes.append(f"1-min load average {load[0]:.1f} before and {load[1]:.1f} after timing "
                            f"(other processes competing for the CPU inflate and scatter the times)")
    timing_notes.append(f"run wall time {wall:.0f} s (timing {phase_s.get('timing', 0):.0f} s, "
                        f"acceptance {phase_s.get('acceptance', 0):.0f} s)"
                        + (f"; {reused} checkpointed records reused (--resume)" if reused else ""))
    timing_notes += budget_notes
    timing = {"provenance": _provenance("measured", req, target, proposers, timing_notes), **timing}
    memory = {"provenance": _provenance("measured", req, target, proposers,
                                        [*mem["notes"], "kv_capacity rows use the simulator's formula"]),
              **mem["section"]}
    name = req.name or safe_name(f"{target.identity['id'].split('/')[-1]}-{target.device.type}")
    dev = devmod.device_facts(target.device)
    description = f"{target.identity['id']} ({'; '.join(target.notes) or dtype_name(target.dtype)}) on {dev['name']}"
    return assemble(
        name=name,
        description=description,
        target=target.identity,
        proposers={p.name: p.identity() for p in proposers},
        timing=timing,
        memory=memory,
        acceptance=acceptance,
        extras={"x-run": {"wall_s": round(wall, 1), "phases_s": {k: round(v, 1) for k, v in phase_s.items()},
                          "grids": grids.as_dict(), "quick": req.quick}},
    )
