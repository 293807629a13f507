"""How much work a scenario asks for, estimated before any run: requests × the steps each takes
part in, refused up front past the work limit (``SPECPLAN_MAX_REQUEST_STEPS``), so a typo in a
rate or a duration fails in one line instead of running for hours."""

from __future__ import annotations

import math
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.input_limits import DEFAULT_MAX_REQUEST_STEPS, MAX_REQUESTS_PER_RUN, env_limit


def max_request_steps() -> int:
    """The work limit: ``SPECPLAN_MAX_REQUEST_STEPS`` or ``DEFAULT_MAX_REQUEST_STEPS``."""
    value = env_limit("SPECPLAN_MAX_REQUEST_STEPS")
    return DEFAULT_MAX_REQUEST_STEPS if value is None else value


def mean_length(dist: Any) -> float:
    """Mean of a LengthDist (lognormal: before clipping at min, clipped at max) for estimates."""
    try:
        if dist.dist == "fixed":
            return float(dist.value)
        if dist.dist == "uniform":
            return (float(dist.min) + float(dist.max)) / 2.0
        if dist.dist == "empirical":
            return sum(dist.values) / len(dist.values)
        m = float(dist.median) * math.exp(min(float(dist.sigma) ** 2 / 2.0, 700.0))
        return min(m, float(dist.max)) if dist.max is not None else m
    except (OverflowError, TypeError, ValueError, ZeroDivisionError):
        return math.inf


def check_work(expected_requests: float, steps_per_request: float, runs: int, origin: object) -> None:
    """Refuse up front work that would clearly not finish: more than ``max_request_steps()``
    simulated request-steps (a request's output tokens, each one step it takes part in) over
    all runs, or more than ``MAX_REQUESTS_PER_RUN`` requests held in memory in one run."""
    limit = max_request_steps()
    total = expected_requests * max(steps_per_request, 1.0) * max(runs, 1)
    if not math.isfinite(expected_requests) or expected_requests > MAX_REQUESTS_PER_RUN:
        raise SpecplanError(
            f"{origin}: about {expected_requests:.3g} requests per run (rate × duration), over the "
            f"limit of {MAX_REQUESTS_PER_RUN:,}; shorten run.duration_s or lower the rate"
        )
    if not math.isfinite(total) or total > limit:
        raise SpecplanError(
            f"{origin}: about {total:.3g} simulated request-steps ({expected_requests:.3g} requests "
            f"× {steps_per_request:.3g} steps × {runs} runs), over the limit of {limit:,} "
            "(SPECPLAN_MAX_REQUEST_STEPS); shorten run.duration_s, lower the rate, run fewer "
            "seeds/candidates or, with prefix caching, share shorter prompts"
        )


def workload_size(workload: Any, run: Any, trace: Any = None, block_size: int | None = None) -> tuple[float, float]:
    """(expected requests per run, steps per request ≈ mean output tokens + 1) of a workload,
    before any request is generated (a trace: its rows, at most). With ``block_size`` (prefix
    caching on, ``hashed_block_size``) a request also counts its shared prompt blocks: each one is
    hashed before the run and given a cache row, which costs what a step does (a conversation's
    10-million-token history took minutes while its steps took a second)."""
    n, steps = _requests_and_steps(workload, run, trace)
    if block_size is None:
        return n, steps
    if trace is not None:
        shared = float(trace.prompt_tokens.mean()) if trace.hash_ids is not None and len(trace.prompt_tokens) else 0.0
    else:
        try:
            shared = sum(float(share) * _shared_tokens(seg)
                         for share, seg in zip(workload.shares, workload.segments, strict=True))
        except (OverflowError, TypeError):
            shared = math.inf
    return n, steps + shared / block_size


def _shared_tokens(seg: Any) -> float:
    """Mean prompt tokens a segment's requests share (an upper bound): a conversation's whole
    mean prompt (its history is shared), else the system prompt and document, within the prompt."""
    if seg.prompt_tokens is None:
        return 0.0
    prompt = mean_length(seg.prompt_tokens)
    conv = seg.conversation
    if conv is not None:  # turn t's prompt: the first + (t - 1) × (answer + user turn)
        return prompt + (conv.turns - 1) / 2.0 * (mean_length(seg.output_tokens) + conv.user_tokens)
    head = seg.shared_prefix_tokens + (seg.documents.tokens if seg.documents is not None else 0)
    return min(prompt, float(head))


def hashed_block_size(scenario: Any) -> int | None:
    """The block size prompts are hashed in when some candidate caches prefixes, else None."""
    engine = scenario.fleet.engine
    if any(c.prefix_caching_on(engine.prefix_caching) for c in scenario.candidates):
        return int(engine.block_size)
    return None


def _requests_and_steps(workload: Any, run: Any, trace: Any) -> tuple[float, float]:
    duration = float(run.duration_s)
    if workload.arrival in ("poisson", "gamma"):
        n = float(workload.rate) * duration * workload.turns_per_arrival
    elif workload.arrival == "piecewise":
        n = float(workload.piecewise.max_rate()) * duration * workload.turns_per_arrival
    elif workload.arrival == "concurrency":
        n = -1.0  # clients: their count follows from the lengths (below)
    else:
        n = float(len(trace.offsets_s)) if trace is not None else 0.0
        if trace is not None and len(trace.output_tokens):
            return n, float(trace.output_tokens.mean()) + 1.0
        return n, 1.0
    try:
        out = sum(
            float(share) * mean_length(seg.output_tokens)
            for share, seg in zip(workload.shares, workload.segments, strict=True)
            if seg.output_tokens is not None
        )
    except (OverflowError, TypeError):
        out = math.inf
    if n < 0:  # every client busy the whole run at 2 ms a step: more than any GPU serves
        n = float(workload.concurrency) * (1.0 + duration / (float(workload.think_time_s) + 0.002 * (out + 1.0)))
    return n, out + 1.0
