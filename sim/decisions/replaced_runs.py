"""A finished result seen with one candidate's per-request records replaced.

Why: the acceptance interval's ends re-run one candidate; the decision is then taken again by
the same function on the same result, with only that candidate's records swapped in, so no
other candidate is simulated twice (``sim.decisions.acceptance_doubt``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
