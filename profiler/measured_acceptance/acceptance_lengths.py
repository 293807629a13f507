"""Acceptance lengths per k ↔ per-position survival rates, in vLLM's terms.

Why this conversion is exact (up to noise): vLLM's mean acceptance length of a run drafting
``k`` tokens is ``1 + accepted / drafts = 1 + Σ_{i≤k} s_i`` with ``s_i = accepted_per_pos[i-1] /
drafts``, the unconditional survival rate of position ``i`` (``v1/spec_decode/metrics.py``). A
chain drafter (EAGLE, EAGLE-3, MTP) drafts position ``i`` the same way whatever ``k`` is, so
``s_i`` does not depend on ``k`` and ``s_k = AL(k) − AL(k−1)`` with ``AL(0) = 1``.

Published tables (InferenceX's golden AL per k) run each ``k`` separately, so the increments
carry sampling noise and rounding: a later increment can exceed an earlier one, or be negative,
which no survival curve can produce. Those increments are projected onto the nearest
non-increasing sequence (least squares: pool adjacent violators, which keeps the sum of every
pooled run, hence ``AL`` at its ends) and clipped to ``[0, 1]``; :func:`round_trip_error` says
how far the rates' lengths then are from the table, and the entry's notes print it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from sim.contracts.errors import SpecplanError


def lengths_from_rates(rates: Sequence[float]) -> list[float]:
    """``AL(k) = 1 + s_1 + … + s_k`` for ``k = 1 … len(rates)``."""
    out, total = [], 1.0
    for s in rates:
        total += float(s)
        out.append(total)
    return out


def _check_lengths(lengths: Mapping[int, float]) -> list[float]:
    ks = sorted(lengths)
    if not ks or ks != list(range(1, len(ks) + 1)):
        raise SpecplanError(f"acceptance lengths: need every k from 1 up, got k = {ks}")
    vals = [float(lengths[k]) for k in ks]
    for k, al in zip(ks, vals, strict=True):
        if not math.isfinite(al) or not 1.0 <= al <= k + 1:
            raise SpecplanError(f"acceptance length at k={k} is {al}: must lie in [1, k + 1]")
    return vals


def _pool_adjacent_violators(values: Sequence[float]) -> list[float]:
    """The non-increasing sequence nearest ``values`` in squared error (equal weights)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out: list[float] = []
    for s, n in blocks:
        out += [s / n] * int(n)
    return out


def rates_from_lengths(lengths: Mapping[int, float]) -> list[float]:
    """Survival rates ``s_1 … s_K`` from acceptance lengths ``{k: AL(k)}`` for ``k = 1 … K``:
    the increments, made non-increasing and clipped to [0, 1] where noise broke that."""
    vals = _check_lengths(lengths)
    steps = [b - a for a, b in zip([1.0, *vals[:-1]], vals, strict=True)]
    return [min(max(s, 0.0), 1.0) for s in _pool_adjacent_violators(steps)]


def round_trip_error(lengths: Mapping[int, float], rates: Sequence[float]) -> float:
    """The largest ``|AL(k) from the rates − AL(k) in the table|`` over the table's k."""
    back = lengths_from_rates(rates)
    return max(abs(back[k - 1] - float(al)) for k, al in lengths.items())


def entry_lengths(entry: Mapping) -> tuple[float, float, float]:
    """An acceptance entry's ``(tokens per verification step, mean acceptance length per draft,
    share of steps with a proposal)`` over its segments: ``1 + accepted / steps``,
    ``1 + accepted / drafts`` (vLLM's), ``drafts / steps``. A segment without ``num_steps`` had a
    proposal on every step. NaN where nothing was drafted or stepped.

    Why both: vLLM's mean acceptance length counts only steps with a proposal, so an n-gram
    entry whose lookups rarely match says 4.19 where a step commits about 1.25 tokens; the step
    is what the time is paid for."""
    segs = list(entry.get("segments") or [])
    drafts = sum(int(s["num_drafts"]) for s in segs)
    steps = sum(int(s.get("num_steps") or s["num_drafts"]) for s in segs)
    accepted = sum(int(s["num_accepted_tokens"]) for s in segs)
    per_draft = 1.0 + accepted / drafts if drafts else math.nan
    per_step = 1.0 + accepted / steps if steps else math.nan
    return per_step, per_draft, (drafts / steps if steps else math.nan)


def headline(name: str, entry: Mapping) -> str:
    """The profile summary's line for one proposer: acceptance length per step first, per draft
    (labelled as vLLM's) beside it when some steps had no proposal."""
    per_step, per_draft, share = entry_lengths(entry)
    n = len(entry.get("segments") or [])
    method = (entry.get("provenance") or {}).get("method", "unknown")
    if math.isnan(per_step):
        return f"acceptance {name}: {n} segments, nothing drafted [{method}]"
    if share >= 1.0:
        return (f"acceptance {name}: {n} segments, acceptance length {per_step:.2f} tokens per step "
                f"(a proposal on every step) [{method}]")
    return (f"acceptance {name}: {n} segments, acceptance length {per_step:.2f} tokens per step; "
            f"{per_draft:.2f} per draft (vLLM's mean acceptance length, counting only the "
            f"{100 * share:.0f}% of steps with a proposal) [{method}]")
