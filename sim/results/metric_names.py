"""The one place metric and column names live (vLLM's names: ttft, tpot, itl, e2el, goodput).

Everything that reads or writes a summary frame (report, dashboard, capacity search, sweeps)
uses these constants, so a rename happens here or nowhere.
"""

from __future__ import annotations

TTFT = "ttft"
"""Time to first token: first burst minus arrival."""
TPOT = "tpot"
"""Time per output token after the first: (e2el - ttft) / (output tokens - 1)."""
ITL = "itl"
"""Inter-token latency as the user sees it: the gap between consecutive bursts."""
E2EL = "e2el"
"""End-to-end latency: finish minus arrival."""
PAUSE = "pause"
"""Stream pause: a request's longest gap between two bursts."""

LATENCY_METRICS: tuple[str, ...] = (TTFT, TPOT, ITL, E2EL)
LATENCY_STATS: tuple[str, ...] = ("mean", "median", "p95", "p99")
PAUSE_STATS: tuple[str, ...] = ("p95", "p99", "max")

CANDIDATE = "candidate"
SEGMENT = "segment"
SEED = "seed"
N_SEEDS = "n_seeds"
ALL_SEGMENTS = "all"

COMPLETED = "completed"
REJECTED = "rejected"
TIMED_OUT = "timed_out"
UNFINISHED = "unfinished"
TOO_LONG = "too_long"
"""Request column: rejected because prompt + output exceeds ``max_model_len`` (outcome "rejected")."""
REJECTED_TOO_LONG = "rejected_too_long"
"""Summary count: the rejected requests that were too long for the model (part of ``rejected``)."""
OUTCOMES: tuple[str, ...] = (COMPLETED, REJECTED, TIMED_OUT, UNFINISHED)

REQUEST_THROUGHPUT = "request_throughput"
OUTPUT_THROUGHPUT = "output_throughput"
REQUEST_GOODPUT = "request_goodput"
SLO_ATTAINMENT = "slo_attainment"
MEAN_ACCEPTANCE_LENGTH = "mean_acceptance_length"
"""vLLM's: 1 + accepted / drafts, over steps that had a proposal."""
TOKENS_PER_STEP = "mean_acceptance_length_per_step"
"""1 + accepted / verification steps, steps without a proposal (n-gram no match) included."""
PREEMPTIONS = "preemptions"
QUEUE_LEN_TW = "queue_len_tw"
KV_USE_TW = "kv_use_tw"
COST_TOTAL_USD = "cost_total_usd"
COST_PER_GOOD_ANSWER_USD = "cost_per_good_answer_usd"
PREFIX_HIT_RATE = "prefix_cache_hit_rate"
"""Prompt tokens found in the prefix cache / prompt tokens, over requests scheduled (first
admission; 0 with caching off). vLLM's ``prefix_cache_hits / prefix_cache_queries``."""
PREFILL_SAVED = "prefill_tokens_saved"
"""Prompt tokens not prefilled thanks to the prefix cache (first admissions)."""
SPEC_OFF_STEPS = "spec_off_step_share"
"""Share of decoding steps (a decode batch above zero) run with k = 0: how often the policy
turned speculation off (fixed k: 0; the baseline: null, it never speculates)."""
SPEC_OFF_TIME = "spec_off_time_share"
"""The same share weighted by each step's duration: the share of decoding time without
speculation."""

CI_SUFFIX = "_ci95"


def latency_col(metric: str, stat: str) -> str:
    """``ttft`` + ``p99`` -> ``ttft_ms_p99``."""
    return f"{metric}_ms_{stat}"


def pause_col(stat: str) -> str:
    """``p99`` -> ``pause_ms_p99``."""
    return f"{PAUSE}_ms_{stat}"


def ci_col(col: str) -> str:
    """Half-width of the 95% confidence interval of ``col`` over seeds."""
    return f"{col}{CI_SUFFIX}"


LATENCY_COLUMNS: tuple[str, ...] = tuple(
    latency_col(m, s) for m in LATENCY_METRICS for s in LATENCY_STATS
) + tuple(pause_col(s) for s in PAUSE_STATS)

COUNT_COLUMNS: tuple[str, ...] = (COMPLETED, REJECTED, REJECTED_TOO_LONG, TIMED_OUT)

RATE_COLUMNS: tuple[str, ...] = (
    REQUEST_THROUGHPUT,
    OUTPUT_THROUGHPUT,
    REQUEST_GOODPUT,
    SLO_ATTAINMENT,
    MEAN_ACCEPTANCE_LENGTH,
    TOKENS_PER_STEP,
    PREEMPTIONS,
    QUEUE_LEN_TW,
    KV_USE_TW,
    COST_TOTAL_USD,
    COST_PER_GOOD_ANSWER_USD,
    PREFIX_HIT_RATE,
    PREFILL_SAVED,
    SPEC_OFF_STEPS,
    SPEC_OFF_TIME,
)

WINDOW_START_S = "window_start_s"
"""Start of the measured window the rates are per second of: the end of warm-up."""
WINDOW_END_S = "window_end_s"
"""Its end: the later of ``duration_s`` and the last measured request's end (drain included)."""
WINDOW_COLUMNS: tuple[str, ...] = (WINDOW_START_S, WINDOW_END_S)

METRIC_COLUMNS: tuple[str, ...] = LATENCY_COLUMNS + COUNT_COLUMNS + RATE_COLUMNS + WINDOW_COLUMNS
"""Every numeric metric of a summary row, in column order."""

SHARE_COLUMNS: tuple[str, ...] = (SLO_ATTAINMENT, KV_USE_TW, PREFIX_HIT_RATE, SPEC_OFF_STEPS, SPEC_OFF_TIME)
"""Metrics that are shares of a whole: their range is [0, 1]."""


def metric_range(col: str) -> tuple[float, float]:
    """The values ``col`` can take: shares [0, 1]; acceptance lengths at least 1 (a pass commits
    its verified token); everything else at least 0. An interval is clipped to it
    (``sim.results.intervals.clip_interval``)."""
    base = col[: -len(CI_SUFFIX)] if col.endswith(CI_SUFFIX) else col
    if base in SHARE_COLUMNS:
        return 0.0, 1.0
    if base in (MEAN_ACCEPTANCE_LENGTH, TOKENS_PER_STEP):
        return 1.0, float("inf")
    return 0.0, float("inf")
