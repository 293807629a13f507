"""Step-time error per batch size: how far the profile's price of a pass is from the pass the
real serving loop ran, one row per decode batch size.

Why per batch: one summary number averages a grid cell priced 50 % too cheap (an interpolated
batch size where a CPU switched kernels) with cells priced right; TTFT and E2EL errors then
look like queueing noise. Per batch size, a bad cell names itself.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from sim.contracts.profile_timing import origin_of

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
    "origin": pl.String(),
}


def batch_errors(residuals: pl.DataFrame, timing: Any = None) -> pl.DataFrame:
    """Per candidate (when the frame is tagged with one) and decode batch size, over decode-only
    steps: step count, median measured and predicted
    times, and the median over steps of ``predicted / measured − 1`` (the error's sign as in
    the error table: negative = the profile prices the pass too cheap); ``origin``: how the
    profile's ``timing`` (``sim.contracts.profile_timing.Timing``) prices that batch size
    (measured, refined, interpolated, extrapolated; null without ``timing``)."""
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
    if timing is None:
        out = out.with_columns(pl.lit(None, pl.String()).alias("origin"))
    else:
        tf = timing.target_forward
        axis = tf.axes[tf.axis_names.index("batch")]
        out = out.with_columns(pl.col("decode_seqs").map_elements(
            lambda b: origin_of(int(b), axis, timing.batch_origin), return_dtype=pl.String()).alias("origin"))
    return out.select(list(BATCH_ERROR_SCHEMA)).cast(BATCH_ERROR_SCHEMA)  # type: ignore[arg-type]


def batch_error_lines(residuals: pl.DataFrame, what: str, timing: Any = None) -> list[str]:
    """The report's per-batch block: a head line and one line per decode batch size, each with
    how the profile prices that batch size when ``timing`` is given."""
    table = batch_errors(residuals, timing)
    if table.is_empty():
        return []
    lines = [f"step time error per decode batch size ({what}; median over decode-only steps of "
             f"predicted/measured − 1, ±{BATCH_TOLERANCE:.0%} marked):"]
    for (cand,), grp in table.group_by(["candidate"], maintain_order=True):
        lines.append(f"  {cand}: {int(grp['within'].sum())} of {grp.height} batch sizes within ±{BATCH_TOLERANCE:.0%}")
        for r in grp.iter_rows(named=True):
            mark = "" if r["within"] else "  <- outside"
            how = f", {r['origin']} in the profile" if r["origin"] else ""
            lines.append(f"    batch {r['decode_seqs']:>3}: {r['rel_error_median']:+7.1%}  (measured "
                         f"{r['measured_ms_median']:.1f} ms, predicted {r['predicted_ms_median']:.1f} ms, "
                         f"{r['steps']} steps{how}){mark}")
    return lines
