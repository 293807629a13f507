"""The decision table: one row per standing, window, acceptance need and load limit, derived
from the decision (never a second rule set), so the report, the dashboard and the JSON show the
same observation → decision → risk the terminal's verdict says."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sim.decisions.acceptance_needed_text import point_words, sentence
from sim.decisions.answer_text import (
    Answer,
    describe,
    headline,
    idealised_words,
    limit_words,
    numbers,
    plain,
)
from sim.decisions.decision import Decision, status_words
from sim.results.plain_numbers import plain as plain_number
from sim.results.plain_numbers import rate


@dataclass(frozen=True)
class Row:
    """One decision-table row: observation → decision → risk, with the numbers behind it."""

    rule: str
    candidate: str
    segment: str
    load: str
    observation: str
    decision: str
    risk: str
    numbers: Mapping[str, float] = field(default_factory=dict)



def rows(answer: Answer) -> list[Row]:
    """The decision table, derived from the decision (never a second rule set)."""
    d = answer.whole
    f = d.facts
    load = ("whole run" if f.rate is None else rate(f.rate)) + (
        f" on {f.replicas} replica(s)" if d.question == "fleet" else " target")
    out = []
    for s in d.standings:
        c = f.candidate(s.candidate)
        obs = describe(d, c)
        if s.status == "winner" and not c.runnable:
            dec = (f"{c.name} leads but is {idealised_words(c)}: deploy the twin and check it carries "
                   f"the load (simulate it as a candidate)")
            risk = "the lead rests on a policy the engine cannot run; the deployable twin may not keep it"
        elif s.status == "winner":
            dec = f"use {c.name}" + ("" if c.baseline else f" instead of {d.baseline}")
            risk = ("acceptance on live traffic must match the profile's; canary it and watch p99 TPOT, "
                    "KV use and preemptions" if not c.baseline else "the simplest option; nothing to canary")
        elif s.status == "idealised":
            dec = f"do not plan on {c.name}: {s.why}"
            risk = "an idealised policy shows what the engine could gain; it is not a deployment"
        elif s.status == "behind":
            lead = d.winner or ", ".join(d.leaders) or "the others"
            dec = (f"replace {c.name} by {lead}" if c.baseline and d.winner else f"drop {c.name}: {s.why}")
            risk = "holds for this load and traffic mix; re-check at the expected peak"
        elif s.status == "cannot carry":
            need = f"; it needs {f.gpus_text(c.name, c.replicas, c.replicas_low)}" if c.replicas is not None else ""
            dec = f"do not run {c.name} at {load}: {s.why}{need}"
            risk = "a larger fleet may carry it; size it with `specplan capacity`"
        elif s.status == "at risk":
            dec = f"do not bank on {c.name}: {s.why}"
            risk = "it sits at the SLO: more seeds narrow its bound, but the answer does not depend on it"
        elif s.status == "undetermined" and s.step == "acceptance":
            dec = f"undetermined: {s.why}"
            risk = ("the verdict rests on too few measured prompts: measure more "
                    "(specplan profile --prompts-per-segment) before choosing")
        elif s.status == "undetermined":
            dec = (f"undetermined at {d.n_seeds} seed(s): choose between {', '.join(d.leaders)} only after "
                   f"more seeds (run.max_seeds or --max-seeds)")
            risk = "any choice now rests on noise"
        else:
            others = [x for x in d.leaders if x != c.name]
            dec = f"{c.name} or {', '.join(others)}: no difference that matters" + (
                f"; {d.baseline} is the simpler one" if d.baseline in d.leaders else "")
            risk = "the difference is within the indifference amount; cost and latency decide nothing here"
        out.append(Row(s.step, c.name, "all", load + ("" if d.window == "whole run" else f", {d.window}"),
                       obs, plain(dec), risk, numbers(d, c)))
    for w in answer.windows:
        out.append(_window_row(d, w))
    for n in answer.needs:
        if not n.skipped:
            out.append(Row("acceptance needed", n.candidate, "all", ", ".join(plain_number(p.rate) for p in n.points) + " req/s",
                           point_words(n), sentence(n), "acceptance on live traffic below the needed length "
                           "undoes the gain: measure it (vLLM's spec-decode counters) before relying on it",
                           {"mean_acceptance_length": n.assumed, "runs": float(n.runs)}))
    lim = answer.load_limit
    if lim is not None and d.winner is not None:
        out.append(Row("load limit", d.winner, "all", rate(lim.facts.rate), headline(lim),
                       limit_words(answer), "load points are coarse: the limit lies between the two "
                       "simulated loads; `specplan capacity` searches it", {"rate": lim.facts.rate or 0.0}))
    return out


def _window_row(whole: Decision, w: Decision) -> Row:
    lead = whole.winner
    said = headline(w)
    if lead is None:
        dec = f"during {w.window}: {said}"
    else:
        st = w.standing(lead)
        dec = (f"{lead} also leads during {w.window}" if w.winner == lead else
               f"during {w.window} {lead} is {status_words(st.status)}" + ("" if st.status == "winner" else f" ({st.why})"))
    return Row("window", w.winner or "-", "all", w.window, said, dec,
               "a window holds fewer requests than the whole run: its intervals are wider",
               {"seeds": float(w.n_seeds)})
