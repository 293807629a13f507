"""Does the verdict survive the profile's own acceptance uncertainty?

Why: a profile's acceptance is a sample (a quick profile measures one prompt per segment), and
a verdict that holds at the sample's mean but flips inside its interval is not a verdict. The
profile stores, per segment, the prompts measured and a bootstrap interval over them
(``sim.contracts.acceptance_interval``); this module carries it into the decision.

The rule (docs/decisions.md, "The profile's acceptance interval"): each speculative candidate is
simulated again, on the decision's own seeds (the same requests), at the two ends of its
acceptance interval, and the decision is taken again by the same function (``decision.decide``) with its runs
at that end in place of the estimate's. When the answer at an end differs from the answer at the
estimate, the verdict flips inside the interval and is undetermined: "the profile measured N
prompts for segment S; measure about M more". M: a short bisection finds where between the
estimate and that end the answer changes; the interval shrinks with √n, so M prompts bring its
half-width on that side down to the distance from the estimate to the change.

The end of the mix: every segment moves toward its own interval's end (``acceptance_shift``),
each by the same fraction ``c`` of its half-width, with ``c = √(Σ w_s² h_s²) / Σ w_s h_s``
(``w``: the segment's share, ``h``: its half-width on that side), so the mix's mean acceptance
length moves by the root-sum-square of the segments' moves: segments measured on separate
prompts err independently, and all at their 2.5 % ends at once would be far beyond a 95 %
statement. A segment with under two prompts that drafted has no interval, only bounds: it moves
all the way, to 1 (low end) or 1 + k (high end).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sim.contracts.acceptance_interval import more_prompts
from sim.decisions.decision import Decision, Standing
from sim.decisions.replaced_runs import Tally, rerun_decision, rerun_names

CHANGES = "the answer changes inside its acceptance interval"
"""How a standing says the profile's acceptance interval left it undetermined (the headline reads it)."""
FEW_PROMPTS = 10
"""Below two prompts a segment has no interval; the advice is then to reach this many."""


@dataclass(frozen=True)
class SegmentSample:
    """What the profile measured for one scenario segment of a candidate."""

    segment: str
    key: str
    share: float
    prompts: int | None
    """Prompts measured; None when the profile does not record it (written before issue 41)."""
    drafts: int
    point: float
    """Mean acceptance length at the candidate's k (vLLM's aggregate); nan without drafts."""
    low: float | None
    high: float | None
    """The interval's ends at k; None: no interval (fewer than two prompts drafted anything)."""

    def side(self, below: bool, k: int) -> float:
        """Half-width on one side; the whole range 1..1+k when there is no interval."""
        if self.drafts == 0:
            return 0.0  # no draft: the family cannot move it (proposal rate 0 stays 0)
        if below:
            return self.point - (1.0 if self.low is None else self.low)
        return (1.0 + k if self.high is None else self.high) - self.point

    def words(self) -> str:
        if self.prompts is None:
            return f"{self.segment}: sample size not recorded"
        if self.drafts == 0:
            return f"{self.segment}: no draft in {self.prompts} prompt(s)"
        iv = ("no interval" if self.low is None else f"95 % {self.low:.2f}–{self.high:.2f}")
        return f"{self.segment}: {self.point:.2f} ({iv}, {self.prompts} prompt(s))"


@dataclass(frozen=True)
class AcceptanceDoubt:
    """One speculative candidate's acceptance interval, and the answer at each of its ends."""

    candidate: str
    k: int
    segments: tuple[SegmentSample, ...]
    assumed: float = math.nan
    low: float = math.nan
    high: float = math.nan
    """Acceptance length (``acceptance_needed.length_of``) at the estimate and the interval's ends."""
    at_low: str = ""
    at_high: str = ""
    """The verdict's headline with the candidate at each end (empty: not judged)."""
    flips_low: bool = False
    flips_high: bool = False
    change: tuple[float, float] | None = None
    """Bisection bracket (same answer at the first, another at the second) of where it flips."""
    unknown: str = ""
    """Why the interval could not be judged (empty when it was)."""
    runs: int = 0

    @property
    def flips(self) -> bool:
        return self.flips_low or self.flips_high

    def reason(self) -> str:
        """"the profile measured N prompts for segment S; measure about M more"."""
        if not self.flips:
            return ""
        below = self.flips_low
        used = [s for s in self.segments if s.drafts > 0 and s.prompts is not None] or list(self.segments)
        worst = max(used, key=lambda s: s.share * s.side(below, self.k))
        n = worst.prompts or 0
        head = f"the profile measured {n} prompt{'s' if n != 1 else ''} for segment {worst.segment}"
        if worst.low is None:
            return f"{head} (no interval from under two prompts); measure at least {max(1, FEW_PROMPTS - n)} more"
        half = abs(self.assumed - (self.low if below else self.high))
        star = (self.low if below else self.high) if self.change is None else sum(self.change) / 2
        more = more_prompts(n, half, abs(self.assumed - star))
        if more is None:
            return f"{head}; the answer changes at the estimate itself: measure many more"
        return f"{head}; measure about {more} more"

    @property
    def settled(self) -> bool:
        """Judged, and the same answer at both ends with nothing left to the seeds."""
        return (not self.unknown and bool(self.at_low) and not self.flips
                and not any(x.startswith("undetermined") for x in (self.at_low, self.at_high))
                and all(s.low is not None for s in self.segments if s.drafts))

    def words(self, verbose: bool = True) -> str:
        """One line for the verdict block (``verbose``: every segment's estimate and interval;
        else the fewest prompts behind it)."""
        if self.unknown:
            return f"{self.candidate}: {self.unknown}"
        if verbose:
            segs = "; ".join(s.words() for s in self.segments)
        else:
            known = [s.prompts for s in self.segments if s.prompts is not None]
            none = sum(1 for s in self.segments if s.drafts == 0)
            segs = (f"fewest prompts in a segment {min(known)}" if known else "prompts unknown") + (
                f"; {none} segment(s) with no draft" if none else "")
        if not self.at_low:
            return f"{self.candidate}: {segs}"
        if not self.flips:
            said = "the answer is the same at both ends" + (
                "" if not any(x.startswith("undetermined") for x in (self.at_low, self.at_high)) else
                f" (at the {'low' if self.at_low.startswith('undetermined') else 'high'} end the same leader is "
                "ahead but the seeds cannot separate it: more seeds, not more prompts, would tell)")
        else:
            end = "low" if self.flips_low else "high"
            said = f"at the {end} end the verdict would be: {self.at_low if self.flips_low else self.at_high}"
            if self.change is not None:
                said += f"; it changes between {min(self.change):.2f} and {max(self.change):.2f}"
        level = "95 % interval" if all(s.low is not None for s in self.segments if s.drafts) else (
            "interval (95 % where two or more prompts drafted, else the whole range)")
        return (f"{self.candidate}: acceptance length {self.assumed:.2f}, {level} {self.low:.2f}–"
                f"{self.high:.2f}: {said} ({segs})")


def settled_words(doubts: Sequence[AcceptanceDoubt]) -> str:
    """One line for every settled interval (the terminal's short form; --verbose: one each)."""
    known = [s.prompts for d in doubts for s in d.segments if s.prompts is not None]
    fewest = f" (≥ {min(known)} prompts a segment)" if known else ""
    each = ", ".join(f"{d.candidate} {d.low:.2f}–{d.high:.2f}" for d in doubts)
    return f"(95 %) the answer is the same at both ends: {each}{fewest}"


def samples(model: Any, profile_segments: Callable[[str], Any], shares: Sequence[tuple[str, float]],
            k: int) -> tuple[SegmentSample, ...]:
    """Each scenario segment's prompts, drafts, estimate and interval at ``k``;
    ``profile_segments(name)``: the profile's ``AcceptanceSegment`` behind the model's segment."""
    total = sum(w for _, w in shares) or 1.0
    out = []
    for name, share in shares:
        seg = model.segment(name)
        unc = getattr(profile_segments(name), "uncertainty", None)
        point = 1.0 + float(seg.aggregate[:k].sum()) if seg.num_drafts else math.nan
        lo = hi = None
        if unc is not None and unc.has_interval:
            lo, hi = unc.length_low[k - 1], unc.length_high[k - 1]
        out.append(SegmentSample(name, str(seg.key), share / total, None if unc is None else unc.prompts,
                                 int(seg.num_drafts), point, lo, hi))
    return tuple(out)


def _fraction(segs: Sequence[SegmentSample], below: bool, k: int) -> float:
    """``c`` of the module doc over the segments with an interval."""
    hs = [(s.share, s.side(below, k)) for s in segs if s.drafts > 0 and s.low is not None]
    total = sum(w * h for w, h in hs)
    return math.sqrt(sum((w * h) ** 2 for w, h in hs)) / total if total > 0 else 0.0


def moved(segs: Sequence[SegmentSample], u: float, below: bool, k: int) -> dict[str, float]:
    """Each drafting segment's mean acceptance length ``u`` of the way (0: the estimate, 1: the
    end) toward the low (``below``) or high end of the mix: ``c`` of its half-width for a
    segment with an interval, its whole range for one without."""
    c = _fraction(segs, below, k)
    sign = -1.0 if below else 1.0
    return {s.segment: s.point + sign * u * (c if s.low is not None else 1.0) * s.side(below, k)
            for s in segs if s.drafts > 0}


def _mix(segs: Sequence[SegmentSample], u: float, below: bool, k: int) -> float:
    """The mix's mean acceptance length (share-weighted over the segments that drafted) at ``u``."""
    at = moved(segs, u, below, k)
    w = sum(s.share for s in segs if s.segment in at)
    return sum(s.share * at[s.segment] for s in segs if s.segment in at) / w if w > 0 else math.nan


def _unknown(segs: tuple[SegmentSample, ...]) -> str:
    if any(s.prompts is None for s in segs):
        return ("the profile records no sample size for its acceptance (written before issue 41, or "
                "imported): the verdict does not cover the acceptance's uncertainty; "
                "`specplan profile interval` adds it from the stored per-prompt rows")
    if all(s.drafts == 0 for s in segs):
        return ("no draft in any measured prompt of its segments: simulated without speculation; "
                "whether another prompt would get one is unknown")
    return ""


def _key(d: Decision) -> tuple[Any, ...]:
    """What must stay the same for the verdict to hold: outcome, winner, and whether speculation
    pays at all (the baseline among the leaders of a no-winner answer)."""
    return d.outcome, d.winner, d.outcome == "no winner" and d.baseline in d.leaders


def changed(estimate: Decision, end: Decision) -> bool:
    """Whether the answer at an interval's end differs from the estimate's. An end the seeds
    cannot settle, where every open comparison is still led by a leader of the estimate's answer,
    is not a change: more seeds, not more prompts, would tell (said in the doubt's line)."""
    if _key(end) == _key(estimate):
        return False
    if end.outcome != "undetermined":
        return True
    open_ = [c for c in end.comparisons if c.verdict == "undetermined"]
    return not open_ or any(c.leader not in estimate.leaders for c in open_)


def candidate_samples(sc: Any, profile: Any, name: str) -> tuple[Any, Any, int, tuple[SegmentSample, ...]] | None:
    """(the candidate as run, its profile, its k, each scenario segment's sample) for a speculative candidate
    whose acceptance is the profile's; None for assumed acceptance or a replayed trace (no sample
    to doubt). Shared by simulate's and capacity's checks (``capacity_doubt``)."""
    from sim.model.assembly import acceptance_model
    from sim.model.k_schedule import resolve_candidate
    from sim.results.runner import candidate_profiles

    prof = candidate_profiles(sc, profile, [sc.candidate(name)])[name]
    cand = resolve_candidate(sc, prof, sc.candidate(name))  # as run_scenario ran it (schedule = "auto")
    if cand.assumed_acceptance is not None or cand.acceptance_trace is not None:
        return None
    model = acceptance_model(sc.for_candidate(cand), prof, cand)
    if model is None or model.traces is not None:
        return None
    entry = prof.acceptance[cand.proposer]

    def source(seg_name: str) -> Any:
        key = model.segment(seg_name).key
        return next((s for s in entry.segments if s.key == key), None)

    k = cand.max_k
    return cand, prof, k, samples(model, source, [(s.name, s.share) for s in sc.workload.segments], k)


Verdict = Callable[[float, bool], Decision]
"""``verdict(u, below)``: the decision with the candidate's segments moved ``u`` of the way to
the low (``below``) or high end of its acceptance interval (``moved``)."""


def judge(name: str, k: int, segs: tuple[SegmentSample, ...], estimate: Decision, verdict: Verdict, *,
          bisect: int = 2, differs: Callable[[Decision, Decision], bool] | None = None,
          runs: Callable[[], int] = lambda: 0) -> AcceptanceDoubt:
    """One candidate's :class:`AcceptanceDoubt`: the answer at both ends of its interval, and
    where between the estimate and a flipping end the answer changes (``bisect`` evaluations).
    ``differs(estimate, end)``: whether an end's answer is another (default ``changed``)."""
    from sim.decisions.answer_text import headline

    differs = differs or changed
    assumed = _mix(segs, 0.0, True, k)
    why = _unknown(segs)
    if why:
        return AcceptanceDoubt(name, k, segs, assumed, unknown=why)
    low, high = _mix(segs, 1.0, True, k), _mix(segs, 1.0, False, k)
    at_lo, at_hi = verdict(1.0, True), verdict(1.0, False)
    flips_lo, flips_hi = differs(estimate, at_lo), differs(estimate, at_hi)
    change = None
    if flips_lo or flips_hi:
        below = flips_lo
        same, other = 0.0, 1.0
        for _ in range(bisect):
            mid = (same + other) / 2
            if not differs(estimate, verdict(mid, below)):
                same = mid
            else:
                other = mid
        change = (_mix(segs, same, below, k), _mix(segs, other, below, k))
    return AcceptanceDoubt(name, k, segs, assumed, low, high, headline(at_lo), headline(at_hi),
                           flips_lo, flips_hi, change, runs=runs())


def acceptance_doubts(result: Any, profile: Any, estimate: Decision, *, device: str = "replica",
                      progress: Callable[[int, int, str], None] | None = None,
                      bisect: int = 2) -> tuple[AcceptanceDoubt, ...]:
    """One :class:`AcceptanceDoubt` per speculative candidate of ``result`` whose acceptance is
    the profile's (assumed acceptance and replayed traces have no sample to doubt: left out).
    ``estimate``: the decision at the profile's estimate, what each end is compared with;
    ``bisect``: extra evaluations that locate a flip (for M)."""
    names = rerun_names(result, estimate)
    if not names:
        return ()
    sc = result.scenario
    out = []
    tally = Tally(2 * len(names) * len(result.seeds), "acceptance interval", progress)
    for name in names:
        got = candidate_samples(sc, getattr(result, "profiles", None) or profile, name)
        if got is None:
            continue
        cand, prof, k, segs = got

        def verdict(u: float, below: bool, cand: Any = cand, prof: Any = prof, segs: Any = segs,
                    k: int = k) -> Decision:
            """The decision with ``cand``'s segments moved ``u`` of the way to the interval's end."""
            return rerun_decision(result, cand, prof, device=device, tally=tally,
                                  acceptance_shift=moved(segs, u, below, k))

        out.append(judge(name, k, segs, estimate, verdict, bisect=bisect,
                         runs=lambda name=name: tally.each.get(name, 0)))
    return tuple(out)


def undetermined_by(decision: Decision, doubts: Sequence[AcceptanceDoubt]) -> Decision:
    """``decision`` made undetermined when a candidate's verdict flips inside its acceptance
    interval (the reason as its last step); unchanged otherwise."""
    flips = [d for d in doubts if d.flips]
    if not flips:
        return decision
    said = "; ".join(
        f"{d.candidate}: {CHANGES}: {d.reason()} (at the {'low' if d.flips_low else 'high'} end, "
        f"{d.low if d.flips_low else d.high:.2f}, the verdict would be: {d.at_low if d.flips_low else d.at_high})"
        for d in flips)
    names = [d.candidate for d in flips]
    leaders = tuple(dict.fromkeys([*decision.leaders, *names]))
    standings = tuple(
        Standing(s.candidate, "undetermined", "acceptance",
                 f"{CHANGES}: {next(d.reason() for d in flips if d.candidate == s.candidate)}")
        if s.candidate in names else
        Standing(s.candidate, "undetermined", "acceptance", "still in the running: "
                 f"{', '.join(names)} may pay or not within the profile's acceptance interval")
        if s.status in ("winner", "equivalent") else s
        for s in decision.standings)
    return dataclasses.replace(decision, outcome="undetermined", winner=None, leaders=leaders,
                               standings=standings, steps=(*decision.steps, ("acceptance", said)))
