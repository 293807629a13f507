"""The best k for each decode-batch range, from the profile: the one home of the per-batch
break-even rule (``specplan breakeven --best-k`` and a ``schedule = "auto"`` candidate both call
``batch_cost``).

Why per batch: speculation pays while ``D + V + H < M·T`` at the batch the engine runs
(``sim.decisions.breakeven``), and verifying ``k`` extra tokens per row grows from almost free at
batch 1 to nearly ``k + 1`` decodes when the step is compute-bound, so the best ``k`` falls as the
batch grows. At decode batch ``b`` with proposal rate ``p`` (n-gram: the share of steps with a
match; 1 for model drafters) one step drafting ``k`` costs the simulator's own step time averaged
over how many rows draft, as the simulator draws it (``drafting_mix``: each row has a proposal
with probability ``p``, so Binomial(b, p) drafting rows and, at batch 1, a plain step on a share
``1 − p`` of steps; every row when the engine verifies every slot anyway: ``full_width``), and
commits ``b·(1 + r_1 + … + r_k)`` tokens, ``r_i = p·s_i`` share-weighted over the workload's
segments. The best ``k`` (0 = plain decode) minimises seconds per committed token; adjacent batch
sizes with the same ``k`` merge into one inclusive range ``(start, end, k)`` (a batch keeps the
current range's ``k`` while it is within ``SWITCH_GAIN`` of its best): the form vLLM's
``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule`` take
(``sim.decisions.engine_config``). Queueing is not in this rule; the simulator adds it when the
schedule runs as a candidate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.model.acceptance_match import match_segment
from sim.model.step_time import StepShape

Schedule = tuple[tuple[int, int, int], ...]
"""Inclusive decode-batch ranges ``(start, end, k)`` from 1 up to the engine's ``max_num_seqs``."""


@dataclass(frozen=True, slots=True)
class BatchCost:
    """One decode batch size: seconds per committed token at k = 0, 1, …, k_max."""

    batch: int
    per_k_s: tuple[float, ...]
    step_s: tuple[float, ...] = ()
    """Expected seconds of one step of the whole batch at k = 0, 1, …, k_max (the mix of
    ``drafting_mix``); empty when the cell was built from per-token times alone."""
    mix: tuple[tuple[int, float], ...] = ()
    """``drafting_mix`` the steps were averaged over: (drafting rows, probability)."""

    @property
    def best_k(self) -> int:
        return best_of(self.per_k_s)

    @property
    def speedup(self) -> float:
        return speedup_of(self.per_k_s)


def best_of(per_k_s: Sequence[float]) -> int:
    """The k with the fewest seconds per token (ties: the smaller k, so 0 when nothing pays)."""
    return min(range(len(per_k_s)), key=lambda k: (per_k_s[k], k))


def speedup_of(per_k_s: Sequence[float]) -> float:
    """Plain decode time per token over the best k's."""
    return per_k_s[0] / per_k_s[best_of(per_k_s)]


MIX_POINTS = 48
"""Most drafting-row counts ``drafting_mix`` prices one by one (those within 1e-16 of the
Binomial's most likely count)."""

_HERMITE = ((0.0, 0.5333333333333333), (0.9585724646138185, 0.2220759220056126),
            (2.0201828704560856, 0.011257411327720693))
"""Five-point Gauss–Hermite nodes (± each) and weights for a normal's expectation."""


def _binomial(b: int, p: float) -> dict[int, float] | None:
    """Binomial(b, p) over the counts within 1e-16 of its mode's probability (walked out from
    the mode by the ratio of neighbours), or None when that is more than ``MIX_POINTS`` counts."""
    mode = min(b, int(math.floor((b + 1) * p)))
    top = math.exp(math.lgamma(b + 1) - math.lgamma(mode + 1) - math.lgamma(b - mode + 1)
                   + mode * math.log(p) + (b - mode) * math.log1p(-p))
    out = {mode: top}
    odds = p / (1.0 - p)
    n, w = mode, top
    while n < b and w > 1e-16 * top:  # P(n+1) = P(n)·(b−n)/(n+1)·p/(1−p)
        w *= (b - n) / (n + 1) * odds
        n += 1
        out[n] = w
        if len(out) > MIX_POINTS:
            return None
    n, w = mode, top
    while n > 0 and w > 1e-16 * top:
        w *= n / (b - n + 1) / odds
        n -= 1
        out[n] = w
        if len(out) > MIX_POINTS:
            return None
    return out


def drafting_mix(batch: int, proposal_rate: float, *, full_width: bool = False
                 ) -> tuple[tuple[int, float], ...]:
    """How many of a decode batch's rows draft in one step, with their probabilities.

    Why a distribution and not the mean: the simulator draws each row's proposal on its own
    (``draw_kernels``: one uniform per row per step, probability ``p``), so a step has
    Binomial(b, p) drafting rows, and a step with none is a plain decode. A step's price is not
    linear in that count (a verification pass over ``k + 1`` tokens is not ``k·p + 1`` tokens'
    worth; the drafter's fixed cost is paid only when some row drafts), so pricing the mean
    count disagrees with the simulator (issue 41: 1.04× against a simulated 1.62× at batch 1).
    Exact while the Binomial spans at most ``MIX_POINTS`` counts; wider (standard deviation above
    ~2.7 rows, large batches), its normal limit by five Gauss–Hermite nodes, each fractional
    node priced as the mix of its two neighbours, so a step costs at most 10 lookups however
    large the batch. ``full_width`` (an engine that verifies every row's ``k`` slots,
    ``serving_engine``): every row, always."""
    b = int(batch)
    p = float(proposal_rate)
    if full_width or p >= 1.0:
        return ((b, 1.0),)
    if p <= 0.0:
        return ((0, 1.0),)
    mean, sd = b * p, math.sqrt(b * p * (1.0 - p))
    exact = _binomial(b, p)
    out: dict[int, float] = exact if exact is not None else {}
    if exact is None:
        for t, w in _HERMITE:
            for x in {mean - math.sqrt(2.0) * sd * t, mean + math.sqrt(2.0) * sd * t}:
                x = min(max(x, 0.0), float(b))
                n = int(math.floor(x))
                frac = x - n
                out[n] = out.get(n, 0.0) + w * (1.0 - frac)
                if frac:
                    out[n + 1] = out.get(n + 1, 0.0) + w * frac
    total = sum(out.values())
    return tuple((n, w / total) for n, w in sorted(out.items()) if w > 0)


def batch_cost(timer: Any, proposer: str, batch: int, context: float, rates: Sequence[float],
               proposal_rate: float, *, full_width: bool = False) -> BatchCost:
    """The rule at one batch: ``timer`` is a step timer (``ProfileStepTimer``), ``rates`` the
    per-position rates ``r_i = p·s_i`` (tokens a row commits beyond its one: their sum up to k).
    A step drafting ``k`` is priced as the simulator's steps average: over ``drafting_mix``."""
    b = int(batch)
    mix = drafting_mix(b, proposal_rate, full_width=full_width)
    steps = [timer(StepShape(b, context, 0, None))]
    for k in range(1, len(rates) + 1):
        steps.append(sum(w * timer(StepShape(b, context, k, proposer, drafting_seqs=n)) for n, w in mix))
    times = [steps[0] / b] + [steps[k] / (b * (1.0 + float(sum(rates[:k])))) for k in range(1, len(steps))]
    return BatchCost(b, tuple(times), tuple(steps), mix)


SWITCH_GAIN = 0.02
"""A schedule changes k only where the new k is more than this share faster per token than the
current one: the decisions' indifference amount (``sim.decisions.facts.Facts.indifference``).
Why: imported grids have bumps (CUDA-graph sizes, kernel choices) that make the strict argmin
flip back and forth; each switch is a threshold the load can straddle (vLLM issue #49548) for a
gain no decision would count."""


def ranges(cells: Sequence[BatchCost], gain: float = 0.0) -> Schedule:
    """Inclusive ranges over batches 1, 2, …, top (``cells`` in that order): each batch keeps the
    current range's k while that k is within ``gain`` of the batch's best time per token, else
    starts a range at its best k; so with ``gain = 0`` every batch runs its best k."""
    out: list[list[int]] = []
    for i, c in enumerate(cells):
        if c.batch != i + 1:
            raise ValueError(f"ranges need batches 1..top in order, got {c.batch} at position {i}")
        if out and c.per_k_s[out[-1][2]] <= c.per_k_s[c.best_k] * (1.0 + gain):
            out[-1][1] = c.batch
        else:
            out.append([c.batch, c.batch, c.best_k])
    return tuple((a, b, k) for a, b, k in out)


@dataclass(frozen=True)
class KSchedule:
    """A computed schedule and what it rests on."""

    ranges: Schedule
    cells: tuple[BatchCost, ...]
    context: float
    acceptance: str
    """Which acceptance the rule used (segments and shares, or the candidate's assumed rates)."""

    @property
    def k_by_batch(self) -> tuple[tuple[int, int], ...]:
        """The scenario's ``k_by_batch`` form: ``((batch_at_least, k), …)``."""
        return tuple((a, k) for a, _, k in self.ranges)

    def describe(self) -> str:
        """One line: the ranges and what they were computed from."""
        body = ", ".join(f"{a}-{b}: k={k}" for a, b, k in self.ranges)
        return (f"k by batch computed from the profile (best k per decode batch, "
                f"{self.acceptance}, context {self.context:.0f}): {body}")


def mixed_rates(profile: Profile, proposer: str, segments: Sequence[tuple[AcceptanceKey, float]] | None
                ) -> tuple[np.ndarray, float, str]:
    """Share-weighted ``r_i = p·s_i``, the mean proposal rate and a label, over ``segments``
    (every segment of the proposer's entry, equal, when None)."""
    entry = profile.acceptance.get(proposer)
    if entry is None:
        raise profile.error(f"acceptance.{proposer}", f"no acceptance entry for proposer {proposer!r}; "
                            "a computed schedule needs one (or the candidate's assumed_acceptance)")
    chosen = []
    for key, share in segments if segments else [(s.key, 1.0) for s in entry.segments]:
        seg = match_segment(entry.segments, key)
        if seg is None:
            raise SpecplanError(f"{profile.origin}: acceptance.{proposer}: no segment matches {key}; "
                                f"available: {', '.join(str(s.key) for s in entry.segments)}")
        chosen.append((seg, float(share)))
    total = sum(w for _, w in chosen)
    rates = sum(np.asarray(s.survival, float) * s.proposal_rate * (w / total) for s, w in chosen)
    prop = sum(s.proposal_rate * w / total for s, w in chosen)
    label = "acceptance " + " + ".join(f"{s.key} ×{w / total:.2f}" for s, w in chosen)
    return np.asarray(rates, float), float(prop), label


def compute_schedule(timer: Any, proposer: str, top: int, context: float, rates: Sequence[float],
                     proposal_rate: float, label: str, *, k_max: int | None = None,
                     full_width: bool = False) -> KSchedule:
    """The best k for every decode batch 1..``top``, merged into ranges."""
    if top < 1:
        raise SpecplanError(f"a computed schedule needs max_num_seqs >= 1, got {top}")
    r = list(rates)[: k_max if k_max is not None else None]
    cells = tuple(batch_cost(timer, proposer, b, context, r, proposal_rate, full_width=full_width)
                  for b in range(1, top + 1))
    return KSchedule(ranges(cells, SWITCH_GAIN), cells, float(context), label)


def workload_mix(scenario: Any) -> tuple[list[tuple[AcceptanceKey, float]], float]:
    """The scenario's segments as (acceptance key, share) and its mean decode context (mean
    prompt + half the mean output, from 4000 draws with a fixed seed: a fixed input, so the
    schedule is the same on every call)."""
    w = scenario.workload
    shares = np.asarray(w.shares, float)
    rng = np.random.default_rng(np.random.SeedSequence(0))
    segs, ctx = [], 0.0
    for share, s in zip(shares.tolist(), w.segments, strict=True):
        if s.acceptance is not None:
            segs.append((AcceptanceKey(s.acceptance.task, s.acceptance.language, float(s.temperature)), share))
        p = float(np.mean(s.prompt_tokens.sample(rng, 4000))) if s.prompt_tokens is not None else 512.0
        o = float(np.mean(s.output_tokens.sample(rng, 4000))) if s.output_tokens is not None else 128.0
        ctx += share * (p + o / 2)
    return segs, ctx


def candidate_schedule(scenario: Any, profile: Profile, cand: Any) -> KSchedule:
    """The schedule a ``schedule = "auto"`` candidate runs: the rule on its fleet's profile, its
    engine's step rules and ``max_num_seqs``, its workload's segments (or its assumed rates),
    with k up to the candidate's ``k``."""
    from sim.model import serving_engine
    from sim.model.engine_defaults import engine_limits
    from sim.model.step_time import ProfileStepTimer

    own = scenario.for_candidate(cand)
    eng = own.fleet.engine
    engine = serving_engine.resolve(eng, profile)
    top = int(engine_limits(own, profile).max_num_seqs)
    segs, context = workload_mix(own)
    if cand.assumed_acceptance is not None:
        rates, prop, label = np.asarray(cand.assumed_acceptance, float), 1.0, "assumed acceptance (the candidate's)"
    else:
        rates, prop, label = mixed_rates(profile, cand.proposer, segs)
    if int(cand.k) > len(rates):
        raise SpecplanError(f"{scenario.origin or 'scenario'}: candidates[{cand.name}].k: {cand.k} is beyond the "
                            f"acceptance known for {cand.proposer!r} on {profile.name}; valid: 1–{len(rates)}")
    timer = ProfileStepTimer(profile, kv_layout=eng.kv_layout)
    timer.check_proposer(cand.proposer, int(cand.k))
    full = verifies_full_width(engine, profile, cand.proposer)
    return compute_schedule(timer, cand.proposer, top, context, rates, prop, label,
                            k_max=int(cand.k), full_width=full)


def verifies_full_width(engine: Any, profile: Profile, proposer: str) -> bool:
    """Whether ``proposer``'s rows verify ``k`` slots on every step on ``engine`` (a resolved
    ``serving_engine.ServingEngine``): only host lookups (n-gram, suffix) ever lack a proposal."""
    kind = getattr(profile.proposers.get(proposer), "kind", "")
    return bool(engine.full_width_drafts) and kind in ("ngram", "suffix")


def resolve_candidate(scenario: Any, profile: Profile, cand: Any) -> Any:
    """``cand`` with its ``k_by_batch`` computed when it asks for ``schedule = "auto"`` (itself
    otherwise, or when already computed). The result is for running and emitting only: it does
    not round-trip through TOML (``k_by_batch`` and ``schedule`` together are refused there)."""
    if getattr(cand, "schedule", None) != "auto" or cand.k_by_batch is not None:
        return cand
    sched = candidate_schedule(scenario, profile, cand)
    return dataclasses.replace(cand, k_by_batch=sched.k_by_batch, computed=sched.describe())


STRADDLE_SHARE = 0.20
"""Share of decode steps on each side of a k switch (within ``STRADDLE_BAND``) that warns."""
STRADDLE_BAND = 0.10
"""Relative band around a switch's batch size (at least one batch size on each side)."""


def straddled(k_by_batch: Sequence[tuple[int, int]], decode_batches: np.ndarray
              ) -> list[tuple[int, int, int, float, float]]:
    """The k switches a run's decode batches sit at: ``(batch, k below, k from it, share of
    steps just below, share just at or above)`` for each switch with more than
    ``STRADDLE_SHARE`` of the decode steps within ``STRADDLE_BAND`` on each side.

    Why: a batch hovering at a switch flips k from step to step, and vLLM issue #49548 reports
    throughput collapsing there; the schedule's per-step view cannot see that."""
    b = np.asarray(decode_batches)
    b = b[b > 0]
    out: list[tuple[int, int, int, float, float]] = []
    if b.size == 0:
        return out
    for (_, k_lo), (start, k_hi) in zip(k_by_batch, k_by_batch[1:], strict=False):
        if k_lo == k_hi:
            continue
        lo = min(start - 1, math.floor(start * (1 - STRADDLE_BAND)))
        hi = max(start, math.ceil(start * (1 + STRADDLE_BAND)))
        below = float(np.mean((b >= lo) & (b < start)))
        above = float(np.mean((b >= start) & (b <= hi)))
        if below > STRADDLE_SHARE and above > STRADDLE_SHARE:
            out.append((int(start), int(k_lo), int(k_hi), below, above))
    return out


def straddle_notes(name: str, k_by_batch: Sequence[tuple[int, int]], decode_batches: np.ndarray) -> list[str]:
    """One warning line per straddled switch (``straddled``)."""
    return [f"warning: {name}'s load sits at a k switch: {100 * lo:.0f}% of decode steps just below batch "
            f"{start} (k={a}) and {100 * hi:.0f}% at {start}–{math.ceil(start * (1 + STRADDLE_BAND))} (k={c}); "
            "k flips from step to step there, and switching k at a batch threshold has collapsed "
            "throughput in vLLM (issue #49548): move the switch away from this load or use one k"
            for start, a, c, lo, hi in straddled(k_by_batch, decode_batches)]
