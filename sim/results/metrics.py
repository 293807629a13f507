"""Pure functions over record frames: latencies, goodput, SLO attainment, time-weighted levels.

Semantics follow vLLM's benchmark: latency statistics are over completed requests; TPOT is
``(e2el - ttft) / (output - 1)`` (undefined for one-token outputs, which then meet any TPOT
limit); ITL samples are the gaps between bursts; a request is *good* only if it completed and
meets every listed SLO (``request_goodput`` = good / window). Requests arriving during warm-up
are simulated but excluded. Levels (queue length, KV use) are time-weighted over the window,
idle time counting as zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from sim.contracts.fleet_config import RequestOverhead
from sim.results import metric_names as mn
from sim.results.cost import cost_per_good_answer
from sim.results.time_weighted import (
    queue_len_tw,
    queue_len_tw_from_requests,
    time_weighted_levels,
)

_QUANTILES = {"median": 0.5, "p95": 0.95, "p99": 0.99}


def with_latencies(requests: pl.DataFrame) -> pl.DataFrame:
    """Add ``ttft_s``, ``tpot_s``, ``e2el_s`` (null unless completed) to a requests frame."""
    ttft, tpot, e2el = latency_arrays(requests)
    return requests.with_columns(
        pl.Series("ttft_s", ttft, dtype=pl.Float64, nan_to_null=True),
        pl.Series("tpot_s", tpot, dtype=pl.Float64, nan_to_null=True),
        pl.Series("e2el_s", e2el, dtype=pl.Float64, nan_to_null=True),
    )


_TIMES = ("arrival_s", "first_token_s", "finish_s")
_DONE = (pl.col("outcome") == mn.COMPLETED).fill_null(False).alias("_done")
OVERHEAD = "overhead_s"
"""Requests-frame column of each request's time outside the engine (fleet.request_overhead);
absent when the scenario declares none."""


def with_request_overhead(requests: pl.DataFrame, overhead: RequestOverhead | None) -> pl.DataFrame:
    """The frame with its ``overhead_s`` column (fixed + per prompt token, seconds), which the
    latencies below add to TTFT and E2E; unchanged when ``overhead`` is None."""
    if overhead is None:
        return requests
    per_request = overhead.seconds(requests["prompt_tokens"].cast(pl.Float64).to_numpy())
    return requests.with_columns(pl.Series(OVERHEAD, per_request, dtype=pl.Float64))


def _times(frame: pl.DataFrame) -> tuple[str, ...]:
    return (*_TIMES, OVERHEAD) if OVERHEAD in frame.columns else _TIMES


def latency_arrays(requests: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TTFT, TPOT, E2EL) in seconds per request, NaN unless completed (TPOT also for one-token
    outputs): ``first_token - arrival + overhead``, ``(e2el - ttft) / (generated - 1)``,
    ``finish - arrival + overhead``. One definition for the frames (:func:`with_latencies`) and
    the summary's arrays. The overhead (``overhead_s``, when the frame has it) is paid before
    the engine, so it moves TTFT and E2E alike and cancels out of TPOT."""
    return _latencies(_arrays(requests, floats=_times(requests), counts=("generated_tokens",), exprs=(_DONE,)))


def _latencies(a: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    done, arrival, gen = a["_done"], a["arrival_s"], a["generated_tokens"]
    ttft = np.where(done, a["first_token_s"] - arrival, np.nan)
    e2el = np.where(done, a["finish_s"] - arrival, np.nan)
    if OVERHEAD in a:
        ttft = ttft + a[OVERHEAD]
        e2el = e2el + a[OVERHEAD]
    multi = done & (gen > 1)
    tpot = np.full(len(done), np.nan)
    tpot[multi] = (e2el[multi] - ttft[multi]) / (gen[multi] - 1)
    return ttft, tpot, e2el


def _arrays(frame: pl.DataFrame, *, floats: Sequence[str] = (), counts: Sequence[str] = (),
            exprs: Sequence[pl.Expr] = ()) -> dict[str, np.ndarray]:
    """Columns as numpy from one polars query (each Series operation is a query of its own,
    ~0.2 ms): ``floats`` as float64 with nulls as NaN, ``counts`` with nulls as 0, ``exprs``
    as they evaluate."""
    out = frame.select(*(pl.col(c).cast(pl.Float64) for c in floats),
                       *(pl.col(c).fill_null(0) for c in counts), *exprs)
    return {c: out[c].to_numpy() for c in out.columns}


def good_mask(requests: pl.DataFrame, limits_ms: Mapping[str, float]) -> pl.Series:
    """True for requests that completed and meet every limit (``ttft``, ``tpot``, ``e2el``,
    ``pause`` in ms); needs :func:`with_latencies` columns."""
    a = _arrays(requests, floats=("ttft_s", "tpot_s", "e2el_s", "max_pause_s"), exprs=(_DONE,))
    return pl.Series("good", good_array(a["_done"], a, limits_ms))


def good_array(done: np.ndarray, lat: Mapping[str, np.ndarray], limits_ms: Mapping[str, float]) -> np.ndarray:
    """:func:`good_mask` over arrays: ``lat`` holds ``ttft_s``, ``tpot_s``, ``e2el_s`` and
    ``max_pause_s`` (NaN where null); a missing TPOT (one token) or pause meets its limit."""
    good = done.copy()
    for name, limit in limits_ms.items():
        s = limit / 1000.0
        if name == mn.TTFT:
            good &= lat["ttft_s"] <= s
        elif name == mn.TPOT:
            tpot = lat["tpot_s"]
            good &= np.isnan(tpot) | (tpot <= s)
        elif name == mn.E2EL:
            good &= lat["e2el_s"] <= s
        elif name == mn.PAUSE:
            pause = lat["max_pause_s"]
            good &= np.isnan(pause) | (pause <= s)
        else:
            raise ValueError(f"unknown SLO {name!r}; valid: ttft, tpot, e2el, pause")
    return good


def measured_window(requests: pl.DataFrame, warmup_s: float, duration_s: float) -> tuple[float, float]:
    """``[warmup_s, end]``: end is the later of ``duration_s`` and the last in-window finish."""
    fin = requests.filter(pl.col("in_window"))["finish_s"].max()
    end = max(duration_s, float(fin)) if fin is not None else duration_s  # type: ignore[arg-type]
    return warmup_s, end


def _stats(values: np.ndarray) -> dict[str, float | None]:
    """Mean, p50/p95/p99 (linear) and max; ``values`` is the caller's own scratch copy: it is
    partitioned in place (after the mean, whose summation order it would change) rather than
    copied again, which on millions of ITL samples is most of the cost."""
    if values.size == 0:
        return {"mean": None, "median": None, "p95": None, "p99": None, "max": None}
    mean = float(values.mean())
    top = float(values.max())
    q = linear_percentiles(values, tuple(_QUANTILES.values()))
    return {"mean": mean, **dict(zip(_QUANTILES, q, strict=True)), "max": top}


def linear_percentiles(values: np.ndarray, qs: Sequence[float]) -> list[float]:
    """``np.percentile(values, 100 * qs, overwrite_input=True)`` (method 'linear'), bit for bit,
    for finite float64 ``values`` (partitioned in place): numpy's general path costs ~80 µs a
    call, and a dashboard redraw makes ~500 of them. Same virtual index ``(n - 1) q``, same
    order statistics, and numpy's lerp (``b - d (1 - t)`` from ``t >= 0.5``, else ``a + d t``)."""
    n = values.size
    picks = []
    for q in qs:
        v = (n - 1) * q
        if v >= n - 1:
            picks.append((n - 1, n - 1, 0.0))
        else:
            lo = math.floor(v)
            picks.append((lo, lo + 1, v - lo))
    values.partition(sorted({i for p in picks for i in p[:2]}))
    out = []
    for lo, hi, t in picks:
        a, b = float(values[lo]), float(values[hi])
        d = b - a
        out.append(b - d * (1 - t) if t >= 0.5 else a + d * t)
    return out


def latency_stats(values_s: np.ndarray, metric: str) -> dict[str, float | None]:
    """``{metric}_ms_{mean,median,p95,p99}`` of samples given in seconds (linear percentiles)."""
    st = _stats(values_s * 1000.0)
    return {mn.latency_col(metric, s): st[s] for s in mn.LATENCY_STATS}


def pause_stats(max_pause_s: np.ndarray) -> dict[str, float | None]:
    """``pause_ms_{p95,p99,max}`` over requests' longest stream pauses."""
    st = _stats(max_pause_s * 1000.0)
    return {mn.pause_col(s): st[s] for s in mn.PAUSE_STATS}


def summarize(
    requests: pl.DataFrame,
    steps: pl.DataFrame,
    itl: pl.DataFrame,
    *,
    segments: Sequence[str],
    slo_ms: Mapping[str, float],
    warmup_s: float,
    duration_s: float,
    replicas: int,
    cost_total_usd: float | None,
    keys: Mapping[str, object],
    queue_log: Sequence[float] | np.ndarray | None = None,
    speculates: bool = True,
) -> pl.DataFrame:
    """One summary row for ``"all"`` and one per segment, columns as in docs/architecture.md.

    ``cost_total_usd`` is the fleet cost over the arrival window (sim.results.cost); fleet-level
    levels and cost repeat on segment rows, cost per good answer is for ``"all"`` only.
    ``queue_log`` (the engine's queue entries and exits) makes ``queue_len_tw`` exact; without
    it (a real run's frames) it comes from the request records. ``speculates``: False for a
    candidate that never drafts (its speculation-off shares are null, not 100 %).
    """
    t0, t1 = measured_window(requests, warmup_s, duration_s)
    _, kv_tw = time_weighted_levels(steps, t0, t1, replicas)
    q_tw = (queue_len_tw(queue_log, t0, t1) if queue_log is not None
            else queue_len_tw_from_requests(requests, t0, t1))
    cols = _Columns(requests, itl, segments, slo_ms)
    from sim.results.spec_off import spec_off_shares

    off = spec_off_shares(steps, t0, t1) if speculates else (None, None)
    rows = []
    for seg in (mn.ALL_SEGMENTS, *segments):
        m, gaps = cols.of(seg)
        row = _segment_row(seg, cols, m, gaps, keys, slo_ms, (t0, t1), q_tw, kv_tw, cost_total_usd)
        row[mn.SPEC_OFF_STEPS], row[mn.SPEC_OFF_TIME] = off  # the fleet's steps: every segment shares them
        rows.append(row)
    schema: dict[str, pl.DataType] = {}
    for key, value in keys.items():
        schema[key] = pl.Int64() if isinstance(value, int) else pl.String()
    schema[mn.SEGMENT] = pl.String()
    for col in mn.METRIC_COLUMNS:
        schema[col] = pl.Int64() if col in mn.COUNT_COLUMNS or col == mn.PREEMPTIONS else pl.Float64()
    return pl.DataFrame(rows, schema=schema, orient="row")


class _Columns:
    """The measured requests' columns and their ITL samples (completed requests only) as numpy
    arrays, cut per segment by a mask (one conversion per run instead of a polars filter per
    segment and column)."""

    def __init__(self, requests: pl.DataFrame, itl: pl.DataFrame, segments: Sequence[str],
                 slo_ms: Mapping[str, float]) -> None:
        self.code = {seg: i for i, seg in enumerate(segments)}  # segments as ints: fast to compare
        counts = ["generated_tokens", "num_drafts", "accepted_tokens", "preemptions", "prompt_tokens"]
        for extra in ("num_spec_steps", "prefix_hit_tokens"):
            if extra in requests.columns:
                counts.append(extra)
        a = _arrays(requests, floats=(*_times(requests), "max_pause_s", *(
            ("scheduled_s",) if "scheduled_s" in requests.columns else ())), counts=counts, exprs=(
            _DONE, pl.col("in_window").fill_null(False), pl.col("id"), pl.col("outcome"),
            pl.col("segment").replace_strict(self.code, default=-1, return_dtype=pl.Int32).alias("_seg"),
            (pl.col(mn.TOO_LONG).fill_null(False) if mn.TOO_LONG in requests.columns
             else pl.repeat(False, requests.height, dtype=pl.Boolean)).alias("_too_long")))
        # latencies keep their nulls (as NaN, dropped per statistic); counts sum as polars does, nulls as 0
        a["ttft_s"], a["tpot_s"], a["e2el_s"] = _latencies(a)
        done = a["_done"]
        a["good"] = good_array(done, a, slo_ms) if slo_ms else np.zeros(len(done), bool)
        a.setdefault("num_spec_steps", a["num_drafts"])
        a.setdefault("prefix_hit_tokens", np.zeros(len(done), np.int64))
        sched = a.get("scheduled_s", a["first_token_s"])
        a["_queried"] = np.where(np.isnan(sched), 0, a["prompt_tokens"])
        w = a["in_window"]
        self.a = {c: v[w] for c, v in a.items()}
        self.outcome = self.a["outcome"]
        self.segment = self.a["_seg"]
        measured_done = done[w]
        self.gap_s, self.gap_segment = _done_gaps(itl, self.a["id"][measured_done], self.segment[measured_done])

    def of(self, seg: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Masks of ``seg``'s requests and ITL samples (None: all of them, also when ``seg``
        holds every one: no copy of millions of samples for a one-segment workload)."""
        if seg == mn.ALL_SEGMENTS:
            return None, None
        code = self.code.get(seg, -2)
        m, g = self.segment == code, self.gap_segment == code
        return (None if m.all() else m), (None if g.all() else g)


def _done_gaps(itl: pl.DataFrame, done: np.ndarray, done_seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ITL samples of the completed measured requests (ids ``done``, segment codes ``done_seg``),
    in sample order, with their segment codes: a lookup table over request ids when they are
    small integers (a GPU hour has millions of samples; a hash join costs several times more),
    else an inner join."""
    ids = itl["id"].to_numpy()
    top = int(max(ids.max(initial=-1), done.max(initial=-1)))
    if ids.size and min(ids.min(), done.min(initial=0)) >= 0 and top < 4 * (len(done) + len(ids)):
        table = np.full(top + 1, -2, np.int32)  # -2: not a completed measured request
        table[done] = done_seg
        seg = table[ids]
        keep = seg != -2
        gaps = itl["gap_s"].to_numpy()  # a read-only view when it has no nulls: never written
        if keep.all():  # every sample kept (no warm-up, nothing unfinished): no copies
            return gaps, seg
        return gaps[keep], seg[keep]
    done_ids = pl.DataFrame({"id": done, "_seg": done_seg}, schema={"id": itl.schema["id"], "_seg": pl.Int32})
    joined = itl.join(done_ids, on="id", how="inner", maintain_order="left")
    return joined["gap_s"].to_numpy(), joined["_seg"].to_numpy()


def _segment_row(seg: str, cols: _Columns, m: np.ndarray | None, gaps: np.ndarray | None,
                 keys: Mapping[str, object], slo_ms: Mapping[str, float], span: tuple[float, float],
                 q_tw: float | None, kv_tw: float | None, cost_total_usd: float | None) -> dict[str, object]:
    """The summary row of one segment (or ``"all"``): its measured requests are ``cols`` under
    mask ``m``, its ITL samples under ``gaps`` (None: no mask); rates are per second of the
    measured window ``span`` (:func:`measured_window`), which the row states."""
    a = cols.a
    window = span[1] - span[0]
    outcome = cols.outcome if m is None else cols.outcome[m]

    def col(name: str, mask: np.ndarray | None = None) -> np.ndarray:
        v = a[name] if m is None else a[name][m]
        return v if mask is None else v[mask]

    def present(v: np.ndarray) -> np.ndarray:  # the nulls polars hands to numpy as NaN
        return v[~np.isnan(v)]

    row: dict[str, object] = dict(keys)
    row[mn.SEGMENT] = seg
    done = outcome == mn.COMPLETED
    for metric, name in ((mn.TTFT, "ttft_s"), (mn.TPOT, "tpot_s"), (mn.E2EL, "e2el_s")):
        row.update(latency_stats(present(col(name, done)), metric))
    row.update(latency_stats(cols.gap_s if gaps is None else cols.gap_s[gaps], mn.ITL))
    row.update(pause_stats(present(col("max_pause_s", done))))
    n_done = int(done.sum())
    row[mn.COMPLETED] = n_done
    row[mn.REJECTED] = int((outcome == mn.REJECTED).sum())
    row[mn.REJECTED_TOO_LONG] = int(col("_too_long").sum())
    row[mn.TIMED_OUT] = int((outcome == mn.TIMED_OUT).sum())
    n_req = len(outcome)
    n_good = int(col("good").sum())
    row[mn.REQUEST_THROUGHPUT] = n_done / window if window > 0 else None
    row[mn.OUTPUT_THROUGHPUT] = (
        float(int(col("generated_tokens", done).sum())) / window if window > 0 else None
    )
    row[mn.REQUEST_GOODPUT] = n_good / window if slo_ms and window > 0 else None
    row[mn.SLO_ATTAINMENT] = n_good / n_req if slo_ms and n_req else None
    drafts = int(col("num_drafts").sum())
    accepted = int(col("accepted_tokens").sum())
    row[mn.MEAN_ACCEPTANCE_LENGTH] = 1.0 + accepted / drafts if drafts else None
    spec_steps = int(col("num_spec_steps").sum())
    row[mn.TOKENS_PER_STEP] = 1.0 + accepted / spec_steps if spec_steps else None
    row[mn.PREEMPTIONS] = int(col("preemptions").sum())
    row[mn.QUEUE_LEN_TW] = q_tw
    row[mn.KV_USE_TW] = kv_tw
    saved = int(col("prefix_hit_tokens").sum())
    queried = int(col("_queried").sum())
    row[mn.PREFIX_HIT_RATE] = saved / queried if queried else None
    row[mn.PREFILL_SAVED] = float(saved)
    row[mn.COST_TOTAL_USD] = cost_total_usd
    row[mn.WINDOW_START_S], row[mn.WINDOW_END_S] = span
    row[mn.COST_PER_GOOD_ANSWER_USD] = (
        cost_per_good_answer(cost_total_usd, n_good)
        if seg == mn.ALL_SEGMENTS and slo_ms
        else None
    )
    return row
