"""Scenario files (TOML) → frozen, validated dataclasses; dotted-path overrides for what-ifs.

This module holds the document (``Scenario``), its [run] and [slo] tables and the loader; the
other tables are ``workload_config``, ``fleet_config`` and ``candidate``; the generic reading
and writing is ``dataclass_mapping``, ``scenario_overrides`` and ``toml_writer``.

The format is documented in docs/scenario-format.md. Every problem a user can fix is one
``SpecplanError`` line: ``file: dotted.field[i].name: problem; valid: …``. Unknown keys are
errors, because a typo must never silently fall back to a default.

Paths (``fleet.profile``, ``workload.trace.path``) are resolved against the scenario file's
folder first, then the current directory. ``load_scenario`` checks that a trace exists (the
workload cannot be generated without it); the profile is loaded and checked by the caller
(``Scenario.require_profile_path()`` gives a clear error when it is missing), so scenarios can
be parsed, tested and overridden before a profile has been measured. Fields that name files are
declared with ``scenario_paths.path_field``, so a scenario from someone else (a dashboard upload)
can have every one of them confined to allowed folders before it is loaded.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sim.contracts.candidate import BASELINE_NAME, Candidate
from sim.contracts.dataclass_mapping import from_mapping, internal_field, to_plain
from sim.contracts.errors import FieldError, SpecplanError, clip, echo, read_text
from sim.contracts.fleet_config import FleetConfig, NamedFleet
from sim.contracts.input_limits import check_nesting, check_tree
from sim.contracts.scenario_checks import check_scenario
from sim.contracts.scenario_fields import looked_in, not_a_file, resolve_path
from sim.contracts.scenario_overrides import apply_override, plain_value
from sim.contracts.toml_writer import dumps_toml, inline_value
from sim.contracts.two_route import TwoRouteConfig
from sim.contracts.workload_config import WorkloadConfig

__all__ = ["RunConfig", "Scenario", "SloConfig", "load_scenario", "parse_toml_text"]

SloName = Literal["ttft", "tpot", "e2el", "pause"]

# --------------------------------------------------------------------------------------------
# [run]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """How long to generate arrivals, what to exclude as warm-up, and which seeds to replicate."""

    duration_s: float
    """Simulated seconds of arrivals (open loop): arrivals fall in [0, duration_s)."""
    warmup_s: float = 0.0
    """Requests arriving before this are simulated but excluded from metrics."""
    seeds: tuple[int, ...] = (0,)
    """One replication per seed; results give the mean and a 95% CI over them."""
    drain: bool = True
    """Keep simulating after the last arrival until every request has ended."""
    max_seeds: int = 10
    """Replication budget of a decision: while it is undetermined, seeds (the next integers) are
    added until it is resolved or this many ran; never fewer than ``seeds``."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_seeds <= 1000:
            raise FieldError("max_seeds", f"must be in 1..1000, got {self.max_seeds}")
        if not self.duration_s > 0:
            raise FieldError("duration_s", f"must be > 0 seconds, got {self.duration_s}")
        if self.warmup_s < 0 or self.warmup_s >= self.duration_s:
            raise FieldError(
                "warmup_s", f"must be ≥ 0 and < duration_s ({self.duration_s}), got {self.warmup_s}"
            )
        if not self.seeds:
            raise FieldError("seeds", "must list at least one seed, e.g. [1, 2, 3]")
        for i, s in enumerate(self.seeds):
            if s < 0:
                raise FieldError(f"seeds[{i}]", f"must be ≥ 0, got {s}")
        if len(set(self.seeds)) != len(self.seeds):
            raise FieldError("seeds", f"must be distinct, got {list(self.seeds)}")

    @property
    def measured_s(self) -> float:
        """Length of the measurement window (arrivals after warm-up)."""
        return self.duration_s - self.warmup_s

# --------------------------------------------------------------------------------------------
# [slo]


@dataclass(frozen=True, slots=True)
class SloConfig:
    """What users require; a request is "good" only if it meets every listed limit."""

    ttft_ms: float | None = None
    """Time to first token limit (ms)."""
    tpot_ms: float | None = None
    """Mean time per output token after the first (ms)."""
    e2el_ms: float | None = None
    """End-to-end latency limit (ms)."""
    pause_ms: float | None = None
    """Longest gap between two bursts of tokens the user sees (ms)."""
    percentile: float = 95.0
    """Percentile at which capacity search and decisions hold the SLOs, in (0, 100)."""

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "e2el_ms", "pause_ms"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise FieldError(name, f"must be > 0 ms, got {v}")
        if not 0 < self.percentile < 100:
            raise FieldError("percentile", f"must be in (0, 100), got {self.percentile}")

    @property
    def limits(self) -> dict[str, float]:
        """The set limits by metric name ("ttft", "tpot", "e2el", "pause") → ms."""
        out: dict[str, float] = {}
        for name in ("ttft", "tpot", "e2el", "pause"):
            v = getattr(self, f"{name}_ms")
            if v is not None:
                out[name] = float(v)
        return out

# --------------------------------------------------------------------------------------------
# Scenario


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole scenario: traffic, SLOs, fleet, candidates to compare and run length."""

    name: str
    """Short identifier (defaults to the file name without .toml)."""
    run: RunConfig
    """[run]: duration, warm-up, seeds."""
    workload: WorkloadConfig
    """[workload]: arrivals and segments."""
    fleet: FleetConfig = field(default_factory=FleetConfig)
    """[fleet]: profile, replicas, engine, admission, restart, prices."""
    slo: SloConfig = field(default_factory=SloConfig)
    """[slo]: latency limits; without any, goodput and SLO attainment are undefined."""
    candidates: tuple[Candidate, ...] = ()
    """[[candidates]]: the baseline (added first if absent) and speculative configurations."""
    description: str = ""
    """One line for humans."""
    fleets: dict[str, NamedFleet] | None = None
    """[fleets.NAME]: other hardware (profile, tensor parallel size, prices) a candidate may run
    on with ``fleet = "NAME"``, so one scenario compares GPU types with and without speculation."""
    two_routes: tuple[TwoRouteConfig, ...] = ()
    """[[two_routes]]: a speculative and a baseline pool behind a router by load, sized and priced
    together (the deployable form of a load-dependent policy; ``sim.decisions.two_route``)."""
    origin: str | None = internal_field()
    """File the scenario came from (for error messages); None when built in code."""
    base_dir: str | None = internal_field()
    """Folder relative paths resolve against (the scenario file's folder)."""

    def __post_init__(self) -> None:
        cands = self.candidates
        if not any(c.is_baseline for c in cands):
            for i, c in enumerate(cands):
                if c.name != BASELINE_NAME:
                    continue
                if c.speculates:
                    raise FieldError(f"candidates[{i}].name", "a speculative candidate is named \"baseline\"; "
                                     "rename it (the baseline, speculation = \"off\", is added under that name)")
                raise FieldError(f"candidates[{i}].prefix_caching", "true makes \"baseline\" a cache-on candidate, "
                                 "not the baseline; rename it, or remove prefix_caching (the baseline, "
                                 "speculation = \"off\", is added under that name)")
            # normalising the candidate list is part of construction, not a later mutation
            object.__setattr__(self, "candidates", (Candidate(BASELINE_NAME, "off"), *cands))
        check_scenario(self)

    def fleet_for(self, candidate: Candidate | str) -> FleetConfig:
        """The fleet ``candidate`` runs on: [fleet], with a named fleet's hardware when it has one."""
        c = self.candidate(candidate) if isinstance(candidate, str) else candidate
        if c.fleet is None:
            return self.fleet
        return (self.fleets or {})[c.fleet].applied_to(self.fleet)

    def for_candidate(self, candidate: Candidate | str) -> Scenario:
        """This scenario with [fleet] replaced by the candidate's fleet (itself when it has none)."""
        import dataclasses

        c = self.candidate(candidate) if isinstance(candidate, str) else candidate
        return self if c.fleet is None else dataclasses.replace(self, fleet=self.fleet_for(c))

    @property
    def has_named_fleets(self) -> bool:
        """True when some candidate runs on a [fleets.NAME] table."""
        return any(c.fleet is not None for c in self.candidates)

    # ---- derived values

    @property
    def baseline(self) -> Candidate:
        """The no-speculation candidate every other is compared with (always present): the one
        on [fleet] when another fleet has its own baseline too."""
        bases = [c for c in self.candidates if c.is_baseline]
        return next((c for c in bases if c.fleet is None), bases[0])

    @property
    def speculative(self) -> tuple[Candidate, ...]:
        """Every speculating candidate, in file order."""
        return tuple(c for c in self.candidates if c.speculates)

    @property
    def candidate_names(self) -> tuple[str, ...]:
        """Candidate names in order (baseline included)."""
        return tuple(c.name for c in self.candidates)

    def candidate(self, name: str) -> Candidate:
        """The candidate called ``name``; SpecplanError listing the valid names otherwise."""
        for c in self.candidates:
            if c.name == name:
                return c
        raise SpecplanError(
            f"{self.origin or 'scenario'}: candidates: no candidate {echo(name, 60)}; "
            f"valid: {', '.join(self.candidate_names)}"
        )

    @property
    def profile_path(self) -> Path | None:
        """Resolved absolute profile path (may not exist; see ``require_profile_path``)."""
        return self.fleet.profile_path

    @property
    def trace_path(self) -> Path | None:
        """Resolved absolute trace path for trace arrivals, else None."""
        t = self.workload.trace
        return None if t is None else t.resolved_path

    def require_profile_path(self, candidate: Candidate | None = None) -> Path:
        """The profile path (of ``candidate``'s fleet when given), or a SpecplanError saying
        where it was looked for."""
        f = self.fleet if candidate is None else self.fleet_for(candidate)
        where = "fleet.profile" if candidate is None or candidate.fleet is None else f"fleets.{candidate.fleet}.profile"
        if f.profile is None:
            raise SpecplanError(
                f"{self.origin or 'scenario'}: fleet.profile: not set; add "
                "profile = \"../profiles/NAME.json\" under [fleet] or pass --profile"
            )
        p = resolve_path(f.profile, f.base_dir)
        if not p.is_file():
            raise SpecplanError(
                f"{self.origin or 'scenario'}: {where}: {not_a_file(p)}; looked in "
                f"{looked_in(f.profile, f.base_dir)} (measure one with `specplan profile`)"
            )
        return p

    # ---- construction, serialisation, overrides

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], origin: str | None = None, base_dir: str | Path | None = None
    ) -> Scenario:
        """Build and validate a scenario from a plain mapping (a parsed TOML document).

        ``origin`` names the source in error messages; ``base_dir`` is the folder relative
        paths resolve against (defaults to the folder of ``origin`` when it is a file path).
        """
        if not isinstance(d, Mapping):
            raise SpecplanError(f"{origin or 'scenario'}: expected a table, got {type(d).__name__}")
        check_tree(d, origin or "scenario", "scenario")
        if base_dir is None and origin is not None:
            base_dir = Path(origin).parent
        ctx = {"origin": origin, "base_dir": None if base_dir is None else str(base_dir)}
        data = dict(d)
        if "name" not in data and origin is not None:
            data["name"] = Path(origin).stem
        try:
            return from_mapping(cls, data, "", ctx)
        except FieldError as exc:
            raise SpecplanError(f"{origin or 'scenario'}: {exc.field or '(top level)'}: {exc.problem}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict in the TOML layout (None fields and loader-internal fields omitted);
        ``Scenario.from_dict(s.to_dict(), s.origin, s.base_dir) == s``."""
        return to_plain(self)

    def to_toml(self) -> str:
        """The scenario as TOML text that loads back to an equal scenario."""
        return dumps_toml(self.to_dict())

    def with_overrides(self, overrides: Mapping[str, object]) -> Scenario:
        """A new, fully re-validated scenario with dotted-path fields replaced.

        Paths: ``"workload.rate"``, ``"fleet.engine.memory_utilization"``, ``"run.seeds"``,
        ``"candidates[ngram-k3].k"`` (list items by name or index),
        ``"workload.segments[support-en].share"``. A value of None removes the field (back to
        its default). Unknown paths raise SpecplanError naming the path and the valid keys.
        """
        data = self.to_dict()
        for path, value in overrides.items():
            apply_override(Scenario, data, str(path), value, self.origin)
        desc = clip(", ".join(f"{k} = {clip(inline_value(plain_value(v)), 60)}" for k, v in overrides.items()), 200)
        try:
            return Scenario.from_dict(data, self.origin, self.base_dir)
        except SpecplanError as exc:
            raise SpecplanError(f"{exc} (after overrides {desc})") from None

    def with_load_scale(self, factor: float) -> Scenario:
        """The same scenario with every arrival rate multiplied by ``factor`` (> 0).

        Works for every arrival kind: poisson/gamma scale ``rate``, piecewise scales every
        point's rate. A trace replays **the same requests** in ``1/factor`` of the time: the
        rows the scenario replays stay pinned (``window_s`` fixed), ``rate_scale`` × factor
        divides every gap, and the run, its warm-up and a restart's time ÷ factor, so the slice
        keeps its bursts and order and the same requests fall in the warm-up (never a longer
        or another slice: docs/decisions.md, "Traces at another rate"). Used by capacity search.
        """
        if not factor > 0 or not math.isfinite(factor):
            raise SpecplanError(f"load scale must be a finite number > 0, got {factor}")
        w = self.workload
        if w.arrival == "concurrency":
            raise SpecplanError(f"{self.origin or 'scenario'}: workload.arrival: a load scale "
                                "multiplies an arrival rate; closed-loop clients have none "
                                "(vary workload.concurrency instead)")
        if w.rate is not None:
            return self.with_overrides({"workload.rate": w.rate * factor})
        if w.piecewise is not None:
            pts = [[t, r * factor] for t, r in w.piecewise.points]
            return self.with_overrides({"workload.piecewise.points": pts})
        assert w.trace is not None
        t, run, rs = w.trace, self.run, self.fleet.restart
        # rows replayed: offsets in [start_s, start_s + window) landing before the run's end
        window = min(t.effective_window_s(run.duration_s), run.duration_s * t.rate_scale)
        over: dict[str, object] = {"workload.trace.rate_scale": t.rate_scale * factor,
                                   "workload.trace.window_s": window,
                                   "run.duration_s": run.duration_s / factor,
                                   "run.warmup_s": run.warmup_s / factor}
        if rs is not None:  # the restart stays at the same request; loading weights takes as long
            over["fleet.restart.at_s"] = rs.at_s / factor
        return self.with_overrides(over)


def parse_toml_text(text: str, origin: str) -> dict[str, Any]:
    """``tomllib.loads`` with the loader's error style: ``origin:line: TOML syntax error: …``."""
    check_nesting(text, origin, "TOML", toml=True)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise SpecplanError(f"{origin}: TOML nested too deeply to parse") from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", None) or str(exc)
        if line is None:
            m = re.search(r"at line (\d+)", str(exc))
            line = int(m.group(1)) if m else None
            msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", msg)
        loc = f"{origin}:{line}" if line else origin
        raise SpecplanError(f"{loc}: TOML syntax error: {msg}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file; SpecplanError (with file:line for syntax) on any
    problem."""
    p = Path(path)
    data = parse_toml_text(read_text(p, "scenario"), str(p))
    return Scenario.from_dict(data, str(p), p.resolve().parent)
