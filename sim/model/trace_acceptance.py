"""A candidate's acceptance from a per-request trace: replayed, or drawn independently.

Why both: replay keeps each request's own sequence of accepted lengths (clustered rejections,
proposal droughts), independent draws use only its per-position rates; running both on the
same trace shows what independence costs. The model built here is an ordinary
:class:`~sim.model.acceptance.AcceptanceModel` (one row per traced request, vLLM counting, with the
request's proposal rate), so notes, precision and per-request bootstrap work as for a profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sim.contracts.acceptance_trace import (
    TraceRequest,
    entry_from_trace,
    read_specdecode_bench,
    read_trace,
    read_vllm_per_request,
)
from sim.contracts.errors import SpecplanError
from sim.contracts.profile_acceptance import AcceptanceKey, AcceptanceSegment, RequestAcceptance
from sim.model.acceptance import AcceptanceModel, SegmentAcceptance, _segment_from_profile
from sim.model.acceptance_match import resolve_segment


def load_trace(path: str, trace_format: str) -> list[TraceRequest]:
    """Read a trace in one of the scenario's ``trace_format`` layouts."""
    if trace_format == "specplan":
        return read_trace(path)
    if trace_format in ("specdecode-bench-eagle", "specdecode-bench-ngram"):
        return read_specdecode_bench(path, trace_format.rsplit("-", 1)[1])
    if trace_format == "vllm-per-request":
        return read_vllm_per_request(path)
    raise SpecplanError(f"trace_format {trace_format!r}: valid are specplan, specdecode-bench-eagle, "
                        "specdecode-bench-ngram, vllm-per-request")


def _segment(name: str, rows: list[dict], key: AcceptanceKey) -> SegmentAcceptance:
    reqs = tuple(RequestAcceptance(r["num_drafts"], tuple(r["accepted_per_pos"]), r["num_steps"]) for r in rows)
    k = len(rows[0]["accepted_per_pos"])
    per_pos = tuple(sum(r.accepted_per_pos[i] for r in reqs) for i in range(k))
    drafts = sum(r.num_drafts for r in reqs)
    seg = AcceptanceSegment(key, drafts, drafts * k, sum(per_pos), per_pos, reqs, sum(r.num_steps or 0 for r in reqs))
    return _segment_from_profile(name, seg)


def trace_acceptance(
    records: Sequence[TraceRequest],
    k: int,
    segment_keys: Mapping[str, tuple[str, str, float]] | None,
    *,
    proposer: str,
    source: str,
) -> tuple[AcceptanceModel, dict[str, list[TraceRequest]]]:
    """The acceptance model and, per scenario segment, the traced requests its rows come from
    (row ``i`` of a segment is ``records[i]``). ``segment_keys=None``: every segment uses every
    record (a trace without task labels, e.g. SpecDecode-Bench's)."""
    by_key: dict[AcceptanceKey, list[TraceRequest]] = {}
    for r in records:
        by_key.setdefault(AcceptanceKey(r.task, r.language, r.temperature), []).append(r)
    names = segment_keys or {"*": ("any", "any", 0.0)}
    segs: dict[str, SegmentAcceptance] = {}
    chosen: dict[str, list[TraceRequest]] = {}
    for name, (task, language, temp) in names.items():
        if segment_keys is None:
            recs = list(records)
            key = AcceptanceKey("any", "any", 0.0)
        else:
            key = AcceptanceKey(task, language, float(temp))
            stub = [AcceptanceSegment(kk, 0, 0, 0, ()) for kk in by_key]
            seg, note = resolve_segment(stub, key)
            if seg is None:
                raise SpecplanError(f"{source}: scenario segment {name!r}: {note}")
            recs = by_key[seg.key]
            key = seg.key
        segs[name] = _segment(name, entry_from_trace(recs, k)[0]["per_request"], key)
        chosen[name] = recs
    n = sum(len(v) for v in chosen.values())
    model = AcceptanceModel(proposer, k, segs if segment_keys is not None else {},
                            f"acceptance[{proposer}]: trace {source} ({n} traced requests)",
                            wildcard=segs.get("*"))
    return model, chosen


def trace_tokens(t: TraceRequest) -> int:
    """Output tokens a traced request's sequence covers before a replay would loop it: its
    answer's positions, or every recorded step's committed tokens (1 + accepted) at its k."""
    if t.layout == "positions":
        return len(t.values)
    return sum(1 + max(v, 0) for v in t.values)


def draw_trace_request(
    model: AcceptanceModel, traces: Mapping[str, list[TraceRequest]], segment: str, rng: np.random.Generator,
    output_tokens: int = 0,
) -> tuple[np.ndarray, float, TraceRequest]:
    """One simulated request's (rates, proposal rate, traced request), all from one draw among
    the traced requests that cover its ``output_tokens`` (else the longest): a short trace
    looped over a long answer repeats its opening (often its easiest or hardest part) and
    biases tokens per step. When every traced request covers it, the draw is the plain one."""
    seg = model.segment(segment)
    name = segment if traces.get(segment) else "*"
    recs = traces[name]
    cover = model.trace_tokens.get(name)
    if cover is None:
        cover = model.trace_tokens[name] = np.array([trace_tokens(r) for r in recs], np.int64)
    fits = np.flatnonzero(cover >= output_tokens)
    if fits.size == 0:
        fits = np.flatnonzero(cover == cover.max())
    i = int(fits[int(rng.integers(fits.size))])
    prop = 1.0 if seg.row_proposal is None else float(seg.row_proposal[i])
    return seg.rows[i], prop, recs[i]
