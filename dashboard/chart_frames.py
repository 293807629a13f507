"""The small frames the charts draw, derived from a run's results and the profile.

Acceptance per draft position (the simulator's own acceptance models), the break-even model
per k, per-request latencies, and KV use and queue length binned over time.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.contracts.scenario import Scenario
from sim.decisions.breakeven import (
    BreakevenRow,
    acceptance_length_rates,
    assumed_overhead_note,
    breakeven_from_profile,
)
from sim.model.acceptance import AcceptanceModel
from sim.results import metric_names as mn
from sim.results.metrics import with_latencies
from sim.results.runner import ScenarioResult


def acceptance_frame(scenario: Scenario, profile: Profile) -> pl.DataFrame:
    """Survival rate per draft position for every speculative candidate × scenario segment,
    from the same acceptance models the simulator samples (assumed rates win over the profile).

    Columns: ``candidate``, ``segment``, ``position``, ``rate``, ``method``.
    """
    rows = []
    for c in scenario.speculative:
        assert c.proposer is not None
        if c.assumed_acceptance is not None:
            model = AcceptanceModel.from_assumed(c.assumed_acceptance, scenario.workload.segment_names, c.proposer)
            method = "assumed"
        else:
            keys = {s.name: (s.acceptance.task, s.acceptance.language, s.temperature)
                    for s in scenario.workload.segments if s.acceptance is not None}
            model = AcceptanceModel.from_profile(profile, c.proposer, keys)
            method = profile.acceptance[c.proposer].provenance.method
        for seg in scenario.workload.segment_names:
            agg = model.segment(seg).aggregate
            for pos in range(1, min(len(agg), max(c.max_k, 1)) + 1):
                rows.append({"candidate": c.name, "segment": seg, "position": pos,
                             "rate": float(agg[pos - 1]), "method": method})
    return pl.DataFrame(rows, schema={"candidate": pl.String, "segment": pl.String, "position": pl.Int64,
                                      "rate": pl.Float64, "method": pl.String})


def breakeven_frame(scenario: Scenario, profile: Profile, *, batch: int = 1) -> tuple[pl.DataFrame, str, list[str]]:
    """D(k), V(k), H(k) and time per committed token for k = 1..max k of each candidate.

    Evaluated at ``batch`` sequences and a context of the largest segment's median prompt
    length, with that segment's acceptance (or the candidate's assumed rates). Returns the
    frame, a label saying where it was evaluated, and notes (extrapolations).
    """
    seg = max(scenario.workload.segments, key=lambda s: s.share)
    context = typical_length(seg.prompt_tokens)
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    for c in scenario.speculative:
        assert c.proposer is not None
        k_top = max(1, c.max_k)
        key = None if seg.acceptance is None else AcceptanceKey(seg.acceptance.task, seg.acceptance.language,
                                                                 seg.temperature)
        try:
            if c.assumed_acceptance is not None or key is None:
                res = breakeven_from_profile(profile, c.proposer, alpha=0.0, batch=batch, context=context,
                                             k_max=k_top)
                rates = list(c.assumed_acceptance or [])
                brs = [BreakevenRow(r.k, r.draft_s, r.verify_s, r.overhead_s,
                                    acceptance_length_rates(rates, r.k), r.baseline_s) for r in res.rows]
            else:
                res = breakeven_from_profile(profile, c.proposer, segment=key, batch=batch, context=context,
                                             k_max=k_top)
                brs = list(res.rows)
            # the candidate's own k, at the acceptance drawn (the profile's note is of its best k)
            best, own = (assumed_overhead_note(profile, c.proposer, rs, k) for rs, k in ((res.rows, None), (brs, c.k)))
            res = replace(res, notes=tuple(n for n in res.notes if n != best) + ((own,) if own else ()))
        except SpecplanError as exc:
            notes.append(f"break-even for {c.name} not drawn: {exc}")
            continue
        notes += [f"break-even {c.name}: {n}" for n in res.notes]
        for r in brs:
            rows.append({"candidate": c.name, "k": r.k, "draft_ms": r.draft_s * 1e3, "verify_ms": r.verify_s * 1e3,
                         "overhead_ms": r.overhead_s * 1e3, "per_token_ms": r.time_per_token_s * 1e3,
                         "baseline_ms": r.baseline_s * 1e3})
    label = f"batch {batch}, context {context:g} tokens, acceptance of segment {seg.name}"
    frame = pl.DataFrame(rows, schema={"candidate": pl.String, "k": pl.Int64, "draft_ms": pl.Float64,
                                       "verify_ms": pl.Float64, "overhead_ms": pl.Float64,
                                       "per_token_ms": pl.Float64, "baseline_ms": pl.Float64})
    return frame, label, notes


def typical_length(d: object) -> float:
    """A length distribution's middle: the median (lognormal, empirical), the value (fixed) or
    the midpoint (uniform); 512 tokens when unknown."""
    kind = getattr(d, "dist", None)
    if kind == "fixed" and getattr(d, "value", None) is not None:
        return float(d.value)  # type: ignore[attr-defined]
    if kind == "lognormal" and getattr(d, "median", None) is not None:
        return float(d.median)  # type: ignore[attr-defined]
    if kind == "uniform" and getattr(d, "min", None) is not None and getattr(d, "max", None) is not None:
        return (d.min + d.max) / 2.0  # type: ignore[attr-defined]
    vals = getattr(d, "values", None)
    if kind == "empirical" and vals:
        v = sorted(vals)
        return float(v[len(v) // 2])
    return 512.0


def latency_values(result: ScenarioResult, metric: str) -> pl.DataFrame:
    """Per-request latency in ms of the first seed's measured, completed requests:
    ``candidate``, ``value_ms`` (latencies as ``sim.results.metrics.with_latencies`` defines them)."""
    seed = result.seeds[0]
    req = with_latencies(result.requests.filter((pl.col(mn.SEED) == seed) & pl.col("in_window")))
    col = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2el_s"}[metric]
    return req.select(mn.CANDIDATE, (pl.col(col) * 1000.0).alias("value_ms")).drop_nulls()


def levels_over_time(steps: pl.DataFrame, bin_s: float) -> pl.DataFrame:
    """Bin the steps frame into time-weighted KV use and queue length per candidate.

    Input columns: ``candidate``, ``replica``, ``t_start_s``, ``duration_s``, ``queue_len``,
    ``kv_used_blocks``, ``kv_total_blocks`` (one seed). Within a bin each replica's levels are
    weighted by step duration (levels hold for a step's duration); queue lengths are summed over
    replicas and KV use is the fleet's used blocks over its total. Output: ``candidate``,
    ``t_s`` (bin start), ``kv_use`` (fraction), ``queue_len``.
    """
    if steps.height == 0:
        return pl.DataFrame(schema={"candidate": pl.String, "t_s": pl.Float64, "kv_use": pl.Float64,
                                    "queue_len": pl.Float64})
    w = pl.col("duration_s").clip(lower_bound=1e-12)
    per_replica = (
        steps.with_columns((pl.col("t_start_s") / bin_s).floor().alias("_bin"))
        .group_by("candidate", "replica", "_bin")
        .agg(
            ((pl.col("queue_len") * w).sum() / w.sum()).alias("queue_len"),
            ((pl.col("kv_used_blocks") * w).sum() / w.sum()).alias("kv_used"),
            pl.col("kv_total_blocks").max().alias("kv_total"),
        )
    )
    return (
        per_replica.sort("candidate", "_bin", "replica").group_by("candidate", "_bin", maintain_order=True)
        .agg(pl.col("queue_len").sum(), (pl.col("kv_used").sum() / pl.col("kv_total").sum()).alias("kv_use"))
        .with_columns((pl.col("_bin") * bin_s).alias("t_s"))
        .select("candidate", "t_s", "kv_use", "queue_len")
        .sort("candidate", "t_s")
    )
