"""Why a speculative candidate is faster or slower per token, read off its simulated steps.

Why its own module: the summary table prints it under the verdict, and it is a view of the
steps, not a decision (the decision is sim.decisions.decision's, rendered by the CLI).
"""

from __future__ import annotations

import polars as pl

from sim.results import metric_names as mn


def why_lines(steps: pl.DataFrame, baseline: str) -> list[str]:
    """Why each speculative candidate pays or not, read off the simulated steps themselves.

    A candidate's decode steps commit ``M = 1 + accepted / rows`` tokens per request and cost
    ``r`` times the baseline's decode steps *at the same batch size* (batch sizes both reached,
    weighted by the candidate's steps): per token it is faster when ``M > r``. A per-step view only:
    queueing and the SLO decide the answer (sim.decisions.decision), so it never says "pays".
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
        verb = "faster" if m > ratio else "slower"
        out.append(f"  per step, {name}: {m:.2f} tokens/request/step at {ratio:.2f}× the baseline's "
                   f"step time ({verb} per token)")
    return out
