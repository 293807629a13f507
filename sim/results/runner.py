"""All candidates × seeds of a scenario, aggregated to mean and 95% CI per metric.

Each seed's workload is generated once and served by every candidate (common random numbers),
so differences between candidates are not differences between request samples. The
confidence interval is Student t over seeds: with few seeds it is wide, as it should be.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from sim.contracts.candidate import Candidate
from sim.contracts.errors import SpecplanError
from sim.contracts.machine_identity import machine_line
from sim.contracts.memory_limits import check_memory
from sim.contracts.profile import Profile, load_profile
from sim.contracts.scenario import Scenario
from sim.contracts.trace import read_trace
from sim.contracts.work_limits import check_work, hashed_block_size, workload_size
from sim.model.cold_start import source_line as cold_start_source
from sim.model.drivers.engine import StepTimer
from sim.model.k_schedule import resolve_candidate, straddle_notes
from sim.results import metric_names as mn
from sim.results.atomic_io import ensure_dir, write_parquet_atomic, write_text_atomic
from sim.results.heap import give_back_freed
from sim.results.intervals import mean_ci95
from sim.results.records import REQUEST_SCHEMA
from sim.results.request_parts import RequestParts, pack
from sim.results.run_notes import extrapolation_notes
from sim.results.simulation import RunResult, simulate_once
from sim.workload.workload import generate_requests


def aggregate(per_seed: pl.DataFrame) -> pl.DataFrame:
    """Per-seed summary rows → one row per (candidate, segment): mean and ``_ci95`` columns."""
    metric_cols = [c for c in mn.METRIC_COLUMNS if c in per_seed.columns]
    # one conversion of the frame, then groups as row indices in order of first appearance
    # (a polars partition and select per group cost ~15 ms per dashboard run)
    values = per_seed.select(metric_cols).to_dict(as_series=False)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(per_seed[mn.CANDIDATE].to_list(), per_seed[mn.SEGMENT].to_list(), strict=True)):
        groups.setdefault(key, []).append(i)
    rows = []
    for (cand, seg), idx in groups.items():
        row: dict[str, object] = {mn.CANDIDATE: cand, mn.SEGMENT: seg, mn.N_SEEDS: len(idx)}
        cis: dict[str, object] = {}
        for col in metric_cols:
            vals = values[col]
            mean, ci = mean_ci95([vals[i] for i in idx])
            row[col] = mean
            cis[mn.ci_col(col)] = ci
        row.update(cis)
        rows.append(row)
    schema: dict[str, pl.DataType] = {
        mn.CANDIDATE: pl.String(), mn.SEGMENT: pl.String(), mn.N_SEEDS: pl.Int64()
    }
    for col in metric_cols:
        schema[col] = pl.Float64()
    for col in metric_cols:
        schema[mn.ci_col(col)] = pl.Float64()
    return pl.DataFrame(rows, schema=schema)


@dataclass(frozen=True)
class ScenarioResult:
    """Everything one ``specplan simulate`` produces."""

    scenario: Scenario
    summary: pl.DataFrame
    """Aggregated: one row per candidate and segment, metric means and ``_ci95`` half-widths."""
    per_seed: pl.DataFrame
    """The per-seed summary rows the aggregate was computed from."""
    request_parts: RequestParts
    """Per-request records, one part per candidate × seed (large ones compressed): read them
    part by part (``request_parts.frames()``) where a whole frame is not needed."""
    steps: pl.DataFrame
    sources: tuple[str, ...]
    """Provenance of every profile section used, plus assumed acceptance lines."""
    notes: tuple[str, ...]
    """Extrapolation and approximation notes."""
    candidates: tuple[str, ...]
    seeds: tuple[int, ...]
    profiles: dict[str, Profile] | None = None
    """The profile each candidate ran on, by name (its fleet's; see ``candidate_profiles``)."""

    @property
    def requests(self) -> pl.DataFrame:
        """Every request of every candidate × seed as one frame (built on each call: as large
        as the records; the decision reads ``request_parts`` instead)."""
        return self.request_parts.frame()

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write requests/steps/summary Parquet and summary.json into ``out_dir``."""
        out = ensure_dir(out_dir)
        paths = [out / "requests.parquet", out / "steps.parquet", out / "summary.parquet"]
        for frame, path in zip((self.requests, self.steps, self.summary), paths, strict=True):
            write_parquet_atomic(frame, path, statistics=False)  # whole or not at all
        js = out / "summary.json"
        write_text_atomic(js, json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n")
        return [*paths, js]

    def merged(self, more: ScenarioResult) -> ScenarioResult:
        """This result and ``more`` (the same scenario and candidates on other seeds) as one:
        what the sequential procedure does when it adds replications."""
        if more.candidates != self.candidates or set(more.seeds) & set(self.seeds):
            raise ValueError("merge needs the same candidates on new seeds")
        per_seed = pl.concat([self.per_seed, more.per_seed], how="vertical")
        order = {c: i for i, c in enumerate(self.candidates)}
        per_seed = per_seed.sort(pl.col(mn.CANDIDATE).replace_strict(order, return_dtype=pl.Int64),
                                 mn.SEED, maintain_order=True)
        notes = [*self.notes, *(n for n in more.notes if n not in self.notes and not n.startswith("extrapolated"))]
        return ScenarioResult(
            scenario=self.scenario, summary=aggregate(per_seed), per_seed=per_seed,
            request_parts=self.request_parts.merged(more.request_parts),
            steps=pl.concat([self.steps, more.steps], how="vertical", rechunk=True),
            sources=tuple(dict.fromkeys([*self.sources, *more.sources])), notes=tuple(notes),
            candidates=self.candidates, seeds=(*self.seeds, *more.seeds), profiles=self.profiles,
        )

    def to_json(self) -> dict[str, object]:
        """Plain JSON: ``inf`` cost per good answer becomes null with a label."""
        rows = []
        for row in self.summary.iter_rows(named=True):
            clean: dict[str, object] = {}
            for k, v in row.items():
                if isinstance(v, float) and math.isinf(v):
                    clean[k] = None
                    clean[f"{k}_note"] = "no SLO-conformant answers (infinite)"
                else:
                    clean[k] = v
            rows.append(clean)
        return {
            "scenario": self.scenario.name,
            "candidates": list(self.candidates),
            "seeds": list(self.seeds),
            "slo": self.scenario.slo.limits,
            "summary": rows,
            "rate_window": (f"{mn.REQUEST_THROUGHPUT}, {mn.OUTPUT_THROUGHPUT} and {mn.REQUEST_GOODPUT} are per "
                            f"second of [{mn.WINDOW_START_S}, {mn.WINDOW_END_S}]: warm-up end to the last "
                            "measured request's end, drain included; the decision's goodput is per second "
                            "of arrivals [run.warmup_s, run.duration_s)"),
            "sources": list(self.sources),
            "notes": list(self.notes),
        }


def resolve_profile(scenario: Scenario, profile: Profile | str | Path | None) -> Profile:
    """The profile to use: given, or the scenario's ``fleet.profile``."""
    if isinstance(profile, Profile):
        return profile
    if profile is not None:
        return load_profile(profile)
    return scenario_profile(scenario)


def scenario_profile(scenario: Scenario, cand: Candidate | None = None) -> Profile:
    """The profile the scenario names for ``cand``'s fleet; an error names the scenario's field
    as well as the profile's file and line (the file may be sound and the field wrong)."""
    path = scenario.require_profile_path(cand)
    try:
        return load_profile(path)
    except SpecplanError as exc:
        field = "fleet.profile" if cand is None or cand.fleet is None else f"fleets.{cand.fleet}.profile"
        raise SpecplanError(f"{scenario.origin or 'scenario'}: {field}: {exc}") from None


def candidate_profiles(scenario: Scenario, profile: Profile | str | Path | Mapping[str, Profile] | None,
                       cands: Sequence[Candidate]) -> dict[str, Profile]:
    """Each candidate's profile by name: ``profile`` (or [fleet]'s) for those on [fleet], each
    [fleets.NAME]'s own, loaded once; a proposer that profile lacks is one line naming both.
    A mapping ``profile`` is such a result already (a capacity search's probes reuse it)."""
    if isinstance(profile, Mapping) and all(c.name in profile for c in cands):
        return {c.name: profile[c.name] for c in cands}
    if isinstance(profile, Mapping):
        profile = None
    default: Profile | None = None
    named: dict[str, Profile] = {}
    out: dict[str, Profile] = {}
    for c in cands:
        if c.fleet is None:
            default = default or resolve_profile(scenario, profile)
            out[c.name] = default
            continue
        if c.fleet not in named:
            named[c.fleet] = scenario_profile(scenario, c)
            tp, built = scenario.fleet_for(c).tensor_parallel_size, named[c.fleet].replica.tensor_parallel_size
            if tp != built:
                raise SpecplanError(
                    f"{scenario.origin or 'scenario'}: fleets.{c.fleet}.tensor_parallel_size = {tp} but its "
                    f"profile {named[c.fleet].name} was built for {built} GPUs per replica; valid: {built}")
        prof = out[c.name] = named[c.fleet]
        if c.proposer is not None and c.proposer not in prof.proposers:
            raise SpecplanError(
                f"{scenario.origin or 'scenario'}: candidates[{c.name}].proposer: {c.proposer!r} is not "
                f"in fleet {c.fleet!r}'s profile ({prof.name}); valid: {', '.join(prof.proposers) or 'none'}")
    return out


def run_scenario(
    scenario: Scenario,
    profile: Profile | str | Path | Mapping[str, Profile] | None = None,
    candidates: Sequence[str | Candidate] | None = None,
    seeds: Sequence[int] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    step_timer_factory: Callable[[Profile], StepTimer] | None = None,
    acceptance_shift: Mapping[str, Mapping[str, float]] | None = None,
) -> ScenarioResult:
    """Simulate every candidate on every seed; ``progress(done, total, label)`` after each run;
    ``acceptance_shift``: candidate → its segments' mean acceptance lengths (``simulate_once``),
    what capacity's acceptance-interval ends are searched at (``sim.decisions.capacity_doubt``).

    A candidate with ``fleet = NAME`` runs on that fleet's profile, replica shape and prices;
    every candidate is served the same requests per seed whatever its hardware."""
    cands = [
        scenario.candidate(c) if isinstance(c, str) else c
        for c in (candidates if candidates is not None else scenario.candidates)
    ]
    # baseline first, then the others in scenario order
    cands.sort(key=lambda c: not c.is_baseline)
    seed_list = tuple(seeds if seeds is not None else scenario.run.seeds)
    if not seed_list:
        raise SpecplanError("no seeds to run; give at least one (run.seeds or --seeds)")
    if not cands:
        raise SpecplanError("no candidates to run")
    profs = candidate_profiles(scenario, profile, cands)
    # schedule = "auto": k by batch computed from each candidate's profile, once, before any run
    # (the result keeps the scenario as written; the computed ranges are in its sources)
    cands = [resolve_candidate(scenario, profs[c.name], c) for c in cands]
    trace = None
    if scenario.workload.arrival == "trace":
        assert scenario.trace_path is not None
        trace = read_trace(scenario.workload.trace)
    total = len(cands) * len(seed_list)
    size = workload_size(scenario.workload, scenario.run, trace, hashed_block_size(scenario))
    check_work(*size, total, scenario.origin or "scenario")
    check_memory(size[0], total, scenario.origin or "scenario")
    done = 0
    runs: list[tuple[RunResult, pl.DataFrame | bytes]] = []
    for seed in seed_list:
        work_ss = np.random.SeedSequence(seed).spawn(2)[0]
        specs = None  # the previous seed's requests are let go before this seed's are made
        specs = (None if scenario.workload.arrival == "concurrency"  # clients make their own
                 else generate_requests(scenario, rng=work_ss, trace=trace))
        for cand in cands:
            prof = profs[cand.name]
            timer = step_timer_factory(prof) if step_timer_factory is not None else None
            run = simulate_once(scenario.for_candidate(cand), prof, cand, seed, timer, requests=specs,
                                keep_itl=False, acceptance_shift=(acceptance_shift or {}).get(cand.name))
            runs.append(_kept(run))  # (the run without its records, its requests packed)
            del run  # its ITL samples and full-width records go before the next run starts
            give_back_freed()  # (sim/results/heap.py: else they stay resident under the next run)
            done += 1
            if progress is not None:
                progress(done, total, f"{cand.name} seed {seed}")
    del specs
    order = {c.name: i for i, c in enumerate(cands)}
    runs.sort(key=lambda r: (order[r[0].candidate], r[0].seed))
    parts = RequestParts(tuple(p for _, p in runs), REQUEST_SCHEMA)
    per_seed = pl.concat([r.summary for r, _ in runs], how="vertical")
    summary = aggregate(per_seed)
    used = list({id(p): p for p in profs.values()}.values())
    sources = list(used[0].sources())
    sources += [line for p in used[1:] for line in p.sources() if line not in sources]
    fleet_prof = next((profs[c.name] for c in cands if c.fleet is None), None)
    cold = cold_start_source(scenario.fleet.restart, fleet_prof)
    sources += [cold] if cold else []
    # a profile measured on another machine: said first, every number below rests on it
    notes: list[str] = [line for p in used if (line := machine_line(p)) is not None]
    notes += list(trace.notes) if trace is not None else []
    extrap: dict[str, dict[str, int]] = {}
    steps_by: dict[str, int] = {}
    for r, _ in runs:
        for line in r.sources:
            if line not in sources:
                sources.append(line)
        counts = r.extra.get("extrapolations") or {}
        per = extrap.setdefault(r.candidate, {})
        for what, n in counts.items():
            per[what] = per.get(what, 0) + n
        steps_by[r.candidate] = steps_by.get(r.candidate, 0) + int(r.extra.get("timer_steps", 0))
        for line in r.notes:
            if line not in notes:
                notes.append(line)
    steps = _joined_steps(runs)
    for cand in cands:
        if cand.computed is not None:
            sources.append(f"{cand.name}: {cand.computed}")
        if cand.speculates and cand.policy == "k_by_batch" and cand.k_by_batch:
            dec = steps.filter(pl.col(mn.CANDIDATE) == cand.name)["decode_seqs"].to_numpy()
            notes.extend(straddle_notes(cand.name, cand.k_by_batch, dec))
    for cand, counts in extrap.items():
        notes.extend(
            extrapolation_notes(counts, steps_by[cand], f"{cand}, {len(seed_list)} seed(s)")
        )
    return ScenarioResult(
        scenario=scenario,
        summary=summary,
        per_seed=per_seed,
        request_parts=parts,
        steps=steps,
        sources=tuple(sources),
        notes=tuple(notes),
        candidates=tuple(c.name for c in cands),
        seeds=seed_list,
        profiles=profs,
    )


def _joined_steps(runs: list[tuple[RunResult, pl.DataFrame | bytes]]) -> pl.DataFrame:
    """Every run's steps as one frame in one chunk (``pl.concat(..., rechunk=True)``'s), joined a
    column at a time, each run's copy of a column let go once it is copied: the steps are held
    once plus one column rather than twice (~80 MB on a GPU hour). The runs keep no steps."""
    columns = []
    for i, (run, part) in enumerate(runs):
        columns.append(run.steps.get_columns())
        runs[i] = (dataclasses.replace(run, steps=run.steps.clear()), part)
    del run  # (the last run's frame: its columns are in ``columns`` alone now)
    joined = []
    for j in range(len(columns[0])):
        pieces = [cols[j] for cols in columns]
        for cols in columns:
            cols[j] = None
        joined.append(pl.concat(pieces, how="vertical", rechunk=True))
        del pieces
        give_back_freed()  # the runs' column, freed in the heap, is of no use to polars' allocator
    return pl.DataFrame(joined)


def _kept(run: RunResult) -> tuple[RunResult, pl.DataFrame | bytes]:
    """What a scenario result keeps of a run: the run without its per-request records (its ITL
    samples were never kept: ``keep_itl``), and its requests as one compact part (``pack``)."""
    return dataclasses.replace(run, requests=_NO_REQUESTS), pack(run.requests)


_NO_REQUESTS = pl.DataFrame(schema=REQUEST_SCHEMA)
