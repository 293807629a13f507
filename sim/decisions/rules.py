"""Decision rules: simulated results → one row per finding (observation → decision → risk).

Each rule is a pure function over a summary frame (architecture.md "Result frames": one row per
candidate × segment, optionally per load level in a ``rate`` column) and returns the findings it
supports, each carrying the numbers behind it. No rule reads files or simulates; the table is
only as good as the frames it is given, and every row says which numbers it rests on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from sim.contracts.errors import SpecplanError
from sim.decisions.summary_rows import ci_of, load_rates, row_at, value_of


@dataclass(frozen=True, slots=True)
class Thresholds:
    """How big a difference must be before a rule speaks (fractions unless named otherwise)."""

    min_decode_gain: float = 0.05
    """TPOT must drop by at least this share vs the baseline to count as 'decode faster'."""
    goodput_tolerance: float = 0.02
    """Goodput may be this share below the baseline and still count as 'within limits'."""
    min_slo_attainment: float = 0.95
    """Share of answers meeting every SLO needed for 'quality within limits'."""
    cost_tolerance: float = 0.02
    """Cost per good answer this much higher than an alternative counts as 'worse'."""
    waiting_tolerance: float = 0.10
    """p95 TTFT this much above the baseline's at a load level counts as 'more waiting'."""
    min_acceptance_rate: float = 0.3
    """Accepted share of proposed draft tokens below this counts as 'many rejections'."""
    ttft_share: float = 0.5
    """TTFT at least this share of end-to-end latency counts as 'TTFT dominates'."""

    def __post_init__(self) -> None:
        for name in ("min_decode_gain", "goodput_tolerance", "min_slo_attainment", "cost_tolerance",
                     "waiting_tolerance", "min_acceptance_rate", "ttft_share"):
            v = getattr(self, name)
            if not (0 <= v <= 1):
                raise SpecplanError(f"decision threshold {name}: must be in [0, 1], got {v}")


@dataclass(frozen=True)
class Decision:
    """One finding in the mission's terms, with the numbers it rests on."""

    rule: str
    candidate: str
    segment: str
    load: str
    observation: str
    decision: str
    risk: str
    numbers: Mapping[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Frame helpers


def _need(df: pl.DataFrame, cols: Sequence[str], rule: str) -> bool:
    """Whether ``df`` has what ``rule`` needs (a rule without its columns stays silent)."""
    return all(c in df.columns for c in cols)


def _load_label(rate: float | None) -> str:
    return "scenario load" if rate is None else f"{rate:.3g} req/s per replica"


def _speculative(df: pl.DataFrame, baseline: str) -> list[str]:
    return [c for c in dict.fromkeys(df["candidate"].to_list()) if c != baseline]


# ---------------------------------------------------------------------------------------------
# Rules


def rule_canary(df: pl.DataFrame, baseline: str, th: Thresholds) -> list[Decision]:
    """Decode faster, goodput and SLO attainment within limits, and no more waiting (p95 TTFT),
    at every simulated load → canary it as measured."""
    cols = ("tpot_ms_mean", "request_goodput", "slo_attainment")
    if not _need(df, cols, "canary"):
        return []
    out = []
    rates = load_rates(df)
    for cand in _speculative(df, baseline):
        per = []
        for r in rates:
            b, c = row_at(df, baseline, rate=r), row_at(df, cand, rate=r)
            if b is None or c is None:
                break
            gain = 1 - value_of(c, "tpot_ms_mean") / value_of(b, "tpot_ms_mean")
            gp_b, gp_c = value_of(b, "request_goodput"), value_of(c, "request_goodput")
            wait = (value_of(c, "ttft_ms_p95") / value_of(b, "ttft_ms_p95") - 1
                    if "ttft_ms_p95" in df.columns else 0.0)
            ok = (gain >= th.min_decode_gain
                  and gp_c + ci_of(c, "request_goodput") >= gp_b * (1 - th.goodput_tolerance)
                  and value_of(c, "slo_attainment") >= th.min_slo_attainment
                  and not wait > th.waiting_tolerance)  # more waiting at some load: restrict-load
            per.append((r, ok, gain, gp_b, gp_c, value_of(c, "slo_attainment")))
        if len(per) != len(rates) or not all(p[1] for p in per):
            continue
        worst = min(per, key=lambda p: p[2])
        r, _, gain, gp_b, gp_c, att = worst
        loads = "all loads simulated" if len(rates) > 1 else _load_label(r)
        out.append(Decision(
            rule="canary", candidate=cand, segment="all", load=loads,
            observation=(f"TPOT {gain:.0%} lower than {baseline} (smallest gain, at "
                         f"{_load_label(r)}); goodput {gp_c:.3g} vs {gp_b:.3g} req/s; "
                         f"{att:.1%} of answers meet every SLO"),
            decision=f"test {cand} as measured (same proposer, k, policy) as a canary",
            risk=("confirm acceptance on live traffic matches the profile's segments; watch p99 "
                  "TPOT, KV use and preemptions on the canary; speculative verification is "
                  "lossless only with the same sampler settings — compare outputs"),
            numbers={"tpot_gain": gain, "goodput_candidate": gp_c, "goodput_baseline": gp_b,
                     "slo_attainment": att, **({"rate": r} if r is not None else {})},
        ))
    return out


def rule_cheaper(df: pl.DataFrame, baseline: str, th: Thresholds,
                 rate: float | None = None) -> list[Decision]:
    """Higher acceptance but a worse cost per good answer → prefer the cheaper alternative."""
    cols = ("mean_acceptance_length", "cost_per_good_answer_usd")
    if not _need(df, cols, "cheaper"):
        return []
    rate = rate if rate is not None else load_rates(df)[-1]
    rows = {c: row_at(df, c, rate=rate) for c in dict.fromkeys(df["candidate"].to_list())}
    rows = {c: r for c, r in rows.items() if r is not None}
    out = []
    for cand in _speculative(df, baseline):
        r = rows.get(cand)
        if r is None:
            continue
        acc, cost = value_of(r, "mean_acceptance_length"), value_of(r, "cost_per_good_answer_usd")
        alts = []
        for other, o in rows.items():
            if other == cand:
                continue
            o_acc = 1.0 if other == baseline else value_of(o, "mean_acceptance_length")
            o_cost = value_of(o, "cost_per_good_answer_usd")
            if o_acc < acc and o_cost * (1 + th.cost_tolerance) < cost:
                alts.append((o_cost, other, o_acc))
        if not alts or math.isnan(cost):
            continue
        o_cost, other, o_acc = min(alts)
        what = "the baseline" if other == baseline else f"the cheaper proposer {other}"
        out.append(Decision(
            rule="cheaper", candidate=cand, segment="all", load=_load_label(rate),
            observation=(f"acceptance length {acc:.2f} vs {o_acc:.2f} for {other}, but cost per "
                         f"SLO-conformant answer ${cost:.3g} vs ${o_cost:.3g} "
                         f"(+{cost / o_cost - 1:.0%})"),
            decision=f"prefer {what} over {cand}",
            risk=("cost depends on the price per GPU-hour and draft hardware in the scenario and on "
                  "goodput at this load; re-check at the expected peak and with real prices"),
            numbers={"acceptance_length": acc, "acceptance_length_alt": o_acc, "cost_usd": cost,
                     "cost_usd_alt": o_cost, **({"rate": rate} if rate is not None else {})},
        ))
    return out


def rule_restrict_load(df: pl.DataFrame, baseline: str, th: Thresholds,
                       dominant: Sequence[str] = ()) -> list[Decision]:
    """Faster decode at low load but more waiting at peak → speculate only below a cut-off.

    A candidate in ``dominant`` (it sustains more load than the baseline at a lower cost per
    good answer, from the capacity search) is never told to keep the baseline: its extra
    waiting at the top load level is a thing to watch, not a reason to drop it.
    """
    cols = ("tpot_ms_mean", "ttft_ms_p95")
    rates = load_rates(df)
    if not _need(df, cols, "restrict") or len(rates) < 2 or rates[0] is None:
        return []
    out = []
    for cand in _speculative(df, baseline):
        levels = []
        for r in rates:
            b, c = row_at(df, baseline, rate=r), row_at(df, cand, rate=r)
            if b is None or c is None:
                continue
            gain = 1 - value_of(c, "tpot_ms_mean") / value_of(b, "tpot_ms_mean")
            wait = value_of(c, "ttft_ms_p95") / value_of(b, "ttft_ms_p95") - 1
            worse_gp = False
            if "request_goodput" in df.columns:
                worse_gp = value_of(c, "request_goodput") < value_of(b, "request_goodput") * (1 - th.goodput_tolerance)
            levels.append((r, gain, wait, worse_gp))
        if len(levels) < 2:
            continue
        low, peak = levels[0], levels[-1]
        peak_bad = peak[2] > th.waiting_tolerance or peak[3]
        if not (low[1] >= th.min_decode_gain and peak_bad):
            continue
        good = [lv for lv in levels if lv[1] >= th.min_decode_gain and lv[2] <= th.waiting_tolerance
                and not lv[3]]
        cutoff = max((lv[0] for lv in good), default=None)
        first_bad = min(lv[0] for lv in levels if lv[2] > th.waiting_tolerance or lv[3])
        if cand in dominant:
            decision = (f"prefer {cand}: it sustains more load than {baseline} at a lower cost per "
                        f"good answer (capacity search); watch p95 TTFT from {first_bad:.3g} req/s "
                        f"per replica, where it waits longer than {baseline}")
        elif cutoff is None or cutoff >= first_bad:
            decision = (f"keep {baseline}: no simulated load was clean (more waiting or less "
                        f"goodput already at {first_bad:.3g} req/s per replica); test {cand} only "
                        f"below that load")
        else:
            decision = (f"restrict speculation to the proven load range: up to {cutoff:.3g} req/s "
                        f"per replica (worse from {first_bad:.3g}); set the policy's batch cut-off "
                        f"to the decode batch seen at that load")
        out.append(Decision(
            rule="restrict-load", candidate=cand, segment="all",
            load=f"{rates[0]:.3g}–{rates[-1]:.3g} req/s per replica",
            observation=(f"TPOT {low[1]:.0%} lower at {low[0]:.3g} req/s, but at {peak[0]:.3g} "
                         f"req/s p95 TTFT is {peak[2]:+.0%} vs {baseline}"
                         + (" and goodput is lower" if peak[3] else "")),
            decision=decision,
            risk=("the cut-off holds for this traffic mix; a burstier peak or longer prompts move it "
                  "— use hysteresis (adaptive policy) so speculation does not flap at the edge"),
            numbers={"tpot_gain_low": low[1], "ttft_p95_excess_peak": peak[2], "rate_low": low[0],
                     "rate_peak": peak[0], "cutoff_rate": cutoff if cutoff is not None else math.nan,
                     "first_bad_rate": first_bad},
        ))
    return out


def rule_segment_baseline(df: pl.DataFrame, baseline: str, th: Thresholds,
                          ks: Mapping[str, int] | None = None,
                          rate: float | None = None) -> list[Decision]:
    """Many draft rejections in one task or language, and no decode gain there (when the
    baseline's segment row is known) → keep the baseline for those segments (one finding per
    candidate, listing each segment with its numbers)."""
    if not _need(df, ("mean_acceptance_length",), "segment"):
        return []
    rate = rate if rate is not None else load_rates(df)[-1]
    segs = [s for s in dict.fromkeys(df["segment"].to_list()) if s != "all"]
    out = []
    for cand in _speculative(df, baseline):
        k = (ks or {}).get(cand)
        if k is None and "k" in df.columns:
            row = row_at(df, cand, rate=rate)
            k = int(row["k"]) if row is not None and row.get("k") is not None else None
        if not k:
            continue
        bad: list[tuple[str, float, float, float]] = []
        for seg in segs:
            c = row_at(df, cand, seg, rate)
            if c is None:
                continue
            mal = value_of(c, "mean_acceptance_length")
            acc_rate = (mal - 1) / k
            if not acc_rate < th.min_acceptance_rate:
                continue
            b = row_at(df, baseline, seg, rate)
            tpot_ratio = (value_of(c, "tpot_ms_mean") / value_of(b, "tpot_ms_mean")
                          if "tpot_ms_mean" in df.columns else math.nan)
            if tpot_ratio < 1 - th.min_decode_gain:
                continue  # rejections are many, but speculation still decodes this segment faster
            bad.append((seg, acc_rate, mal, tpot_ratio))
        if not bad or (len(segs) > 1 and len(bad) == len(segs)):
            continue  # none, or every segment: a whole-candidate finding, not a segment one
        parts = [f"{seg}: {a:.0%} of {k} accepted (length {m:.2f})"
                 + ("" if math.isnan(t) else f", TPOT {t - 1:+.0%}") for seg, a, m, t in bad]
        numbers: dict[str, float] = {"k": float(k)}
        for seg, a, m, t in bad:
            numbers |= {f"{seg}.acceptance_rate": a, f"{seg}.acceptance_length": m,
                        f"{seg}.tpot_ratio": t}
        names = ", ".join(seg for seg, *_ in bad)
        out.append(Decision(
            rule="segment-baseline", candidate=cand, segment=names, load=_load_label(rate),
            observation="many draft tokens rejected, no decode gain: " + "; ".join(parts),
            decision=(f"keep {baseline} for {names} (route to a non-speculative pool or disable "
                      f"speculation per request)"),
            risk=("acceptance for a segment rests on the profile's prompts for that task and "
                  "language; measure it on real prompts before splitting traffic"),
            numbers=numbers,
        ))
    return out


def rule_ttft_dominates(df: pl.DataFrame, baseline: str, th: Thresholds,
                        rate: float | None = None) -> list[Decision]:
    """TTFT is most of the end-to-end latency → work on prefill/queueing, not speculation."""
    if not _need(df, ("ttft_ms_mean", "e2el_ms_mean"), "ttft"):
        return []
    rate = rate if rate is not None else load_rates(df)[-1]
    out = []
    for seg in dict.fromkeys(df["segment"].to_list()):
        b = row_at(df, baseline, seg, rate)
        ttft, e2el = value_of(b, "ttft_ms_mean"), value_of(b, "e2el_ms_mean")
        if not (e2el > 0) or not ttft / e2el >= th.ttft_share:
            continue
        share = ttft / e2el
        out.append(Decision(
            rule="ttft-dominates", candidate=baseline, segment=seg, load=_load_label(rate),
            observation=(f"TTFT is {share:.0%} of end-to-end latency ({ttft:.0f} of {e2el:.0f} ms "
                         f"mean): answers are short relative to the wait for the first token"),
            decision=("prioritise prefill and queueing (chunked prefill budget, more replicas, "
                      "prompt caching), not speculation: even an infinitely fast decode would cut "
                      f"end-to-end latency by at most {1 - share:.0%}"),
            risk="check whether the TTFT is queueing (load) or prefill (prompt length) before acting",
            numbers={"ttft_ms_mean": ttft, "e2el_ms_mean": e2el, "ttft_share": share,
                     "max_e2el_gain_from_decode": 1 - share},
        ))
    return out


RULES: tuple[str, ...] = ("canary", "cheaper", "restrict-load", "segment-baseline", "ttft-dominates")


def decision_table(
    summary: pl.DataFrame,
    baseline: str,
    *,
    operating_rate: float | None = None,
    ks: Mapping[str, int] | None = None,
    thresholds: Thresholds | None = None,
    dominant: Sequence[str] = (),
) -> list[Decision]:
    """Every rule over ``summary``; rules comparing at one load use ``operating_rate`` (default
    the highest ``rate`` in the frame, or the frame as is when it has no ``rate``).
    ``dominant``: candidates the capacity search found better than the baseline on capacity
    and cost (see ``rule_restrict_load``)."""
    th = thresholds or Thresholds()
    for col in ("candidate", "segment"):
        if col not in summary.columns:
            raise SpecplanError(f"decision table: summary frame lacks the {col!r} column")
    if baseline not in summary["candidate"].to_list():
        raise SpecplanError(f"decision table: baseline {baseline!r} is not among the candidates "
                            f"{sorted(set(summary['candidate'].to_list()))}")
    rules: list[Callable[[], list[Decision]]] = [
        lambda: rule_canary(summary, baseline, th),
        lambda: rule_cheaper(summary, baseline, th, operating_rate),
        lambda: rule_restrict_load(summary, baseline, th, dominant),
        lambda: rule_segment_baseline(summary, baseline, th, ks, operating_rate),
        lambda: rule_ttft_dominates(summary, baseline, th, operating_rate),
    ]
    return [d for r in rules for d in r()]


def decisions_frame(decisions: Sequence[Decision]) -> pl.DataFrame:
    """Tidy frame of decisions; ``numbers`` as a JSON object string (stable key order)."""
    return pl.DataFrame(
        [{"rule": d.rule, "candidate": d.candidate, "segment": d.segment, "load": d.load,
          "observation": d.observation, "decision": d.decision, "risk": d.risk,
          "numbers": json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v)
                                 for k, v in d.numbers.items()}, sort_keys=True)}
         for d in decisions],
        schema={c: pl.String for c in ("rule", "candidate", "segment", "load", "observation",
                                        "decision", "risk", "numbers")},
    )


def format_decisions(decisions: Sequence[Decision]) -> str:
    """Readable terminal block: one numbered finding per row."""
    if not decisions:
        return "No decision rule fired: no difference exceeded its threshold (see sim/decisions/rules.py)."
    lines = []
    for i, d in enumerate(decisions, 1):
        scope = d.candidate + ("" if d.segment == "all" else f" / {d.segment}")
        lines += [f"{i}. [{d.rule}] {scope} @ {d.load}",
                  f"   observed: {d.observation}",
                  f"   decision: {d.decision}",
                  f"   risk:     {d.risk}"]
    return "\n".join(lines)
