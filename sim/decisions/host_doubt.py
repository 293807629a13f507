"""Does the verdict survive the draft's assumed host time?

Why: an import prices the draft's host time H(b, k) at an *assumed* 0.5 ms a draft pass
(docs/profile-format.md), and where verification is cheap that term alone can turn the sign of
speculation: Qwen3-30B-A3B at TP 4 breaks even at 1.08× it, and the published run lost
(docs/fidelity-gpu.md §6). An assumption has no interval, so the check runs each speculative
candidate whose H is assumed again, on the decision's own seeds (the same requests), at the two
ends of what published runs imply (``ENDS``), and takes the decision again by the same function.
Where an end's answer differs, a short bisection says at which multiple of the assumed H it
changes. The verdict itself is left as it is (the multiple is not a confidence statement); its
line says that the answer rests on the assumption, and what replaces it
(``specplan calibrate --fit draft_host_scale``, docs/fidelity.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.profile import Profile
from sim.decisions.acceptance_doubt import changed
from sim.decisions.decision import Decision
from sim.decisions.replaced_runs import Tally, rerun_decision, rerun_names

ENDS = (0.0, 4.0)
"""Multiples of the assumed H the verdict is checked at. 0: a drafting loop whose host time is
hidden (SGLang's CUDA-graph loop; the EAGLE-3 paper's baseline is met by the kernels alone,
docs/fidelity-gpu.md §3). 4: the published small-batch MoE runs on SGLang spent 2.04–5.92 ms a
k = 3 step beyond the priced kernels, 1.4–3.9× the assumed 1.5 ms (§6)."""


@dataclass(frozen=True)
class HostDoubt:
    """One speculative candidate's verdict with its draft's assumed host time at each end."""

    candidate: str
    at: tuple[tuple[float, str], ...]
    """(multiple of the assumed H, the verdict's headline there) for each end of ``ENDS``."""
    changes: tuple[tuple[float, float, float], ...] = ()
    """(end, same, other) for each end whose answer differs from the estimate's: the bisection
    bracket of the multiple where it changes (the estimate's answer at ``same``, another at ``other``)."""
    runs: int = 0

    @property
    def flips(self) -> tuple[float, ...]:
        """The ends whose answer differs from the estimate's."""
        return tuple(end for end, _, _ in self.changes)

    def words(self) -> str:
        lo, hi = ENDS
        if not self.changes:
            return f"{self.candidate}: the answer is the same with {lo:g}× and {hi:g}× the assumed H"
        said = dict(self.at)
        ends = "; ".join(f"with {end:g}× the assumed H the verdict would be: {said[end]} (it changes between "
                         f"{min(a, b):.2g}× and {max(a, b):.2g}×)" for end, a, b in self.changes)
        return f"{self.candidate}: {ends}; measure it"


def scaled(profile: Profile, proposer: str, factor: float) -> Profile:
    """``profile`` with ``proposer``'s host-time grid H(b, k) × ``factor`` (nothing else moves)."""
    pt = profile.timing.proposers[proposer]
    g = pt.overhead

    def times(a: np.ndarray | None) -> np.ndarray | None:
        if a is None:
            return None
        out = a * factor
        out.flags.writeable = False
        return out

    grid = dataclasses.replace(g, median=times(g.median), p10=times(g.p10), p90=times(g.p90))
    proposers = {**profile.timing.proposers, proposer: dataclasses.replace(pt, overhead=grid)}
    return dataclasses.replace(profile, timing=dataclasses.replace(profile.timing, proposers=proposers))


def host_doubts(result: Any, profile: Any, estimate: Decision, *, device: str = "replica",
                progress: Callable[[int, int, str], None] | None = None,
                bisect: int = 2) -> tuple[HostDoubt, ...]:
    """One :class:`HostDoubt` per speculative candidate of ``result`` whose profile assumes its
    draft's host time (``acceptance_basis.assumed_draft_host``); ``estimate``: the decision as
    taken, what each end is compared with."""
    from sim.model.k_schedule import resolve_candidate
    from sim.results.acceptance_basis import assumed_draft_host
    from sim.results.runner import candidate_profiles

    names = rerun_names(result, estimate)
    sc = result.scenario
    chosen = []
    for name in names:
        prof = candidate_profiles(sc, getattr(result, "profiles", None) or profile, [sc.candidate(name)])[name]
        cand = resolve_candidate(sc, prof, sc.candidate(name))
        if cand.proposer is not None and assumed_draft_host(prof, cand.proposer) is not None:
            chosen.append((cand, prof))
    tally = Tally(len(ENDS) * len(chosen) * len(result.seeds), "draft host time", progress)
    out = []
    for cand, prof in chosen:
        def verdict(x: float, cand: Any = cand, prof: Any = prof) -> Decision:
            return rerun_decision(result, cand, scaled(prof, cand.proposer, x), device=device, tally=tally)

        out.append(judge(cand.name, estimate, verdict, bisect=bisect,
                         runs=lambda name=cand.name: tally.each.get(name, 0)))
    return tuple(out)


def capacity_host_doubts(report: Any, scenario: Any, profile: Any, estimate: Decision, *, device: str = "replica",
                         engines: Mapping[str, Any] | None = None, min_requests: int = 200,
                         max_replicas: int = 256, progress: Callable[[str], None] | None = None,
                         bisect: int = 1, cache_dir: Any = None) -> tuple[HostDoubt, ...]:
    """The same check for ``specplan capacity``: each speculative candidate whose H is assumed has
    its capacity searched and its replicas counted again with H × each end (``capacity_doubt``'s
    ``searched_again``, on the plan's seeds; probes kept in ``cache_dir`` under keys naming the
    multiple), and an end changes the answer when the winner or its settled replica count does
    (``capacity_doubt.differs``). Arguments as ``capacity_doubt.capacity_doubts``."""
    from sim.decisions.capacity_doubt import differs, searched_again, searched_again_setup
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.results.acceptance_basis import assumed_draft_host

    sc, names, profiles, named = searched_again_setup(report, scenario, profile, estimate)
    say = progress or (lambda _m: None)
    out = []
    for name in names:
        prof = profiles[name]
        proposer = sc.candidate(name).proposer  # a k schedule, computed or not, keeps its proposer
        if proposer is None or assumed_draft_host(prof, proposer) is None:
            continue
        runs = [0]

        def verdict(x: float, name: str = name, prof: Any = prof, runs: list[int] = runs) -> Decision:
            say(f"{name}: capacity with {x:g}× the draft's assumed host time")
            load = SimulatedLoad(sc, prof, report.criteria, min_requests, cache_dir, profiles=named,
                                 host_scale={name: x})
            return searched_again(report, sc, name, load, say, runs, device=device, engines=engines,
                                  max_replicas=max_replicas)

        out.append(judge(name, estimate, verdict, bisect=bisect, runs=lambda runs=runs: runs[0],
                         differs=lambda est, end, name=name: differs(est, end, name)))
    return tuple(out)


def judge(name: str, estimate: Decision, verdict: Callable[[float], Decision], *, bisect: int = 2,
          runs: Callable[[], int] = lambda: 0,
          differs: Callable[[Decision, Decision], bool] = changed) -> HostDoubt:
    """The answer at each end of ``ENDS``, and for each end that changes it (``differs``: the
    decision's, or capacity's which also counts replicas), where between the estimate (1×) and
    that end it changes (``bisect`` evaluations each)."""
    from sim.decisions.answer_text import headline

    at = [(x, verdict(x)) for x in ENDS]
    changes = []
    for end, d in at:
        if not differs(estimate, d):
            continue
        same, other = 1.0, end
        for _ in range(bisect):
            mid = (same + other) / 2
            if differs(estimate, verdict(mid)):
                other = mid
            else:
                same = mid
        changes.append((end, same, other))
    return HostDoubt(name, tuple((x, headline(d)) for x, d in at), tuple(changes), runs())


def draft_host_lines(d: Decision) -> list[str]:
    """``draft host time: draft-k3, eagle3-k3: ASSUMED (…)``: the speculative candidates whose
    draft's host time is an assumption (``CandidateFacts.draft_host``), candidates on one basis
    together (none when measured)."""
    by: dict[str, list[str]] = {}
    for c in d.facts.candidates:
        if c.draft_host:
            by.setdefault(c.draft_host, []).append(c.name)
    return [f"draft host time: {', '.join(names)}: {basis}" for basis, names in by.items()]


def host_lines(doubts: Sequence[HostDoubt]) -> list[str]:
    """The verdict block's lines: one for every candidate whose answer holds at both ends, one each
    for the others."""
    same = [d.candidate for d in doubts if not d.flips]
    lo, hi = ENDS
    out = [f"draft host time check: the answer is the same with {lo:g}× and {hi:g}× the assumed H: "
           + ", ".join(same)] if same else []
    return out + [f"draft host time check: {d.words()}" for d in doubts if d.flips]
