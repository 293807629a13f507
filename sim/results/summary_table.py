"""Terminal table of a scenario result: baseline first, each candidate with its delta.

Rows are metrics, columns candidates, each cell ``mean ± ci95`` over seeds; speculative
candidates show the relative change against the baseline. Below the table: where every number
came from (profile provenance, assumed acceptance) and the notes (extrapolation,
approximations), so a reader never mistakes an assumption for a measurement.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from sim.contracts.errors import clip
from sim.results import metric_names as mn
from sim.results.intervals import interval_text
from sim.results.runner import ScenarioResult
from sim.results.step_view import why_lines


@dataclass(frozen=True)
class Row:
    label: str
    column: str
    decimals: int = 1
    scale: float = 1.0
    better: str = "lower"  # "lower" | "higher" | "none"
    pair: str | None = None
    """A second column shown in the same cell after " | " (two views of one thing, one line)."""


ROWS: tuple[Row, ...] = (
    Row("TTFT p50 (ms)", mn.latency_col(mn.TTFT, "median"), 0),
    Row("TTFT p95 (ms)", mn.latency_col(mn.TTFT, "p95"), 0),
    Row("TTFT p99 (ms)", mn.latency_col(mn.TTFT, "p99"), 0),
    Row("TPOT p50 (ms)", mn.latency_col(mn.TPOT, "median"), 1),
    Row("TPOT p95 (ms)", mn.latency_col(mn.TPOT, "p95"), 1),
    Row("TPOT p99 (ms)", mn.latency_col(mn.TPOT, "p99"), 1),
    Row("ITL p99 (ms)", mn.latency_col(mn.ITL, "p99"), 1),
    Row("E2EL p50 (ms)", mn.latency_col(mn.E2EL, "median"), 0),
    Row("E2EL p95 (ms)", mn.latency_col(mn.E2EL, "p95"), 0),
    Row("E2EL p99 (ms)", mn.latency_col(mn.E2EL, "p99"), 0),
    Row("stream pause p99 (ms)", mn.pause_col("p99"), 0),
    Row("throughput (req/s)", mn.REQUEST_THROUGHPUT, 3, better="higher"),
    Row("output (tok/s)", mn.OUTPUT_THROUGHPUT, 1, better="higher"),
    Row("goodput (req/s)", mn.REQUEST_GOODPUT, 3, better="higher"),
    Row("SLO attainment (%)", mn.SLO_ATTAINMENT, 1, 100.0, better="higher"),
    Row("completed", mn.COMPLETED, 1, better="higher"),
    Row("rejected | timed out", mn.REJECTED, 1, pair=mn.TIMED_OUT),
    Row("rejected too long", mn.REJECTED_TOO_LONG, 1),
    Row("acc. length per draft", mn.MEAN_ACCEPTANCE_LENGTH, 2, better="higher"),
    Row("acc. length per step", mn.TOKENS_PER_STEP, 2, better="higher"),
    Row("preemptions", mn.PREEMPTIONS, 1),
    Row("queue length (time-wt)", mn.QUEUE_LEN_TW, 2),
    Row("KV use (time-wt, %)", mn.KV_USE_TW, 1, 100.0),
    Row("prefix cache hits (%)", mn.PREFIX_HIT_RATE, 1, 100.0, better="higher"),
    Row("prefill tokens saved", mn.PREFILL_SAVED, 0, better="higher"),
    Row("spec. off (% steps | % time)", mn.SPEC_OFF_STEPS, 1, 100.0, better="none", pair=mn.SPEC_OFF_TIME),
    Row("$ per 1,000 good answers", mn.COST_PER_GOOD_ANSWER_USD, 3, 1000.0),
)


def _fmt(value: float | None, decimals: int, scale: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "∞"
    return f"{value * scale:,.{decimals}f}"


def _cell(row: dict, spec: Row, base: dict | None, with_ci: bool = True) -> str:
    if spec.pair is not None:
        one = Row(spec.label, spec.column, spec.decimals, spec.scale, spec.better)
        two = Row(spec.label, spec.pair, spec.decimals, spec.scale, spec.better)
        return f"{_cell(row, one, None, with_ci)} | {_cell(row, two, None, with_ci)}"
    v = row.get(spec.column)
    ci = row.get(mn.ci_col(spec.column))
    text = _fmt(v, spec.decimals, spec.scale)
    if with_ci and ci is not None and v is not None and not math.isinf(v) and not math.isnan(ci):
        # clipped to the metric's range (SLO met 14.8 % ± 44.1 % reads [0.0–58.9]): the one rule
        text += interval_text(v, ci, lambda x: _fmt(x, spec.decimals, spec.scale), *mn.metric_range(spec.column))
    if base is not None:
        b = base.get(spec.column)
        if v is not None and b is not None and not math.isinf(v) and not math.isinf(b) and b != 0:
            text += f" ({(v - b) / abs(b) * 100:+.0f}%)"
    return text


def table(result: ScenarioResult, segment: str = mn.ALL_SEGMENTS, with_ci: bool = True) -> str:
    """The metric × candidate table for one segment (``all`` by default); without ``with_ci``
    cells show the mean and its change against the baseline only, and all-zero rows are left out
    (what fits a 100-column terminal; the intervals stay in the JSON and ``--verbose``)."""
    rows = {
        r[mn.CANDIDATE]: r
        for r in result.summary.filter(pl.col(mn.SEGMENT) == segment).iter_rows(named=True)
    }
    names = [c for c in result.candidates if c in rows]
    base_name = next((c for c in names if _is_baseline(result, c)), None)
    base = rows.get(base_name) if base_name else None
    header = ["metric", *names]
    body = []
    for spec in ROWS:
        cols = [spec.column] + ([spec.pair] if spec.pair else [])
        if all(rows[c].get(col) is None for c in names for col in cols):
            continue
        if not with_ci and all(rows[c].get(col) in (None, 0.0) for c in names for col in cols):
            continue
        body.append(
            [spec.label]
            + [_cell(rows[c], spec, None if c == base_name else base, with_ci) for c in names]
        )
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in body:
        lines.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
    return "\n".join(lines)


def _is_baseline(result: ScenarioResult, name: str) -> bool:
    return name in result.scenario.candidate_names and result.scenario.candidate(name).is_baseline


def render(result: ScenarioResult, by_segment: bool = False, verbose: bool = False,
           verdict: Sequence[str] = ()) -> str:
    """Verdict first (``verdict``: the decision's lines, sim.decisions.answer_text), then the table (and one per segment), SLOs and cost, sources and notes.

    By default it fits one screen: sources one line per section and notes condensed
    (``condense_notes``); ``verbose`` prints the intervals in every cell, the full provenance
    and every note as the JSON has them.
    """
    sc = result.scenario
    seeds = ", ".join(str(s) for s in result.seeds)
    window, differs = rate_window(result, bool(verdict))
    w0, hi = sc.run.warmup_s, _latest_end(result)
    cells = ("mean ± 95% CI over seeds (Student t), (±x%) vs baseline" if verbose
             else "mean over seeds, (±x%) vs baseline; 95% CIs with --verbose")
    if window and not verbose:  # one line on the screen: the latest end
        cells = f"mean over seeds, (±x%) vs baseline, CIs: --verbose; rates per s of {w0:g} s–last end (≤{hi:.4g} s)"
    lines = [
        f"scenario {sc.name}: {sc.description}".rstrip(": "),
        f"{len(result.seeds)} seed(s) [{seeds}]; {sc.run.duration_s:g} s of arrivals, first "
        f"{sc.run.warmup_s:g} s warm-up excluded",
        "",
        *verdict_block(result, verdict, per_step=verbose),
        "",
        f"cells: {cells}",
        table(result, with_ci=verbose),
        *([window] if window and verbose else []),
        *differs,
        "",
    ]
    if by_segment:
        for seg in sc.workload.segment_names:
            lines += [f"segment {seg}:", table(result, seg, with_ci=verbose), ""]
    limits = sc.slo.limits
    if limits:
        slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in limits.items())
        lines.append(f"SLO (a good answer meets all): {slo}")
    else:
        lines.append("SLO: none set, so goodput, SLO attainment and cost per good answer are undefined")
    cost_rows = result.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    if any(
        v is not None and math.isinf(v) for v in cost_rows[mn.COST_PER_GOOD_ANSWER_USD].to_list()
    ):
        lines.append("cost per good answer ∞: no SLO-conformant answers at any price")
    fleets = {c.fleet: sc.fleet_for(c) for c in sc.candidates if c.name in result.candidates}
    priced = [(name, f) for name, f in fleets.items() if f.price_per_gpu_hour is not None]
    for name, f in priced:
        g = f.gpus_per_replica
        gpus = "" if g == 1 else f" × {g} GPUs"
        whose = "" if len(fleets) == 1 else f"{'[fleet]' if name is None else f'[fleets.{name}]'} "
        lines.append(
            f"cost: {whose}{f.replicas} replica(s){gpus} × ${f.price_per_gpu_hour:g}/h over the "
            "arrival window (idle, failed work billed; drain not)"
        )
    lines.append("")
    lines.append("sources:" if verbose else "sources: (one line per section; --verbose or --json: full provenance)")
    lines.extend(f"  {s}" for s in (result.sources if verbose else fold_sources([short_source(s) for s in result.sources])))
    notes = list(result.notes) if verbose else fold_extrapolation(condense_notes(result.notes, result.candidates))
    if not verbose and len(notes) > SHORT_NOTES:  # one screen: the rest are a flag away
        notes = notes[:SHORT_NOTES - 1] + [f"… {len(notes) - SHORT_NOTES + 1} more note(s): --verbose or --json"]
    if notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in notes)
    return "\n".join(lines)


SHORT_NOTES = 3
"""Most note lines the default (non-verbose) table prints, so `make run` fits one screen."""


def _latest_end(result: ScenarioResult) -> float:
    ends = result.summary[mn.WINDOW_END_S].drop_nulls() if mn.WINDOW_END_S in result.summary.columns else None
    return float(ends.max()) if ends is not None and ends.len() else result.scenario.run.duration_s  # type: ignore[arg-type]


def rate_window(result: ScenarioResult, with_verdict: bool) -> tuple[str, list[str]]:
    """The window the table's rates are per second of (said on the cells line), and, under a
    verdict that counts goodput per second of arrivals (sim/decisions/facts.py), a line saying
    how far its goodput reads above the table's when the drain after arrivals makes it differ
    by more than 1 %."""
    rows = result.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    ends = ([float(v) for v in rows[mn.WINDOW_END_S].to_list() if v is not None]
            if mn.WINDOW_END_S in rows.columns else [])
    if not ends:
        return "", []
    run = result.scenario.run
    w0, d, lo, hi = run.warmup_s, run.duration_s, min(ends), max(ends)
    end = f"{hi:.4g} s" if hi - lo < 0.0005 * max(hi, 1.0) else f"{lo:.4g}…{hi:.4g} s"
    said = f"rates per s of {w0:g}–{end} (warm-up to the last measured request's end)"
    # the verdict's goodput is this × window / arrival window: said where some goodput moves by > 1 %
    good = [float(e) for e, g in zip(rows[mn.WINDOW_END_S].to_list(), rows[mn.REQUEST_GOODPUT].to_list(),
                                     strict=True) if e is not None and g]
    more = (max(good) - w0) / (d - w0) - 1 if good and d > w0 else 0.0
    if with_verdict and result.scenario.slo.limits and len(result.candidates) > 1 and more > 0.01:
        return said, [f"verdict goodput: the same good answers per s of arrivals ({w0:g}–{d:g} s), "
                      f"up to {more:.1%} higher"]
    return said, []


def verdict_block(result: ScenarioResult, verdict: Sequence[str], per_step: bool = False) -> list[str]:
    """The decision's lines and (``per_step``) each speculative candidate's per-step view."""
    if len(result.candidates) < 2:
        return ["verdict: one candidate only, nothing to compare"]
    base = next((c for c in result.candidates if _is_baseline(result, c)), result.candidates[0])
    return [*verdict, *(why_lines(result.steps, base) if per_step else [])]


SHORT = 100
"""Columns a condensed line may take."""


def _clip(text: str, width: int = SHORT - 2) -> str:
    return clip(text, width)  # at a word boundary: a half word reads as another word


def short_source(line: str) -> str:
    """A provenance line without its bracketed notes, clipped to one terminal line."""
    return _clip(line.split(" [", 1)[0])


def fold_sources(lines: Sequence[str]) -> list[str]:
    """Short source lines with the same provenance after their section name folded into one
    ("timing, memory: measured on …"): the screen's budget; ``--verbose`` keeps one per section."""
    said: dict[str, list[str]] = {}
    for line in lines:
        section, _, rest = line.partition(": ")
        said.setdefault(rest if rest else line, []).append(section if rest else "")
    return [_clip(f"{', '.join(secs)}: {rest}") if secs[0] else rest for rest, secs in said.items()]


_FOLDED = re.compile(r"^extrapolated (?P<axis>\w+) (?P<side>above|below) (?P<edge>\S+): up to (?P<pct>[\d.]+)% of steps \((?P<who>[^)]+)\)")


def fold_extrapolation(lines: Sequence[str]) -> list[str]:
    """Condensed notes with their extrapolation lines folded into one (the screen's budget: the
    main job fits one terminal screen); ``--verbose`` keeps each grid and candidate."""
    hits = [m for m in map(_FOLDED.match, lines) if m]
    if len(hits) < 2:
        return list(lines)
    parts = ", ".join(f"{m['axis']}{'>' if m['side'] == 'above' else '<'}{m['edge']} {m['pct']}% ({m['who']})"
                      for m in hits)
    folded = _clip(f"extrapolated (% of steps): {parts}")
    first = next(i for i, line in enumerate(lines) if _FOLDED.match(line))
    rest = [line for line in lines if not _FOLDED.match(line)]
    return [*rest[:first], folded, *rest[first:]]


_EXTRAP = re.compile(r"^extrapolated \((?P<who>.+), \d+ seed\(s\)\): (?P<quantity>[\w.-]+?)\."
                     r"(?P<axis>\w+) (?P<side>above|below) (?P<edge>\S+) in (?P<pct>[\d.]+)% of steps")


def condense_notes(notes: Sequence[str], candidates: Sequence[str]) -> list[str]:
    """Notes without repeats: extrapolation one line per grid axis and side (the largest share
    of steps and its candidate), the same note for several candidates once with their names,
    and every line clipped to one terminal line."""
    axes: dict[tuple[str, str], list[tuple[float, str, str, str]]] = {}
    same: dict[str, list[str]] = {}
    order: list[str] = []
    for note in notes:
        m = _EXTRAP.match(note)
        if m:
            key = (m["axis"], m["side"])
            if key not in axes:
                order.append(f"\0axis{len(axes)}")
            axes.setdefault(key, []).append((float(m["pct"]), m["who"], m["quantity"], m["edge"]))
            continue
        who, _, rest = note.partition(": ")
        if who in candidates and rest:
            if rest not in same:
                order.append(f"\0same{rest}")
            same.setdefault(rest, []).append(who)
        else:
            order.append(note)
    out = []
    keys = list(axes)
    for item in order:
        if item.startswith("\0axis"):
            axis, side = keys[int(item[5:])]
            hits = axes[(axis, side)]
            pct, who, _, edge = max(hits, key=lambda h: h[0])
            grids = sorted({h[2] for h in hits})
            edges = sorted({h[3] for h in hits}, key=lambda e: float(e) if e.replace(".", "", 1).isdigit() else 0)
            out.append(_clip(f"extrapolated {axis} {side} {'/'.join(edges)}: up to {pct:g}% of steps "
                             f"({who}) in {', '.join(g.removeprefix('proposers.') for g in grids)}"))
        elif item.startswith("\0same"):
            rest = item[5:]
            out.append(_clip(f"{', '.join(same[rest])}: {rest}"))
        else:
            out.append(_clip(item))
    return out
