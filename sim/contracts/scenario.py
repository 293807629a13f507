"""Scenario files (TOML) → frozen, validated dataclasses; dotted-path overrides for what-ifs.

The format is documented in docs/scenario-format.md. Every problem a user can fix is one
``SpecplanError`` line: ``file: dotted.field[i].name: problem; valid: …``. Unknown keys are
errors, because a typo must never silently fall back to a default.

Paths (``fleet.profile``, ``workload.trace.path``) are resolved against the scenario file's
folder first, then the current directory. ``load_scenario`` checks that a trace exists (the
workload cannot be generated without it); the profile is loaded and checked by the caller
(``Scenario.require_profile_path()`` gives a clear error when it is missing), so scenarios can
be parsed, tested and overridden before a profile has been measured.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sim.contracts.errors import FieldError, SpecplanError, read_text
from sim.contracts.input_limits import check_nesting, check_tree, path_problem
from sim.contracts.lengths import LengthDist

__all__ = [
    "AcceptanceRef",
    "AdaptiveConfig",
    "AdmissionConfig",
    "Candidate",
    "EngineConfig",
    "FieldError",
    "FleetConfig",
    "LengthDist",
    "PiecewiseConfig",
    "RestartConfig",
    "RunConfig",
    "Scenario",
    "SegmentConfig",
    "SloConfig",
    "TraceConfig",
    "WorkloadConfig",
    "load_scenario",
    "resolve_path",
]

ArrivalName = Literal["poisson", "gamma", "piecewise", "trace"]
PiecewiseShape = Literal["step", "linear", "daily"]
RoutingName = Literal["round_robin", "least_outstanding"]
OnRestart = Literal["reroute", "drop"]
Fallback = Literal["baseline", "same"]
Speculation = Literal["on", "off"]
KvLayout = Literal["paged", "padded"]
PolicyName = Literal["fixed", "off_above_batch", "k_by_batch", "adaptive"]
SloName = Literal["ttft", "tpot", "e2el", "pause"]

_NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")
_INTERNAL = {"internal": True}


def _internal() -> Any:
    """A field set by the loader (file origin, base folder), never read from or written to TOML."""
    return field(default=None, compare=False, repr=False, metadata=_INTERNAL)


def resolve_path(raw: str, base_dir: str | None) -> Path:
    """Resolve a scenario path: absolute as is; else the scenario's folder, then the cwd.

    Returns the first candidate that exists, or the scenario-folder candidate when none does
    (so an error message points where the user most likely meant).
    """
    try:
        p = Path(raw).expanduser()
    except RuntimeError:  # ~user of an unknown user: left as written, reported as not found
        p = Path(raw)
    if p.is_absolute():
        return p
    candidates = ([Path(base_dir) / p] if base_dir else []) + [Path.cwd() / p]
    for c in candidates:
        if c.exists():
            return c.resolve()
    return candidates[0].resolve()


def _looked_in(raw: str, base_dir: str | None) -> str:
    places = ([str(Path(base_dir) / raw)] if base_dir else []) + [str(Path.cwd() / raw)]
    return " or ".join(places)


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

    def __post_init__(self) -> None:
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
# [workload]


@dataclass(frozen=True, slots=True)
class PiecewiseConfig:
    """A time-varying arrival rate given by points (time, rate)."""

    shape: PiecewiseShape
    """"step": each rate holds until the next point; "linear": ramps between points;
    "daily": linear with a 24 h period, times in hours in [0, 24)."""
    points: tuple[tuple[float, float], ...]
    """[[time, rate], …]: time in seconds (hours for daily), non-decreasing; rate ≥ 0 req/s.
    Before the first point the first rate holds, after the last the last rate holds."""
    start_h: float = 0.0
    """daily only: the hour of day at simulated time 0 (e.g. 11.5 to start at 11:30)."""

    def __post_init__(self) -> None:
        if not self.points:
            raise FieldError("points", "must hold at least one [time, rate] point")
        prev = -math.inf
        for i, (t, r) in enumerate(self.points):
            if t < prev:
                raise FieldError(f"points[{i}]", f"times must be non-decreasing, {t} < {prev}")
            if t < 0:
                raise FieldError(f"points[{i}]", f"time must be ≥ 0, got {t}")
            if r < 0:
                raise FieldError(f"points[{i}]", f"rate must be ≥ 0 req/s, got {r}")
            if self.shape == "daily" and t >= 24:
                raise FieldError(f"points[{i}]", f"daily times are hours in [0, 24), got {t}")
            prev = t
        if max(r for _, r in self.points) <= 0:
            raise FieldError("points", "at least one rate must be > 0")
        if self.shape != "daily" and self.start_h != 0.0:
            raise FieldError("start_h", f"only used by shape 'daily', not {self.shape!r}")
        if not 0 <= self.start_h < 24:
            raise FieldError("start_h", f"must be in [0, 24) hours, got {self.start_h}")

    def rate_at(self, t_s: np.ndarray | float) -> np.ndarray:
        """Arrival rate (req/s) at simulated times ``t_s`` (seconds)."""
        t = np.asarray(t_s, dtype=np.float64)
        times = np.array([p[0] for p in self.points], dtype=np.float64)
        rates = np.array([p[1] for p in self.points], dtype=np.float64)
        if self.shape == "step":
            idx = np.searchsorted(times, t, side="right") - 1
            return rates[np.clip(idx, 0, len(rates) - 1)]
        if self.shape == "linear":
            return np.interp(t, times, rates)
        hours = np.mod(self.start_h + t / 3600.0, 24.0)
        if len(times) == 1:
            return np.full_like(hours, rates[0])
        return np.interp(hours, times, rates, period=24.0)

    def max_rate(self) -> float:
        """Largest rate anywhere (the thinning envelope)."""
        return max(r for _, r in self.points)

    def mean_rate(self, duration_s: float) -> float:
        """Time-averaged rate over [0, duration_s) (numerical, fine grid)."""
        n = 20_001
        t = np.linspace(0.0, duration_s, n)
        if self.shape == "step":
            # exact: integrate the step function over its breakpoints
            edges = np.unique(np.concatenate([[0.0, duration_s],
                                              [p[0] for p in self.points if 0 < p[0] < duration_s]]))
            widths = np.diff(edges)
            return float(np.sum(self.rate_at(edges[:-1]) * widths) / duration_s)
        r = self.rate_at(t)
        return float(np.sum((r[1:] + r[:-1]) * 0.5 * np.diff(t)) / duration_s)


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """Replay a CSV in the Azure LLM trace schema (TIMESTAMP,ContextTokens,GeneratedTokens)."""

    path: str
    """The CSV file, relative to the scenario's folder (then the cwd) or absolute."""
    start_s: float = 0.0
    """Start of the replayed window, seconds after the trace's first row."""
    window_s: float | None = None
    """Length of the replayed window in trace seconds; default duration_s·rate_scale, which
    exactly fills the run."""
    rate_scale: float = 1.0
    """Arrivals per second relative to the trace: 2.0 halves every gap, 0.5 doubles them."""
    base_dir: str | None = _internal()
    """Folder of the scenario file (set by the loader) for resolving ``path``."""

    def __post_init__(self) -> None:
        if not self.path:
            raise FieldError("path", "must name a CSV file")
        if why := path_problem(self.path):
            raise FieldError("path", why)
        if self.start_s < 0:
            raise FieldError("start_s", f"must be ≥ 0 seconds, got {self.start_s}")
        if self.window_s is not None and not self.window_s > 0:
            raise FieldError("window_s", f"must be > 0 seconds, got {self.window_s}")
        if not self.rate_scale > 0:
            raise FieldError("rate_scale", f"must be > 0, got {self.rate_scale}")
        if not self.resolved_path.is_file():
            raise FieldError(
                "path", f"file not found; looked in {_looked_in(self.path, self.base_dir)}"
            )

    @property
    def resolved_path(self) -> Path:
        """Absolute path of the CSV (scenario folder first, then the cwd)."""
        return resolve_path(self.path, self.base_dir)

    def effective_window_s(self, duration_s: float) -> float:
        """Trace seconds replayed for a run of ``duration_s`` simulated seconds."""
        return self.window_s if self.window_s is not None else duration_s * self.rate_scale


@dataclass(frozen=True, slots=True)
class AcceptanceRef:
    """Which of the profile's acceptance segments a workload segment uses."""

    task: str
    """Task name of a profile acceptance segment (e.g. "support", "summarization", "code")."""
    language: str
    """ISO 639-1 language code of the segment (e.g. "en", "sv"), or "any"."""
    fallback: str | None = None
    """Profile entry ``task:language:temperature`` to use when the profile has no entry for this
    segment's own task, language and temperature (named explicitly; results note it). Without
    one, a missing entry is an error: acceptance is never matched silently."""

    def __post_init__(self) -> None:
        if self.fallback is not None and len(str(self.fallback).split(":")) != 3:
            raise FieldError("fallback", f"expected task:language:temperature, e.g. \"support:en:0.7\", got {self.fallback!r}")
        if not self.task:
            raise FieldError("task", "must be a non-empty task name, e.g. \"support\"")
        if not self.language:
            raise FieldError("language", "must be an ISO 639-1 code like \"en\", or \"any\"")


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """A class of requests: its share of arrivals, its lengths and its acceptance behaviour."""

    name: str
    """Unique segment name ([A-Za-z0-9._+-]); results are broken down by it."""
    share: float
    """Relative share of arrivals (> 0); shares are normalised to sum 1."""
    prompt_tokens: LengthDist | None = None
    """Prompt length distribution; required except with trace arrivals (lengths come from the
    trace there, so giving one is an error)."""
    output_tokens: LengthDist | None = None
    """Output length distribution; required except with trace arrivals."""
    acceptance: AcceptanceRef | None = None
    """Key into the profile's acceptance segments; required by speculative candidates that do
    not give assumed_acceptance."""
    temperature: float = 0.0
    """Sampling temperature; picks the profile's acceptance entry with the nearest temperature."""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise FieldError("name", f"must match [A-Za-z0-9._+-]+, got {self.name!r}")
        if not self.share > 0:
            raise FieldError("share", f"must be > 0, got {self.share}")
        if not 0 <= self.temperature <= 100:
            raise FieldError("temperature", f"must be ≥ 0 and ≤ 100, got {self.temperature}")


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """Open-loop traffic: how requests arrive and what they look like."""

    arrival: ArrivalName
    """"poisson", "gamma", "piecewise" or "trace"."""
    segments: tuple[SegmentConfig, ...]
    """At least one segment; names unique."""
    rate: float | None = None
    """Mean arrival rate in req/s; required for poisson and gamma, not used otherwise."""
    burstiness: float = 1.0
    """gamma only (vLLM's meaning): shape of the gap distribution; 1 = Poisson, < 1 burstier,
    > 1 smoother; squared coefficient of variation of gaps = 1/burstiness."""
    piecewise: PiecewiseConfig | None = None
    """Required for arrival = "piecewise"."""
    trace: TraceConfig | None = None
    """Required for arrival = "trace"."""
    client_timeout_s: float | None = None
    """A request not finished this long after arrival is abandoned (timed out); none: never."""

    def __post_init__(self) -> None:
        a = self.arrival
        if a in ("poisson", "gamma"):
            if self.rate is None:
                raise FieldError("rate", f"required for arrival {a!r} (req/s, > 0)")
            if not self.rate > 0:
                raise FieldError("rate", f"must be > 0 req/s, got {self.rate}")
        elif self.rate is not None:
            raise FieldError(
                "rate", f"only used by poisson and gamma arrivals, not {a!r}; remove it"
            )
        if not self.burstiness > 0:
            raise FieldError("burstiness", f"must be > 0, got {self.burstiness}")
        if a != "gamma" and self.burstiness != 1.0:
            raise FieldError(
                "burstiness",
                f"only used by arrival \"gamma\" (poisson is burstiness 1); got {self.burstiness} "
                f"with arrival {a!r}",
            )
        if a == "piecewise" and self.piecewise is None:
            raise FieldError("piecewise", "required for arrival \"piecewise\": {shape, points}")
        if a != "piecewise" and self.piecewise is not None:
            raise FieldError("piecewise", f"only used by arrival \"piecewise\", not {a!r}")
        if a == "trace" and self.trace is None:
            raise FieldError("trace", "required for arrival \"trace\": {path, start_s, ...}")
        if a != "trace" and self.trace is not None:
            raise FieldError("trace", f"only used by arrival \"trace\", not {a!r}")
        if self.client_timeout_s is not None and not self.client_timeout_s > 0:
            raise FieldError("client_timeout_s", f"must be > 0 seconds, got {self.client_timeout_s}")
        if not self.segments:
            raise FieldError("segments", "at least one [[workload.segments]] is required")
        seen: set[str] = set()
        for i, s in enumerate(self.segments):
            for which in ("prompt_tokens", "output_tokens"):
                given = getattr(s, which) is not None
                if a == "trace" and given:
                    raise FieldError(
                        f"segments[{i}].{which}",
                        "not used with arrival \"trace\" (lengths come from the trace); remove it",
                    )
                if a != "trace" and not given:
                    raise FieldError(
                        f"segments[{i}].{which}",
                        f"required for arrival {a!r}: e.g. {{dist = \"lognormal\", median = 200, "
                        "sigma = 0.6, min = 1, max = 2048}",
                    )
            if s.name in seen:
                raise FieldError(f"segments[{i}].name", f"duplicate segment name {s.name!r}")
            seen.add(s.name)

    @property
    def shares(self) -> np.ndarray:
        """Segment shares normalised to sum 1, in segment order."""
        raw = np.array([s.share for s in self.segments], dtype=np.float64)
        return raw / raw.sum()

    @property
    def segment_names(self) -> tuple[str, ...]:
        """Segment names in file order."""
        return tuple(s.name for s in self.segments)

    def mean_rate(self, duration_s: float) -> float:
        """Mean arrival rate over a run of ``duration_s`` seconds in req/s (a trace is read to
        count the rows its window replays)."""
        if self.rate is not None:
            return self.rate
        if self.piecewise is not None:
            return self.piecewise.mean_rate(duration_s)
        assert self.trace is not None
        from sim.contracts.trace import read_trace  # only trace scenarios pay for polars here

        t = self.trace
        off = read_trace(t.resolved_path).offsets_s
        window = t.effective_window_s(duration_s)
        lo, hi = np.searchsorted(off, [t.start_s, t.start_s + window], side="left")
        times = (off[lo:hi] - t.start_s) / t.rate_scale
        return float(np.count_nonzero(times < duration_s)) / duration_s


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
# [fleet]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Per-replica engine limits, in vLLM's terms."""

    max_num_seqs: int | None = None
    """Most requests in the running batch (vLLM max_num_seqs); none: the engine's default for
    the profile's device (sim/model/engine_defaults.py: 1024 on GPUs with ≥ 70 GiB other than A100,
    else 256)."""
    max_num_batched_tokens: int | None = None
    """Token budget of one engine step, drafts included (vLLM max_num_batched_tokens); none:
    the engine's default for the profile's device (8192 on GPUs with ≥ 70 GiB other than A100,
    else 2048)."""
    block_size: int = 16
    """Tokens per KV-cache block (paged attention)."""
    memory_utilization: float = 0.9
    """Fraction of device memory the engine may use, in (0, 1] (vLLM gpu_memory_utilization)."""
    chunked_prefill: bool = True
    """Split long prompts over several steps; when false a prompt must fit one step's budget."""
    kv_layout: KvLayout = "paged"
    """``paged``: a decode step costs the batch's mean context (vLLM's paged attention);
    ``padded``: every row is padded to the longest context (Hugging Face ``generate``-style
    batching, and ``specplan validate``'s own real serving loop)."""

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise FieldError(name, f"must be ≥ 1, got {v}")
        if not 0 < self.memory_utilization <= 1:
            raise FieldError(
                "memory_utilization", f"must be in (0, 1], got {self.memory_utilization}"
            )


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Load shedding at each replica's queue."""

    queue_limit: int | None = None
    """Waiting requests per replica beyond this are rejected on arrival; none: unbounded."""
    max_queue_time_s: float | None = None
    """A request still waiting (not yet scheduled) this long is rejected; none: never."""

    def __post_init__(self) -> None:
        if self.queue_limit is not None and self.queue_limit < 0:
            raise FieldError("queue_limit", f"must be ≥ 0, got {self.queue_limit}")
        if self.max_queue_time_s is not None and not self.max_queue_time_s > 0:
            raise FieldError("max_queue_time_s", f"must be > 0 seconds, got {self.max_queue_time_s}")


@dataclass(frozen=True, slots=True)
class RestartConfig:
    """One replica restart during the run (deploy, crash) and what speculation does after it."""

    at_s: float
    """Simulated time of the restart (seconds, within the run)."""
    cold_start_s: float
    """Seconds the replica serves nothing while it loads weights and warms up (≥ 0)."""
    replica: int = 0
    """Index of the restarting replica (0-based, < fleet.replicas)."""
    on_restart: OnRestart = "reroute"
    """"reroute": in-flight requests go back to the router; "drop": they are lost."""
    fallback: Fallback = "baseline"
    """"baseline": after the restart the candidate serves without speculation;
    "same": it comes back with the candidate's configuration."""

    def __post_init__(self) -> None:
        if self.at_s < 0:
            raise FieldError("at_s", f"must be ≥ 0 seconds, got {self.at_s}")
        if self.cold_start_s < 0:
            raise FieldError("cold_start_s", f"must be ≥ 0 seconds, got {self.cold_start_s}")
        if self.replica < 0:
            raise FieldError("replica", f"must be ≥ 0, got {self.replica}")


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """What serves the traffic: the calibration profile, replicas, engine limits and prices."""

    profile: str | None = None
    """Calibration profile JSON (relative to the scenario's folder, then the cwd); none: the
    caller must pass a profile."""
    replicas: int = 1
    """Identical engine replicas behind the router (≥ 1); capacity counts these."""
    tensor_parallel_size: int = 1
    """GPUs per replica that shard the model's weights and KV cache (tensor parallelism); must
    equal the profile's ``replica.tensor_parallel_size`` (timing is per replica shape)."""
    pipeline_parallel_size: int = 1
    """Pipeline stages per replica; only 1 is modelled (the step-time model has no pipeline
    stages or bubbles), so anything else is refused."""
    routing: RoutingName = "least_outstanding"
    """"round_robin" or "least_outstanding" (fewest unfinished requests)."""
    price_per_gpu_hour: float | None = None
    """$ per GPU-hour (device-hour on a CPU replica); a replica costs ``gpus_per_replica`` ×
    this; none: cost is not computed."""
    draft_price_per_hour: float = 0.0
    """$ per hour of separate draft hardware per replica (whole replica, not per GPU), if any."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Engine limits of every replica."""
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    """Queue limits of every replica."""
    restart: RestartConfig | None = None
    """Optional replica restart during the run."""
    base_dir: str | None = _internal()
    """Folder of the scenario file (set by the loader) for resolving ``profile``."""

    def __post_init__(self) -> None:
        if self.profile is not None and not self.profile:
            raise FieldError("profile", "must name a profile JSON file")
        if self.profile is not None and (why := path_problem(self.profile)):
            raise FieldError("profile", why)
        if self.replicas < 1:
            raise FieldError("replicas", f"must be ≥ 1, got {self.replicas}")
        if self.tensor_parallel_size < 1:
            raise FieldError(
                "tensor_parallel_size", f"must be ≥ 1 GPUs per replica, got {self.tensor_parallel_size}"
            )
        if self.pipeline_parallel_size != 1:
            raise FieldError(
                "pipeline_parallel_size",
                f"{self.pipeline_parallel_size} is not supported: the step-time model has no "
                "pipeline stages or bubbles; valid: 1 (use tensor_parallel_size to spread a model "
                "over GPUs)",
            )
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour < 0:
            raise FieldError("price_per_gpu_hour", f"must be ≥ 0 $/h, got {self.price_per_gpu_hour}")
        if self.draft_price_per_hour < 0:
            raise FieldError(
                "draft_price_per_hour", f"must be ≥ 0 $/h, got {self.draft_price_per_hour}"
            )
        if self.restart is not None and self.restart.replica >= self.replicas:
            raise FieldError(
                "restart.replica",
                f"must be < replicas ({self.replicas}), got {self.restart.replica}",
            )

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica occupies (tensor × pipeline parallel size): what price_per_gpu_hour
        is multiplied by."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def profile_path(self) -> Path | None:
        """Absolute path of the profile (scenario folder first, then the cwd); may not exist."""
        return None if self.profile is None else resolve_path(self.profile, self.base_dir)


# --------------------------------------------------------------------------------------------
# [[candidates]]


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """Hysteresis on the mean decode batch: speculate when it is small, stop when it is large."""

    on_below_batch: float
    """Turn speculation on when the windowed mean decode batch falls below this."""
    off_above_batch: float
    """Turn speculation off when the windowed mean decode batch rises above this."""
    window_s: float = 5.0
    """Averaging window of the decode batch (seconds)."""

    def __post_init__(self) -> None:
        if self.on_below_batch < 0:
            raise FieldError("on_below_batch", f"must be ≥ 0, got {self.on_below_batch}")
        if not self.on_below_batch < self.off_above_batch:
            raise FieldError(
                "off_above_batch",
                f"must be > on_below_batch ({self.on_below_batch}), got {self.off_above_batch}",
            )
        if not self.window_s > 0:
            raise FieldError("window_s", f"must be > 0 seconds, got {self.window_s}")


_POLICY_FIELDS: dict[str, tuple[str, ...]] = {
    "fixed": ("k",),
    "off_above_batch": ("k", "max_batch"),
    "k_by_batch": ("k_by_batch",),
    "adaptive": ("k", "adaptive"),
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One serving configuration to compare: the baseline or a speculative-decoding setup."""

    name: str
    """Unique candidate name ([A-Za-z0-9._+-])."""
    speculation: Speculation = "on"
    """"off" marks the baseline (no drafting); "on" needs a proposer and a policy."""
    proposer: str | None = None
    """A proposer name of the profile (e.g. "ngram", "selfdraft-l6")."""
    policy: PolicyName = "fixed"
    """How k is chosen per step: "fixed", "off_above_batch", "k_by_batch" or "adaptive"."""
    k: int | None = None
    """Draft tokens per decode request and step (fixed, off_above_batch, adaptive)."""
    max_batch: int | None = None
    """off_above_batch: speculation is off while more than this many requests decode."""
    k_by_batch: tuple[tuple[int, int], ...] | None = None
    """k_by_batch: [[batch_size_at_least, k], …], first threshold 1, thresholds increasing."""
    adaptive: AdaptiveConfig | None = None
    """adaptive: the hysteresis thresholds."""
    assumed_acceptance: tuple[float, ...] | None = None
    """Optional survival rate per position (non-increasing, in [0, 1], length ≥ max k) that
    replaces the profile's acceptance for this candidate; shown as "assumed"."""
    acceptance_trace: str | None = None
    """Optional per-request acceptance trace (docs/acceptance-trace-format.md; path relative to
    the scenario) that replaces the profile's acceptance: each request replays one traced
    request's sequence (``trace_replay``) or draws steps independently at its rates."""
    trace_format: Literal["specplan", "specdecode-bench-eagle", "specdecode-bench-ngram"] = "specplan"
    """Layout of ``acceptance_trace``: specplan's JSONL, or a user's own SpecDecode-Bench
    ``combined_*.jsonl`` (its ``acc_eagle`` / ``acc_ngram`` arrays; no task labels)."""
    trace_replay: bool = True
    """True: within a request, accepted lengths follow the traced sequence; False: independent
    draws at the traced request's per-position rates (to compare)."""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise FieldError("name", f"must match [A-Za-z0-9._+-]+, got {self.name!r}")
        all_params = ("proposer", "k", "max_batch", "k_by_batch", "adaptive", "assumed_acceptance")
        if self.speculation == "off":
            for p in all_params:
                if getattr(self, p) is not None:
                    raise FieldError(p, "not used by the baseline (speculation = \"off\"); remove it")
            if self.policy != "fixed":
                raise FieldError("policy", "not used by the baseline (speculation = \"off\")")
            return
        if self.proposer is None:
            raise FieldError("proposer", "required for a speculative candidate (a profile proposer)")
        needed = _POLICY_FIELDS[self.policy]
        for p in ("k", "max_batch", "k_by_batch", "adaptive"):
            given = getattr(self, p) is not None
            if p in needed and not given:
                raise FieldError(p, f"required by policy {self.policy!r}")
            if p not in needed and given:
                raise FieldError(
                    p, f"not used by policy {self.policy!r}; valid: {', '.join(needed)}"
                )
        if self.k is not None and self.k < 1:
            raise FieldError("k", f"must be ≥ 1, got {self.k}")
        if self.max_batch is not None and self.max_batch < 1:
            raise FieldError("max_batch", f"must be ≥ 1, got {self.max_batch}")
        if self.k_by_batch is not None:
            if not self.k_by_batch:
                raise FieldError("k_by_batch", "must hold at least one [batch_at_least, k] pair")
            if self.k_by_batch[0][0] != 1:
                raise FieldError("k_by_batch[0]", f"first threshold must be 1, got {self.k_by_batch[0][0]}")
            for i, (b, kk) in enumerate(self.k_by_batch):
                if i and b <= self.k_by_batch[i - 1][0]:
                    raise FieldError(f"k_by_batch[{i}]", f"thresholds must increase, got {b}")
                if kk < 0:
                    raise FieldError(f"k_by_batch[{i}]", f"k must be ≥ 0, got {kk}")
            if self.max_k < 1:
                raise FieldError("k_by_batch", "at least one k must be ≥ 1 (else use the baseline)")
        if self.assumed_acceptance is not None:
            a = self.assumed_acceptance
            if len(a) < self.max_k:
                raise FieldError(
                    "assumed_acceptance",
                    f"needs ≥ max k ({self.max_k}) rates, got {len(a)}",
                )
            for i, r in enumerate(a):
                if not 0 <= r <= 1:
                    raise FieldError(f"assumed_acceptance[{i}]", f"must be in [0, 1], got {r}")
                if i and r > a[i - 1]:
                    raise FieldError(
                        f"assumed_acceptance[{i}]",
                        f"survival rates must be non-increasing, {r} > {a[i - 1]}",
                    )

    @property
    def is_baseline(self) -> bool:
        """True for the no-speculation candidate."""
        return self.speculation == "off"

    @property
    def max_k(self) -> int:
        """Largest k this candidate may draft in any step (0 for the baseline)."""
        if self.is_baseline:
            return 0
        if self.k_by_batch is not None:
            return max(kk for _, kk in self.k_by_batch)
        return int(self.k or 0)


BASELINE_NAME = "baseline"


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
    origin: str | None = _internal()
    """File the scenario came from (for error messages); None when built in code."""
    base_dir: str | None = _internal()
    """Folder relative paths resolve against (the scenario file's folder)."""

    def __post_init__(self) -> None:
        cands = self.candidates
        if not any(c.is_baseline for c in cands):
            if any(c.name == BASELINE_NAME for c in cands):
                raise FieldError(
                    "candidates", "a speculative candidate is named \"baseline\"; rename it "
                    "(the baseline, speculation = \"off\", is added under that name)"
                )
            # normalising the candidate list is part of construction, not a later mutation
            object.__setattr__(self, "candidates", (Candidate(BASELINE_NAME, "off"), *cands))
        seen: set[str] = set()
        n_base = 0
        for i, c in enumerate(self.candidates):
            if c.name in seen:
                raise FieldError(f"candidates[{i}].name", f"duplicate candidate name {c.name!r}")
            seen.add(c.name)
            n_base += c.is_baseline
            if n_base > 1 and c.is_baseline:
                raise FieldError(
                    f"candidates[{i}].speculation", "at most one baseline (speculation = \"off\")"
                )
        r = self.fleet.restart
        if r is not None and r.at_s >= self.run.duration_s:
            raise FieldError(
                "fleet.restart.at_s",
                f"must be < run.duration_s ({self.run.duration_s}), got {r.at_s}",
            )
        eng = self.fleet.engine
        if not eng.chunked_prefill and self.workload.arrival != "trace":
            budget = eng.max_num_batched_tokens  # None: the device's default, checked at run time
            for i, s in enumerate(self.workload.segments):
                assert s.prompt_tokens is not None  # checked by WorkloadConfig
                ub = s.prompt_tokens.upper_bound
                if ub is None or (budget is not None and ub > budget):
                    raise FieldError(
                        f"workload.segments[{i}].prompt_tokens",
                        f"longest prompt ({'unbounded: set max' if ub is None else ub}) must fit "
                        f"fleet.engine.max_num_batched_tokens ({budget or 'engine default'}) when "
                        "chunked_prefill = false",
                    )
        needs_key = [c for c in self.candidates if not c.is_baseline and c.assumed_acceptance is None
                     and not (c.acceptance_trace is not None and c.trace_format != "specplan")]
        if needs_key:
            for i, s in enumerate(self.workload.segments):
                if s.acceptance is None:
                    raise FieldError(
                        f"workload.segments[{i}].acceptance",
                        f"required by candidate {needs_key[0].name!r} (or give it "
                        "assumed_acceptance): {task, language} of a profile acceptance segment",
                    )

    # ---- derived values

    @property
    def baseline(self) -> Candidate:
        """The no-speculation candidate (always present)."""
        return next(c for c in self.candidates if c.is_baseline)

    @property
    def speculative(self) -> tuple[Candidate, ...]:
        """Every candidate except the baseline, in file order."""
        return tuple(c for c in self.candidates if not c.is_baseline)

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
            f"{self.origin or 'scenario'}: candidates: no candidate {name!r}; "
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

    def require_profile_path(self) -> Path:
        """The profile path, or a SpecplanError saying where it was looked for."""
        f = self.fleet
        if f.profile is None:
            raise SpecplanError(
                f"{self.origin or 'scenario'}: fleet.profile: not set; add "
                "profile = \"../profiles/NAME.json\" under [fleet] or pass --profile"
            )
        p = resolve_path(f.profile, f.base_dir)
        if not p.is_file():
            raise SpecplanError(
                f"{self.origin or 'scenario'}: fleet.profile: file not found; looked in "
                f"{_looked_in(f.profile, f.base_dir)} (measure one with `specplan profile`)"
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
            return _from_mapping(cls, data, "", ctx)
        except FieldError as exc:
            raise SpecplanError(f"{origin or 'scenario'}: {exc.field or '(top level)'}: {exc.problem}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict in the TOML layout (None fields and loader-internal fields omitted);
        ``Scenario.from_dict(s.to_dict(), s.origin, s.base_dir) == s``."""
        return _to_plain(self)

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
            _apply_override(self, data, str(path), value, self.origin)
        desc = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        try:
            return Scenario.from_dict(data, self.origin, self.base_dir)
        except SpecplanError as exc:
            raise SpecplanError(f"{exc} (after overrides {desc})") from None

    def with_load_scale(self, factor: float) -> Scenario:
        """The same scenario with every arrival rate multiplied by ``factor`` (> 0).

        Works for every arrival kind: poisson/gamma scale ``rate``, piecewise scales every
        point's rate, a trace scales ``rate_scale`` and its window (more trace rows replayed
        over the same simulated span). Used by capacity search.
        """
        if not factor > 0 or not math.isfinite(factor):
            raise SpecplanError(f"load scale must be a finite number > 0, got {factor}")
        w = self.workload
        if w.rate is not None:
            return self.with_overrides({"workload.rate": w.rate * factor})
        if w.piecewise is not None:
            pts = [[t, r * factor] for t, r in w.piecewise.points]
            return self.with_overrides({"workload.piecewise.points": pts})
        assert w.trace is not None
        over: dict[str, object] = {"workload.trace.rate_scale": w.trace.rate_scale * factor}
        if w.trace.window_s is not None:
            # keep the replayed span (window_s / rate_scale) so more rows fill the same run
            over["workload.trace.window_s"] = w.trace.window_s * factor
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


# --------------------------------------------------------------------------------------------
# generic mapping ↔ dataclass conversion (one place for unknown keys, types and locations)

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _public_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return f"{type(value).__name__} {value!r}"


def _convert(hint: Any, value: Any, path: str, ctx: dict[str, Any]) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, ctx)
    if origin is Literal:
        if not isinstance(value, str) or value not in args:
            raise FieldError(path, f"must be one of {', '.join(map(repr, args))}; got {_describe(value)}")
        return value
    if hint is bool:
        if not isinstance(value, bool | np.bool_):
            raise FieldError(path, f"expected true or false, got {_describe(value)}")
        return bool(value)
    if hint is int:
        if isinstance(value, numbers.Real) and not isinstance(value, bool | numbers.Integral):
            if math.isfinite(float(value)) and float(value).is_integer():
                return int(value)  # 2.0 from a numeric sweep grid means 2
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise FieldError(path, f"expected an integer, got {_describe(value)}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise FieldError(path, f"expected a number, got {_describe(value)}")
        v = float(value)
        if not math.isfinite(v):
            raise FieldError(path, f"must be a finite number, got {v}")
        return v
    if hint is str:
        if not isinstance(value, str):
            raise FieldError(path, f"expected a string, got {_describe(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise FieldError(path, f"expected an array, got {_describe(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{path}[{i}]", ctx) for i, v in enumerate(value))
        if len(value) != len(args):
            raise FieldError(path, f"expected an array of {len(args)} values, got {len(value)}")
        return tuple(_convert(a, v, f"{path}[{i}]", ctx) for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise FieldError(path, f"expected a table, got {_describe(value)}")
        return _from_mapping(hint, value, path, ctx)
    raise TypeError(f"unsupported field type {hint!r} at {path}")  # a programming error


def _from_mapping(cls: type, d: Mapping[str, Any], path: str, ctx: dict[str, Any]) -> Any:
    fields = _public_fields(cls)
    names = [f.name for f in fields]
    for key in d:
        if key not in names:
            raise FieldError(_join(path, str(key)), f"unknown key; valid: {', '.join(names)}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.name in d:
            kwargs[f.name] = _convert(hints[f.name], d[f.name], _join(path, f.name), ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            where = _join(path, f.name)
            hint = hints[f.name]
            elem = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
            if dataclasses.is_dataclass(hint):
                how = f"add a [{where}] table"
            elif elem is not None and dataclasses.is_dataclass(elem):
                how = f"add at least one [[{where}]] table"
            else:
                how = f"add {f.name} = …"
            raise FieldError(where, f"required; {how}")
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal") and f.name in ctx:
            kwargs[f.name] = ctx[f.name]
    try:
        return cls(**kwargs)
    except FieldError as exc:
        raise exc.under(path) from None


def _to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in _public_fields(type(obj)):
            v = getattr(obj, f.name)
            if v is None:
                continue
            out[f.name] = _to_plain(v)
        return out
    if isinstance(obj, tuple | list):
        return [_to_plain(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------
# overrides

_SEG_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]+)\])?")


def _parse_path(path: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(path):
        m = _SEG_RE.match(path, pos)
        if not m:
            raise SpecplanError(f"override {path!r}: cannot parse at {path[pos:]!r}; "
                                "use dotted fields like workload.segments[NAME].share")
        out.append((m.group(1), m.group(2)))
        pos = m.end()
        if pos < len(path):
            if path[pos] != ".":
                raise SpecplanError(f"override {path!r}: expected '.' at {path[pos:]!r}")
            pos += 1
            if pos == len(path):
                raise SpecplanError(f"override {path!r}: ends with '.'")
    if not out:
        raise SpecplanError("override: empty path")
    return out


def _plain_value(value: object) -> object:
    """Overrides may carry numpy scalars/arrays or tuples; TOML-like plain values go in."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [_plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain_value(v) for k, v in value.items()}
    return value


def _apply_override(
    scen: Scenario, data: dict[str, Any], path: str, value: object, origin: str | None
) -> None:
    parts = _parse_path(path)
    src = origin or "scenario"
    cls: Any = Scenario
    node: Any = data
    done = ""
    for n, (key, sel) in enumerate(parts):
        last = n == len(parts) - 1
        fields = {f.name: f for f in _public_fields(cls)}
        if key not in fields:
            raise SpecplanError(
                f"{src}: override {path!r}: unknown field {_join(done, key)!r}; "
                f"valid: {', '.join(fields)}"
            )
        hint = _hints(cls)[key]
        done = _join(done, key)
        # strip Optional
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if sel is not None:
            items = node.get(key)
            elem = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
            if not isinstance(items, list) or not dataclasses.is_dataclass(elem):
                raise SpecplanError(f"{src}: override {path!r}: {done} is not a list of tables")
            idx = next((i for i, it in enumerate(items) if it.get("name") == sel), None)
            if idx is None and sel.lstrip("-").isdigit() and -len(items) <= int(sel) < len(items):
                idx = int(sel) % len(items)
            if idx is None:
                names = [str(it.get("name", i)) for i, it in enumerate(items)]
                raise SpecplanError(
                    f"{src}: override {path!r}: no item {sel!r} in {done}; valid: {', '.join(names)}"
                )
            done = f"{done}[{sel}]"
            if last:
                items[idx] = _plain_value(value)
                return
            node, cls = items[idx], elem
            continue
        if last:
            if value is None:
                node.pop(key, None)
            else:
                node[key] = _plain_value(value)
            return
        if not dataclasses.is_dataclass(hint):
            raise SpecplanError(f"{src}: override {path!r}: {done} is a value, not a table")
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        node, cls = child, hint


# --------------------------------------------------------------------------------------------
# a minimal TOML writer (tomllib only reads)


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_str(v: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in v:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_str(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, Mapping) for x in v)


def dumps_toml(doc: Mapping[str, Any]) -> str:
    """Write a nested dict as TOML: tables as [sections], lists of tables as [[arrays]],
    tables inside array items inline. Enough for scenarios and reports."""
    lines: list[str] = []

    def body(table: Mapping[str, Any], prefix: str) -> None:
        for k, v in table.items():
            if not isinstance(v, Mapping) and not _is_table_array(v):
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in table.items():
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            if isinstance(v, Mapping):
                lines.append("")
                lines.append(f"[{name}]")
                body(v, name)
            elif _is_table_array(v):
                for item in v:
                    lines.append("")
                    lines.append(f"[[{name}]]")
                    for ik, iv in item.items():
                        lines.append(f"{_toml_key(ik)} = {_toml_value(iv)}")

    body(doc, "")
    return "\n".join(lines).lstrip("\n") + "\n"
