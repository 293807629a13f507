"""One candidate of a scenario judged at a rate by simulation, each probe cached and resumable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.decisions.capacity_search import Probe
from sim.decisions.load_scaling import at_load, with_duration
from sim.decisions.sustain import SustainCriteria

PROBE_STRETCHES = (1.0, 2.0, 4.0)
"""How much longer a passing probe whose queue grows is run again before it counts as a runaway
(stationary and piecewise arrivals; a trace's probe is its slice, run once)."""


class SimulatedLoad:
    """Evaluates one candidate of a scenario at a rate (and replica count) by simulation.

    Keeps every summary it computed so the decision table and bottleneck attribution can reuse
    them without simulating again.
    """

    def __init__(self, scenario: Any, profile: Any, criteria: SustainCriteria,
                 min_requests: int = 0, cache_dir: Any = None, timer_scale: float = 1.0,
                 profiles: dict[str, Any] | None = None, resolved: dict[str, Any] | None = None,
                 acceptance_shift: dict[str, dict[str, float]] | None = None,
                 host_scale: dict[str, float] | None = None) -> None:
        from sim.results.runner import (
            run_scenario,  # the simulator; imported late to keep this testable
        )

        self._run = run_scenario
        self.timer_scale = timer_scale
        """Every step time × this (``timing_spread``'s factors for the profile band); 1 normally."""
        self.scenario = scenario
        self.profile = profile
        self.profiles = profiles
        """Each candidate's profile by name when some run on [fleets.NAME] (``run_scenario``'s
        ``candidate_profiles``, loaded once); None: every candidate runs on ``profile``."""
        self.acceptance_shift = acceptance_shift
        """Candidate → segment → mean acceptance length its runs are moved to (an acceptance
        interval's end, ``capacity_doubt``); None: the profile's estimate. Part of every probe's
        key (``_probe_key``), so such probes sit beside the estimate's in ``cache_dir``."""
        self.host_scale = host_scale
        """Candidate → multiple of its draft's assumed host time H(b, k) its runs are priced at
        (``host_doubt``'s ends; its k schedule stays the one planned at 1×); None: the profile's.
        Part of every probe's key, like ``acceptance_shift``."""
        self._scaled: dict[str, Any] = {}
        self.criteria = criteria
        self.min_requests = min_requests
        self.rows: list[dict[str, Any]] = []
        self.work = 0.0
        self.cache_dir = cache_dir
        """Folder of finished probes' summaries (``--out DIR/probes``): a rerun after Ctrl-C or
        kill -9 reads them instead of simulating again."""
        self.reused = 0
        self._judged_once: dict[tuple[str, float, int, tuple[int, ...], float], tuple[Any, Any]] = {}
        """Each load judged in this process, by its inputs: a capacity search and the replica
        count after it probe the same rate on the same replicas and seed (the scenario's rate on
        its fleet), and a run depends on nothing else, so the second asks for the first's."""
        self._ready: dict[tuple[str, float, int, tuple[int, ...]], Any] = {}
        """Results ``prefetch`` simulated in worker processes, handed out once by ``result``."""
        self.sources: set[str] = set()
        self.notes: set[str] = set()
        self.resolved: dict[str, Any] = {} if resolved is None else resolved
        """Each candidate by name as it runs: a ``schedule = "auto"`` one with its k schedule,
        computed once per search (shared with the search's other loads) instead of once per probe.
        Safe because the schedule reads the profile, the candidate, the segments' acceptance and
        lengths and the engine, never the rate, replica count or duration a probe changes
        (``sim.model.k_schedule.candidate_schedule``; tests/sim/decisions/test_schedule_once.py)."""

    def candidate_of(self, name: str) -> Any:
        """``name``'s candidate as every probe runs it (its ``schedule = "auto"`` computed once)."""
        cand = self.resolved.get(name)
        if cand is None:
            from sim.model.k_schedule import resolve_candidate

            cand = resolve_candidate(self.scenario, self._fleet_profile(name), self.scenario.candidate(name))
            self.resolved[name] = cand
        return cand

    def _fleet_profile(self, candidate: str) -> Any:
        return (self.profiles or {}).get(candidate, self.profile)

    def profile_of(self, candidate: str) -> Any:
        """The profile ``candidate`` runs on (its own fleet's, its draft's host time scaled where
        ``host_scale`` names it)."""
        prof = self._fleet_profile(candidate)
        x = (self.host_scale or {}).get(candidate)
        if x is None:
            return prof
        if candidate not in self._scaled:
            from sim.decisions.host_doubt import scaled
            from sim.results.runner import resolve_profile

            self._scaled[candidate] = scaled(resolve_profile(self.scenario, prof),
                                             self.scenario.candidate(candidate).proposer, x)
        return self._scaled[candidate]

    def result(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int],
               stretch: float = 1.0) -> Any:
        """The full ``run_scenario`` result of one candidate at one load (``stretch`` × as long)."""
        sc = at_load(self.scenario, rate, replicas, self.min_requests)
        if stretch != 1.0:
            sc = with_duration(sc, sc.run.duration_s * stretch)
        self._spend(sc, len(seeds))
        key = (candidate, rate, replicas, tuple(seeds))
        res = self._ready.pop(key) if stretch == 1.0 and key in self._ready else self.simulate(sc, candidate, seeds)
        self.sources.update(res.sources)
        self.notes.update(res.notes)
        return res

    def simulate(self, sc: Any, candidate: str, seeds: Sequence[int]) -> Any:
        """``run_scenario`` of one candidate of the probed scenario ``sc`` (nothing recorded)."""
        factory = None
        if self.timer_scale != 1.0:
            from sim.model.step_time import ProfileStepTimer

            layout, scale = sc.fleet.engine.kv_layout, self.timer_scale
            factory = lambda p: ProfileStepTimer(p, kv_layout=layout, scale=scale)  # noqa: E731
        profile = self.profiles or self.profile
        if (self.host_scale or {}).get(candidate) is not None:
            profile = {**(self.profiles or {}), candidate: self.profile_of(candidate)}
        return self._run(sc, profile=profile, candidates=[self.candidate_of(candidate)],
                         seeds=list(seeds), step_timer_factory=factory, acceptance_shift=self.acceptance_shift)

    def prefetch(self, jobs: Sequence[tuple[str, float, int, tuple[int, ...]]], workers: int) -> None:
        """Simulate independent loads ``(candidate, rate, replicas, seeds)`` on ``workers``
        processes before ``result`` asks for them with the same arguments. Why it changes
        nothing: a run depends only on its scenario, profile and seeds, never on what ran
        before it, so the results are the ones ``result`` would compute, bit for bit."""
        todo = list(dict.fromkeys(j for j in jobs if j not in self._ready))
        if workers <= 1 or len(todo) < 2:
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        for name in dict.fromkeys(j[0] for j in todo):  # schedules computed here, once, not per worker
            self.candidate_of(name)
        state = (self.scenario, self.profile, self.criteria, self.min_requests, None, self.timer_scale,
                 self.profiles, self.resolved)
        ctx = mp.get_context("spawn")  # no fork of a parent holding threads (polars)
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=ctx,
                                 initializer=_init_worker, initargs=(state,)) as pool:
            for job, res in zip(todo, pool.map(_simulate_job, todo), strict=True):
                self._ready[job] = res

    def _spend(self, sc: Any, runs: int) -> None:
        """The search's simulated request-steps so far stay under the work limit (one line
        naming the scenario and the total when they would not), so no search runs for hours."""
        from sim.contracts.work_limits import hashed_block_size, max_request_steps, workload_size

        n, steps = workload_size(sc.workload, sc.run, None, hashed_block_size(sc))
        self.work += n * steps * runs
        if self.work > max_request_steps():
            raise SpecplanError(
                f"{self.scenario.origin or 'scenario'}: the capacity search would simulate about "
                f"{self.work:.3g} request-steps, over the limit of {max_request_steps():,} "
                "(SPECPLAN_MAX_REQUEST_STEPS); lower --target-rate, --duration or --max-evals"
            )

    def summary(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int]) -> Any:
        return self._judged(candidate, rate, replicas, seeds)[0]

    def _judged(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int],
                stretch: float = 1.0) -> tuple[Any, Any]:
        """The summary and queue trend of one load: judged once per process, and from
        ``cache_dir`` when that probe finished before (a rerun after Ctrl-C or kill -9 redoes
        nothing finished)."""
        once = (candidate, rate, replicas, tuple(seeds), stretch)
        if once not in self._judged_once:
            self._judged_once[once] = self._judged_new(candidate, rate, replicas, seeds, stretch)
        return self._judged_once[once]

    def _judged_new(self, candidate: str, rate: float, replicas: int, seeds: Sequence[int],
                    stretch: float) -> tuple[Any, Any]:
        import json
        from pathlib import Path

        import polars as pl

        from sim.decisions.steady_state import QueueTrend, queue_trend
        from sim.results.atomic_io import ensure_dir, write_parquet_atomic, write_text_atomic

        if self.cache_dir is None:
            res = self.result(candidate, rate, replicas, seeds, stretch)
            return res.summary, queue_trend(res.requests)
        sc = at_load(self.scenario, rate, replicas, self.min_requests)
        if stretch != 1.0:
            sc = with_duration(sc, sc.run.duration_s * stretch)
        key = _probe_key(sc, self._fleet_profile(candidate), candidate, seeds, self.timer_scale,
                         (self.acceptance_shift or {}).get(candidate), (self.host_scale or {}).get(candidate))
        base = Path(self.cache_dir) / key
        done = base.with_suffix(".json")
        if done.is_file() and base.with_suffix(".parquet").is_file():
            meta = json.loads(done.read_text(encoding="utf-8"))
            self.sources.update(meta["sources"])
            self.notes.update(meta["notes"])
            self.reused += 1
            return pl.read_parquet(base.with_suffix(".parquet")), QueueTrend(*meta["trend"])
        res = self.result(candidate, rate, replicas, seeds, stretch)
        trend = queue_trend(res.requests)
        ensure_dir(self.cache_dir, "probe folder")
        write_parquet_atomic(res.summary, base.with_suffix(".parquet"))
        # the .json marks the probe finished; written last, so a torn probe is redone
        write_text_atomic(done, json.dumps({"sources": sorted(res.sources), "notes": sorted(res.notes),
                                            "trend": [trend.state, trend.growth_s, trend.first_half_wait_s,
                                                      trend.requests]}))
        return res.summary, trend

    def probe(self, candidate: str, rate: float, seed: int, replicas: int) -> Probe:
        """Judge one seed at ``rate``; a probe that passes while its queue grows
        (``sim.decisions.steady_state``) is run again ×2, ×4 as long, and fails as a runaway queue if it
        still grows at the longest. A failing probe whose queue grows says so first."""
        import polars as pl

        # a recorded trace is judged on its one slice: a longer run would add idle time or
        # another slice (docs/decisions.md, "Traces at another rate"), never more of the same
        stretches = (1.0,) if self.scenario.workload.arrival == "trace" else PROBE_STRETCHES
        for stretch in stretches:
            summary, trend = self._judged(candidate, rate, replicas, [seed], stretch)
            rows = summary.filter((pl.col("candidate") == candidate) & (pl.col("segment") == "all"))
            if rows.height != 1:
                raise RuntimeError(f"run_scenario summary has {rows.height} 'all' rows for {candidate}")
            row = rows.row(0, named=True)
            verdict = self.criteria.judge(row, rate)
            if not trend.growing or not verdict.conclusive:
                break
            if not verdict.sustained:
                verdict = Probe(rate, False, verdict.margin, f"runaway queue ({trend.describe()}); {verdict.reason}")
                break
        else:
            verdict = Probe(rate, False, None, f"runaway queue: still growing at {stretch:g}× the probe's "
                                                f"length ({trend.describe()})")
        self.rows.append({**row, "rate": rate, "replicas": replicas, "seed": seed})
        return verdict


_WORKER_LOAD: SimulatedLoad | None = None


def _init_worker(state: tuple[Any, ...]) -> None:
    """Process-pool initializer: the scenario and profile arrive once per worker."""
    global _WORKER_LOAD
    _WORKER_LOAD = SimulatedLoad(*state)


def _simulate_job(job: tuple[str, float, int, tuple[int, ...]]) -> Any:
    candidate, rate, replicas, seeds = job
    load = _WORKER_LOAD
    assert load is not None
    return load.simulate(at_load(load.scenario, rate, replicas, load.min_requests), candidate, seeds)


def _probe_key(sc: Any, profile: Any, candidate: str, seeds: Sequence[int], timer_scale: float = 1.0,
               shift: dict[str, float] | None = None, host_scale: float | None = None) -> str:
    """What a probe's result depends on: the probed scenario, the profile's bytes, candidate,
    seeds, the step-time scale of a profile-band search, the acceptance an interval's end moves
    the candidate's segments to and the multiple of its draft's assumed host time
    (sim.decisions.sweep's digest, so both resume the same way; a key without the last three is
    the one written before they existed)."""
    import hashlib
    from pathlib import Path

    from sim.decisions.sweep_grid import content_digest

    origin = getattr(profile, "origin", None) if profile is not None else None
    if origin is None and sc.profile_path is not None:
        origin = str(sc.profile_path)
    prof = getattr(profile, "name", "")
    if origin and Path(origin).is_file():
        prof = hashlib.sha256(Path(origin).read_bytes()).hexdigest()
    extra: list[Any] = [] if timer_scale == 1.0 else [timer_scale]
    if shift:
        extra.append({"acceptance_shift": {k: float(v) for k, v in sorted(shift.items())}})
    if host_scale is not None:
        extra.append({"draft_host_scale": float(host_scale)})
    return content_digest(sc.to_dict(), prof, candidate, list(seeds), *extra)[:24]
