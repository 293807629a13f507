"""How far the simulator's predictions are from measured serving: the error table and the bar.

Both sides are reduced to the same numbers by the same functions (``sim.results.metrics``): a
prediction comes from ``simulate_once`` on exactly the requests the real run served (same
arrival times, lengths, segments), a measurement from the real run's records (the real serving
loop of ``profiler/passes/serving.py``) or from a `vllm bench serve` result file. The error of a
metric is ``(predicted - measured) / measured``.

No torch here: the live serving path lives in ``profiler/passes/serving.py`` and is imported by
``cli/validate.py`` only when a live run is asked for.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.results import metric_names as mn

# (label, summary column) in table order: what the brief and docs/fidelity.md call "every
# prediction". Percentiles are linear (numpy), as sim.results.metrics and vLLM's benchmark compute them.
COMPARED: tuple[tuple[str, str], ...] = (
    ("TTFT p50 (ms)", "ttft_ms_median"),
    ("TTFT p95 (ms)", "ttft_ms_p95"),
    ("TTFT p99 (ms)", "ttft_ms_p99"),
    ("TPOT p50 (ms)", "tpot_ms_median"),
    ("TPOT p95 (ms)", "tpot_ms_p95"),
    ("TPOT p99 (ms)", "tpot_ms_p99"),
    ("E2EL p50 (ms)", "e2el_ms_median"),
    ("E2EL p95 (ms)", "e2el_ms_p95"),
    ("E2EL p99 (ms)", "e2el_ms_p99"),
    ("ITL p50 (ms)", "itl_ms_median"),
    ("ITL p95 (ms)", "itl_ms_p95"),
    ("pause p50 (ms)", "pause_ms_median"),
    ("pause p95 (ms)", "pause_ms_p95"),
    ("pause p99 (ms)", "pause_ms_p99"),
    ("throughput (req/s)", mn.REQUEST_THROUGHPUT),
    ("output throughput (tok/s)", mn.OUTPUT_THROUGHPUT),
    ("goodput (req/s)", mn.REQUEST_GOODPUT),
    ("mean acceptance length", mn.MEAN_ACCEPTANCE_LENGTH),
    ("tokens per verification step", mn.TOKENS_PER_STEP),
    ("step time p50 (ms)", "step_ms_median"),
    ("step time p95 (ms)", "step_ms_p95"),
    ("decode-only step p50 (ms)", "decode_step_ms_median"),
    ("step with prefill p50 (ms)", "prefill_step_ms_median"),
)

# The bar docs/fidelity.md reports against: these columns within 10 % below 85 % load.
BAR_COLUMNS: tuple[str, ...] = ("ttft_ms_median", "ttft_ms_p95", "e2el_ms_median", "e2el_ms_p95")
BAR_RELATIVE_ERROR = 0.10
BAR_MAX_LOAD = 0.85

TABLE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "load": pl.Float64(),
    "rate": pl.Float64(),
    "candidate": pl.String(),
    "metric": pl.String(),
    "column": pl.String(),
    "predicted": pl.Float64(),
    "measured": pl.Float64(),
    "measured_min": pl.Float64(),
    "measured_max": pl.Float64(),
    "real_runs": pl.Int64(),
    "abs_error": pl.Float64(),
    "rel_error": pl.Float64(),
    "measured_requests": pl.Int64(),
}

MEASURED_REQUESTS = "measured_requests"
"""Key of a values dict (and column of the table): the completed requests a measurement's
percentiles were taken over (the fewest of its real runs)."""

MIN_TAIL_REQUESTS = 2
"""A percentile with fewer measured requests above it than this is one request's value: p95 over
12 requests has 0.6 above it (``tail_warnings`` says so beside the bar)."""


def pause_median_ms(requests: pl.DataFrame) -> float | None:
    """Median over completed, in-window requests of their longest stream pause (ms).

    ``sim.results.metrics`` carries p95/p99/max of pauses; the median is added here the same way.
    """
    done = requests.filter(pl.col("in_window") & (pl.col("outcome") == mn.COMPLETED))
    vals = done["max_pause_s"].drop_nulls().to_numpy()
    return float(np.percentile(vals * 1000.0, 50)) if vals.size else None


def values_from_run(summary: pl.DataFrame, requests: pl.DataFrame) -> dict[str, float | None]:
    """The compared numbers of one run: its ``all`` summary row plus the pause median."""
    row = summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    if row.height != 1:
        raise ValueError(f"summary has {row.height} 'all' rows; expected exactly one")
    r = row.row(0, named=True)
    out: dict[str, float | None] = {}
    for _, col in COMPARED:
        if col == "pause_ms_median":
            out[col] = pause_median_ms(requests)
        else:
            v = r.get(col)
            out[col] = None if v is None else float(v)
    done = requests.filter(pl.col("in_window") & (pl.col("outcome") == mn.COMPLETED))
    out[MEASURED_REQUESTS] = float(done.height)
    return out


def finite_or_none(v: float | None) -> float | None:
    """``v`` when it is a finite number, else None."""
    return None if v is None or not math.isfinite(float(v)) else float(v)


def _finite(runs: Sequence[Mapping[str, float | None]], col: str) -> list[float]:
    return [float(v) for r in runs if (v := r.get(col)) is not None and math.isfinite(float(v))]


def _fewest(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    return {MEASURED_REQUESTS: min(v)} if (v := _finite(runs, MEASURED_REQUESTS)) else {}


def mean_values(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Mean of each compared number over replications (None where every replication had none)."""
    return {**{col: float(np.mean(v)) if (v := _finite(runs, col)) else None for _, col in COMPARED},
            **_fewest(runs)}


def median_values(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Median of each compared number over repeated real runs: robust to one disturbed run."""
    return {**{col: float(np.median(v)) if (v := _finite(runs, col)) else None for _, col in COMPARED},
            **_fewest(runs)}


def spread_values(runs: Sequence[Mapping[str, float | None]]) -> dict[str, tuple[float, float]]:
    """(min, max) of each compared number over repeated real runs."""
    return {col: (min(v), max(v)) for _, col in COMPARED if (v := _finite(runs, col))}


def error_rows(
    source: str,
    load: float | None,
    rate: float | None,
    candidate: str,
    predicted: Mapping[str, float | None],
    measured: Mapping[str, float | None],
    spread: Mapping[str, tuple[float, float]] | None = None,
    runs: int = 1,
    labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per compared metric; relative error is null when the measurement is 0 or absent.

    ``measured`` is one run's number or the median of ``runs`` repeated runs, ``spread`` their
    (min, max). A value that is not a finite number counts as absent (the table holds no NaN);
    ``rate`` None means no finite request rate (every request sent at once). ``labels``
    renames metrics by column (e.g. ITL compared per chunk says so in its own row).
    """
    rows = []
    rate = finite_or_none(rate)
    n = finite_or_none(measured.get(MEASURED_REQUESTS))
    for label, col in COMPARED:
        p, m = finite_or_none(predicted.get(col)), finite_or_none(measured.get(col))
        if p is None and m is None:
            continue
        abs_err = None if p is None or m is None else p - m
        rel = None if abs_err is None or not m else abs_err / m
        lo, hi = (finite_or_none(x) for x in (spread or {}).get(col, (m, m)))
        rows.append({
            "source": source, "load": load, "rate": rate, "candidate": candidate,
            "metric": (labels or {}).get(col, label), "column": col, "predicted": p, "measured": m,
            "measured_min": lo, "measured_max": hi, "real_runs": runs,
            "abs_error": abs_err, "rel_error": rel, MEASURED_REQUESTS: None if n is None else int(n),
        })
    return rows


def error_table(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """The tidy error table (columns ``TABLE_SCHEMA``), one row per load × candidate × metric."""
    return pl.DataFrame(list(rows), schema=TABLE_SCHEMA, orient="row")


def bar_check(table: pl.DataFrame) -> pl.DataFrame:
    """Rows the bar covers (p50/p95 TTFT and E2EL below 85 % load) with ``within_bar``."""
    t = table.filter(pl.col("column").is_in(list(BAR_COLUMNS)))
    if "load" in t.columns:
        t = t.filter(pl.col("load").is_null() | (pl.col("load") < BAR_MAX_LOAD))
    return t.with_columns(
        (pl.col("rel_error").abs() <= BAR_RELATIVE_ERROR).fill_null(False).alias("within_bar")
    )


def format_table(table: pl.DataFrame) -> str:
    """Plain-text table for the terminal: predicted, measured, relative error per metric."""
    lines = []
    for (source, load, rate, cand), grp in table.group_by(
        ["source", "load", "rate", "candidate"], maintain_order=True
    ):
        where = f"load {load:.0%} of capacity, " if load is not None else ""
        how = f"{rate:.3g} req/s" if rate is not None else "every request sent at once (no finite rate)"
        lines.append(f"\n{cand} — {where}{how} ({source})")
        runs = int(grp["real_runs"].max() or 1)
        span = f"  range of {runs} real runs" if runs > 1 else ""
        w = max(27, 2 + max(len(x) for x in grp["metric"]))
        lines.append(f"  {'metric':<{w}}{'predicted':>12}{'measured':>12}{'rel. error':>12}{span}")
        for r in grp.iter_rows(named=True):
            p = "—" if r["predicted"] is None else f"{r['predicted']:.4g}"
            m = "—" if r["measured"] is None else f"{r['measured']:.4g}"
            e = "—" if r["rel_error"] is None else f"{r['rel_error']:+.1%}"
            rng = ""
            if runs > 1 and r["measured_min"] is not None:
                rng = f"  {r['measured_min']:.4g}–{r['measured_max']:.4g}"
            lines.append(f"  {r['metric']:<{w}}{p:>12}{m:>12}{e:>12}{rng}")
    return "\n".join(lines)


def format_bar(table: pl.DataFrame) -> str:
    """One line per candidate: how many bar metrics are within 10 %, and the worst one."""
    bar = bar_check(table)
    if bar.height == 0:
        return "bar: no rows below 85% load to check"
    out = []
    for (cand,), grp in bar.group_by(["candidate"], maintain_order=True):
        ok = int(grp["within_bar"].sum())
        worst = grp.sort(pl.col("rel_error").abs(), descending=True, nulls_last=True).row(0, named=True)
        we = "n/a" if worst["rel_error"] is None else f"{worst['rel_error']:+.1%}"
        wl = "" if worst["load"] is None else f" at load {worst['load']:.0%}"
        out.append(
            f"bar (|error| <= {BAR_RELATIVE_ERROR:.0%} for p50/p95 TTFT and E2EL below "
            f"{BAR_MAX_LOAD:.0%} load) {cand}: {ok}/{grp.height} within; worst {worst['metric']} "
            f"{we}{wl}"
        )
    return "\n".join(out)


def _level(column: str) -> int | None:
    """The percentile a compared column is (``*_median`` 50, ``*_p95`` 95), None for others."""
    if column.endswith("_median"):
        return 50
    m = re.search(r"_p(\d+)$", column)
    return int(m.group(1)) if m else None


def tail_warnings(table: pl.DataFrame) -> list[str]:
    """One warning per measured point whose percentiles rest on fewer than ``MIN_TAIL_REQUESTS``
    requests above them (``n·(1 − q)`` of ``n``): such a p95 or p99 is one request's value, and
    an error against it says how far that request was, not the tail. Why beside the bar: the bar
    counts p95 rows as checks however few requests stand behind them."""
    out = []
    if MEASURED_REQUESTS not in table.columns:
        return out
    keys = ["source", "load", "candidate", MEASURED_REQUESTS]
    for (source, load, cand, n), grp in table.drop_nulls(MEASURED_REQUESTS).group_by(keys, maintain_order=True):
        levels = sorted({_level(c) for c in grp["column"]} - {None})
        thin = [q for q in levels if n * (1 - q / 100) < MIN_TAIL_REQUESTS]
        if not thin:
            continue
        top = max(thin)
        need = math.ceil(MIN_TAIL_REQUESTS / (1 - top / 100) - 1e-9)
        where = f" at load {load:.0%}" if load is not None else ""
        tails = ", ".join(f"p{q} {n * (1 - q / 100):.1f}" for q in thin)
        out.append(f"warning: {cand}{where} ({source}): its percentiles rest on {n} measured requests, "
                   f"with fewer than {MIN_TAIL_REQUESTS} above them ({tails}): each is one request's value, "
                   f"not a tail; measure at least {need} requests for p{top}")
    return out


def compact_notes(notes: Sequence[str]) -> list[str]:
    """Notes once each; repeated extrapolation notes (one per simulated run) folded into one
    line per quantity with the largest share of steps seen."""
    out: dict[str, str] = {}
    worst: dict[str, float] = {}
    for n in notes:
        if n.startswith("extrapolated: ") and "% of steps" in n:
            head, _, tail = n.partition(" in ")
            try:
                share = float(tail.split("%", 1)[0])
            except ValueError:
                out.setdefault(n, n)
                continue
            if share >= worst.get(head, -1.0):
                worst[head] = share
                out[head] = f"{head} in up to {share:.1f}% of steps of a simulated run"
        else:
            out.setdefault(n, n)
    return list(out.values())


def write_tables(out: Path, table: pl.DataFrame, frames: Mapping[str, Sequence[pl.DataFrame]],
                 header: Sequence[str], meta: Mapping[str, Any]) -> None:
    """``fidelity.parquet``/``.csv``/``.json`` and one Parquet file per frame list into ``out``,
    each written whole or not at all (``sim.results.atomic_io``)."""
    from sim.results.atomic_io import write_csv_atomic, write_parquet_atomic, write_text_atomic

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecplanError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    write_parquet_atomic(table, out / "fidelity.parquet")
    write_csv_atomic(table, out / "fidelity.csv")
    for name, parts in frames.items():
        if parts:
            write_parquet_atomic(pl.concat(parts, how="diagonal_relaxed"), out / f"{name}.parquet")
    write_text_atomic(out / "fidelity.json", json.dumps({
        **meta, "header": list(header), "bar": format_bar(table).splitlines(), "warnings": tail_warnings(table),
        "rows": table.to_dicts(),
    }, indent=1, default=str))
