"""The answer a platform engineer came for, in a few lines above the table.

Why a module of its own: the terminal, the JSON, the report and the dashboard must say the same
thing, so the verdict is one pure function over the aggregated summary (one row per candidate,
segment ``all``), never re-derived by each surface.

How candidates are ranked at the simulated load (the same requests for all: common random
numbers): with an SLO, by goodput — requests per second that meet every limit — since at a
fixed fleet and arrival rate that is also what decides cost per good answer; without one, by
E2EL p50. A difference counts only when it exceeds the 95 % intervals of both candidates
(Student t over seeds); otherwise the two tie and the next metric (E2EL p50) breaks the tie
only for naming a winner, with the tie said out loud.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from sim.results import metric_names as mn

GOODPUT = mn.REQUEST_GOODPUT
E2EL_P50 = mn.latency_col(mn.E2EL, "median")
WATCHED = (  # latency columns a loser is described by (its worst relative change)
    ("TTFT p95", mn.latency_col(mn.TTFT, "p95")),
    ("TPOT p95", mn.latency_col(mn.TPOT, "p95")),
    ("E2EL p95", mn.latency_col(mn.E2EL, "p95")),
)
TIE_FLOOR = 0.03
"""Relative differences below 3 % tie even when the intervals are missing or narrower (one
seed has none): a percent or two is within what the model's own inputs move."""


@dataclass(frozen=True)
class Standing:
    """One candidate against the baseline."""

    candidate: str
    outcome: str
    """``"winner"``, ``"better"``, ``"tie"``, ``"worse"`` or ``"fails"`` (no SLO-conformant answer)."""
    detail: str


@dataclass(frozen=True)
class Verdict:
    winner: str
    baseline: str
    headline: str
    standings: tuple[Standing, ...]
    certainty: str

    def lines(self) -> list[str]:
        """The verdict block: headline, the winner's numbers, one line per other candidate."""
        out = [f"verdict: {self.headline}"]
        out += [f"  {s.candidate}: {s.outcome if s.outcome != 'winner' else 'best'} — {s.detail}"
                for s in self.standings]
        out.append(f"  certainty {self.certainty}")
        return out

    def to_json(self) -> dict[str, object]:
        return {"winner": self.winner, "baseline": self.baseline, "headline": self.headline,
                "certainty": self.certainty,
                "standings": [{"candidate": s.candidate, "outcome": s.outcome, "detail": s.detail}
                              for s in self.standings]}


def _num(row: Mapping[str, object], col: str) -> float | None:
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)  # type: ignore[arg-type]


def _differs(a: Mapping[str, object], b: Mapping[str, object], col: str) -> int:
    """+1 if ``a`` is clearly above ``b`` on ``col``, −1 if clearly below, 0 if they tie."""
    va, vb = _num(a, col), _num(b, col)
    if va is None or vb is None:
        return 0
    ca = _num(a, mn.ci_col(col)) or 0.0
    cb = _num(b, mn.ci_col(col)) or 0.0
    gap = va - vb
    floor = TIE_FLOOR * max(abs(va), abs(vb))
    if abs(gap) <= max(ca + cb, floor):
        return 0
    return 1 if gap > 0 else -1


def _pct(new: float | None, old: float | None) -> str:
    if new is None or old is None or old == 0 or math.isinf(new) or math.isinf(old):
        return "n/a"
    return f"{100.0 * (new - old) / old:+.0f} %"


def _cost(v: float | None) -> str:
    if v is None:
        return "cost n/a"
    if math.isinf(v):
        return "no good answers at any price"
    return f"${1000.0 * v:.3g}/1k good"


def _worst_latency(row: Mapping[str, object], base: Mapping[str, object]) -> str:
    worst = None
    for label, col in WATCHED:
        new, old = _num(row, col), _num(base, col)
        if new is None or old is None or old <= 0:
            continue
        change = (new - old) / old
        if worst is None or change > worst[0]:
            worst = (change, label)
    return f"{worst[1]} {100.0 * worst[0]:+.0f} %" if worst is not None else ""


def verdict(summary: pl.DataFrame, baseline: str, *, has_slo: bool, rate: float | None = None,
            n_seeds: int = 1) -> Verdict:
    """Rank the candidates of ``summary`` (segment ``all``) against ``baseline`` (see module doc)."""
    rows = {r[mn.CANDIDATE]: r for r in summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS).iter_rows(named=True)}
    if baseline not in rows:
        raise ValueError(f"baseline {baseline!r} is not in the summary ({', '.join(rows)})")
    names = [baseline, *[n for n in rows if n != baseline]]
    key_col = GOODPUT if has_slo else E2EL_P50
    sign = 1 if has_slo else -1  # goodput: higher is better; latency: lower is better

    def score(name: str) -> tuple[float, float]:
        r = rows[name]
        main = _num(r, key_col)
        lat = _num(r, E2EL_P50)
        return (sign * main if main is not None else -math.inf, -(lat if lat is not None else math.inf))

    winner = max(names, key=score)  # ties keep the earlier name: the baseline first
    best = rows[winner]
    if winner != baseline and sign * _differs(best, rows[baseline], key_col) <= 0:
        winner, best = baseline, rows[baseline]  # not clearly better than the baseline: keep it
    on_latency = False
    if has_slo and winner == baseline:
        # equal goodput at this fleet (typically: everyone meets the SLO): the same cost per good
        # answer, so what a user sees is latency; cost differs only in the fleet each one needs
        faster = [n for n in names[1:] if _differs(rows[n], rows[baseline], GOODPUT) == 0
                  and _differs(rows[n], rows[baseline], E2EL_P50) < 0]
        if faster:
            winner = min(faster, key=lambda n: _num(rows[n], E2EL_P50) or math.inf)
            best, on_latency = rows[winner], True
    clear_win = all(sign * _differs(best, rows[n], key_col) > 0 for n in names if n != winner)
    base = rows[baseline]
    standings = []
    for n in names:
        r = rows[n]
        good = _num(r, GOODPUT)
        if n == winner:
            outcome = "winner"
        elif has_slo and (good is None or good == 0.0):
            outcome = "fails"
        else:
            d = sign * _differs(r, base, key_col) if n != baseline else -sign * _differs(best, r, key_col)
            outcome = "better" if d > 0 else "worse" if d < 0 else "tie"
        ref = best if n == baseline else base
        parts = []
        if has_slo:
            parts.append(f"goodput {(good or 0.0):.3g} req/s" if n == winner
                         else f"goodput {_pct(good, _num(ref, GOODPUT))}")
            parts.append(f"SLO met {100.0 * (_num(r, mn.SLO_ATTAINMENT) or 0.0):.1f} %")
            if outcome != "fails":
                parts.append(_cost(_num(r, mn.COST_PER_GOOD_ANSWER_USD)))
        if not has_slo or n == winner:
            e2el = _num(r, E2EL_P50)
            parts.append(f"E2EL p50 {e2el or 0.0:,.0f} ms" if n == winner else
                         f"E2EL p50 {_pct(e2el, _num(ref, E2EL_P50))}")
        if n == baseline and n != winner:  # against the winner: how much slower it is
            parts.append(f"E2EL p50 {_pct(_num(r, E2EL_P50), _num(ref, E2EL_P50))}")
        elif n != winner:
            lat = _worst_latency(r, ref)
            if lat:
                parts.append(lat)
        standings.append(Standing(n, outcome, ", ".join(parts)))
    at = f" at {rate:g} req/s" if rate is not None else ""
    ranked = "goodput" if has_slo else "E2EL p50 (no SLO set)"
    if on_latency:
        head = (f"{winner} is faster{at}, equal goodput (E2EL p50 "
                f"{_pct(_num(best, E2EL_P50), _num(rows[baseline], E2EL_P50))}); cost: `specplan capacity`")
    elif winner == baseline:
        head = f"keep {baseline}{at}: no candidate beats it on {ranked}"
    else:
        head = f"{winner} pays{at}: it beats {baseline} on {ranked}"
    ties = [s.candidate for s in standings if s.outcome == "tie"]
    ahead = [s.candidate for s in standings if s.outcome in ("worse", "fails")]
    certainty = f"({n_seeds} seed(s), 95 % CIs) "
    if clear_win:
        certainty += "clearly ahead of every other candidate"
    else:
        certainty += f"clearly ahead of {', '.join(ahead)}" if ahead else "not clearly ahead of any"
        if ties:
            certainty += f"; tie: {', '.join(ties)}"
    return Verdict(winner, baseline, head, tuple(standings), certainty)


__all__ = ["Standing", "Verdict", "capacity_verdict", "sweep_verdict", "verdict", "why_lines"]


def why_lines(steps: pl.DataFrame, baseline: str) -> list[str]:
    """Why each speculative candidate pays or not, read off the simulated steps themselves.

    A candidate's decode steps commit ``M = 1 + accepted / rows`` tokens per request and cost
    ``r`` times the baseline's decode steps *at the same batch size* (batch sizes both reached,
    weighted by the candidate's steps); speculation pays per step when ``M > r``.
    """
    need = {mn.CANDIDATE, "duration_s", "decode_seqs", "prefill_tokens", "accepted_tokens", "k"}
    if steps.is_empty() or not need <= set(steps.columns):
        return []
    pure = steps.filter((pl.col("prefill_tokens") == 0) & (pl.col("decode_seqs") > 0))
    by = (pure.group_by(mn.CANDIDATE, "decode_seqs")
          .agg(pl.col("duration_s").mean().alias("t"), pl.len().alias("n"),
               pl.col("accepted_tokens").sum().alias("acc"), pl.col("k").max().alias("k")))
    base = by.filter(pl.col(mn.CANDIDATE) == baseline).select("decode_seqs", pl.col("t").alias("t0"))
    out = []
    # in the scenario's candidate order (group_by's order changes from run to run)
    names = [c for c in steps[mn.CANDIDATE].unique(maintain_order=True).to_list() if c != baseline]
    for name in names:
        mine = by.filter(pl.col(mn.CANDIDATE) == name)
        if int(mine["k"].max() or 0) == 0:
            continue
        both = mine.join(base, on="decode_seqs", how="inner")
        if both.is_empty():
            continue
        ratio = float((both["t"] / both["t0"] * both["n"]).sum() / both["n"].sum())
        rows = float((mine["decode_seqs"] * mine["n"]).sum())
        m = 1.0 + float(mine["acc"].sum()) / rows if rows else 1.0
        verb = "pays" if m > ratio else "does not pay"
        out.append(f"  why {name}: {m:.2f} tokens/request/step at {ratio:.2f}× the baseline's "
                   f"step time → {verb}")
    return out


def capacity_verdict(report) -> list[str]:  # noqa: ANN001 - sim.decisions.capacity_report.CapacityReport (no import cycle)
    """The capacity answer first: fewest replicas for the target rate, then cost at that size.

    A candidate pays when it needs fewer replicas than the baseline for the target, or as many
    at a lower cost per good answer; capacities whose 95 % intervals overlap the baseline's are
    said to tie on capacity.
    """
    cands = {c.candidate: c for c in report.candidates}
    base = cands.get(report.baseline)
    if base is None or len(cands) < 2:
        return []

    def cost(c) -> float:  # noqa: ANN001
        v = (c.operating_row or {}).get(mn.COST_PER_GOOD_ANSWER_USD)
        return math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    def key(c) -> tuple[float, float]:  # noqa: ANN001
        return (c.replicas if c.replicas is not None else math.inf, cost(c))

    best = min(report.candidates, key=key)
    if key(best) == key(base) or best.replicas is None:
        best = base
    target = base.target_rate
    lines = []
    if best is base:
        lines.append(f"verdict: keep {base.candidate} for {target:g} req/s: no candidate needs fewer "
                     f"replicas or costs less per good answer")
    else:
        fewer = (base.replicas or 0) - (best.replicas or 0) if base.replicas is not None else None
        why = (f"{best.replicas} replica(s) instead of {base.replicas}" if fewer else
               "as many replicas at a lower cost per good answer")
        lines.append(f"verdict: {best.candidate} pays for {target:g} req/s: {why}")
    for c in report.candidates:
        reps = "not reachable" if c.replicas is None else f"{c.replicas} replica(s)"
        cap = f"{c.mean:.3g} ± {c.ci95:.2g} req/s per replica" if c.mean > 0 else "no capacity found"
        if c.mean > 0 and c.profile_band is not None:
            cap += f" (model band {c.profile_band[0]:.3g}–{c.profile_band[1]:.3g})"
        tie = ""
        if c is not base and c.mean > 0 and base.mean > 0 and abs(c.mean - base.mean) <= c.ci95 + base.ci95:
            tie = " (capacity ties with the baseline within 95 % CIs)"
        lines.append(f"  {c.candidate}: {reps}, {_cost(cost(c)) if c.replicas is not None else 'cost n/a'}; "
                     f"{cap}{tie}")
    return lines


def sweep_verdict(frame: pl.DataFrame, keys: list[str], baseline: str, *, has_slo: bool,
                  most: int = 12) -> list[str]:
    """One line per grid point of a sweep (its varied keys, seeds pooled): which candidate wins
    and by how much against the baseline, on goodput with an SLO, else on E2EL p50."""
    col = GOODPUT if has_slo else E2EL_P50
    if frame.is_empty() or col not in frame.columns or mn.CANDIDATE not in frame.columns:
        return []
    keys = [k for k in keys if k != "seed" and k in frame.columns]
    rows = frame.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS) if mn.SEGMENT in frame.columns else frame
    means = rows.group_by([*keys, mn.CANDIDATE], maintain_order=True).agg(pl.col(col).mean())
    points = means.select(keys).unique(maintain_order=True) if keys else pl.DataFrame({"_": [0]})
    lines = [f"verdict per grid point (best on {'goodput' if has_slo else 'E2EL p50'}, seeds pooled):"]
    for point in points.iter_rows(named=True):
        sel = means
        for k in keys:
            sel = sel.filter(pl.col(k) == point[k])
        vals = {r[mn.CANDIDATE]: r[col] for r in sel.iter_rows(named=True) if r[col] is not None}
        if not vals:
            continue
        best = (max if has_slo else min)(vals, key=lambda n: vals[n])
        where = ", ".join(f"{k}={point[k]}" for k in keys) or "the scenario"
        base = vals.get(baseline)
        if best == baseline or base is None or vals[best] == base:
            lines.append(f"  {where}: keep {baseline}")
        else:
            label = "goodput" if has_slo else "E2EL p50"
            lines.append(f"  {where}: {best} ({label} {_pct(vals[best], base)} vs {baseline})")
    if len(lines) > most + 1:
        lines = [*lines[: most + 1], f"  … {len(lines) - most - 1} more grid points in the table"]
    return lines
