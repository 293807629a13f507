"""A finished result seen with one candidate's per-request records replaced.

Why: the acceptance interval's ends (``sim.decisions.acceptance_doubt``) and the assumed draft
host time's (``sim.decisions.host_doubt``) re-run one candidate; the decision is then taken again
by the same function on the same result, with only that candidate's records swapped in, so no
other candidate is simulated twice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def rerun_names(result: Any, estimate: Any) -> list[str]:
    """The speculative candidates a check may re-run against ``estimate`` (the decision as taken):
    none when there is nothing to compare (one candidate, no seeds) or the estimate is itself
    undetermined."""
    sc = result.scenario
    if not result.seeds or len(result.candidates) < 2 or estimate.outcome == "undetermined":
        return []
    return [n for n in result.candidates if n != sc.baseline.name and sc.candidate(n).speculates]


@dataclass
class Tally:
    """A check's re-runs: in all (reported to ``progress`` against ``total``) and per candidate."""

    total: int
    label: str
    progress: Callable[[int, int, str], None] | None = None
    done: int = 0
    each: dict[str, int] = field(default_factory=dict)

    def ran(self, name: str) -> None:
        self.done += 1
        self.each[name] = self.each.get(name, 0) + 1
        if self.progress is not None:
            self.progress(self.done, self.total, f"{self.label}: {name}")


def rerun_decision(result: Any, cand: Any, profile: Any, *, device: str, tally: Tally, **simulate: Any) -> Any:
    """The decision on ``result`` with candidate ``cand`` simulated again on ``profile`` (its
    ``simulate`` keywords: an acceptance shift, …) on every seed of ``result``, serving the requests
    ``run_scenario`` served that seed (common random numbers); each run counted in ``tally``."""
    import numpy as np

    from sim.contracts.trace import read_trace
    from sim.decisions.answer import answer_of
    from sim.results.request_parts import RequestParts, pack
    from sim.results.simulation import simulate_once
    from sim.workload.workload import generate_requests

    sc = result.scenario
    trace = read_trace(sc.workload.trace) if sc.workload.arrival == "trace" else None
    frames = []
    for seed in result.seeds:
        specs = (None if sc.workload.arrival == "concurrency" else
                 generate_requests(sc, rng=np.random.SeedSequence(seed).spawn(2)[0], trace=trace))
        run = simulate_once(sc.for_candidate(cand), profile, cand, seed, requests=specs, keep_itl=False, **simulate)
        frames.append(pack(run.requests))
        tally.ran(cand.name)
    return answer_of(with_candidate_runs(result, cand.name, RequestParts(tuple(frames))), device=device).whole


def with_candidate_runs(result: Any, name: str, parts: Any) -> Any:
    """``result`` whose per-request records for candidate ``name`` are ``parts``."""
    return _Result(result, name, parts)


@dataclass(frozen=True)
class _Result:
    """``result`` with ``name``'s per-request records replaced by ``parts`` (what
    ``facts.fleet_facts`` reads: scenario, candidates, seeds, profiles, request_parts)."""

    base: Any
    name: str
    parts: Any

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.base, attr)

    @property
    def request_parts(self) -> Any:
        return _Parts(self.base.request_parts, self.name, self.parts)


@dataclass(frozen=True)
class _Parts:
    base: Any
    name: str
    parts: Any

    def frames(self) -> Any:
        import polars as pl

        from sim.results import metric_names as mn

        for f in self.base.frames():
            kept = f.filter(pl.col(mn.CANDIDATE) != self.name)
            if kept.height:
                yield kept
        yield from self.parts.frames()
