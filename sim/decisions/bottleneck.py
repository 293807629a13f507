"""What limits a candidate's capacity, judged by saturation at the capacity point.

Why not busy time: a continuous-batching engine is busy whenever anything is in flight, so at a
quarter of its capacity it can be "busy 100 %" with a small batch and room to spare. What caps
the rate a replica sustains is either an engine limit that holds waiting requests back, or the
time one step takes against the SLO:

- **max_num_seqs**: requests wait while the running batch is full;
- **token budget** (``max_num_batched_tokens``): requests wait while the step's tokens (prefill
  chunks, ``1 + k`` per drafting request, 1 per other) fill the budget;
- **KV capacity**: requests wait (or running ones are preempted) because too few KV blocks are
  free for another prompt;
- **compute per step**: nothing holds requests back, yet the binding SLO (TPOT, TTFT, E2E or
  pauses) is at its limit: each step is too slow at the batch this load brings.

Each engine step that leaves a request waiting is charged to the limit that stopped the
scheduler (``blocked_by``, the scheduler's admission order: KV, then the token budget, then the
running-request limit). A limit holding requests back for ``Saturation.blocked`` of the busy
time names it; below ``Saturation.light_load`` × capacity nothing is saturated. The result is a
frozen :class:`Bottleneck`; ``sim.decisions.bottleneck_text`` renders it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from sim.contracts.grid import GridInterpolator

Limit = Literal["none", "max_num_seqs", "token_budget", "kv", "compute"]
ENGINE_LIMITS: tuple[Limit, ...] = ("kv", "token_budget", "max_num_seqs")
"""The engine limits a waiting request can be held back by, in the scheduler's check order."""


@dataclass(frozen=True, slots=True)
class Saturation:
    """Thresholds of the saturation rule (the module docstring says why each exists)."""

    light_load: float = 0.7
    """Below this fraction of the candidate's capacity nothing is saturated."""
    blocked: float = 0.2
    """Share of busy time an engine limit must hold waiting requests back to be named."""
    slo_near: float = 0.8
    """Without a known capacity: the binding SLO's observed/limit at which compute per step is
    named (below it, and nothing blocked, the candidate is not saturated)."""

    def __post_init__(self) -> None:
        for name in ("light_load", "blocked", "slo_near"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"Saturation.{name}: must be in (0, 1], got {v}")


@dataclass(frozen=True)
class Bottleneck:
    """What limits one candidate at one load, with the measures that show it."""

    candidate: str
    rate: float | None
    """Per-replica arrival rate (req/s) of the run judged; None when not given."""
    capacity: float | None
    """Per-replica capacity the rate is compared with; None when not known."""
    limit: Limit
    slo: str | None
    """The SLO check closest to its limit (``ttft``, ``tpot``, ``e2el``, ``pause``, ``loss``)."""
    slo_margin: float
    """Observed/limit of that check (≤ 1: held); NaN without SLOs."""
    blocked: Mapping[str, float] = field(default_factory=dict)
    """Per engine limit: share of busy time a waiting request was held back by it."""
    busy_fraction: float = 0.0
    mean_batch: float = 0.0
    """Decode batch averaged over busy time."""
    kv_peak: float = 0.0
    preemptions_per_100: float = 0.0
    spec_share_of_step: float = 0.0
    """Share of step time spent drafting and in overhead (D + H), from the profile's grids."""
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None

    @property
    def saturated(self) -> bool:
        return self.limit != "none"

    @property
    def load_fraction(self) -> float | None:
        """Rate over capacity (None when either is unknown)."""
        if self.rate is None or self.capacity is None or not self.capacity > 0:
            return None
        return self.rate / self.capacity

    def to_row(self) -> dict[str, Any]:
        """A flat row (JSON, Parquet): the blocked shares as ``blocked_<limit>`` columns."""
        row = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "blocked"}
        row.update({f"blocked_{k}": float(self.blocked.get(k, 0.0)) for k in ENGINE_LIMITS})
        row["saturated"] = self.saturated
        return row


def blocked_by(*, max_num_seqs: int, max_num_batched_tokens: int,
               block_size: int, prompt_tokens: float, chunked_prefill: bool = True) -> pl.Expr:
    """Per step: the engine limit that left a request waiting after it was planned, or null.

    ``queue_len`` is the waiting queue after the scheduler planned the step, so a request left
    in it was refused by a limit: KV (a preemption, or fewer free blocks than a typical
    ``prompt_tokens`` prompt needs), else the token budget (the step's tokens fill it; without
    chunked prefill, a typical prompt no longer fits), else the running-request limit (the
    scheduler's only other reason)."""
    need = math.ceil(max(prompt_tokens, 1.0) / block_size)
    tokens = (pl.col("decode_seqs") + pl.col("k") * pl.col("drafting_seqs") + pl.col("prefill_tokens"))
    slack = 0 if chunked_prefill else int(prompt_tokens)
    kv = (pl.col("preempted") > 0) | (pl.col("kv_total_blocks") - pl.col("kv_used_blocks") < need)
    return (pl.when(pl.col("queue_len") <= 0).then(None)
            .when(kv).then(pl.lit("kv"))
            .when(tokens + slack >= max_num_batched_tokens).then(pl.lit("token_budget"))
            .otherwise(pl.lit("max_num_seqs")))


def _dh_interpolators(profile: Any, proposer: str) -> tuple[GridInterpolator, GridInterpolator] | None:
    pt = profile.timing.proposers.get(proposer)
    if pt is None:
        return None

    def interp(g: Any) -> GridInterpolator:
        return GridInterpolator(g.axes, g.median, name=g.quantity, axis_names=g.axis_names)

    return interp(pt.draft), interp(pt.overhead)


def speculation_share(steps: pl.DataFrame, profile: Any, proposer: str | None, context: float) -> float:
    """Share of step time that is D + H, summed over steps (0 without speculation)."""
    if proposer is None or steps.height == 0:
        return 0.0
    spec = steps.filter((pl.col("k") > 0) & (pl.col("decode_seqs") > 0))
    total = float(steps["duration_s"].sum())
    if spec.height == 0 or total <= 0:
        return 0.0
    dh = _dh_interpolators(profile, proposer)
    if dh is None:
        return float("nan")
    draft, over = dh
    pairs = spec.group_by(["decode_seqs", "k"]).agg(pl.len().alias("n")).sort("decode_seqs", "k")  # a fixed sum order
    cost = sum(n * (draft(b, k, context) + over(b, k))
               for b, k, n in pairs.select("decode_seqs", "k", "n").iter_rows())
    return float(min(cost / total, 1.0))


def slo_margins(row: Mapping[str, Any] | None, criteria: Any) -> dict[str, float]:
    """Observed/limit of every SLO check of ``criteria`` (``SustainCriteria``) on a summary row,
    losses included (what ``SustainCriteria.judge`` takes the largest of)."""
    if row is None or criteria is None:
        return {}
    from sim.decisions.sustain import loss_fraction

    out: dict[str, float] = {}
    for metric, limit in criteria.limits_ms.items():
        v = row.get(criteria.column(metric))
        out[metric] = math.inf if v is None or not math.isfinite(float(v)) else float(v) / limit
    if criteria.max_loss_fraction > 0:
        out["loss"] = loss_fraction(row) / criteria.max_loss_fraction
    return out


def attribute(
    candidate: str,
    requests: pl.DataFrame,
    steps: pl.DataFrame,
    *,
    window: tuple[float, float],
    replicas: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int = 16,
    chunked_prefill: bool = True,
    margins: Mapping[str, float] | None = None,
    rate: float | None = None,
    capacity: float | None = None,
    profile: Any = None,
    proposer: str | None = None,
    rule: Saturation | None = None,
) -> Bottleneck:
    """The bottleneck of one candidate's records (one or several seeds pooled) at ``rate``.

    ``margins``: observed/limit per SLO check at this load (``slo_margins``); ``capacity``: the
    candidate's per-replica capacity, when known (the capacity point is ``rate ≈ capacity``)."""
    lim = rule or Saturation()
    t0, t1 = window
    span = max(t1 - t0, 1e-12)
    n_seeds = max(int(requests["seed"].n_unique()) if "seed" in requests.columns and requests.height else 1, 1)
    req = requests.filter(pl.col("in_window")) if "in_window" in requests.columns else requests
    done = req.filter(pl.col("outcome") == "completed")
    prompt = float(req["prompt_tokens"].mean()) if req.height else 1.0  # type: ignore[arg-type]
    preempt = float(req["preemptions"].sum()) if req.height else 0.0
    st = steps.filter((pl.col("t_start_s") + pl.col("duration_s") > t0) & (pl.col("t_start_s") < t1))
    end = pl.min_horizontal(pl.col("t_start_s") + pl.col("duration_s"), pl.lit(t1))
    over = (end - pl.max_horizontal(pl.col("t_start_s"), pl.lit(t0))).clip(lower_bound=0.0)
    cause = blocked_by(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                       block_size=block_size, prompt_tokens=prompt, chunked_prefill=chunked_prefill)
    blocked = {k: 0.0 for k in ENGINE_LIMITS}
    busy = batch = kv_peak = 0.0
    if st.height:
        w = st.select(over.alias("w"), cause.alias("cause"), pl.col("decode_seqs"),
                      (pl.col("kv_used_blocks") / pl.col("kv_total_blocks")).alias("kv"))
        total = float(w["w"].sum())
        if total > 0:
            for c, s in w.group_by("cause").agg(pl.col("w").sum()).drop_nulls("cause").iter_rows():
                blocked[c] = float(s) / total
            batch = float((w["w"] * w["decode_seqs"]).sum()) / total
        busy = total / (span * replicas * n_seeds)
        kv_peak = float(w["kv"].max() or 0.0)  # type: ignore[arg-type]
    context = float((done["prompt_tokens"] + done["generated_tokens"] / 2).mean()) if done.height else 0.0  # type: ignore[arg-type]
    spec = speculation_share(st, profile, proposer, context) if profile is not None else 0.0
    slo, margin = max((margins or {}).items(), key=lambda t: t[1], default=(None, math.nan))
    b = Bottleneck(candidate, rate, capacity, "none", slo, margin, blocked, busy, batch, kv_peak,
                   100.0 * preempt / max(done.height, 1), spec, max_num_seqs, max_num_batched_tokens)
    return _judged(b, lim)


def _judged(b: Bottleneck, rule: Saturation) -> Bottleneck:
    """``b`` with its limit named by the saturation rule."""
    from dataclasses import replace

    frac = b.load_fraction
    if frac is not None and frac < rule.light_load:
        return b  # well below capacity: nothing limits it here
    worst = max(ENGINE_LIMITS, key=lambda k: (b.blocked.get(k, 0.0), -ENGINE_LIMITS.index(k)))
    if b.blocked.get(worst, 0.0) >= rule.blocked:
        return replace(b, limit=worst)
    # at the capacity point with nothing held back, the step time against the SLO is the limit;
    # without a known capacity, only when the binding SLO is near its limit
    near = frac is not None or (b.slo_margin == b.slo_margin and b.slo_margin >= rule.slo_near)
    return replace(b, limit="compute") if near else b


def attribute_result(result: Any, profile: Any, *, criteria: Any = None, rate: float | None = None,
                     capacities: Mapping[str, float] | None = None, candidates: Any = None,
                     rule: Saturation | None = None) -> list[Bottleneck]:
    """A ``Bottleneck`` for every candidate of a ``run_scenario`` result (or those named in
    ``candidates``; seeds pooled), at ``rate`` per replica against each candidate's per-replica
    capacity when given."""
    from sim.model.engine_defaults import engine_limits
    from sim.results import metric_names as mn
    from sim.results.metrics import measured_window

    sc = result.scenario
    eng = sc.fleet.engine
    limits = engine_limits(sc, profile)
    proposers: Mapping[str, str | None] = {c.name: c.proposer for c in sc.candidates}
    summary = result.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    rows = {r[mn.CANDIDATE]: r for r in summary.iter_rows(named=True)}
    out = []
    for cand in result.candidates:
        if candidates is not None and cand not in candidates:
            continue
        req = result.requests.filter(pl.col("candidate") == cand)
        stp = result.steps.filter(pl.col("candidate") == cand)
        window = measured_window(req, sc.run.warmup_s, sc.run.duration_s)
        cap = (capacities or {}).get(cand)
        out.append(attribute(
            cand, req, stp, window=window, replicas=int(sc.fleet.replicas),
            max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
            block_size=eng.block_size, chunked_prefill=eng.chunked_prefill,
            margins=slo_margins(rows.get(cand), criteria), rate=rate,
            capacity=cap if cap is not None and cap > 0 else None,
            profile=profile, proposer=proposers.get(cand), rule=rule))
    return out


def bottlenecks_frame(items: list[Bottleneck]) -> pl.DataFrame:
    """One row per candidate × load with every measure (``Bottleneck.to_row``)."""
    return pl.DataFrame([b.to_row() for b in items]) if items else pl.DataFrame()

