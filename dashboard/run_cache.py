"""Finished runs kept between what-ifs, one entry per candidate and load point.

A what-if re-simulates only what it changed: runs are independent per candidate (the same seed
gives the same workload and draws), so each candidate's frames are stored under a key of
everything that decides its run, and a view is assembled from stored and fresh pieces.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import polars as pl

from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.results import metric_names as mn
from sim.results.request_parts import RequestParts
from sim.results.runner import ScenarioResult, aggregate, run_scenario

Progress = Callable[[int, int, str], None]


class RunCache(Protocol):
    """Where finished runs are kept between what-ifs (a ``diskcache.Cache`` or a dict)."""

    def get(self, key: str, default: Any = None) -> Any: ...
    def __setitem__(self, key: str, value: Any) -> None: ...


def digest(*parts: object) -> str:
    """A short content hash of JSON-able parts."""
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def run_keys(scenario: Scenario, profile_key: str) -> dict[str, str]:
    """One cache key per candidate: everything that decides its run except the other candidates
    (runs are independent per candidate: the same seed gives the same workload and draws)."""
    d = scenario.to_dict()
    cands = d.pop("candidates", [])
    base = digest(d, str(scenario.trace_path), profile_key)
    own = {c.fleet: _file_digest(scenario.fleet_for(c).profile_path) for c in scenario.candidates if c.fleet}
    return {c.name: f"run:{digest(base, cd) if c.fleet is None else digest(base, cd, own[c.fleet])}"
            for c, cd in zip(scenario.candidates, cands, strict=True)}  # [fleets.NAME]: its profile's content


def _file_digest(path: Any) -> str | None:
    """Content hash of a file (None when absent: the run itself then says it is missing)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:32]
    except (OSError, AttributeError):
        return None


def ipc_bytes(frame: pl.DataFrame) -> bytes:
    """A frame as compressed Arrow IPC bytes (what the cache stores)."""
    buf = io.BytesIO()
    frame.write_ipc(buf, compression="zstd")
    return buf.getvalue()


Piece = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[str], list[str]]
"""One candidate's share of a result: its per-seed, requests and steps frames, and the provenance
and notes lines about it."""

Stored = tuple[bytes, bytes, bytes, list[str], list[str]]
"""A piece as the cache keeps it (frames as compressed Arrow IPC)."""


def piece(result: ScenarioResult, name: str) -> Piece:
    """Candidate ``name``'s share of ``result``."""
    def own(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter(pl.col(mn.CANDIDATE) == name)

    others = [c for c in result.candidates if c != name]
    sources = [ln for ln in result.sources if not any(ln.startswith(f"{o}:") for o in others)]
    notes = [ln for ln in result.notes if not any(ln.startswith(f"{o} ") or ln.startswith(f"{o}:") for o in others)]
    return own(result.per_seed), own(result.requests), own(result.steps), sources, notes


def encode(p: Piece) -> Stored:
    return ipc_bytes(p[0]), ipc_bytes(p[1]), ipc_bytes(p[2]), p[3], p[4]


def decode(stored: Stored) -> Piece:
    frames = [pl.read_ipc(io.BytesIO(b)) for b in stored[:3]]
    return frames[0], frames[1], frames[2], list(stored[3]), list(stored[4])


def assemble(scenario: Scenario, pieces: Mapping[str, Piece],
             only: Sequence[str] | None = None) -> ScenarioResult:
    """A result from every candidate's piece (or those in ``only``), baseline first (as
    ``run_scenario`` orders them).
    Fresh pieces come in as frames, stored ones decoded: a run just simulated is not read back
    from its bytes (~3 ms a frame)."""
    names = [c.name for c in sorted(scenario.candidates, key=lambda c: not c.is_baseline)
             if only is None or c.name in only]
    per_seed, requests, steps = ([pieces[n][i] for n in names] for i in range(3))
    per_seed_df = pl.concat(per_seed, how="vertical")
    return ScenarioResult(
        scenario=scenario, summary=aggregate(per_seed_df), per_seed=per_seed_df,
        request_parts=RequestParts.of_frames(requests), steps=pl.concat(steps, how="vertical"),
        sources=tuple(dict.fromkeys(ln for n in names for ln in pieces[n][3])),
        notes=tuple(dict.fromkeys(ln for n in names for ln in pieces[n][4])),
        candidates=tuple(names), seeds=tuple(scenario.run.seeds),
    )


class PointRunner:
    """Runs load points of a scenario for some of its candidates, taking from the cache what it
    holds and keeping what it simulates; counts both and reports progress over the plan."""

    def __init__(self, scenario: Scenario, profile: Profile, cache: RunCache | None,
                 profile_key: str | None, progress: Progress | None) -> None:
        self.scenario, self.profile, self.cache, self.key = scenario, profile, cache, profile_key
        self.progress = progress
        self.seeds = len(scenario.run.seeds)
        self.done = self.total = 0
        self.reused = self.simulated = 0
        self._at: dict[float, Scenario] = {}
        self._key_of: dict[int, dict[str, str]] = {}

    def _scenario(self, f: float) -> Scenario:
        """The scenario at load factor ``f`` (built once: ~10 ms each, with its cache keys)."""
        if f not in self._at:
            self._at[f] = self.scenario if f == 1.0 else self.scenario.with_load_scale(f)
        return self._at[f]

    def expect(self, runs: int) -> None:
        """Add ``runs`` candidate runs (each over every seed) to the progress bar's total."""
        self.total += runs * self.seeds

    def uncached(self, factors: Sequence[float], names: Sequence[str]) -> int:
        """How many of ``factors`` × ``names`` the run cache does not hold."""
        n = 0
        for f in factors:
            keys = self._keys(self._scenario(f))
            n += sum(1 for name in names if not keys or self.cache is None or self.cache.get(keys[name]) is None)
        return n

    def _keys(self, s: Scenario) -> dict[str, str]:
        if self.cache is None or not self.key:
            return {}
        if id(s) not in self._key_of:
            self._key_of[id(s)] = run_keys(s, self.key)
        return self._key_of[id(s)]

    def run(self, f: float, names: Sequence[str]) -> tuple[Scenario, ScenarioResult]:
        """Candidates ``names`` at load factor ``f``: (the scenario at that load, their result)."""
        s = self._scenario(f)
        keys = self._keys(s)
        hits = {n: self.cache.get(keys[n]) for n in names} if keys and self.cache is not None else {}
        hits = {n: v for n, v in hits.items() if v is not None}
        missing = [n for n in names if n not in hits]

        def point_progress(done: int, _total: int, label: str, _base: int = self.done) -> None:
            if self.progress is not None:
                self.progress(_base + done, max(self.total, _base + done), f"load ×{f:g}: {label}")

        fresh = run_scenario(s, self.profile, candidates=missing, progress=point_progress) if missing else None
        self.done += len(missing) * self.seeds
        self.simulated += len(missing)
        self.reused += len(names) - len(missing)
        if not keys or self.cache is None:
            assert fresh is not None
            return s, fresh
        pieces = {n: decode(v) for n, v in hits.items()}
        for name in missing:
            assert fresh is not None
            pieces[name] = piece(fresh, name)
            self.cache[keys[name]] = encode(pieces[name])
        return s, assemble(s, pieces, names)
