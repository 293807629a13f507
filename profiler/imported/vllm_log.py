"""Acceptance from vLLM's periodic ``SpecDecoding metrics:`` log lines.

Why: many teams keep server logs, not Prometheus scrapes. vLLM's ``SpecDecodingLogging.log``
(``vllm/v1/spec_decode/metrics.py``) prints, every logging interval, counters summed over that
interval and then resets them::

    SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,
    Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,
    Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%

with ``rates_str = ", ".join(f"{p:.3f}" ...)`` and ``acceptance_rates = per_pos / num_drafts``.
The line does not print ``num_drafts``; since the rates sum to ``accepted / num_drafts``, it is
``round(Accepted / sum(rates))`` (checked against the mean acceptance length, 1 + accepted /
drafts, to its printed 2 decimals), and per-position counts are ``round(rate_i · drafts)``
(rates are printed to 3 decimals: counts are exact to about ±0.0005·drafts). Intervals are
summed. Steps without a proposal are not in these counters (as in ``/metrics``) and the log has
no other count of steps, so the proposal rate stays unknown and the entry says so.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass
from typing import Any

from sim.contracts.errors import SpecplanError, read_text

MARK = "SpecDecoding metrics:"
_FIELD_RE = re.compile(
    r"Mean acceptance length: (?P<mal>[0-9.]+|nan), .*?Accepted: (?P<acc>\d+) tokens, "
    r"Drafted: (?P<drafted>\d+) tokens, Per-position acceptance rate: (?P<rates>[0-9., ]*?), "
    r"Avg Draft acceptance rate: (?P<avg>[0-9.]+|nan)%"
)


@dataclass(frozen=True, slots=True)
class LogInterval:
    """One logged interval's counters (drafts and per-position counts reconstructed)."""

    line: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]


def parse_line(text: str, source: str, line: int) -> LogInterval:
    """One ``SpecDecoding metrics:`` line → its interval; a malformed line is an error."""
    m = _FIELD_RE.search(text[text.index(MARK):])
    if not m:
        raise SpecplanError(f"{source}:{line}: a '{MARK}' line without vLLM's fields "
                            "(Mean acceptance length, Accepted, Drafted, Per-position acceptance rate)")
    try:
        rates = [float(r) for r in m.group("rates").split(",") if r.strip()]
    except ValueError:
        raise SpecplanError(f"{source}:{line}: Per-position acceptance rate: not a list of numbers") from None
    if not rates:
        raise SpecplanError(f"{source}:{line}: Per-position acceptance rate: empty")
    if any(not 0.0 <= r <= 1.0 for r in rates) or any(a < b for a, b in zip(rates, rates[1:], strict=False)):
        raise SpecplanError(f"{source}:{line}: Per-position acceptance rate: must be non-increasing values in [0, 1], got {rates}")
    accepted, drafted = int(m.group("acc")), int(m.group("drafted"))
    total = sum(rates)
    if accepted == 0 or total == 0:
        raise SpecplanError(f"{source}:{line}: Accepted: 0 tokens; the number of drafts cannot be recovered from this line")
    drafts = round(accepted / total)
    mal = float(m.group("mal"))
    if drafts < 1 or (math.isfinite(mal) and abs(1 + accepted / drafts - mal) > 0.0051 + 0.001 * mal):
        raise SpecplanError(f"{source}:{line}: Mean acceptance length {mal} disagrees with Accepted / "
                            f"sum(rates) = {drafts} drafts; the line is inconsistent")
    per_pos = [round(r * drafts) for r in rates]
    per_pos[0] += accepted - sum(per_pos)  # rounding residue goes to position 1 (keeps the sum exact)
    for i in range(1, len(per_pos)):
        per_pos[i] = min(per_pos[i], per_pos[i - 1])
    per_pos[0] = accepted - sum(per_pos[1:])
    return LogInterval(line, drafts, drafted, accepted, tuple(per_pos))


def parse_log(text: str, source: str) -> list[LogInterval]:
    """Every ``SpecDecoding metrics:`` line of a log (other lines are ignored)."""
    out = [parse_line(raw, source, n) for n, raw in enumerate(text.splitlines(), start=1) if MARK in raw]
    if not out:
        raise SpecplanError(f"{source}: no '{MARK}' lines; is this a vLLM server log with speculative decoding on?")
    k = {len(i.accepted_per_pos) for i in out}
    if len(k) > 1:
        raise SpecplanError(f"{source}: lines report different numbers of positions {sorted(k)}; one server config per log")
    return out


def entry_from_log(
    source: str, *, task: str = "any", language: str = "any", temperature: float = 0.0,
    command: str | None = None,
) -> dict[str, Any]:
    """A log file → a profile acceptance entry with provenance ``imported`` (no per-request rows)."""
    intervals = parse_log(read_text(source, "log", "cannot read log file ({exc})"), source)
    k_max = len(intervals[0].accepted_per_pos)
    drafts = sum(i.num_drafts for i in intervals)
    per_pos = [sum(i.accepted_per_pos[j] for i in intervals) for j in range(k_max)]
    accepted = sum(i.num_accepted_tokens for i in intervals)
    notes = (
        f"vLLM '{MARK}' log lines from {source}: {len(intervals)} interval(s) summed; drafts "
        f"recovered as Accepted / sum(per-position rates) ({drafts} drafts, {accepted} accepted, "
        f"mean acceptance length {1 + accepted / drafts:.2f}); per-position counts from rates "
        "printed to 3 decimals; vLLM counts only steps with a proposal and the log has no step "
        "count: proposal rate unknown, every step taken to have had one; no per-request rows: "
        "spread across requests unknown"
    )
    return {
        "provenance": {
            "method": "imported",
            "models": {},
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": command,
            "citation": None,
            "notes": notes,
        },
        "k_max": k_max,
        "segments": [{
            "segment": {"task": task, "language": language, "temperature": float(temperature)},
            "num_drafts": drafts,
            "num_draft_tokens": drafts * k_max,
            "num_accepted_tokens": accepted,
            "accepted_per_pos": per_pos,
            "per_request": [],
        }],
    }
