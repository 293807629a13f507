"""Open-loop request generation: when requests arrive, which segment they belong to, how long.

Open loop means arrival times never depend on how the fleet is doing: they are fixed before the
simulation starts. Randomness comes from a caller-supplied ``numpy.random.SeedSequence``; this
module derives fixed, named child streams from it (arrivals, segments, and per segment the prompt
and output lengths) without mutating it, so changing a length distribution never moves an
arrival and changing one segment's lengths never changes another's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.scenario import RunConfig, Scenario
from sim.contracts.trace import Trace, read_trace
from sim.contracts.work_limits import check_work, workload_size
from sim.contracts.workload_config import PiecewiseConfig, WorkloadConfig
from sim.workload import conversations

# child-stream indices under the workload's SeedSequence (never reorder: results depend on it)
_ARRIVALS, _SEGMENTS, _LENGTHS, _DOCUMENTS, _CONVERSATIONS = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the client sends it (nothing about how it was served)."""

    id: int
    """0, 1, 2, … in arrival order within one generated workload."""
    arrival_s: float
    """Arrival time in simulated seconds, in [0, run.duration_s)."""
    prompt_tokens: int
    """Prompt length (≥ 1)."""
    output_tokens: int
    """Tokens the request will generate if served to completion (≥ 1)."""
    segment: str
    """Name of its workload segment."""
    timeout_s: float | None
    """The client abandons it this long after arrival; None: never."""
    prefix_spans: tuple[tuple[int, int], ...] = ()
    """Its prompt's leading spans as ``(id, tokens)``: equal ids after equal ids = the same
    tokens (a trace's ``hash_ids``, 512 tokens each; a segment's system prompt; a retrieved
    document); what prefix caching can reuse (``sim.workload.prefix_blocks``). The prompt's end
    may cut the last span."""


def child_stream(seq: np.random.SeedSequence, *key: int) -> np.random.Generator:
    """A generator on a fixed named child of ``seq`` (same key → same stream), without
    advancing ``seq``'s spawn counter the way ``seq.spawn`` would."""
    child = np.random.SeedSequence(
        entropy=seq.entropy, spawn_key=(*seq.spawn_key, *key), pool_size=seq.pool_size
    )
    return np.random.default_rng(child)


def _as_seedseq(rng: np.random.SeedSequence | int) -> np.random.SeedSequence:
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if isinstance(rng, int | np.integer) and not isinstance(rng, bool) and rng >= 0:
        return np.random.SeedSequence(int(rng))
    raise TypeError(
        "generate_requests needs a numpy.random.SeedSequence (or a non-negative int seed), "
        f"got {type(rng).__name__}"
    )


# --------------------------------------------------------------------------------------------
# arrival processes (pure functions of a Generator; exposed for tests and the dashboard)


def renewal_arrivals(
    rng: np.random.Generator, duration_s: float, rate: float, burstiness: float = 1.0
) -> np.ndarray:
    """Arrival times in [0, duration_s) of a renewal process with gamma gaps.

    Mean gap 1/rate; shape = burstiness (1 = exponential gaps = Poisson), so the squared
    coefficient of variation of gaps is 1/burstiness. Gaps are uncapped. The first arrival is
    one gap after 0, like a Poisson process started at 0.
    """
    if not (rate > 0 and burstiness > 0 and duration_s > 0):
        raise ValueError("rate, burstiness and duration_s must be > 0")
    expected = rate * duration_s
    chunk = int(expected + 6.0 * np.sqrt(expected / burstiness) + 16)
    total = 0.0
    parts: list[np.ndarray] = []
    while total < duration_s:
        if burstiness == 1.0:
            gaps = rng.exponential(1.0 / rate, size=chunk)
        else:
            gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=chunk)
        times = total + np.cumsum(gaps)
        parts.append(times)
        total = float(times[-1])
        chunk = max(16, chunk // 4)
    t = np.concatenate(parts)
    return t[t < duration_s]


def piecewise_arrivals(
    rng: np.random.Generator, duration_s: float, pw: PiecewiseConfig
) -> np.ndarray:
    """Arrival times in [0, duration_s) of a non-homogeneous Poisson process by thinning
    (Lewis–Shedler): candidates at the peak rate, each kept with probability rate(t)/peak."""
    peak = pw.max_rate()
    cand = renewal_arrivals(rng, duration_s, peak, 1.0)
    keep = rng.random(len(cand)) * peak < pw.rate_at(cand)
    return cand[keep]


def trace_arrivals(
    trace: Trace, duration_s: float, start_s: float, window_s: float, rate_scale: float
) -> np.ndarray:
    """Indices of the trace rows replayed in a run of ``duration_s`` simulated seconds.

    Rows with offset in [start_s, start_s + window_s) are replayed at
    (offset − start_s) / rate_scale; those landing at or after ``duration_s`` are dropped.
    """
    off = trace.offsets_s
    lo = np.searchsorted(off, start_s, side="left")
    hi = np.searchsorted(off, start_s + window_s, side="left")
    idx = np.arange(lo, hi)
    times = (off[idx] - start_s) / rate_scale
    return idx[times < duration_s]


# --------------------------------------------------------------------------------------------


def generate_requests(
    workload: WorkloadConfig | Scenario,
    run: RunConfig | None = None,
    rng: np.random.SeedSequence | int = 0,
    trace: Trace | None = None,
) -> list[RequestSpec]:
    """All requests of one replication, in arrival order, ids 0..n−1.

    ``workload`` may be a whole Scenario (then ``run`` defaults to its [run]). ``rng`` is the
    SeedSequence of this replication's workload (e.g. ``SeedSequence(seed).spawn(2)[0]``, the
    other child driving acceptance); an int is taken as ``SeedSequence(int)``. ``trace`` lets a
    caller that already read the CSV pass it (it is read from ``workload.trace`` otherwise).
    """
    if isinstance(workload, Scenario):
        run = run or workload.run
        workload = workload.workload
    if run is None:
        raise TypeError("generate_requests needs the run config (duration_s) or a Scenario")
    seq = _as_seedseq(rng)
    arr, rows, trace = _arrays_and_rows(workload, run, seq, trace)
    names = workload.segment_names
    seg_idx = arr["segment"].tolist()
    seg_names = [names[i] for i in seg_idx]
    timeout = workload.client_timeout_s
    specs = [
        RequestSpec(i, t, p, o, s, timeout)
        for i, (t, p, o, s) in enumerate(
            zip(
                arr["arrival_s"].tolist(),
                arr["prompt_tokens"].tolist(),
                arr["output_tokens"].tolist(),
                seg_names,
                strict=True,
            )
        )
    ]
    return _with_prefixes(specs, workload, seq, arr, rows, trace)


def segment_spans(workload: WorkloadConfig, segment: np.ndarray,
                  doc_rng: Callable[[int], np.random.Generator]) -> list[tuple[tuple[int, int], ...]]:
    """Each request's shared spans from its segment: the system prompt, then a retrieved document
    drawn from ``doc_rng(segment index)`` (popular ones more often). Segment spans get negative
    ids, one range of 10**7 a segment, so they never meet a trace's."""
    segs = workload.segments
    spans: list[tuple[tuple[int, int], ...]] = [() for _ in range(len(segment))]
    for g, seg in enumerate(segs):
        mine = np.flatnonzero(segment == g)
        head = ((-1 - g, seg.shared_prefix_tokens),) if seg.shared_prefix_tokens else ()
        docs = seg.documents
        if docs is None:
            for i in mine.tolist():
                spans[i] = head
            continue
        drawn = doc_rng(g).choice(docs.count, size=len(mine), p=docs.probabilities())
        base = -1 - len(segs) - g * 10_000_000  # below every system prompt's id, one range a segment
        for i, d in zip(mine.tolist(), drawn.tolist(), strict=True):
            spans[i] = (*head, (base - d, docs.tokens))
    return spans


def _with_prefixes(specs: list[RequestSpec], workload: WorkloadConfig, seq: np.random.SeedSequence,
                   arr: dict[str, np.ndarray], rows: np.ndarray | None, trace: Trace | None) -> list[RequestSpec]:
    """The requests with what their prompts share: a trace's ``hash_ids`` when it has them,
    else each segment's system prompt, retrieved document and conversation history. Segment
    spans get negative ids, so they never meet a trace's; documents are drawn from their own
    child stream per segment (the same for every candidate of a seed, and changing one
    segment's documents moves nothing else)."""
    segment = arr["segment"]
    if rows is not None and trace is not None and trace.hash_ids is not None:
        ids, offs = trace.hash_ids.tolist(), trace.hash_offsets
        per = trace.hash_block_tokens
        assert offs is not None and per is not None
        return [replace(s, prefix_spans=tuple((h, per) for h in ids[offs[r]:offs[r + 1]]))
                for s, r in zip(specs, rows.tolist(), strict=True)]
    segs = workload.segments
    if not any(seg.shared_prefix_tokens or seg.documents or seg.conversation for seg in segs):
        return specs
    spans = segment_spans(workload, segment, lambda g: child_stream(seq, _DOCUMENTS, g))
    if "conversation" in arr:  # below every document's id (one range of 10**7 a segment)
        users = [seg.conversation.user_tokens if seg.conversation else 0 for seg in segs]
        spans = conversations.turn_spans(spans, arr["prompt_tokens"], arr["output_tokens"],
                                         arr["conversation"], users, segment,
                                         -2 - len(segs) - len(segs) * 10_000_000)
    return [replace(s, prefix_spans=sp) if sp else s for s, sp in zip(specs, spans, strict=True)]


def generate_arrays(
    workload: WorkloadConfig,
    run: RunConfig,
    seq: np.random.SeedSequence,
    trace: Trace | None = None,
) -> dict[str, np.ndarray]:
    """The same workload as ``generate_requests`` as columns (arrival_s float64, segment index,
    prompt_tokens and output_tokens int64; with conversations also ``conversation`` and
    ``turn``, see ``sim.workload.conversations``), for vectorised consumers and plots."""
    return _arrays_and_rows(workload, run, seq, trace)[0]


def _arrays_and_rows(
    workload: WorkloadConfig,
    run: RunConfig,
    seq: np.random.SeedSequence,
    trace: Trace | None,
) -> tuple[dict[str, np.ndarray], np.ndarray | None, Trace | None]:
    """``generate_arrays``'s columns, and the trace rows replayed (and the trace) if any."""
    duration = run.duration_s
    if workload.arrival == "concurrency":
        raise SpecplanError("workload.arrival \"concurrency\": closed-loop clients send requests "
                            "during the run (sim.model.drivers.clients); there is no arrival schedule")
    if workload.arrival != "trace":  # refuse before allocating (a trace is bounded by its file)
        check_work(*workload_size(workload, run), 1, "scenario")
    arrivals_rng = child_stream(seq, _ARRIVALS)
    rows: np.ndarray | None = None
    if workload.arrival in ("poisson", "gamma"):
        assert workload.rate is not None
        times = renewal_arrivals(arrivals_rng, duration, workload.rate, workload.burstiness)
    elif workload.arrival == "piecewise":
        assert workload.piecewise is not None
        times = piecewise_arrivals(arrivals_rng, duration, workload.piecewise)
    else:
        tc = workload.trace
        assert tc is not None
        if trace is None:
            trace = read_trace(tc)
        window = tc.effective_window_s(duration)
        rows = trace_arrivals(trace, duration, tc.start_s, window, tc.rate_scale)
        times = (trace.offsets_s[rows] - tc.start_s) / tc.rate_scale
        if len(rows) == 0:  # the hint names the field that emptied the window
            how = ("lower workload.trace.start_s" if tc.start_s >= trace.span_s else
                   "widen workload.trace.window_s" if tc.window_s is not None else
                   f"widen workload.trace.window_s (default run.duration_s × rate_scale {tc.rate_scale:g})")
            raise SpecplanError(
                f"{trace.path}: no trace rows in the window [{tc.start_s}, {tc.start_s + window}) s "
                f"of a trace spanning {trace.span_s:.1f} s; {how}"
            )
    n = len(times)
    segment = child_stream(seq, _SEGMENTS).choice(
        len(workload.segments), size=n, p=workload.shares
    ).astype(np.int64)
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    if rows is not None:
        assert trace is not None
        # a 0-token row is sent as 1 token (vLLM refuses empty prompts and max_tokens 0); the
        # trace's notes say how many (sim/contracts/trace_formats/read_notes.py)
        prompt[:] = np.maximum(trace.prompt_tokens[rows], 1)
        output[:] = np.maximum(trace.output_tokens[rows], 1)
    else:
        for i, seg in enumerate(workload.segments):
            mask = segment == i
            m = int(mask.sum())
            assert seg.prompt_tokens is not None and seg.output_tokens is not None
            prompt[mask] = seg.prompt_tokens.sample(child_stream(seq, _LENGTHS, i, 0), m)
            output[mask] = seg.output_tokens.sample(child_stream(seq, _LENGTHS, i, 1), m)
    arr = {
        "arrival_s": np.asarray(times, dtype=np.float64),
        "segment": segment,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }
    if any(seg.conversation for seg in workload.segments):
        arr = conversations.with_turns(arr, workload.segments, duration,
                                       lambda g: child_stream(seq, _CONVERSATIONS, g))
    return arr, rows, trace
