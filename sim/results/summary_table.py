"""Terminal table of a scenario result: baseline first, each candidate with its delta.

Rows are metrics, columns candidates, each cell ``mean ± ci95`` over seeds; speculative
candidates show the relative change against the baseline. Below the table: where every number
came from (profile provenance, assumed acceptance) and the notes (extrapolation,
approximations), so a reader never mistakes an assumption for a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from sim.results import metric_names as mn
from sim.results.runner import ScenarioResult


@dataclass(frozen=True)
class Row:
    label: str
    column: str
    decimals: int = 1
    scale: float = 1.0
    better: str = "lower"  # "lower" | "higher" | "none"


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
    Row("rejected", mn.REJECTED, 1),
    Row("timed out", mn.TIMED_OUT, 1),
    Row("mean acceptance length", mn.MEAN_ACCEPTANCE_LENGTH, 2, better="higher"),
    Row("preemptions", mn.PREEMPTIONS, 1),
    Row("queue length (time-wt)", mn.QUEUE_LEN_TW, 2),
    Row("KV use (time-wt, %)", mn.KV_USE_TW, 1, 100.0),
    Row("$ per 1,000 good answers", mn.COST_PER_GOOD_ANSWER_USD, 3, 1000.0),
)


def _fmt(value: float | None, decimals: int, scale: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "∞"
    return f"{value * scale:,.{decimals}f}"


def _cell(row: dict, spec: Row, base: dict | None) -> str:
    v = row.get(spec.column)
    ci = row.get(mn.ci_col(spec.column))
    text = _fmt(v, spec.decimals, spec.scale)
    if ci is not None and v is not None and not math.isinf(v) and not math.isnan(ci):
        text += " ± " + _fmt(ci, spec.decimals, spec.scale)
    if base is not None:
        b = base.get(spec.column)
        if v is not None and b is not None and not math.isinf(v) and not math.isinf(b) and b != 0:
            text += f" ({(v - b) / abs(b) * 100:+.0f}%)"
    return text


def table(result: ScenarioResult, segment: str = mn.ALL_SEGMENTS) -> str:
    """The metric × candidate table for one segment (``all`` by default)."""
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
        if all(rows[c].get(spec.column) is None for c in names):
            continue
        body.append(
            [spec.label]
            + [_cell(rows[c], spec, None if c == base_name else base) for c in names]
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
    try:
        return result.scenario.candidate(name).is_baseline
    except Exception:  # noqa: BLE001 - a candidate passed in code, not in the scenario
        return False


def render(result: ScenarioResult, by_segment: bool = False) -> str:
    """Header, table (and one per segment), SLOs, sources and notes as one printable text."""
    sc = result.scenario
    seeds = ", ".join(str(s) for s in result.seeds)
    lines = [
        f"scenario {sc.name}: {sc.description}".rstrip(": "),
        f"{len(result.seeds)} seed(s) [{seeds}]; {sc.run.duration_s:g} s of arrivals, first "
        f"{sc.run.warmup_s:g} s warm-up excluded; cells: mean ± 95% CI over seeds "
        "(Student t), (±x%) vs baseline",
        "",
        table(result),
        "",
    ]
    if by_segment:
        for seg in sc.workload.segment_names:
            lines += [f"segment {seg}:", table(result, seg), ""]
    limits = sc.slo.limits
    if limits:
        slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in limits.items())
        lines.append(f"SLO (a request is good only if it meets all): {slo}")
    else:
        lines.append("SLO: none set, so goodput, SLO attainment and cost per good answer are undefined")
    cost_rows = result.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    if any(
        v is not None and math.isinf(v) for v in cost_rows[mn.COST_PER_GOOD_ANSWER_USD].to_list()
    ):
        lines.append("cost per good answer ∞: no SLO-conformant answers at any price")
    if sc.fleet.price_per_gpu_hour is not None:
        lines.append(
            f"cost: {sc.fleet.replicas} replica(s) × ${sc.fleet.price_per_gpu_hour:g}/h over the "
            "measured window, idle time and rejected/timed-out work included"
        )
    lines.append("")
    lines.append("sources:")
    lines.extend(f"  {s}" for s in result.sources)
    if result.notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in result.notes)
    return "\n".join(lines)
