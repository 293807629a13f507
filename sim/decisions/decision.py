"""The one decision: facts of a question in, winner / no winner / undetermined out.

Why one pure function: the terminal, the JSON, the report and the dashboard used to re-decide
with their own thresholds and disagreed on the same scenario. Here the answer is computed once,
in the order a planner reasons, and every surface renders the :class:`Decision` it returns
(``sim.decisions.answer_text``); the decision-table rows are derived from the same comparisons.

The order (each step keeps only the candidates still in the running):

1. **Load** (fixed fleet): does the candidate carry the offered load at the SLO on this fleet,
   across the seeds (``sim.decisions.carry``: each ``SustainCriteria`` check's 95 % bound, the
   rule the replica search uses)? None does → no winner, with each one's fleet size when a
   capacity search or `simulate --sizing` gave it. A candidate that
   serves fewer good answers than the baseline is out even when it meets the percentiles.
   (Capacity question: a capacity above zero on every seed.)
2. **GPUs**: capacity per replica (capacity question; at a fixed fleet every candidate has the
   same GPUs). Candidates on their own fleets ([fleets.NAME]) with different GPUs per replica
   are compared per GPU of the same device; different devices are made comparable by their
   prices only, so then the step is skipped and cost decides (unpriced: per GPU, said so).
3. **Cost**: $ per 1,000 SLO-conformant answers (fixed fleet: fleet price over goodput; capacity
   question: the banked replicas' price over the target rate).
4. **Latency**: E2EL p50 (capacity question: at the target rate on each one's replicas).

Each step compares the best mean with every other candidate on paired per-seed differences
(``sim.decisions.paired``): beyond the indifference amount → the other is out; within it →
both go on to the next step; neither → undetermined (more seeds would tell). One seed never
decides.

A candidate the named engine cannot run (``CandidateFacts.runnable``: an idealised in-engine
policy, ``sim.decisions.engine_config``) never wins over a runnable equal: at any step where it
is within the indifference amount of a runnable candidate it goes out as "idealised", with its
deployable twin named. Where it is ahead beyond that amount it may still lead, and every
surface shows it as idealised with the twin beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sim.decisions.attribution import Cause, causes
from sim.decisions.facts import CandidateFacts, Facts
from sim.decisions.paired import Paired, paired
from sim.results.plain_numbers import rate

Outcome = Literal["winner", "no winner", "undetermined"]
Status = Literal["winner", "equivalent", "behind", "cannot carry", "at risk", "undetermined", "idealised"]

_PREDICATE: dict[str, str] = {
    "winner": "the winner", "equivalent": "equivalent to the leaders", "behind": "behind",
    "cannot carry": "unable to carry the load", "at risk": "at risk (carries on some seeds only)",
    "undetermined": "undetermined", "idealised": "idealised (the engine cannot run it)",
}


def status_words(status: str) -> str:
    """A standing as the end of "X is …": "unable to carry the load", never the bare status
    ("cannot carry") after "is"."""
    return _PREDICATE.get(status, status)


@dataclass(frozen=True)
class Comparison:
    """One paired comparison the decision rests on."""

    step: str
    """"cost", "goodput", "capacity", "latency", "goodput vs baseline"."""
    leader: str
    other: str
    result: Paired
    unit: str

    @property
    def verdict(self) -> str:
        return self.result.verdict


@dataclass(frozen=True)
class Standing:
    candidate: str
    status: Status
    step: str
    """The step at which its standing was settled ("load", "cost", …)."""
    why: str


@dataclass(frozen=True)
class Decision:
    """The answer to one question (one window of it), ready to render."""

    question: str
    window: str
    outcome: Outcome
    winner: str | None
    leaders: tuple[str, ...]
    """The winner; the equivalent candidates ahead of the rest (no single winner); or the
    candidates still in the running when undetermined."""
    baseline: str
    n_seeds: int
    max_seeds: int
    standings: tuple[Standing, ...]
    comparisons: tuple[Comparison, ...]
    steps: tuple[tuple[str, str], ...]
    """(step, what it found) in the planner's order: the reasons."""
    facts: Facts = field(repr=False, compare=False)
    causes: tuple[Cause, ...] = ()
    """Latency changes split between prefix caching and speculation (``attribution``)."""

    def standing(self, name: str) -> Standing:
        return next(s for s in self.standings if s.candidate == name)

    @property
    def resolved(self) -> bool:
        return self.outcome != "undetermined"


def _means(_c: CandidateFacts, values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _pct(a: float, b: float) -> str:
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return "n/a"
    return f"{100.0 * (a - b) / abs(b):+.0f} %"


@dataclass
class _Run:
    """The state the steps pass along: who is still in, what was settled, the reasons."""

    facts: Facts
    pool: list[str]
    status: dict[str, tuple[Status, str, str]] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    steps: list[tuple[str, str]] = field(default_factory=list)
    undetermined: list[str] = field(default_factory=list)

    def settle(self, name: str, status: Status, step: str, why: str) -> None:
        self.status.setdefault(name, (status, step, why))
        if name in self.pool:
            self.pool.remove(name)

    def narrow(self, step: str, values: Callable[[CandidateFacts], Sequence[float]], *, higher: bool,
               rel_delta: float, unit: str, fmt: Callable[[float], str], _ideal: Sequence[str] = ()) -> None:
        """Keep the best mean and those within the indifference amount of it; drop those
        clearly behind; stop (undetermined) when any comparison cannot tell yet. A candidate the
        engine cannot run that is within the amount of a runnable one goes out first, and the
        step is judged again without it (``_ideal``: those already out)."""
        if _ideal and len(self.pool) == 1:  # the runnable equal alone remains: say why
            self.steps.append((step, f"{self.pool[0]}; idealised (the engine cannot run it), out for a "
                                     f"runnable equal: {', '.join(_ideal)}"))
        if len(self.pool) < 2 or self.undetermined:
            return
        f = self.facts
        means = {n: _means(f.candidate(n), values(f.candidate(n))) for n in self.pool}
        key = (lambda n: means[n]) if higher else (lambda n: -means[n])
        best = max(self.pool, key=lambda n: (key(n), -self.pool.index(n)))
        judged = [(other, paired(values(f.candidate(best)), values(f.candidate(other)), higher_better=higher,
                                 rel_delta=rel_delta)) for other in self.pool if other != best]
        equal = [o for o, p in judged if p.verdict == "equivalent"]
        ideal = self._idealised_out(step, best, equal)
        if ideal:  # judged again among the rest: who is behind depends on who leads
            self.narrow(step, values, higher=higher, rel_delta=rel_delta, unit=unit, fmt=fmt,
                        _ideal=(*_ideal, *ideal))
            return
        behind, open_ = [], []
        for other, p in judged:
            self.comparisons.append(Comparison(step, best, other, p, unit))
            diff = f"{fmt(means[other])} ({_pct(means[other], means[best])})"
            if p.verdict == "better":
                self.settle(other, "behind", step, f"{step} {diff} vs {best}, beyond ±"
                            f"{100 * rel_delta:.0f} % (paired, {p.n} seeds)")
                behind.append(f"{other} {diff}")
            elif p.verdict != "equivalent":
                self.undetermined.append(other)
                reach = fmt(p.reach) if p.n > 1 else "unknown (one seed)"
                open_.append(f"{other} (the difference may be up to {reach})")
        said = f"best {best} at {fmt(means[best])}"
        if _ideal:
            said += f"; idealised (the engine cannot run it), out for a runnable equal: {', '.join(_ideal)}"
        if equal:
            said += f"; within ±{100 * rel_delta:.0f} % of it: {', '.join(equal)}"
        if behind:
            said += f"; behind: {', '.join(behind)}"
        if open_:
            said += f"; undetermined at {len(f.seeds)} seed(s): {', '.join(open_)}"
        self.steps.append((step, said))
        if self.undetermined:  # the best and those equal to it stay in the running with the open ones
            self.undetermined[0:0] = [best, *equal]

    def _idealised_out(self, step: str, best: str, equal: list[str]) -> list[str]:
        """The candidates of ``best`` and ``equal`` (within the indifference amount of each
        other) the engine cannot run, settled "idealised" when a runnable one is among them."""
        f = self.facts
        kept = [best, *equal]
        runnable = [n for n in kept if f.candidate(n).runnable]
        if not runnable:
            return []
        out = [n for n in kept if not f.candidate(n).runnable]
        for n in out:
            c = f.candidate(n)
            self.settle(n, "idealised", step, f"within the indifference amount of {runnable[0]} on {step}, "
                        f"and {c.engine or 'the engine'} cannot run it; deployable: "
                        f"{c.deployable or runnable[0]}")
        return out


def decide(facts: Facts) -> Decision:
    """The decision for ``facts`` (see the module docstring for the order).

    "Carries" is judged across seeds (``sim.decisions.carry``). A candidate whose bound
    straddles the SLO is undetermined; the decision is taken both ways (it carries / it does
    not), and only when the two answers differ is the whole answer undetermined on it (more
    seeds would tell); otherwise it is "at risk" and the answer stands."""
    open_ = open_carry(facts)
    if not open_:
        return _decide(facts, {})
    without = _decide(facts, dict.fromkeys(open_, False))
    with_ = _decide(facts, dict.fromkeys(open_, True))
    if (without.outcome, without.winner, without.leaders) == (with_.outcome, with_.winner, with_.leaders):
        return without
    return _decide(facts, {})


def open_carry(facts: Facts) -> list[str]:
    """Candidates of a fixed-fleet question whose "carries" is undetermined at these seeds."""
    if facts.question != "fleet" or not facts.has_slo or len(facts.seeds) < 2:
        return []
    return [c.name for c in facts.candidates if c.carry.verdict == "undetermined"]


def _decide(facts: Facts, assume: Mapping[str, bool]) -> Decision:
    """The decision with each undetermined "carries" in ``assume`` taken as given."""
    names = [c.name for c in facts.candidates]
    run = _Run(facts, list(names))
    if facts.question == "fleet":
        _fleet_steps(run, assume)
    else:
        _capacity_steps(run)
    n = len(facts.seeds)
    pool = list(run.pool)
    if run.undetermined:
        outcome: Outcome = "undetermined"
        leaders = tuple(dict.fromkeys(run.undetermined))
    elif not pool:
        outcome, leaders = "no winner", ()
    elif len(pool) == 1:
        outcome, leaders = "winner", (pool[0],)
    else:
        outcome, leaders = "no winner", tuple(pool)
    if n < 2 and outcome != "undetermined":  # one seed never claims certainty
        outcome = "undetermined"
        run.steps.append(("seeds", "one seed: no interval, so no difference can be called real"))
        leaders = leaders or tuple(pool)
    winner = leaders[0] if outcome == "winner" else None
    standings = []
    for name in names:
        if name in run.status:
            st, step, why = run.status[name]
        elif outcome == "winner" and name == winner:
            st, step, why = "winner", run.steps[-1][0] if run.steps else "load", "ahead at every step"
        elif outcome == "undetermined" and name in leaders:
            st, step, why = "undetermined", run.steps[-1][0] if run.steps else "seeds", "still in the running"
        else:
            st, step, why = "equivalent", run.steps[-1][0] if run.steps else "load", (
                "no difference that matters from " + ", ".join(x for x in leaders if x != name))
        standings.append(Standing(name, st, step, why))
    return Decision(facts.question, facts.window, outcome, winner, leaders, facts.baseline, n,
                    facts.max_seeds, tuple(standings), tuple(run.comparisons), tuple(run.steps), facts,
                    causes(facts))


def _rate(f: Facts) -> str:
    return rate(f.rate)


def _fleet_steps(run: _Run, assume: Mapping[str, bool]) -> None:
    f = run.facts
    if f.has_slo:
        carry, risky, none, open_ = [], [], [], []
        for c in f.candidates:
            v = c.carry.verdict
            if v == "undetermined" and c.name in assume:
                v = "carries" if assume[c.name] else "at risk"
            {"carries": carry, "at risk": risky, "cannot carry": none, "undetermined": open_}[v].append(c)
        for c in risky:
            run.settle(c.name, "at risk", "load", f"undetermined whether it carries {_rate(f)} ("
                       f"{c.carry.words()}); the answer is the same either way")
        for c in none:
            run.settle(c.name, "cannot carry", "load", f"cannot carry {_rate(f)} at the SLO on "
                       f"{_fleet(f)} ({_first_fail(c) or c.carry.words()})")
        said = (f"carries {_rate(f)} at the SLO on {_fleet(f)} (every check's 95 % bound within "
                f"the SLO over the seeds): {', '.join(c.name for c in carry) or 'none'}")
        if risky:
            said += f"; undetermined, the answer the same either way: {', '.join(c.name for c in risky)}"
        if open_:
            said += (f"; undetermined at {len(f.seeds)} seed(s), and the answer depends on it: "
                     + ", ".join(f"{c.name} ({c.carry.words()})" for c in open_))
        run.steps.append(("load", said))
        if open_:
            run.undetermined += [c.name for c in (*open_, *carry)]
            return
        names = [c.name for c in f.candidates]
        base = f.candidate(f.baseline) if f.baseline in names else None
        if base is not None and f.baseline not in run.pool:
            for name in list(run.pool):
                p = paired(f.candidate(name).goodput, base.goodput, higher_better=True, rel_delta=f.indifference)
                run.comparisons.append(Comparison("goodput vs baseline", name, f.baseline, p, "req/s"))
                if p.verdict == "worse":
                    run.settle(name, "behind", "load", f"meets the percentiles but serves fewer good "
                               f"answers than {f.baseline} (goodput {_pct(_means(base, f.candidate(name).goodput), _means(base, base.goodput))})")
        priced = all(f.candidate(n).hourly_usd is not None for n in run.pool)
        if priced:
            run.narrow("cost", lambda c: [c.cost_per_1k(i) for i in range(len(c.goodput))], higher=False,
                       rel_delta=f.indifference, unit="$/1k good", fmt=lambda v: f"${v:.3g}/1k good")
        else:
            run.narrow("goodput", lambda c: c.goodput, higher=True, rel_delta=f.indifference,
                       unit="req/s", fmt=lambda v: f"{v:.3g} req/s")
    run.narrow("latency", lambda c: c.latency_ms, higher=False, rel_delta=f.latency_indifference,
               unit="ms E2EL p50", fmt=lambda v: f"{v:,.0f} ms")


def _capacity_steps(run: _Run) -> None:
    f = run.facts
    found, partly, none = [], [], []
    for c in f.candidates:
        ok = sum(1 for x in c.capacity if x > 0)
        (found if ok == len(c.capacity) and ok else partly if ok else none).append(c)
    for c in partly:
        run.settle(c.name, "at risk", "load", f"sustains the SLO on {sum(1 for x in c.capacity if x > 0)} "
                   f"of {len(c.capacity)} seeds only")
    for c in none:
        run.settle(c.name, "cannot carry", "load", "sustains the SLO at no rate probed")
    run.steps.append(("load", f"sustains the SLO at some rate on every seed: "
                              f"{', '.join(c.name for c in found) or 'none'}"))
    if not found and partly:
        run.undetermined += [c.name for c in partly]
        return
    priced = all(f.candidate(n).replicas_per_hour_usd is not None for n in run.pool)
    devices = {f.device_of(n) for n in run.pool}
    if not f.mixed_fleets:
        run.narrow("GPUs", lambda c: c.capacity, higher=True, rel_delta=f.indifference,
                   unit="req/s per replica", fmt=lambda v: f"{v:.3g} req/s per replica")
    elif len(devices) > 1 and priced:
        need = ", ".join(f"{n} {f.gpus_text(n, c.replicas)}" for n in run.pool
                         if (c := f.candidate(n)).replicas is not None)
        run.steps.append(("GPUs", f"different kinds of GPU ({', '.join(sorted(devices))}) are "
                                  "compared by their price, at the cost step" + (f"; for {rate(f.rate)}: {need}"
                                                                                 if need and f.rate else "")))
    else:
        unit = "req/s per GPU" + ("" if len(devices) == 1 else " (GPUs of different kinds, unpriced)")
        run.narrow("GPUs", lambda c: [x / c.gpus_per_replica for x in c.capacity], higher=True,
                   rel_delta=f.indifference, unit=unit, fmt=lambda v: f"{v:.3g} {unit}")

    def at_size(c: CandidateFacts) -> list[float]:
        cost = cost_at_size(c, f.rate)
        return [cost] * len(c.capacity)

    if priced:
        run.narrow("cost", at_size, higher=False, rel_delta=f.indifference, unit="$/1k answers",
                   fmt=lambda v: f"${v:.3g}/1k answers" if math.isfinite(v) else "no fleet size")
    if all(len(f.candidate(n).latency_ms) == len(f.seeds) for n in run.pool):
        run.narrow("latency", lambda c: c.latency_ms, higher=False, rel_delta=f.latency_indifference,
                   unit="ms E2EL p50 at the target", fmt=lambda v: f"{v:,.0f} ms")


def cost_at_size(c: CandidateFacts, target: float | None) -> float:
    """$ per 1,000 answers at the banked fleet size serving the target rate."""
    if c.replicas is None or c.replicas_per_hour_usd is None or not target:
        return math.inf
    return 1000.0 * c.replicas * c.replicas_per_hour_usd / 3600.0 / target


def _first_fail(c: CandidateFacts) -> str:
    return next((r for ok, r in zip(c.carries, c.carry_reason, strict=True) if not ok), "")


def _fleet(f: Facts) -> str:
    return f.fleet_text


def sizes(decision: Decision) -> Mapping[str, int | None]:
    """Replicas each candidate needs, where the facts hold them (capacity search, sweep)."""
    return {c.name: c.replicas for c in decision.facts.candidates}
