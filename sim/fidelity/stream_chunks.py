"""How a server grouped generated tokens into streamed chunks, read from a `vllm bench serve`
file, and the simulator's token stream grouped the same way, so that TTFT, TPOT, ITL and pauses
are compared as the benchmark client measured them.

What the client measures (vLLM, ``vllm/benchmarks/lib/endpoint_request_func.py``,
``async_request_openai_completions`` / ``..._chat_completions``): every SSE message that carries
a choice is timestamped; the first gives ``ttft``, each later one appends ``now - previous`` to
``itl``; ``latency`` is the last such message. So one ITL sample is the gap between two
*chunks*, however many tokens a chunk carries. ``output_lens`` is the server's
``completion_tokens`` and TPOT is ``(latency - ttft) / (output_len - 1)`` per request
(``vllm/benchmarks/serve.py``, ``calculate_metrics``), whatever the chunking.

How vLLM chunks (``--stream-interval c``; ``vllm/v1/engine/output_processor.py``,
``RequestState.make_request_output``): the first token is sent alone, then whenever ``c`` or
more tokens have accumulated since the last send, and at the finish. A request of ``n`` tokens
then has ``ceil((n - 1) / c)`` ITL entries; TTFT, TPOT and E2EL are those of a one-token stream
and only ITL and pauses change (by about ``c`` times). A proxy that buffers from the start
(``fixed`` below: the first chunk holds ``c`` tokens too) has ``ceil(n / c) - 1`` entries and
moves TTFT late by ``c - 1`` tokens, which also shrinks TPOT's numerator but not its
denominator: short requests' TPOT comes out low. Comparing the simulator's one-token stream
with either gives false errors (about ``1/c - 1`` on ITL), so the simulator's stream is grouped
by the detected rule before any number is taken from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from sim.results import metric_names as mn

Layout = Literal["first-alone", "fixed"]
"""``first-alone``: vLLM's ``--stream-interval`` (first token alone, then every ``c``);
``fixed``: every chunk holds ``c`` tokens from the first on (a buffering proxy)."""

REGULAR_SHARE = 0.95
"""Share of requests whose ITL count one (layout, c) must reproduce exactly to be called the
server's rule; below it the chunks are irregular (merged deltas, speculative steps) and the
mean tokens per gap is used."""


@dataclass(frozen=True, slots=True)
class StreamChunking:
    """The chunk rule a `vllm bench serve` file shows, and how sure that reading is."""

    tokens: int
    """Tokens per chunk ``c`` (1: one token per chunk, the simulator's own stream)."""
    layout: Layout
    requests: int
    """Requests given with at least two tokens: the ones that show a rule."""
    matched: int
    """Of those, the requests whose ITL count the rule reproduces exactly."""
    mean_tokens_per_gap: float
    """``sum(n - 1) / sum(len(itl))`` over those requests (the denominator at least 1)."""
    tokens_max: int = 0
    """Largest interval that reproduces as many requests as ``tokens`` (the counts cannot tell
    them apart: all outputs 128 tokens long fit 16, 17 and 18 alike); 0: the same as ``tokens``."""

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.requests < 0 or not 0 <= self.matched <= self.requests:
            raise ValueError(f"inconsistent chunking {self!r}")

    @property
    def regular(self) -> bool:
        return self.requests > 0 and self.matched >= REGULAR_SHARE * self.requests

    @property
    def one_token(self) -> bool:
        """True when grouping would change nothing: one token per chunk, first alone."""
        return self.tokens == 1 and self.layout == "first-alone"

    def basis(self) -> str:
        """The line the table prints: which basis ITL and pauses were compared on, and why."""
        seen = (f"detected from {self.requests} requests: {self.matched} match exactly, "
                f"{self.mean_tokens_per_gap:.3g} tokens per ITL gap on average")
        if self.requests == 0:
            return ("ITL per token: no successful request with two or more tokens shows how the "
                    "server chunked its stream")
        if self.one_token:
            return f"ITL per token (one token per streamed chunk, {seen})"
        rule = ("the first token alone, then every "
                f"{self.tokens} as vLLM's --stream-interval {self.tokens} sends them"
                if self.layout == "first-alone" else
                f"every chunk {self.tokens} tokens from the first on (buffered from the start)")
        if not self.regular:
            return (f"ITL per chunk of ~{self.mean_tokens_per_gap:.3g} tokens (irregular chunks: no single "
                    f"interval explains every request; {seen}); the simulator's stream grouped to the same "
                    "mean chunk")
        if self.tokens_max:
            seen += (f"; intervals {self.tokens}–{self.tokens_max} fit as many requests, the smallest "
                     "is used")
        return (f"ITL per chunk of ~{self.tokens} tokens ({seen}); the simulator's tokens grouped the "
                f"same way: {rule}")


def itl_entries(n: np.ndarray, c: int, layout: Layout) -> np.ndarray:
    """ITL entries a request of ``n`` tokens has under the rule (0 for ``n <= 1``)."""
    n = np.asarray(n, dtype=np.int64)
    if layout == "first-alone":
        out = -((1 - n) // c)  # ceil((n - 1) / c)
    else:
        out = -((-n) // c) - 1  # ceil(n / c) - 1
    return np.maximum(out, 0)


def detect(output_lens: Sequence[int], itl_counts: Sequence[int]) -> StreamChunking:
    """The (layout, tokens per chunk) that reproduces the most requests' ITL counts.

    Only requests with ``n >= 2`` tokens say anything (one with no ITL entry got its whole
    output in one chunk). Candidate
    intervals are each request's smallest consistent one under either layout; ties go to the
    first-alone layout (vLLM's own) and then to the smaller interval. With fewer than
    ``REGULAR_SHARE`` matching, the chunks are irregular and ``tokens`` is their mean, rounded.
    """
    n = np.asarray(output_lens, dtype=np.int64)
    m = np.asarray(itl_counts, dtype=np.int64)
    keep = n >= 2
    n, m = n[keep], m[keep]
    if n.size == 0:
        return StreamChunking(1, "first-alone", 0, 0, 1.0)
    mean = float((n - 1).sum() / max(int(m.sum()), 1))
    lower_a = -((1 - n[m >= 1]) // m[m >= 1])  # smallest c with ceil((n-1)/c) <= m
    lower_b = -((-n) // (m + 1))  # smallest c with ceil(n/c) - 1 <= m
    values, counts = np.unique(np.concatenate([lower_a, lower_b, [1]]), return_counts=True)
    cands = values[np.argsort(-counts, kind="stable")[:64]]
    best: tuple[int, int, Layout] = (-1, 0, "first-alone")
    for layout in ("first-alone", "fixed"):
        for c in sorted(int(v) for v in cands if v >= 1):
            hits = int((itl_entries(n, c, layout) == m).sum())  # type: ignore[arg-type]
            if hits > best[0]:
                best = (hits, c, layout)  # type: ignore[assignment]
    hits, c, layout = best
    if hits < REGULAR_SHARE * n.size:
        return StreamChunking(max(1, round(mean)), "first-alone", int(n.size), hits, mean)
    top = c
    while top < min(int(n.max()), 4 * c + 16) and int((itl_entries(n, top + 1, layout) == m).sum()) == hits:
        top += 1
    return StreamChunking(c, layout, int(n.size), hits, mean, top if top > c else 0)


@dataclass(frozen=True, slots=True)
class ClientView:
    """The simulator's completed requests as the benchmark client would have timed them."""

    requests: pl.DataFrame
    """``id``, ``output_tokens``, ``ttft_s``, ``tpot_s``, ``e2el_s``, ``num_chunks``,
    ``max_pause_s`` (vLLM's columns, as ``VllmBenchResult.requests_frame`` has them)."""
    itl_s: np.ndarray
    """Every gap between consecutive chunks, seconds."""
    approximate: int
    """Requests whose steps carried several tokens each (speculation): the simulator keeps no
    per-step token count, so each later step is taken to carry the request's mean."""


def _sends(per_step: np.ndarray, c: float, layout: Layout) -> np.ndarray:
    """Indices of the steps after which a chunk is sent (``per_step``: tokens of each step)."""
    sends: list[int] = []
    acc = 0.0
    last = len(per_step) - 1
    for i, t in enumerate(per_step):
        acc += float(t)
        first = layout == "first-alone" and not sends
        if first or acc >= c - 1e-9 or i == last:
            sends.append(i)
            acc = 0.0
    return np.asarray(sends, dtype=np.int64)


def client_view(requests: pl.DataFrame, itl: pl.DataFrame, tokens: float, layout: Layout,
                by_steps: bool = False) -> ClientView:
    """Group each completed request's steps into chunks of ``tokens`` (``layout``) and time them
    as the client does: TTFT at the first chunk, E2EL at the last, TPOT from the two, ITL and
    pauses between chunks. Overhead outside the engine (``overhead_s``) moves TTFT and E2EL
    alike. ``by_steps``: ``tokens`` counts engine steps instead (a speculative run's step
    carries several tokens; irregular chunks are matched by whole steps)."""
    one_token = tokens <= 1 and layout == "first-alone"
    done = requests.filter(pl.col("outcome") == mn.COMPLETED).sort("id")
    gaps = itl.filter(pl.col("id").is_in(done["id"].implode())).sort("id", maintain_order=True)
    by_id = {k[0]: g["gap_s"].to_numpy() for k, g in gaps.group_by(["id"], maintain_order=True)}
    has_overhead = "overhead_s" in done.columns
    cols: dict[str, list] = {k: [] for k in ("id", "output_tokens", "ttft_s", "tpot_s", "e2el_s",
                                             "num_chunks", "max_pause_s")}
    all_gaps: list[np.ndarray] = []
    approx = 0
    for r in done.iter_rows(named=True):
        g = by_id.get(r["id"], np.empty(0))
        times = r["first_token_s"] + np.concatenate([[0.0], np.cumsum(g)])
        gen = int(r["generated_tokens"])
        steps = len(times)
        if by_steps or steps == gen or steps == 1:
            per_step = np.ones(steps)
        else:  # speculative steps: first one token, later ones the mean (no per-step count kept)
            approx += 1
            per_step = np.full(steps, (gen - 1) / (steps - 1))
            per_step[0] = 1.0
        t = times if one_token else times[_sends(per_step, tokens, layout)]
        shift = r["overhead_s"] if has_overhead and r["overhead_s"] is not None else 0.0
        ttft = float(t[0] - r["arrival_s"] + shift)
        e2el = float(t[-1] - r["arrival_s"] + shift)
        d = np.diff(t)
        all_gaps.append(d)
        cols["id"].append(r["id"])
        cols["output_tokens"].append(gen)
        cols["ttft_s"].append(ttft)
        cols["e2el_s"].append(e2el)
        cols["tpot_s"].append((e2el - ttft) / (gen - 1) if gen > 1 else None)
        cols["num_chunks"].append(len(t))
        cols["max_pause_s"].append(float(d.max()) if d.size else 0.0)
    frame = pl.DataFrame(cols, schema={"id": pl.Int64, "output_tokens": pl.Int64, "ttft_s": pl.Float64,
                                       "tpot_s": pl.Float64, "e2el_s": pl.Float64, "num_chunks": pl.Int64,
                                       "max_pause_s": pl.Float64})
    flat = np.concatenate(all_gaps) if all_gaps else np.empty(0)
    return ClientView(frame, flat, approx)
