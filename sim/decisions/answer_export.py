"""The one answer as data: plain JSON (no inf or NaN), a tidy frame of the decision table and its
numbered terminal block; every surface that exports the answer calls these."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import polars as pl

from sim.decisions.acceptance_needed_text import need_json
from sim.decisions.answer_rows import Row
from sim.decisions.answer_text import Answer, headline, idealised_words, method, numbers
from sim.decisions.decision import Decision


def to_json(answer: Answer) -> dict[str, object]:
    """Plain JSON of the answer (no inf or NaN: null with words)."""
    def one(d: Decision) -> dict[str, object]:
        return {
            "window": d.window, "question": d.question, "outcome": d.outcome, "winner": d.winner,
            "leaders": list(d.leaders), "baseline": d.baseline, "headline": headline(d),
            "reasons": [{"step": s, "found": t} for s, t in d.steps],
            "standings": [{"candidate": s.candidate, "status": s.status, "step": s.step, "why": s.why,
                           "device": d.facts.device_of(s.candidate),
                           "gpus_per_replica": d.facts.candidate(s.candidate).gpus_per_replica,
                           "acceptance": d.facts.candidate(s.candidate).acceptance or None,
                           "draft_host": d.facts.candidate(s.candidate).draft_host or None,
                           "runnable": d.facts.candidate(s.candidate).runnable,
                           "idealised": idealised_words(d.facts.candidate(s.candidate)) or None,
                           "deployable_twin": d.facts.candidate(s.candidate).deployable or None,
                           "figures": _clean(numbers(d, d.facts.candidate(s.candidate))),
                           "carries": _carry(d, s.candidate)}
                          for s in d.standings],
            "comparisons": [{"step": c.step, "leader": c.leader, "other": c.other, "unit": c.unit,
                             "n_seeds": c.result.n, "mean_difference": _num(c.result.diff),
                             "ci95_halfwidth": _num(c.result.half), "indifference": _num(c.result.delta),
                             "verdict": c.verdict} for c in d.comparisons],
            "causes": [{"candidate": c.candidate, "metric": c.metric, "change_vs_baseline_ms": _num(c.total),
                        "prefix_caching_ms": _num(c.caching), "speculation_ms": _num(c.speculation)}
                       for c in d.causes],
            "seeds": list(d.facts.seeds), "max_seeds": d.max_seeds, "method": method(d),
        }

    doc = one(answer.whole)
    doc["windows"] = [one(w) for w in answer.windows]
    doc["budget"] = answer.budget_note
    doc["acceptance_needed"] = need_json(answer.needs)
    doc["acceptance_interval"] = [
        {"candidate": d.candidate, "k": d.k, "acceptance_length": _num(d.assumed), "low": _num(d.low),
         "high": _num(d.high), "verdict_at_low": d.at_low or None, "verdict_at_high": d.at_high or None,
         "flips": d.flips, "change_between": None if d.change is None else list(d.change), "reason": d.reason() or None, "unknown": d.unknown or None, "runs": d.runs,
         "segments": [{"segment": s.segment, "profile_segment": s.key, "prompts": s.prompts, "drafts": s.drafts,
                       "acceptance_length": _num(s.point), "low": s.low, "high": s.high} for s in d.segments]}
        for d in answer.doubts]
    doc["draft_host_check"] = [
        {"candidate": h.candidate, "verdict_at": {f"{x:g}x": said for x, said in h.at}, "flips_at": list(h.flips),
         "change_between": [[same, other] for _, same, other in h.changes], "runs": h.runs}
        for h in answer.host_doubts]
    return doc


def _carry(d: Decision, name: str) -> dict[str, object] | None:
    """Whether it carries the load, across seeds (``sim.decisions.carry``): fixed-fleet questions
    with an SLO only (None otherwise)."""
    if d.question != "fleet" or not d.facts.has_slo:
        return None
    c = d.facts.candidate(name).carry
    return {"verdict": c.verdict, "check": c.check or None, "mean_ratio": _num(c.mean),
            "ci95": [_num(c.low), _num(c.high)] if c.low is not None else None, "seeds": c.n,
            "words": c.words()}


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _clean(m: Mapping[str, float]) -> dict[str, float | None]:
    return {k: _num(v) for k, v in m.items()}


def rows_json(table: Sequence[Row]) -> list[dict[str, object]]:
    """The rows as plain JSON objects."""
    return [{"rule": r.rule, "candidate": r.candidate, "segment": r.segment, "load": r.load,
             "observation": r.observation, "decision": r.decision, "risk": r.risk,
             "numbers": _clean(r.numbers)} for r in table]


def rows_frame(table: Sequence[Row]) -> pl.DataFrame:
    """Tidy frame of the rows; ``numbers`` as a JSON object string (stable key order)."""
    return pl.DataFrame(
        [{"rule": r.rule, "candidate": r.candidate, "segment": r.segment, "load": r.load,
          "observation": r.observation, "decision": r.decision, "risk": r.risk,
          "numbers": json.dumps(_clean(r.numbers), sort_keys=True)} for r in table],
        schema={c: pl.String for c in ("rule", "candidate", "segment", "load", "observation",
                                        "decision", "risk", "numbers")},
    )


def format_rows(table: Sequence[Row]) -> str:
    """Terminal block: one numbered row each."""
    out = []
    for i, r in enumerate(table, 1):
        out += [f"{i}. [{r.rule}] {r.candidate} @ {r.load}", f"   observed: {r.observation}",
                f"   decision: {r.decision}", f"   risk:     {r.risk}"]
    return "\n".join(out)
