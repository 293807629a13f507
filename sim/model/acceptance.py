"""Per-segment, per-request acceptance of draft tokens, and the draw of one step's accepted count.

Acceptance is a distribution, not a scalar: each simulated request gets one measured request's
per-position survival rates (bootstrap over the profile's ``per_request`` rows), so the spread
across requests that drives p99 TPOT and stream pauses is kept. Counting follows vLLM
(``v1/spec_decode/metrics.py``): drafts, draft tokens, accepted tokens, accepted per position;
``accepted_per_pos[i] / drafts`` is the unconditional survival rate of position ``i + 1``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey, AcceptanceSegment
from sim.model.acceptance_match import resolve_segment

SegmentKeyLike = AcceptanceKey | tuple[str, str, float]


def draw_accepted(rates: Sequence[float] | np.ndarray, k: int, rng: np.random.Generator) -> int:
    """Accepted draft tokens in one step drafting ``k`` tokens (0..k; the bonus token not counted).

    Acceptance of position ``i`` given position ``i-1`` was accepted has probability
    ``s_i / s_{i-1}`` (``s_0 = 1``) and drafting stops at the first rejection, so
    ``P(accepted >= i) = s_i``. That is drawn here with one uniform ``u`` (inverse CDF):
    accepted = number of leading positions with ``u < s_i``. Same distribution as drawing each
    position in turn, one random number per call whatever the outcome (reproducible streams),
    and fast. Pass a list (``rates.tolist()``, cached per request) for the fastest path.
    """
    if k > len(rates):
        raise ValueError(f"k={k} exceeds the {len(rates)} positions with acceptance rates (k_max)")
    u = rng.random()
    n = 0
    while n < k and u < rates[n]:
        n += 1
    return n


def draw_accepted_many(rates: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Vectorised :func:`draw_accepted` for a batch: ``rates`` is (requests, positions).

    Consumes one uniform per request, like ``len(rates)`` calls of :func:`draw_accepted`.
    """
    rates = np.asarray(rates, dtype=float)
    if rates.ndim != 2 or k > rates.shape[1]:
        raise ValueError(f"rates must be (requests, >= k={k}) survival rates, got shape {rates.shape}")
    u = rng.random(rates.shape[0])
    return (u[:, None] < rates[:, :k]).sum(axis=1)


def mean_acceptance_length(rates: Sequence[float] | np.ndarray, k: int) -> float:
    """Expected tokens committed per step drafting ``k``: ``1 + s_1 + ... + s_k``."""
    if k > len(rates):
        raise ValueError(f"k={k} exceeds the {len(rates)} positions with acceptance rates (k_max)")
    return 1.0 + float(sum(float(r) for r in rates[:k]))


OUTPUT_LENGTH_RATIO = 1.5
"""A workload segment whose median output is this many times longer (or shorter) than the
answers its acceptance was measured on gets a note (see measured_output_tokens)."""

FEW_REQUESTS = 10
"""Below this many measured requests a segment's mean and spread are too uncertain to trust
silently: results carry a note (3 built-in prompts gave 1.00 for support/en where 10 gave 1.07)."""


def mean_length_interval(
    drafts: Sequence[float] | np.ndarray, accepted: np.ndarray, k: int
) -> tuple[float, float, int]:
    """Mean acceptance length at ``k`` over measured requests, its 95 % half-width, and n.

    Why: a segment's acceptance is a ratio over a handful of requests (accepted tokens / drafts),
    and how few shows only in its spread. The half-width is the ratio estimator's normal
    interval, ``1.96 · sqrt(n/(n-1) · Σ(a_i − R·d_i)²) / Σd_i`` with ``a_i`` request i's accepted
    tokens within the first ``k`` positions and ``d_i`` its drafts; ``inf`` below 2 requests.
    ``accepted`` is (requests, positions) accepted counts per position.
    """
    d = np.asarray(drafts, dtype=float)
    acc = np.asarray(accepted, dtype=float).reshape(len(d), -1)
    if k > acc.shape[1]:
        raise ValueError(f"k={k} exceeds the {acc.shape[1]} positions with acceptance counts (k_max)")
    n, total = len(d), float(d.sum())
    if n == 0 or total <= 0:
        return math.nan, math.inf, n
    a = acc[:, :k].sum(axis=1)
    ratio = float(a.sum()) / total
    if n < 2:
        return 1.0 + ratio, math.inf, n
    resid = a - ratio * d
    half = 1.96 * math.sqrt(n / (n - 1) * float((resid**2).sum())) / total
    return 1.0 + ratio, half, n


@dataclass
class SpecDecodeCounters:
    """vLLM's speculative-decoding counters, accumulated one draft (request-step) at a time."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, k: int, accepted: int) -> None:
        """Record one draft of ``k`` tokens of which the first ``accepted`` were kept."""
        if not 0 <= accepted <= k:
            raise ValueError(f"accepted must be in 0..k={k}, got {accepted}")
        if k == 0:
            return  # no draft was made
        self.num_drafts += 1
        self.num_draft_tokens += k
        self.num_accepted_tokens += accepted
        if len(self.accepted_per_pos) < k:
            self.accepted_per_pos.extend([0] * (k - len(self.accepted_per_pos)))
        for i in range(accepted):
            self.accepted_per_pos[i] += 1

    @property
    def mean_acceptance_length(self) -> float:
        """``1 + accepted / drafts`` (1.0 before any draft)."""
        return 1.0 + (self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0)

    @property
    def survival(self) -> list[float]:
        """Unconditional survival rate per position."""
        return [a / self.num_drafts for a in self.accepted_per_pos] if self.num_drafts else []


@dataclass(frozen=True, eq=False)
class SegmentAcceptance:
    """Acceptance data one scenario segment samples from."""

    name: str
    """Scenario segment name."""
    key: AcceptanceKey | None
    """Profile segment it was matched to (None for assumed rates)."""
    aggregate: np.ndarray
    """Survival rates over all requests (used when there are no per-request rows)."""
    rows: np.ndarray
    """(requests, k_max) survival rates of measured requests; 0 rows = spread unknown."""
    num_drafts: int
    row_drafts: np.ndarray
    """Drafts of each row of ``rows`` (how much each measured request weighs)."""
    proposal: float = 1.0
    """Fraction of verification steps with a proposal (aggregate); survival rates are given one."""
    row_proposal: np.ndarray | None = None
    """Proposal rate of each row of ``rows`` (None: every row proposes at every step)."""
    note: str | None = None
    """How the profile entry was chosen when it was not an exact match (a named fallback)."""


class AcceptanceModel:
    """Acceptance of one proposer for every scenario segment of a run."""

    def __init__(
        self,
        proposer: str,
        k_max: int,
        segments: Mapping[str, SegmentAcceptance],
        source: str,
        *,
        wildcard: SegmentAcceptance | None = None,
    ) -> None:
        self.proposer = proposer
        self.k_max = k_max
        self.segments = dict(segments)
        self.source = source
        """Provenance line, e.g. ``acceptance[ngram]: measured on ...`` or ``... assumed``."""
        self._wildcard = wildcard
        self.traces: dict | None = None
        """Per scenario segment, the traced requests whose sequences requests replay
        (``sim.model.trace_acceptance``); None: every step is drawn."""
        self.trace_tokens: dict[str, np.ndarray] = {}
        """Per traced segment, the output tokens each traced request covers (filled on first use)."""

    @classmethod
    def from_profile(
        cls,
        profile: Profile,
        proposer: str,
        segment_keys: Mapping[str, SegmentKeyLike],
        fallbacks: Mapping[str, str] | None = None,
    ) -> AcceptanceModel:
        """Match each scenario segment ``name -> (task, language, temperature)`` to a profile entry.

        No silent matches: the entry must have the same task, language (or ``any``) and
        temperature; otherwise the segment's named fallback (``fallbacks[name]``, a
        ``task:language:temperature`` key) is used and noted, or loading fails naming both.
        """
        entry = profile.acceptance.get(proposer)
        if entry is None:
            have = ", ".join(profile.acceptance) or "none"
            raise profile.error(
                f"acceptance.{proposer}",
                f"no acceptance entry for proposer {proposer!r} (entries: {have}); measure it, "
                "merge one in, or give the candidate an assumed_acceptance",
            )
        segs: dict[str, SegmentAcceptance] = {}
        fallbacks = fallbacks or {}
        for name, raw in segment_keys.items():
            key = raw if isinstance(raw, AcceptanceKey) else AcceptanceKey(str(raw[0]), str(raw[1]), float(raw[2]))
            seg, note = resolve_segment(entry.segments, key, fallbacks.get(name))
            if seg is None:
                raise profile.error(f"acceptance.{proposer}.segments", f"scenario segment {name!r}: {note}")
            segs[name] = _segment_from_profile(name, seg, note)
        source = f"acceptance[{proposer}]: {entry.provenance.describe()}"
        return cls(proposer, entry.k_max, segs, source)

    @classmethod
    def from_assumed(
        cls, rates: Sequence[float], segments: Iterable[str] | None = None, proposer: str = "assumed"
    ) -> AcceptanceModel:
        """Every request of every segment gets the same assumed survival rates (no spread).

        ``segments=None`` serves any segment name.
        """
        vals = [float(r) for r in rates]
        if not vals:
            raise SpecplanError("assumed acceptance: give at least one survival rate")
        for i, r in enumerate(vals):
            if not 0.0 <= r <= 1.0:
                raise SpecplanError(f"assumed acceptance[{i}]: survival rates must be in [0, 1], got {r}")
            if i and r > vals[i - 1]:
                raise SpecplanError(
                    f"assumed acceptance[{i}]: survival rates must be non-increasing, got {vals[i - 1]} then {r}"
                )
        agg = np.array(vals)
        agg.setflags(write=False)
        empty = np.empty((0, len(vals)))

        def seg(name: str) -> SegmentAcceptance:
            return SegmentAcceptance(name, None, agg, empty, 0, np.zeros(0))

        names = list(segments) if segments is not None else []
        source = f"acceptance[{proposer}]: assumed survival rates " + ", ".join(f"{r:g}" for r in vals)
        return cls(
            proposer,
            len(vals),
            {n: seg(n) for n in names},
            source,
            wildcard=seg("*") if segments is None else None,
        )

    def segment(self, name: str) -> SegmentAcceptance:
        """Acceptance data of scenario segment ``name``."""
        seg = self.segments.get(name)
        if seg is None:
            if self._wildcard is not None:
                return self._wildcard
            raise KeyError(f"acceptance model has no segment {name!r} (segments: {', '.join(self.segments)})")
        return seg

    def request_rates(self, segment: str, rng: np.random.Generator) -> np.ndarray:
        """One request's survival rates (length ``k_max``, read-only): a bootstrap draw of one
        measured request, or the aggregate rates when the spread is unknown."""
        return self.request_acceptance(segment, rng)[0]

    def request_acceptance(self, segment: str, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """One request's (survival rates given a proposal, proposal rate per step), drawn
        together from one measured request (the same single draw as :meth:`request_rates`)."""
        seg = self.segment(segment)
        n = seg.rows.shape[0]
        if n == 0:
            return seg.aggregate, seg.proposal
        i = int(rng.integers(n))
        return seg.rows[i], (1.0 if seg.row_proposal is None else float(seg.row_proposal[i]))

    def draw_requests(self, segments: Sequence[str], rng: np.random.Generator) -> list[tuple[list[float], float]]:
        """:meth:`request_acceptance` for requests of ``segments`` in order, as (negated rates,
        proposal rate): the same draws in one call (``rng.integers`` over an array of bounds takes
        one draw per bound from the stream, as one call per request does)."""
        segs = {name: self.segment(name) for name in dict.fromkeys(segments)}
        pos = {name: j for j, name in enumerate(segs)}
        names = np.array([pos[n] for n in segments], np.int64)
        sizes = np.array([g.rows.shape[0] for g in segs.values()], np.int64)[names]
        picks = np.zeros(len(segments), np.int64)
        drawn = np.flatnonzero(sizes > 0)
        if drawn.size:
            picks[drawn] = rng.integers(0, sizes[drawn])
        out: list[tuple[list[float], float]] = [([], 1.0)] * len(segments)
        for j, g in enumerate(segs.values()):  # one gather per segment, not one per request
            at = np.flatnonzero(names == j)
            if g.rows.shape[0] == 0:
                neg = (-g.aggregate).tolist()
                for i in at.tolist():
                    out[i] = (list(neg), g.proposal)
                continue
            sel = picks[at]
            rows = (-g.rows[sel]).tolist()
            props = [1.0] * len(rows) if g.row_proposal is None else g.row_proposal[sel].astype(float).tolist()
            for i, row, prop in zip(at.tolist(), rows, props, strict=True):
                out[i] = (row, prop)
        return out

    def powered(self, gamma: float) -> AcceptanceModel:
        """The same model with every survival rate raised to ``gamma`` (aggregate and per-request
        rows): the one-parameter family ``sim.decisions.acceptance_needed`` scales acceptance by.
        ``gamma < 1`` accepts more, ``> 1`` less; positions that always (1) or never (0) accept
        stay so, rates stay non-increasing by position, and the bootstrap picks the same rows."""
        if self.traces is not None:
            raise SpecplanError(f"{self.source.split(':')[0]}: a replayed acceptance trace cannot be scaled")
        if not gamma > 0:
            raise ValueError(f"gamma must be > 0, got {gamma}")

        def pw(seg: SegmentAcceptance) -> SegmentAcceptance:
            agg, rows = np.power(seg.aggregate, gamma), np.power(seg.rows, gamma)
            agg.setflags(write=False)
            rows.setflags(write=False)
            return dataclasses.replace(seg, aggregate=agg, rows=rows)

        out = AcceptanceModel(self.proposer, self.k_max, {n: pw(s) for n, s in self.segments.items()},
                              f"{self.source}, survival rates ^{gamma:.4g}",
                              wildcard=None if self._wildcard is None else pw(self._wildcard))
        return out

    def proposal_rate(self, segment: str) -> float:
        """Aggregate fraction of verification steps with a proposal."""
        return self.segment(segment).proposal

    def spread_known(self, segment: str) -> bool:
        """False when every request gets the aggregate rates (results should say so)."""
        return self.segment(segment).rows.shape[0] > 0

    def check_k(self, k: int) -> None:
        """One-line error when ``k`` exceeds what acceptance was measured for."""
        if k > self.k_max:
            raise SpecplanError(
                f"{self.source.split(':')[0]}: k={k} exceeds k_max={self.k_max} (acceptance is only "
                f"known for up to {self.k_max} draft tokens)"
            )

    def mean_acceptance_length(self, segment: str, k: int) -> float:
        """Expected tokens per drafted step at ``k`` (vLLM's 1 + accepted / drafts)."""
        return mean_acceptance_length(self.segment(segment).aggregate, k)

    def tokens_per_step(self, segment: str, k: int) -> float:
        """Expected tokens per verification step at ``k``, steps without a proposal included."""
        seg = self.segment(segment)
        return 1.0 + seg.proposal * (mean_acceptance_length(seg.aggregate, k) - 1.0)

    def precision(self, segment: str, k: int) -> tuple[float, float, int]:
        """(mean acceptance length at ``k``, 95 % half-width, measured requests) of a segment;
        (aggregate value, nan, 0) when per-request rows or their drafts are unknown."""
        seg = self.segment(segment)
        if seg.rows.shape[0] == 0:
            return mean_acceptance_length(seg.aggregate, k), math.nan, 0
        return mean_length_interval(seg.row_drafts, seg.rows * seg.row_drafts[:, None], k)

    def measured_output_tokens(self, segment: str) -> float:
        """Median tokens generated per measured request of a segment (nan when unknown).

        Why: acceptance depends on how far into an answer a step is (a small model repeats
        itself more the longer it writes, so n-gram lookup finds more to copy), so a profile
        measured on much shorter or longer answers than the workload's misleads. Each
        verification step emits its accepted tokens plus one (the last step may overshoot the
        request's length by up to k_max: the count is approximate).
        """
        seg = self.segment(segment)
        if seg.rows.shape[0] == 0:
            return math.nan
        prop = seg.row_proposal if seg.row_proposal is not None else np.ones(len(seg.row_drafts))
        steps = np.where(prop > 0, seg.row_drafts / np.where(prop > 0, prop, 1.0), 0.0)
        per_request = steps + seg.row_drafts * seg.rows.sum(axis=1)
        return float(np.median(per_request))

    def describe(self) -> list[str]:
        """Which profile segment each scenario segment uses, and how much data is behind it."""
        lines = [self.source]
        for name, seg in self.segments.items():
            spread = f"{seg.rows.shape[0]} requests" if seg.rows.shape[0] else "spread unknown"
            key = f" -> {seg.key}" if seg.key is not None else ""
            drafts = f", {seg.num_drafts} drafts" if seg.num_drafts else ""
            prop = f", proposal at {100 * seg.proposal:.0f}% of steps" if seg.proposal < 1.0 else ""
            lines.append(f"  segment {name}{key} ({spread}{drafts}{prop})")
        return lines


def _segment_from_profile(name: str, seg: AcceptanceSegment, note: str | None = None) -> SegmentAcceptance:
    agg = np.array(seg.survival, dtype=float)
    kept = [r for r in seg.per_request if r.num_drafts > 0 or r.num_steps]
    rows = np.array(
        [[a / r.num_drafts if r.num_drafts else 0.0 for a in r.accepted_per_pos] for r in kept], dtype=float
    ).reshape(-1, len(seg.accepted_per_pos))
    drafts = np.array([r.num_drafts for r in kept], dtype=float)
    has_steps = seg.num_steps is not None or any(r.num_steps for r in kept)
    prop = np.array([r.proposal_rate for r in kept], dtype=float) if has_steps else None
    for arr in (agg, rows, drafts, prop):
        if arr is not None:
            arr.setflags(write=False)
    return SegmentAcceptance(name, seg.key, agg, rows, seg.num_drafts, drafts, seg.proposal_rate, prop, note)
