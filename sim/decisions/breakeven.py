"""The break-even model of speculative decoding: does drafting k tokens pay off?

One speculative cycle drafts ``k`` tokens (D(k)), verifies them in one target pass over
``k + 1`` tokens (V(k)) and pays bookkeeping H(k); it commits on average
``M(k) = 1 + s_1 + ... + s_k`` tokens (``s_i`` the unconditional survival rate of position i;
``s_i = α^i`` for a constant per-token acceptance α). Plain decoding commits one token per
target step of T seconds, so speculation pays off when ``D + V + H < M·T``, and the speedup in
time per committed token is ``M·T / (D + V + H)``.

From a profile the cycle is the simulator's own step, priced by its step timer over the mix of
steps it runs (``sim.model.k_schedule.batch_cost``, the rule's one home): an n-gram proposer
without a match leaves a row a plain decode on that step (or, on an engine that verifies full
width, a ``k + 1``-token pass that accepts nothing), so D, V, H and M(k) are averages over
verification and plain steps. A single-user ``simulate`` of the same profile and segment agrees
(tests/sim/decisions/test_breakeven_vs_simulate.py). This ignores queueing and batching effects
across requests; the simulator is what answers those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.fleet_config import EngineConfig
from sim.contracts.grid import GridInterpolator
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.model import serving_engine
from sim.model.acceptance_match import match_segment
from sim.model.k_schedule import batch_cost, verifies_full_width
from sim.model.serving_engine import ServingEngine
from sim.model.step_time import ProfileStepTimer
from sim.results.acceptance_basis import HOST_HINT, assumed_draft_host


def acceptance_length_alpha(alpha: float, k: int) -> float:
    """``M(k) = 1 + α + α² + ... + α^k`` for per-token acceptance ``α`` in [0, 1]."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return float(sum(alpha**i for i in range(k + 1)))


def acceptance_length_rates(rates: Sequence[float], k: int) -> float:
    """``M(k) = 1 + s_1 + ... + s_k`` from unconditional survival rates."""
    if k > len(rates):
        raise ValueError(f"k={k} exceeds the {len(rates)} survival rates given")
    return 1.0 + float(sum(rates[:k]))


def alpha_needed(cycle_s: float, baseline_s: float, k: int, proposal_rate: float = 1.0) -> float | None:
    """Smallest per-token acceptance α with ``(1 + p·(M_α(k) − 1))·T >= cycle`` for proposal
    rate ``p`` (None: unreachable even at α=1)."""
    target = cycle_s / baseline_s
    if target <= 1.0:
        return 0.0
    if proposal_rate <= 0.0:
        return None
    target = 1.0 + (target - 1.0) / proposal_rate  # M_α(k) a verification step must reach
    if target > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: M is increasing in α
        mid = (lo + hi) / 2
        if acceptance_length_alpha(mid, k) < target:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class BreakevenRow:
    """One k: its cycle cost, the tokens it commits and whether it beats plain decoding."""

    k: int
    draft_s: float
    """D(k): drafting k tokens."""
    verify_s: float
    """V(k): one target pass over k + 1 tokens per sequence."""
    overhead_s: float
    """H(k): bookkeeping of the cycle."""
    acceptance_length: float
    """M(k): expected tokens committed per cycle."""
    baseline_s: float
    """T: one plain decode step (one token)."""
    proposal_rate: float = 1.0
    """Share of cycles with a proposal (n-gram: a match); ``alpha_needed`` scales by it."""

    @property
    def cycle_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    @property
    def time_per_token_s(self) -> float:
        return self.cycle_s / self.acceptance_length

    @property
    def speedup(self) -> float:
        """Plain time per token over speculative time per token (> 1 pays off)."""
        return self.acceptance_length * self.baseline_s / self.cycle_s if self.cycle_s > 0 else float("inf")

    @property
    def pays_off(self) -> bool:
        """``D + V + H < M·T``."""
        return self.cycle_s < self.acceptance_length * self.baseline_s

    @property
    def alpha_needed(self) -> float | None:
        """Per-token acceptance at which this k breaks even (None: never)."""
        return alpha_needed(self.cycle_s, self.baseline_s, self.k, self.proposal_rate)

    @property
    def overhead_breakeven_s(self) -> float:
        """The largest H at which this k still breaks even, ``M·T − D − V`` (< 0: never, even at H = 0).
        Why: an import's H is *assumed*, and it is the term that decides where verification is cheap."""
        return self.acceptance_length * self.baseline_s - self.draft_s - self.verify_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            cycle_s=self.cycle_s,
            time_per_token_s=self.time_per_token_s,
            speedup=self.speedup,
            pays_off=self.pays_off,
            alpha_needed=self.alpha_needed,
            overhead_breakeven_s=self.overhead_breakeven_s,
        )
        return d


@dataclass(frozen=True)
class BreakevenResult:
    """A break-even table over k with where its numbers came from."""

    rows: tuple[BreakevenRow, ...]
    baseline_s: float
    sources: tuple[str, ...]
    """Provenance of every number, one line each."""
    notes: tuple[str, ...] = ()
    """Extrapolations and other caveats."""
    inputs: tuple[tuple[str, Any], ...] = ()
    """What was asked (proposer, batch, context, segment, ...)."""

    def best(self) -> BreakevenRow | None:
        """The k with the lowest time per token, if any k pays off."""
        paying = [r for r in self.rows if r.pays_off]
        return min(paying, key=lambda r: r.time_per_token_s) if paying else None

    def to_dict(self) -> dict[str, Any]:
        best = self.best()
        return {
            "inputs": dict(self.inputs),
            "baseline_s": self.baseline_s,
            "rows": [r.to_dict() for r in self.rows],
            "best_k": best.k if best else None,
            "sources": list(self.sources),
            "notes": list(self.notes),
        }


def breakeven_from_numbers(
    *,
    alpha: float,
    baseline_s: float,
    draft_per_token_s: float,
    verify_s: float,
    overhead_s: float = 0.0,
    ks: Sequence[int] = (1, 2, 3, 4, 5, 6),
) -> BreakevenResult:
    """Break-even from typed-in numbers: D(k) = k·``draft_per_token_s``; V and H the same for every k."""
    if not 0.0 <= alpha <= 1.0:
        raise SpecplanError(f"--alpha: per-token acceptance must be in [0, 1], got {alpha}")
    if not baseline_s > 0:
        raise SpecplanError(f"--T-ms: plain decode step time must be > 0, got {baseline_s * 1e3:g}")
    if draft_per_token_s < 0:
        raise SpecplanError(f"--D-ms: draft time per token must be >= 0, got {draft_per_token_s * 1e3:g}")
    if not verify_s > 0:
        raise SpecplanError(f"--V-ms: verification time must be > 0, got {verify_s * 1e3:g}")
    if overhead_s < 0:
        raise SpecplanError(f"--H-ms: overhead must be >= 0, got {overhead_s * 1e3:g}")
    if not ks or any(k < 1 for k in ks):
        raise SpecplanError(f"--k: draft lengths must be >= 1, got {list(ks)}")
    rows = tuple(
        BreakevenRow(
            k=k,
            draft_s=k * draft_per_token_s,
            verify_s=verify_s,
            overhead_s=overhead_s,
            acceptance_length=acceptance_length_alpha(alpha, k),
            baseline_s=baseline_s,
        )
        for k in ks
    )
    src = (
        f"assumed numbers from the command line: alpha={alpha:g}, T={baseline_s * 1e3:g} ms, "
        f"D={draft_per_token_s * 1e3:g} ms per draft token, V={verify_s * 1e3:g} ms, H={overhead_s * 1e3:g} ms",
    )
    inputs = (("mode", "numbers"), ("alpha", alpha), ("ks", list(ks)))
    return BreakevenResult(rows, baseline_s, src, (), inputs)


def breakeven_from_profile(
    profile: Profile,
    proposer: str,
    *,
    segment: AcceptanceKey | None = None,
    alpha: float | None = None,
    batch: int = 1,
    context: float = 512.0,
    k_max: int | None = None,
    engine: ServingEngine | None = None,
) -> BreakevenResult:
    """Break-even at one batch size and context from a profile's grids and acceptance.

    Acceptance comes from the proposer's entry (``segment`` picks one; required when there are
    several), or from ``alpha`` (then labelled assumed). k runs from 1 to ``k_max`` (default:
    the acceptance entry's k_max, or the largest measured draft k with ``alpha``). Every step is
    priced by the simulator's step timer over the simulator's mix of steps (``batch_cost``) on
    ``engine`` (default: vLLM, its runner by the profile's device, as a scenario that names none).
    """
    if batch < 1:
        raise SpecplanError(f"--batch: must be >= 1, got {batch}")
    if context < 0:
        raise SpecplanError(f"--context: must be >= 0, got {context}")
    if proposer not in profile.proposers:
        raise profile.error("proposers", f"unknown proposer {proposer!r} (profile proposers: {', '.join(profile.proposers) or 'none'})")
    ptiming = profile.timing.proposers.get(proposer)
    if ptiming is None:
        raise profile.error(f"timing.proposers.{proposer}", f"no draft/overhead timing for proposer {proposer!r}")
    sources = [f"timing: {profile.timing.provenance.describe()}"]
    kmax_avail, rates, prop, seg_label = _acceptance_of(profile, proposer, ptiming, segment, alpha, sources)
    top = kmax_avail if k_max is None else k_max
    if top < 1:
        raise SpecplanError(f"--k-max: must be >= 1, got {top}")
    if rates is not None and top > len(rates):
        raise SpecplanError(f"--k-max: acceptance is only known up to k_max={len(rates)}, got {top}")
    survival = [alpha**i for i in range(1, top + 1)] if rates is None else list(rates[:top])
    eng = engine if engine is not None else serving_engine.resolve(EngineConfig(), profile)
    full = verifies_full_width(eng, profile, proposer)
    sources.append(eng.source_line)
    timer = ProfileStepTimer(profile)
    timer.check_proposer(proposer, top)
    cell = batch_cost(timer, proposer, batch, context, [prop * x for x in survival], prop, full_width=full)
    rows = []
    for k in range(1, top + 1):
        d, h = _drafting_parts(timer, proposer, cell.mix, k, context)
        rows.append(
            BreakevenRow(
                k=k,
                draft_s=d,
                verify_s=cell.step_s[k] - d - h,
                overhead_s=h,
                acceptance_length=1.0 + prop * (acceptance_length_rates(survival, k) - 1.0),
                baseline_s=cell.step_s[0],
                proposal_rate=prop,
            )
        )
    notes = _notes(prop, full, timer.grids())
    if ptiming.overhead_provenance is not None:
        sources.append(f"draft host H[{proposer}]: {ptiming.overhead_provenance.describe()}")
    doubt = assumed_overhead_note(profile, proposer, rows)
    notes += [doubt] if doubt else []
    inputs = (
        ("mode", "profile"),
        ("profile", profile.name),
        ("proposer", proposer),
        ("segment", seg_label),
        ("alpha", alpha),
        ("batch", batch),
        ("context", context),
    )
    return BreakevenResult(tuple(rows), cell.step_s[0], tuple(sources), tuple(notes), inputs)


def _drafting_parts(timer: ProfileStepTimer, proposer: str, mix: Sequence[tuple[int, float]], k: int,
                    context: float) -> tuple[float, float]:
    """The drafter's D and host H parts of ``batch_cost``'s average step (what the timer adds for
    ``n`` drafting rows, nothing when none drafts): shown apart, summed into the same price."""
    draft, over = timer._draft[proposer], timer._overhead[proposer]
    d = sum(w * draft(n, k, context) for n, w in mix if n > 0)
    h = sum(w * over(n, k) for n, w in mix if n > 0)
    return d, h


def _acceptance_of(profile: Profile, proposer: str, ptiming: Any, segment: AcceptanceKey | None,
                   alpha: float | None, sources: list[str]) -> tuple[int, Any, float, str | None]:
    """(k_max available, survival rates or None for ``alpha``, proposal rate, segment label);
    appends the acceptance's provenance line to ``sources``."""
    seg_label = None
    prop = 1.0
    if alpha is not None:
        if not 0.0 <= alpha <= 1.0:
            raise SpecplanError(f"--alpha: per-token acceptance must be in [0, 1], got {alpha}")
        kmax_avail = int(ptiming.draft.axes[1][-1])
        rates = None
        sources.append(f"acceptance: assumed alpha={alpha:g} from the command line")
    else:
        entry = profile.acceptance.get(proposer)
        if entry is None:
            raise profile.error(
                f"acceptance.{proposer}",
                f"no acceptance entry for proposer {proposer!r} (entries: {', '.join(profile.acceptance) or 'none'}); pass --alpha",
            )
        kmax_avail = entry.k_max
        if segment is None:
            if len(entry.segments) != 1:
                have = ", ".join(str(s.key) for s in entry.segments)
                raise SpecplanError(f"--segment: {len(entry.segments)} acceptance segments, choose one of {have}")
            chosen = entry.segments[0]
        else:
            chosen = match_segment(entry.segments, segment)
            if chosen is None:
                have = ", ".join(str(s.key) for s in entry.segments)
                raise SpecplanError(f"--segment: no acceptance segment matches {segment}; available: {have}")
        rates = chosen.survival
        prop = chosen.proposal_rate
        seg_label = str(chosen.key)
        sources.append(f"acceptance[{proposer}]: {entry.provenance.describe()}")
    return kmax_avail, rates, prop, seg_label


def assumed_overhead_note(profile: Profile, proposer: str, rows: Sequence[BreakevenRow],
                          k: int | None = None) -> str | None:
    """``overhead_doubt`` of ``rows`` when the profile's H for ``proposer`` is assumed, else None."""
    if assumed_draft_host(profile, proposer) is None:
        return None
    return overhead_doubt(rows, f"timing.proposers.{proposer}.overhead", k)


def overhead_doubt(rows: Sequence[BreakevenRow], field: str, k: int | None = None) -> str | None:
    """How far the answer rests on an assumed H (``field``, the profile's grid), for draft length
    ``k`` (default: the best k, else the k closest to paying): the H at which it breaks even
    against the assumed one. None without rows (or without a row for ``k``)."""
    if k is not None:
        row = next((r for r in rows if r.k == k), None)
    else:
        row = min((r for r in rows if r.pays_off), key=lambda r: r.time_per_token_s, default=None)
        row = row or max(rows, key=lambda r: r.overhead_breakeven_s, default=None)
    if row is None:
        return None
    head = f"H is assumed ({field}): "
    who = f"the best k={row.k}" if k is None and row.pays_off else f"k={row.k}"
    hmax, h = row.overhead_breakeven_s * 1e3, row.overhead_s * 1e3
    fit = f"; {HOST_HINT}"
    if hmax <= 0:
        never = "no k pays" if k is None else f"{who} does not pay"
        return head + f"{never} even with H = 0, so the answer does not rest on it"
    if row.pays_off:
        times = f", {hmax / h:.2f}x the assumed {h:.3f} ms" if h > 0 else ""
        return head + f"{who} pays while H <= {hmax:.3f} ms a step{times}" + fit
    lead = f"no k pays with it, but {who}" if k is None else f"{who} does not pay with it, but"
    return head + f"{lead} would with H <= {hmax:.3f} ms a step (assumed {h:.3f} ms)" + fit


def _notes(prop: float, full: bool, grids: Sequence[GridInterpolator]) -> list[str]:
    """What the result's numbers rest on beyond the profile: partial proposals, extrapolation."""
    notes = []
    if prop < 1.0:
        step = ("a full-width pass that accepts nothing" if full else "a plain one-token decode")
        notes.append(f"proposal on {100 * prop:.1f}% of steps (an n-gram lookup without a match leaves {step}): "
                     "D, V, H and M(k) are averages over verification and plain steps, as the simulator runs them")
    for g in grids:
        for what, n in g.extrapolations().items():
            notes.append(f"extrapolated: {g.name.removeprefix('timing.')}.{what} in {n} of {g.calls} lookups")
        if g.filled:
            notes.append(f"filled: {g.name.removeprefix('timing.')} has {g.filled} null cells filled from neighbours")
    return notes
