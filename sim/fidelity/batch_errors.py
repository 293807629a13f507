"""Step-time error per batch size: how far the profile's price of a pass is from the pass the
real serving loop ran, one row per decode batch size.

Why per batch: one summary number averages a grid cell priced 50 % too cheap (an interpolated
batch size where a CPU switched kernels) with cells priced right; TTFT and E2EL errors then
look like queueing noise. Per batch size, a bad cell names itself.
"""

from __future__ import annotations

import polars as pl

BATCH_TOLERANCE = 0.10
"""The fidelity bar's ±10 %, applied to each batch size's median step-time error."""

BATCH_ERROR_SCHEMA: dict[str, pl.DataType] = {
    "candidate": pl.String(),
    "decode_seqs": pl.Int64(),
    "steps": pl.Int64(),
    "measured_ms_median": pl.Float64(),
    "predicted_ms_median": pl.Float64(),
    "rel_error_median": pl.Float64(),
    "within": pl.Boolean(),
}


def batch_errors(residuals: pl.DataFrame) -> pl.DataFrame:
    """Per candidate (when the frame is tagged with one) and decode batch size, over decode-only
    steps: step count, median measured and predicted
    times, and the median over steps of ``predicted / measured − 1`` (the error's sign as in
    the error table: negative = the profile prices the pass too cheap)."""
    dec = residuals.filter((pl.col("kind") == "decode") & (pl.col("measured_s") > 0))
    if dec.is_empty():
        return pl.DataFrame(schema=BATCH_ERROR_SCHEMA)
    if "candidate" not in dec.columns:
        dec = dec.with_columns(pl.lit("all").alias("candidate"))
    err = pl.col("predicted_s") / pl.col("measured_s") - 1.0
    out = (dec.group_by("candidate", "decode_seqs", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("steps"),
        (pl.col("measured_s").median() * 1e3).alias("measured_ms_median"),
        (pl.col("predicted_s").median() * 1e3).alias("predicted_ms_median"),
        err.median().alias("rel_error_median"),
    ).sort("candidate", "decode_seqs", maintain_order=True))
    out = out.with_columns((pl.col("rel_error_median").abs() <= BATCH_TOLERANCE).alias("within"))
    return out.select(list(BATCH_ERROR_SCHEMA)).cast(BATCH_ERROR_SCHEMA)  # type: ignore[arg-type]


def batch_error_lines(residuals: pl.DataFrame, what: str) -> list[str]:
    """The report's per-batch block: a head line and one line per decode batch size."""
    table = batch_errors(residuals)
    if table.is_empty():
        return []
    lines = [f"step time error per decode batch size ({what}; median over decode-only steps of "
             f"predicted/measured − 1, ±{BATCH_TOLERANCE:.0%} marked):"]
    for (cand,), grp in table.group_by(["candidate"], maintain_order=True):
        lines.append(f"  {cand}: {int(grp['within'].sum())} of {grp.height} batch sizes within ±{BATCH_TOLERANCE:.0%}")
        for r in grp.iter_rows(named=True):
            mark = "" if r["within"] else "  <- outside"
            lines.append(f"    batch {r['decode_seqs']:>3}: {r['rel_error_median']:+7.1%}  (measured "
                         f"{r['measured_ms_median']:.1f} ms, predicted {r['predicted_ms_median']:.1f} ms, "
                         f"{r['steps']} steps){mark}")
    return lines
