"""How often a policy turned speculation off: the share of decoding steps, and of decoding time,
run with k = 0.

Why it is reported: a load-dependent policy (a cut-off, k by batch, the KV fallback, adaptive)
can win or tie because it is *not* speculating most of the time (the default scenario's
``ngram-k2-cutoff2`` runs 74 % of its decode steps without drafts), and a reader comparing it
with a fixed k needs to see that. Read from the step rows every driver logs (``k`` per step),
over the summary's measured window.
"""

from __future__ import annotations

import polars as pl


def spec_off_shares(steps: pl.DataFrame, t0: float, t1: float) -> tuple[float | None, float | None]:
    """(share of decoding steps, share of decoding time) within ``[t0, t1]`` run with k = 0:
    how often the policy turned speculation off. A decoding step has a decode batch above zero
    (a prefill-only step has nothing to draft for); its time is the part inside the window.
    (None, None) when no decoding step falls in it."""
    from sim.results.time_weighted import overlap  # the one window-overlap rule

    if steps.height == 0 or "k" not in steps.columns:
        return None, None
    dec = steps.filter(pl.col("decode_seqs") > 0).select(
        (pl.col("k") == 0).alias("off"), overlap(steps, t0, t1).alias("t"))
    dec = dec.filter(pl.col("t") > 0)
    if dec.height == 0:
        return None, None
    off, t_off, t_all = dec.select(pl.col("off").sum(), (pl.col("t") * pl.col("off")).sum().alias("t_off"),
                                   pl.col("t").sum()).row(0)
    return int(off) / dec.height, (float(t_off) / float(t_all) if t_all > 0 else None)
