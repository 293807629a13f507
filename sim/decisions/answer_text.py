"""Renderings of the one decision: the verdict lines, the decision-table rows, the JSON.

Why nothing here decides: every sentence is read off a :class:`Decision` (and the facts it was
computed from), so the terminal, the JSON, the report and the dashboard say the same thing.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from sim.contracts.errors import clip as clip_words
from sim.decisions.acceptance_doubt import CHANGES, AcceptanceDoubt, settled_words
from sim.decisions.acceptance_needed import AcceptanceNeeded
from sim.decisions.acceptance_needed_text import need_lines
from sim.decisions.decision import Decision, cost_at_size, status_words
from sim.decisions.facts import CandidateFacts
from sim.decisions.host_doubt import HostDoubt, draft_host_lines, host_lines
from sim.decisions.paired import mean_interval
from sim.results.plain_numbers import plain as plain_number
from sim.results.plain_numbers import rate

METHOD = ("paired-t 95 % intervals on per-seed differences (common random numbers: every candidate "
          "serves the same requests per seed); differences within ±{ind:.0f} % ({what}) or ±{lat:.0f} % "
          "(latency) do not count; one seed decides nothing")


@dataclass(frozen=True)
class Answer:
    """The decision for the whole run and for each window of it (peak, restart, fallback)."""

    whole: Decision
    windows: tuple[Decision, ...] = ()
    budget_note: str = ""
    """How the seeds were chosen (added until resolved, or the budget that stopped them)."""
    load_limit: Decision | None = None
    """The decision at the lowest simulated load above the question's where the winner is no
    longer among the leaders while another candidate is (None: no load shows that)."""
    needs: tuple[AcceptanceNeeded, ...] = ()
    """Per speculative candidate, the acceptance length it needs per load point
    (``sim.decisions.acceptance_needed``; empty unless asked for)."""
    doubts: tuple[AcceptanceDoubt, ...] = ()
    """Per speculative candidate on the profile's acceptance, its interval and whether the verdict
    holds across it (``sim.decisions.acceptance_doubt``; ``whole`` is already undetermined when it
    does not)."""
    host_doubts: tuple[HostDoubt, ...] = ()
    """Per speculative candidate whose draft's host time is assumed, the verdict at ``ENDS`` of it
    (``sim.decisions.host_doubt``; said beside the verdict, which it leaves as it is)."""


NUMBER_LABELS = {
    "goodput_rps": "goodput (req/s)", "slo_attainment": "SLO met (share)",
    "usd_per_1k_good": "$ per 1k good answers", "e2el_ms_p50": "E2EL p50 (ms)",
    "capacity_rps_per_replica": "capacity (req/s per replica)", "replicas": "replicas",
    "replicas_low": "replicas (if the lower count carries)",
    "usd_per_1k_answers_at_size": "$ per 1k answers at that size", "ttft_ms_p95": "TTFT p95 (ms)",
    "tpot_ms_p95": "TPOT p95 (ms)", "e2el_ms_p95": "E2EL p95 (ms)", "pause_ms_p95": "pause p95 (ms)",
    "ttft_ms_p99": "TTFT p99 (ms)", "tpot_ms_p99": "TPOT p99 (ms)", "e2el_ms_median": "E2EL p50 (ms)",
    "mean_acceptance_length": "acceptance length", "seeds": "seeds",
    "spec_off_time_share": "speculation off (share of decode time)",
}
"""Words for the figures' keys, where a page shows them."""


def _money(v: float) -> str:
    if not math.isfinite(v):
        return "no good answers"
    return f"${v:.3g}"


def _mean(v: Sequence[float]) -> float:
    return sum(v) / len(v) if v else math.nan


def numbers(d: Decision, c: CandidateFacts) -> dict[str, float]:
    """The figures a candidate is described by (means over seeds)."""
    out: dict[str, float] = {}
    if d.question == "fleet":
        if d.facts.has_slo:
            out["goodput_rps"] = _mean(c.goodput)
            out["slo_attainment"] = _mean(c.attainment)
            if c.hourly_usd is not None:
                out["usd_per_1k_good"] = _mean([c.cost_per_1k(i) for i in range(len(c.goodput))])
        out["e2el_ms_p50"] = _mean(c.latency_ms)
    else:
        out["capacity_rps_per_replica"] = _mean(c.capacity)
        if c.replicas is not None:
            out["replicas"] = float(c.replicas)
            if c.replicas_undetermined and c.replicas_low is not None:
                out["replicas_low"] = float(c.replicas_low)
            out["gpus"] = float(c.replicas * c.gpus_per_replica)
        cost = cost_at_size(c, d.facts.rate)
        if math.isfinite(cost):
            out["usd_per_1k_answers_at_size"] = cost
    out.update({k: v for k, v in c.shown.items() if k not in ("requests", "e2el_ms_median")})
    return out


def describe(d: Decision, c: CandidateFacts, short: bool = False) -> str:
    """One candidate's figures in words (intervals clipped to each metric's range; ``short``:
    means only, for the terminal)."""
    parts = []
    if d.question == "fleet":
        if d.facts.has_slo:
            g, _, gtxt = mean_interval(c.goodput)
            parts.append(f"goodput {g:.3g} req/s" + ("" if short else f" ({gtxt})"))
            parts.append(f"SLO met {100 * _mean(c.attainment):.1f} %")
            if c.hourly_usd is not None:
                cost = _mean([c.cost_per_1k(i) for i in range(len(c.goodput))])
                parts.append((f"{_money(cost)}/1k good" if short else f"{_money(cost)} per 1k good answers")
                             if math.isfinite(cost) else "no good answers")
        lat = _mean(c.latency_ms)
        if math.isfinite(lat):
            parts.append(f"E2EL p50 {lat:,.0f} ms")
    else:
        if any(x > 0 for x in c.capacity):
            m, _, txt = mean_interval(c.capacity)
            on = f" of {d.facts.device_of(c.name)}" if d.facts.mixed_fleets else ""
            parts.append(f"capacity {m:.3g} req/s per replica{on}" + ("" if short else f" ({txt})"))
        else:
            parts.append("no capacity found")
        if c.replicas is not None:
            rep = d.facts.gpus_text(c.name, c.replicas, c.replicas_low) + ("" if short else f" for {rate(d.facts.rate)}")
            if c.replicas_undetermined and not short:
                rep += f" (undetermined at {d.n_seeds} seeds whether {c.replicas_low} carry it)"
            parts.append(rep)
            cost = cost_at_size(c, d.facts.rate)
            if math.isfinite(cost):
                parts.append(f"{_money(cost)}/1k answers" if short else f"{_money(cost)} per 1k answers at that size")
    acc = c.shown.get("mean_acceptance_length")
    if acc is not None and not c.baseline and not short:
        parts.append(f"acceptance length {acc:.2f}")
    off = c.shown.get("spec_off_time_share")
    if off and not c.baseline:  # a policy that turns speculation off says how often (0: a fixed k)
        parts.append(f"speculation off {100 * off:.0f} % of decode time")
    return ", ".join(parts)


def idealised_words(c: CandidateFacts) -> str:
    """"idealised: vLLM (GPU) cannot run it; deployable twin: eagle3-k3" for a candidate
    the named engine cannot run ("" for one it can): said beside it on every surface."""
    if c.runnable:
        return ""
    return f"idealised: {c.engine or 'the engine'} cannot run it; deployable twin: {c.deployable or 'none named'}"


def headline(d: Decision, tag: bool = True) -> str:
    """The answer in one sentence (``tag``: name the window when it is not the whole run)."""
    text = (_short_fleet(d) if d.question == "capacity" else "") + _headline(d, tag)
    if d.winner is not None and not d.facts.candidate(d.winner).runnable:
        text += f" ({idealised_words(d.facts.candidate(d.winner))})"
    return text


def _headline(d: Decision, tag: bool) -> str:
    f = d.facts
    where = "" if d.window == "whole run" or not tag else f" [{d.window}]"
    fleet = f.fleet_text
    rate_said = rate(f.rate)
    if d.outcome == "winner":
        w = d.winner
        assert w is not None
        decisive = [s for s in d.standings if s.candidate != w]
        last = max((s.step for s in decisive), key=_STEP_ORDER.get, default="load")
        if d.question == "capacity":
            return _capacity_winner(d, w, rate_said, where)
        why = {"load": f"the only candidate that carries {rate_said} at the SLO on {fleet}",
               "cost": f"carries {rate_said} at the SLO on {fleet} at the lowest cost per good answer",
               "goodput": f"carries {rate_said} at the SLO on {fleet} with the most good answers",
               "latency": f"carries {rate_said} at the SLO on {fleet} at the same cost per good answer as "
                          f"the others that do (within ±{100 * f.indifference:.0f} %), and answers fastest"}
        return f"{w}{where}: {why.get(last, 'ahead at every step')}"
    if d.outcome == "no winner":
        if not d.leaders:
            if d.question == "capacity":
                return f"no winner{where}: no candidate sustains the SLO at any rate probed"
            if d.window != "whole run":
                return (f"no winner{where}: no candidate carries {rate_said} at the SLO on {fleet} during "
                        f"this window")
            need = [(c.name, f.gpus_text(c.name, c.replicas, c.replicas_low)) for c in f.candidates
                    if c.replicas is not None]
            tail = ("; each needs: " + ", ".join(f"{n} {r}" for n, r in need)) if need else (
                f"; `specplan capacity --target-rate {plain_number(f.rate)}` gives each one's fleet" if f.rate else "")
            return f"no winner{where}: {fleet} cannot carry {rate_said} at the SLO with any candidate{tail}"
        eq = " and ".join(d.leaders)
        pays = "; speculation does not pay here" if d.baseline in d.leaders else ""
        return f"no winner{where}: {eq} are equivalent (no difference that matters){pays}"
    if d.steps and d.steps[-1][0] == "acceptance":  # the profile's acceptance interval decided it
        said = "; ".join(f"{s.candidate}: {s.why}" for s in d.standings
                         if s.step == "acceptance" and s.why.startswith(CHANGES))
        return f"undetermined{where}: {said}"
    comp = [c for c in d.comparisons if c.verdict == "undetermined"]
    if comp:
        c = comp[-1]
        p = c.result
        spread = "one seed: no interval" if p.n < 2 else f"the difference is within ±{p.reach:.3g} {c.unit}"
        base = f"undetermined at {d.n_seeds} seed(s){where}: {c.leader} vs {c.other} on {c.step}: {spread}"
    else:
        open_ = [c for c in f.candidates if c.name in d.leaders and c.carry.verdict == "undetermined"]
        if open_ and d.steps and d.steps[-1][0] == "load":
            who = ", ".join(f"{c.name} ({c.carry.words()})" for c in open_)
            verb = "carries" if len(open_) == 1 else "carry"
            base = (f"undetermined at {d.n_seeds} seed(s){where}: whether {who} {verb} {rate_said} at the SLO on "
                    f"{fleet}; the answer depends on it")
        else:
            base = f"undetermined at {d.n_seeds} seed(s){where}: " + (
                f"{', '.join(d.leaders)} carry the load on some seeds only" if d.steps and d.steps[-1][0] != "seeds"
                else f"one seed cannot decide ({', '.join(d.leaders)} lead)")
    return base


def _capacity_winner(d: Decision, w: str, rate: str, where: str) -> str:
    """The capacity question's winner, named with the step that decided it."""
    f = d.facts
    decisive = [s for s in d.standings if s.candidate != w]
    last = max((s.step for s in decisive), key=_STEP_ORDER.get, default="load")
    c = f.candidate(w)
    size = ((f.gpus_text(w, c.replicas, c.replicas_low) if c.replicas is not None else "? replica(s)")
            + f" for {rate}" + (f" (undetermined at {d.n_seeds} seeds whether {c.replicas_low} carry it)"
                                if c.replicas_undetermined else ""))
    cap = f"{_mean(c.capacity):.3g} req/s per replica"
    per_gpu = f"{_mean(c.capacity) / c.gpus_per_replica:.3g} req/s per GPU"
    why = {"load": f"the only candidate that sustains the SLO ({cap}); {size}",
           "GPUs": (f"the most req/s per GPU ({per_gpu}); {size}" if f.mixed_fleets
                    else f"the most req/s per replica ({cap}); {size}"),
           "cost": f"the cheapest fleet for {rate}: {size}",
           "latency": f"capacity within ±{100 * f.indifference:.0f} % of the best ({cap}) and the "
                      f"same fleet cost, and the fastest at {rate}; {size}"}
    return f"{w}{where}: {why.get(last, size)}"


def _short_fleet(d: Decision) -> str:
    """"1 H200 cannot carry 30 req/s at the SLO with any candidate: each needs …; " when the
    scenario's own fleet is below every candidate's capacity for the target."""
    f = d.facts
    if not f.rate or not f.candidates:
        return ""
    if any(sum(c.capacity) / max(len(c.capacity), 1) * f.replicas >= f.rate for c in f.candidates):
        return ""
    need = ", ".join(f"{c.name} {c.replicas_low} or {c.replicas}" if c.replicas_undetermined else f"{c.name} {c.replicas}"
                     for c in f.candidates if c.replicas is not None)
    return (f"{f.fleet_text} cannot carry {rate(f.rate)} at the SLO with any "
            f"candidate" + (f"; replicas each needs: {need}" if need else "") + ". ")


_STEP_ORDER = {"load": 0, "goodput vs baseline": 0, "GPUs": 1, "cost": 2, "goodput": 2, "latency": 3, "seeds": 4}


WIDTH = 100
"""Terminal columns the verdict block is wrapped to."""


_CHECK = re.compile(r"(?P<m>ttft|tpot|e2el|pause)_ms_(?P<p>p\d+|median)=(?P<v>[\d.]+|inf)ms vs (?P<lim>[\d.]+)")
_LOST = re.compile(r"lost=(?P<v>[\d.]+%) vs (?P<lim>[\d.]+%)")


def plain(reason: str) -> str:
    """A sustain check in words: ``ttft_ms_p95=1210ms vs 1000`` → ``TTFT p95 1,210 ms > 1,000 ms``."""
    def check(m: re.Match[str]) -> str:
        p = "p50" if m["p"] == "median" else m["p"]
        v = m["v"] if m["v"] == "inf" else f"{float(m['v']):,.0f}"
        return f"{m['m'].upper()} {p} {v} ms > {float(m['lim']):,.0f} ms"

    return _LOST.sub(lambda m: f"{m['v']} of requests lost > {m['lim']}", _CHECK.sub(check, reason))


def _fail(c: CandidateFacts) -> str:
    return next((r for ok, r in zip(c.carries, c.carry_reason, strict=False) if not ok), "")


def _clip(text: str) -> str:
    return clip_words(text, WIDTH)  # at a word boundary: a half word reads as another word


def _wrap(text: str, indent: str, more: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=more,
                         break_on_hyphens=False) or [indent]


def lines(answer: Answer, verbose: bool = False, wrap: bool = True) -> list[str]:
    """The verdict block every surface leads with (``wrap``: to 100 columns, for a terminal; a
    page lists each item whole; ``verbose``: the intervals and the full statistical method)."""
    d = answer.whole
    items: list[tuple[str, str, str, bool]] = [(f"verdict: {headline(d)}", "", "    ", False)]
    for i, (step, said) in enumerate(d.steps, 1):
        items.append((f"{i}. {step}: {said}", "  ", "       ", False))
    for s in d.standings:
        c = d.facts.candidate(s.candidate)
        ideal = f" [{idealised_words(c)}]" if not c.runnable else ""
        if s.status in ("cannot carry", "at risk") and not verbose:
            why = c.carry.words() if s.status == "at risk" and c.slo_ratios else plain(_fail(c) or s.why)
            said = f"{s.candidate}: {s.status}{ideal} — {why}, {describe(d, c, short=True)}"
        elif s.status == "idealised":
            said = f"{s.candidate}: {idealised_words(c)} — {describe(d, c, short=not verbose)}"
        else:
            why = f" ({plain(s.why)})" if s.status in ("cannot carry", "at risk") else ""
            said = f"{s.candidate}: {s.status}{ideal} — {describe(d, c, short=not verbose)}{why}"
        # one line each in a terminal; the reasons above say why, --verbose and the JSON say all
        items.append((said, "  ", "      ", not verbose))
    for said in cause_lines(d):
        items.append((said, "  ", "      ", False))
    for said in acceptance_lines(d, measured_too=verbose):
        items.append((said, "  ", "      ", False))
    for said in [*draft_host_lines(d), *host_lines(answer.host_doubts)]:
        items.append((said, "  ", "      ", False))
    if d.question == "fleet":
        items.append((f"fleet: {fleet_line(d)}", "  ", "      ", False))
    for w in answer.windows:
        items.append((f"{w.window}: {headline(w, tag=False)}", "  ", "      ", False))
    if answer.load_limit is not None:
        items.append((f"load limit: {limit_words(answer)}", "  ", "      ", False))
    unknown: dict[str, list[str]] = {}  # one line per reason, not per candidate
    same = [] if verbose else [x for x in answer.doubts if x.settled]
    if same:
        items.append((f"acceptance intervals: {settled_words(same)}", "  ", "      ", False))
    for doubt in answer.doubts:
        if doubt.unknown:
            unknown.setdefault(doubt.unknown, []).append(doubt.candidate)
        elif doubt not in same:
            items.append((f"acceptance interval: {doubt.words(verbose)}", "  ", "      ", False))
    for why, names in unknown.items():
        items.append((f"acceptance interval: {', '.join(names)}: {why}", "  ", "      ", False))
    for said in need_lines(answer.needs):
        items.append((said.strip(), "  " if not said.startswith(" ") else "    ", "      ", False))
    how = method(d) if verbose else (f"paired-t 95 % on per-seed differences; within ±{100 * d.facts.indifference:.0f} % "
                                     f"(±{100 * d.facts.latency_indifference:.0f} % latency) counts as equal")
    per = "; goodput per second of arrivals" if d.question == "fleet" and d.facts.has_slo else ""
    items.append((f"statistics: {d.n_seeds} seed(s), {how}{per}"
                  + (f"; {answer.budget_note}" if answer.budget_note else ""), "  ", "      ", False))
    if not wrap:
        return [text for text, *_ in items]
    out: list[str] = []
    for text, indent, more, clip in items:
        out += [_clip(indent + text)] if clip else _wrap(text, indent, more)
    return out


def fleet_line(d: Decision) -> str:
    """What fleet a fixed-fleet answer's figures are at, and each candidate's own replica count
    where it was searched (``fleet_sizing``: `specplan capacity`'s rule), so no surface shows a
    fleet answer other than capacity's without saying so."""
    f = d.facts
    rate = "the offered load" if f.rate is None else f"{plain_number(f.rate)} req/s"
    said = f"figures at the scenario's fixed fleet ({f.fleet_text})"
    own = [(c.name, f.gpus_text(c.name, c.replicas, c.replicas_low)) for c in f.candidates if c.replicas is not None]
    if own:
        return said + f"; each one's own replica count for {rate} (capacity's rule): " + ", ".join(
            f"{n} {r}" for n, r in own)
    if f.rate is None:
        return said
    return said + "; own counts: `simulate --sizing`"


def acceptance_lines(d: Decision, measured_too: bool = True) -> list[str]:
    """``acceptance: draft-k3, draft-k2: ASSUMED 0.7 per position (…)``: what each speculative
    candidate's acceptance rests on (the least certain input), candidates on one basis together.
    ``measured_too=False`` (the terminal's one screen) leaves out the plain "measured" basis: the
    line is there to flag acceptance that was not measured."""
    by: dict[str, list[str]] = {}
    for c in d.facts.candidates:
        if c.acceptance and (measured_too or c.acceptance != "measured"):
            by.setdefault(c.acceptance, []).append(c.name)
    return [f"acceptance: {', '.join(names)}: {basis}" for basis, names in by.items()]


def cause_lines(d: Decision) -> list[str]:
    """``by cause: cache+eagle3-k3 vs baseline: TTFT p95 -40.1 ms = prefix caching -43.0 +
    speculation +2.9; …``, one line per candidate with prefix caching on and its twin run."""
    out: dict[str, list[str]] = {}
    for c in d.causes:
        label = c.metric.replace("_ms_", " ").upper().replace(" P", " p")
        out.setdefault(c.candidate, []).append(
            f"{label} {c.total:+,.1f} ms = prefix caching {c.caching:+,.1f} + speculation {c.speculation:+,.1f}")
    return [f"by cause: {name} vs {d.baseline}: {'; '.join(parts)}" for name, parts in out.items()]


def method(d: Decision) -> str:
    f = d.facts
    what = "cost, goodput" if d.question == "fleet" else "capacity, cost"
    return METHOD.format(ind=100 * f.indifference, lat=100 * f.latency_indifference, what=what)


def limit_words(answer: Answer) -> str:
    """"above 24 req/s eagle3-k3's advantage is gone: at 30 req/s it cannot carry (…), X leads"."""
    d, lim = answer.whole, answer.load_limit
    assert lim is not None and d.winner is not None
    st = lim.standing(d.winner)
    lead = ", ".join(lim.leaders)
    return (f"{d.winner}'s advantage is gone at {rate(lim.facts.rate)}: it is {status_words(st.status)} there "
            f"({plain(st.why)}) and {lead} lead{'s' if len(lim.leaders) == 1 else ''}")
