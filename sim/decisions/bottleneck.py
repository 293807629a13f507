"""Bottleneck attribution: which resource limits a candidate at a load, and the measure showing it.

Four suspects, each with the number that gives it away (all over the measured window):

- **KV capacity**: preemptions (per 100 finished requests) with KV use near full (time-weighted
  mean and peak fraction of KV blocks in use).
- **compute**: replicas busy nearly all the time (busy fraction) while requests wait little
  (queueing share of TTFT low) *and* the batch near the engine's limits (decode batch vs
  ``max_num_seqs``, tokens per step vs ``max_num_batched_tokens``): the engine is saturated by
  work, not by admission. A continuous-batching engine is busy whenever anything is in flight,
  so at a quarter of its capacity it can be busy 100 % with a small batch and room to spare.
- **queueing**: most of the time to first token is spent waiting to be scheduled.
- **speculation overhead**: drafting plus bookkeeping (D + H, from the profile's grids at each
  step's batch and k and the workload's mean context) is a large share of step time, with the
  acceptance length that has to pay for it.

A finding is flagged when its measure crosses the threshold in :class:`Limits`; the primary
bottleneck is the flagged one furthest past its threshold, or ``none`` (headroom).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.grid import GridInterpolator


@dataclass(frozen=True, slots=True)
class Limits:
    """Thresholds above which a measure is called a bottleneck."""

    kv_use: float = 0.9
    """Time-weighted KV use (or peak ≥ ``kv_peak``) with preemptions → KV capacity."""
    kv_peak: float = 0.98
    busy: float = 0.9
    """Busy fraction of the replicas → compute (when queueing share is below ``queue_share``)."""
    queue_share: float = 0.5
    """Share of mean TTFT spent waiting to be scheduled → queueing."""
    spec_share: float = 0.25
    """Share of step time spent drafting and in overhead (D + H) → speculation overhead."""
    batch_fill: float = 0.8
    """Busy-time mean of the fuller of decode batch / max_num_seqs and tokens per step /
    max_num_batched_tokens a busy replica must reach to be called compute-bound (when the
    engine's limits are known)."""


@dataclass(frozen=True)
class Attribution:
    """The measures of one candidate at one load, the flags they raise, and the primary one."""

    candidate: str
    rate: float | None
    primary: str
    flags: tuple[str, ...]
    preemptions_per_100: float
    kv_use_tw: float
    kv_peak: float
    busy_fraction: float
    queue_len_tw: float
    queue_share_of_ttft: float
    queue_delay_ms_mean: float
    spec_share_of_step: float
    mean_acceptance_length: float
    mean_k: float
    mean_decode_batch: float = 0.0
    """Decode batch averaged over busy time: a busy replica with a small batch still has room."""
    batch_fill: float = float("nan")
    """Busy-time mean of max(decode batch / max_num_seqs, step tokens / token budget); NaN when
    the engine's limits were not given."""

    def evidence(self) -> str:
        """One line with the measure behind each flag (or the headroom when none)."""
        parts = {
            "kv": f"KV use {self.kv_use_tw:.0%} (peak {self.kv_peak:.0%}), "
                  f"{self.preemptions_per_100:.1f} preemptions/100 req",
            "compute": f"busy {self.busy_fraction:.0%} (mean decode batch {self.mean_decode_batch:.1f}"
                       + (f", {self.batch_fill:.0%} of the engine's batch limits" if self.batch_fill == self.batch_fill else "")
                       + f") with {self.queue_share_of_ttft:.0%} of TTFT queueing",
            "queueing": f"{self.queue_share_of_ttft:.0%} of TTFT is queueing "
                        f"({self.queue_delay_ms_mean:.0f} ms mean wait)",
            "speculation": f"D+H {self.spec_share_of_step:.0%} of step time at mean k "
                           f"{self.mean_k:.1f}, acceptance length {self.mean_acceptance_length:.2f}",
        }
        if not self.flags:
            return (f"headroom: busy {self.busy_fraction:.0%} (mean decode batch "
                    f"{self.mean_decode_batch:.1f}), KV {self.kv_use_tw:.0%}, "
                    f"queueing {self.queue_share_of_ttft:.0%} of TTFT")
        return "; ".join(parts[f] for f in self.flags)

    def to_row(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = ",".join(self.flags)
        d["evidence"] = self.evidence()
        return d


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


def attribute(
    candidate: str,
    requests: pl.DataFrame,
    steps: pl.DataFrame,
    *,
    window: tuple[float, float],
    replicas: int,
    profile: Any = None,
    proposer: str | None = None,
    rate: float | None = None,
    limits: Limits | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> Attribution:
    """Measures and flags for one candidate's records (one or several seeds pooled); with the
    engine's limits, compute is flagged only when the batch is near them."""
    lim = limits or Limits()
    t0, t1 = window
    span = max(t1 - t0, 1e-12)
    n_seeds = max(int(requests["seed"].n_unique()) if "seed" in requests.columns and requests.height else 1, 1)
    req = requests.filter(pl.col("in_window")) if "in_window" in requests.columns else requests
    done = req.filter(pl.col("outcome") == "completed")
    preempt = float(req["preemptions"].sum()) if req.height else 0.0
    pre_per_100 = 100.0 * preempt / max(done.height, 1)
    st = steps.filter((pl.col("t_start_s") + pl.col("duration_s") > t0) & (pl.col("t_start_s") < t1))
    end = pl.min_horizontal(pl.col("t_start_s") + pl.col("duration_s"), pl.lit(t1))
    over = (end - pl.max_horizontal(pl.col("t_start_s"), pl.lit(t0))).clip(lower_bound=0.0)
    if st.height:
        agg = st.select(
            over.sum().alias("busy"),
            (over * pl.col("kv_used_blocks") / pl.col("kv_total_blocks")).sum().alias("kv"),
            (over * pl.col("queue_len")).sum().alias("q"),
            (pl.col("kv_used_blocks") / pl.col("kv_total_blocks")).max().alias("kv_peak"),
            (over * pl.col("decode_seqs")).sum().alias("batch"),
            (over * _fill(max_num_seqs, max_num_batched_tokens)).sum().alias("fill"),
        ).row(0, named=True)
        fill = (float(agg["fill"]) / float(agg["busy"]) if max_num_seqs and float(agg["busy"]) > 0
                else float("nan"))
        batch = float(agg["batch"]) / float(agg["busy"]) if float(agg["busy"]) > 0 else 0.0
        busy = float(agg["busy"]) / (span * replicas * n_seeds)
        kv_tw = float(agg["kv"]) / (span * replicas * n_seeds)
        q_tw = float(agg["q"]) / (span * n_seeds)
        kv_peak = float(agg["kv_peak"])
        spec_steps = st.filter(pl.col("decode_seqs") > 0)
        mean_k = float(spec_steps["k"].mean()) if spec_steps.height else 0.0
        drafts = st.filter(pl.col("k") > 0)
        mal = (1.0 + float(drafts["accepted_tokens"].sum()) / float(drafts["decode_seqs"].sum())
               if drafts.height and float(drafts["decode_seqs"].sum()) > 0 else 1.0)
    else:
        busy = kv_tw = q_tw = kv_peak = mean_k = batch = 0.0
        fill = float("nan")
        mal = 1.0
    if done.height:
        wait = (done["scheduled_s"] - done["arrival_s"]).to_numpy()
        ttft = (done["first_token_s"] - done["arrival_s"]).to_numpy()
        q_ms = float(np.mean(wait)) * 1e3
        q_share = float(np.mean(wait) / np.mean(ttft)) if np.mean(ttft) > 0 else 0.0
        context = float((done["prompt_tokens"] + done["generated_tokens"] / 2).mean())
    else:
        q_ms, q_share, context = 0.0, 0.0, 0.0
    spec = speculation_share(st, profile, proposer, context) if profile is not None else 0.0

    excess: dict[str, float] = {}
    if preempt > 0 and (kv_tw >= lim.kv_use or kv_peak >= lim.kv_peak):
        excess["kv"] = max(kv_tw / lim.kv_use, kv_peak / lim.kv_peak) + 1.0  # preemption: worst
    if busy >= lim.busy and q_share < lim.queue_share and not fill < lim.batch_fill:
        excess["compute"] = busy / lim.busy
    if q_share >= lim.queue_share:
        excess["queueing"] = q_share / lim.queue_share
    if spec == spec and spec >= lim.spec_share:
        excess["speculation"] = spec / lim.spec_share
    flags = tuple(sorted(excess, key=lambda f: -excess[f]))
    return Attribution(candidate, rate, flags[0] if flags else "none", flags, pre_per_100, kv_tw,
                       kv_peak, busy, q_tw, q_share, q_ms, spec, mal, mean_k, batch, fill)


def _fill(max_num_seqs: int | None, max_num_batched_tokens: int | None) -> pl.Expr:
    """Per step: the fuller of its decode batch and its tokens against the engine's limits."""
    if not max_num_seqs:
        return pl.lit(0.0)
    seqs = pl.col("decode_seqs") / max_num_seqs
    if not max_num_batched_tokens:
        return seqs
    tokens = (pl.col("decode_seqs") * (pl.col("k") + 1) + pl.col("prefill_tokens")) / max_num_batched_tokens
    return pl.max_horizontal(seqs, tokens)


def attribute_result(result: Any, profile: Any, rate: float | None = None,
                     limits: Limits | None = None) -> list[Attribution]:
    """Attribution for every candidate of a ``run_scenario`` result (seeds pooled)."""
    from sim.results.metrics import measured_window

    sc = result.scenario
    proposers: Mapping[str, str | None] = {c.name: c.proposer for c in sc.candidates}
    out = []
    for cand in result.candidates:
        req = result.requests.filter(pl.col("candidate") == cand)
        stp = result.steps.filter(pl.col("candidate") == cand)
        window = measured_window(req, sc.run.warmup_s, sc.run.duration_s)
        eng = sc.fleet.engine
        out.append(attribute(cand, req, stp, window=window, replicas=int(sc.fleet.replicas),
                             profile=profile, proposer=proposers.get(cand), rate=rate, limits=limits,
                             max_num_seqs=eng.max_num_seqs, max_num_batched_tokens=eng.max_num_batched_tokens))
    return out


def attributions_frame(attrs: list[Attribution]) -> pl.DataFrame:
    """One row per candidate × load with every measure, the flags and a line of evidence."""
    return pl.DataFrame([a.to_row() for a in attrs]) if attrs else pl.DataFrame()


def format_attributions(attrs: list[Attribution]) -> list[str]:
    """Terminal lines: candidate @ load → primary bottleneck: evidence."""
    return [f"{a.candidate:<18} @ {'' if a.rate is None else f'{a.rate:.3g} req/s':<12} "
            f"{a.primary:<12} {a.evidence()}" for a in attrs]
