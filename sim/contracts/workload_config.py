"""The scenario's [workload] table: arrivals (poisson, gamma, piecewise, trace, concurrency) and
segments."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sim.contracts.errors import FieldError, echo
from sim.contracts.lengths import LengthDist
from sim.contracts.scenario_fields import NAME_RE
from sim.contracts.trace_config import TraceConfig

ArrivalName = Literal["poisson", "gamma", "piecewise", "trace", "concurrency"]
PiecewiseShape = Literal["step", "linear", "daily"]
ThinkDist = Literal["fixed", "exponential"]
MAX_CONCURRENCY = 100_000
"""Most clients a closed-loop workload may hold (one request in flight each)."""


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
            raise FieldError("start_h", f"only used by shape 'daily', not {echo(self.shape, 60)}")
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
class DocumentsConfig:
    """Retrieved documents a segment's prompts carry (RAG), reused across requests: each request
    draws one of ``count`` documents of ``tokens`` tokens, popular ones more often (Zipf)."""

    count: int
    """How many distinct documents (≥ 1)."""
    tokens: int
    """Tokens of each document (≥ 1), right after the segment's shared system prompt."""
    zipf: float = 1.0
    """Popularity exponent: the document of rank r is drawn with probability ∝ 1 / r**zipf
    (0: all equally likely; ~1: web-like skew)."""

    def __post_init__(self) -> None:
        if not 1 <= self.count <= 10_000_000:
            raise FieldError("count", f"must be in [1, 10000000] documents, got {self.count}")
        if not 1 <= self.tokens <= 10_000_000:
            raise FieldError("tokens", f"must be in [1, 10000000] tokens, got {self.tokens}")
        if not 0 <= self.zipf <= 10:
            raise FieldError("zipf", f"must be in [0, 10], got {self.zipf}")

    def probabilities(self) -> np.ndarray:
        """Each document's chance, by rank."""
        w = 1.0 / np.arange(1, self.count + 1, dtype=np.float64) ** self.zipf
        return w / w.sum()


@dataclass(frozen=True, slots=True)
class ConversationConfig:
    """Multi-turn conversations that resend their history (open loop): each of a segment's
    arrivals starts one, and each later turn's prompt is the previous prompt + its output + the
    user's new message (docs/prefix-caching.md)."""

    turns: int
    """Turns per conversation (1..1000), the first included."""
    gap_s: float
    """Mean seconds from a turn's arrival to the next turn's (exponential, > 0): the answer's
    time plus the user's think time; the next turn does not wait for the answer (open loop)."""
    user_tokens: int
    """Tokens the user adds per later turn (1..10000000)."""

    def __post_init__(self) -> None:
        if isinstance(self.turns, bool) or not isinstance(self.turns, int) or not 1 <= self.turns <= 1000:
            raise FieldError("turns", f"must be an integer 1..1000, got {echo(self.turns, 60)}")
        if not (math.isfinite(self.gap_s) and self.gap_s > 0):
            raise FieldError("gap_s", f"must be a finite number of seconds > 0 (the mean), got {self.gap_s}")
        if isinstance(self.user_tokens, bool) or not 1 <= self.user_tokens <= 10_000_000:
            raise FieldError("user_tokens", f"must be in [1, 10000000] tokens, got {self.user_tokens}")


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
            raise FieldError("fallback", f"expected task:language:temperature, e.g. \"support:en:0.7\", got {echo(self.fallback, 60)}")
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
    shared_prefix_tokens: int = 0
    """The first this many tokens of every prompt of the segment are the same (a system prompt
    shared by all its requests; a shorter prompt shares its whole length); read by prefix
    caching (docs/prefix-caching.md). Prompt lengths include it."""
    documents: DocumentsConfig | None = None
    """Optional RAG documents reused across the segment's requests, after the system prompt
    (prompt lengths include them too); read by prefix caching."""
    conversation: ConversationConfig | None = None
    """Optional multi-turn conversations: each arrival starts one; ``prompt_tokens`` is its
    first turn's prompt and ``output_tokens`` every turn's answer (open-loop arrivals only)."""

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise FieldError("name", f"must match [A-Za-z0-9._+-]+, got {echo(self.name, 60)}")
        if not 0 <= self.shared_prefix_tokens <= 10_000_000:
            raise FieldError("shared_prefix_tokens",
                             f"must be in [0, 10000000] tokens, got {self.shared_prefix_tokens}")
        if not self.share > 0:
            raise FieldError("share", f"must be > 0, got {self.share}")
        if not 0 <= self.temperature <= 100:
            raise FieldError("temperature", f"must be ≥ 0 and ≤ 100, got {self.temperature}")


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """Traffic: how requests arrive (open loop, or closed loop with a fixed number of clients)
    and what they look like."""

    arrival: ArrivalName
    """"poisson", "gamma", "piecewise", "trace" (open loop: arrival times fixed before the run)
    or "concurrency" (closed loop: each client sends its next request when its last one ends)."""
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
    concurrency: int | None = None
    """arrival "concurrency" only: clients, each with one request in flight (1..100000), as
    ``vllm bench serve --max-concurrency``; they send until ``run.duration_s``."""
    think_time_s: float = 0.0
    """arrival "concurrency" only: seconds a client waits after a request ends (finished, timed
    out or rejected) before sending its next one (≥ 0; the mean when exponential)."""
    think_time_dist: ThinkDist = "fixed"
    """arrival "concurrency" only: "fixed" (every think time is ``think_time_s``) or
    "exponential" (drawn per request with mean ``think_time_s`` > 0)."""

    def __post_init__(self) -> None:
        a = self.arrival
        self._check_concurrency()
        if a in ("poisson", "gamma"):
            if self.rate is None:
                raise FieldError("rate", f"required for arrival {echo(a, 60)} (req/s, > 0)")
            if not self.rate > 0:
                raise FieldError("rate", f"must be > 0 req/s, got {self.rate}")
        elif self.rate is not None:
            raise FieldError(
                "rate", f"only used by poisson and gamma arrivals, not {echo(a, 60)}; remove it"
            )
        if not self.burstiness > 0:
            raise FieldError("burstiness", f"must be > 0, got {self.burstiness}")
        if a != "gamma" and self.burstiness != 1.0:
            raise FieldError(
                "burstiness",
                f"only used by arrival \"gamma\" (poisson is burstiness 1); got {self.burstiness} "
                f"with arrival {echo(a, 60)}",
            )
        if a == "piecewise" and self.piecewise is None:
            raise FieldError("piecewise", "required for arrival \"piecewise\": {shape, points}")
        if a != "piecewise" and self.piecewise is not None:
            raise FieldError("piecewise", f"only used by arrival \"piecewise\", not {echo(a, 60)}")
        if a == "trace" and self.trace is None:
            raise FieldError("trace", "required for arrival \"trace\": {path, start_s, ...}")
        if a != "trace" and self.trace is not None:
            raise FieldError("trace", f"only used by arrival \"trace\", not {echo(a, 60)}")
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
                        f"required for arrival {echo(a, 60)}: e.g. {{dist = \"lognormal\", median = 200, "
                        "sigma = 0.6, min = 1, max = 2048}",
                    )
            if s.conversation is not None and a not in ("poisson", "gamma", "piecewise"):
                raise FieldError(f"segments[{i}].conversation",
                                 f"needs poisson, gamma or piecewise arrivals, not {echo(a, 60)} (a trace "
                                 "gives its turns as rows; closed-loop conversations are not modelled)")
            if s.name in seen:
                raise FieldError(f"segments[{i}].name", f"duplicate segment name {echo(s.name, 60)}")
            seen.add(s.name)

    def _check_concurrency(self) -> None:
        a = self.arrival
        if a == "concurrency":
            n = self.concurrency
            if n is None:
                raise FieldError("concurrency", "required for arrival \"concurrency\": clients in "
                                 f"flight, an integer 1..{MAX_CONCURRENCY}")
            if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= MAX_CONCURRENCY:
                raise FieldError("concurrency", f"must be an integer 1..{MAX_CONCURRENCY}, got {echo(n, 60)}")
        elif self.concurrency is not None:
            raise FieldError("concurrency", f"only used by arrival \"concurrency\", not {echo(a, 60)}; remove it")
        if not (math.isfinite(self.think_time_s) and self.think_time_s >= 0):
            raise FieldError("think_time_s", f"must be a finite number of seconds ≥ 0, got {self.think_time_s}")
        if a != "concurrency" and self.think_time_s != 0.0:
            raise FieldError("think_time_s", f"only used by arrival \"concurrency\", not {echo(a, 60)}; remove it")
        if a != "concurrency" and self.think_time_dist != "fixed":
            raise FieldError("think_time_dist", f"only used by arrival \"concurrency\", not {echo(a, 60)}; remove it")
        if self.think_time_dist == "exponential" and not self.think_time_s > 0:
            raise FieldError("think_time_dist", "\"exponential\" needs think_time_s > 0 (its mean)")

    @property
    def shares(self) -> np.ndarray:
        """Segment shares normalised to sum 1, in segment order."""
        raw = np.array([s.share for s in self.segments], dtype=np.float64)
        return raw / raw.sum()

    @property
    def turns_per_arrival(self) -> float:
        """Requests per arrival, by share: conversations' turns (1 without them); turns past
        the run's end are dropped, so the run sees a few fewer."""
        return float(sum(sh * (s.conversation.turns if s.conversation else 1)
                         for sh, s in zip(self.shares.tolist(), self.segments, strict=True)))

    @property
    def segment_names(self) -> tuple[str, ...]:
        """Segment names in file order."""
        return tuple(s.name for s in self.segments)

    def mean_rate(self, duration_s: float) -> float | None:
        """Mean arrival rate over a run of ``duration_s`` seconds in req/s (a trace is read to
        count the rows its window replays); None for closed-loop clients, whose rate is what
        the fleet makes of them."""
        if self.arrival == "concurrency":
            return None
        turns = self.turns_per_arrival
        if self.rate is not None:
            return self.rate if turns == 1.0 else self.rate * turns
        if self.piecewise is not None:
            rate = self.piecewise.mean_rate(duration_s)
            return rate if turns == 1.0 else rate * turns
        assert self.trace is not None
        from sim.contracts.trace import read_trace  # only trace scenarios pay for polars here

        t = self.trace
        off = read_trace(t).offsets_s
        window = t.effective_window_s(duration_s)
        lo, hi = np.searchsorted(off, [t.start_s, t.start_s + window], side="left")
        times = (off[lo:hi] - t.start_s) / t.rate_scale
        return float(np.count_nonzero(times < duration_s)) / duration_s
