"""Per-request acceptance traces: reading them, and what a speculative step commits from them.

Why: acceptance within a request is not a coin flipped afresh every step; rejections cluster
(a model copies a passage, then writes freely). A trace keeps each request's own sequence, so
the simulator can replay it instead of drawing steps independently at the request's mean.
Two layouts (docs/acceptance-trace-format.md):

- ``steps`` (specplan's own, what ``specplan profile`` measures): one record per request with
  ``accepted``: per verification step, the draft tokens the target kept (``0..k``), or
  ``null`` when the proposer had nothing (an n-gram lookup without a match: one token fed);
- ``positions`` (SpecDecode-Bench's ``acc_len``): per generated position, how many tokens a
  step starting there would commit (``>= 1``, the bonus included), whatever the draft length.

Both reduce to a replay: a step at ``k`` commits ``min(commit, k + 1)`` tokens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sim.contracts.errors import SpecplanError, echo, read_text
from sim.contracts.json_reader import decode_failure

LAYOUTS = ("steps", "positions")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request's acceptance sequence."""

    request: str
    task: str
    language: str
    temperature: float
    layout: str
    """``steps`` or ``positions``."""
    values: tuple[int, ...]
    """``steps``: accepted per step (-1 = no proposal); ``positions``: tokens a step starting at
    each generated position commits (>= 1)."""
    k: int | None = None
    """Draft length the ``steps`` layout was measured at (None for ``positions``)."""

    def steps_at(self, k: int) -> list[tuple[bool, int]]:
        """``(proposed, accepted)`` of each verification step of the whole request at ``k``.

        ``positions``: walk the answer, each step committing ``min(commit, k + 1)`` tokens;
        ``steps``: the recorded steps, accepted capped at ``k`` (exact at the measured k).
        """
        if self.layout == "steps":
            return [(v >= 0, min(max(v, 0), k)) for v in self.values]
        out, pos, n = [], 0, len(self.values)
        while pos < n:
            commit = min(self.values[pos], k + 1)
            out.append((True, commit - 1))
            pos += commit
        return out

    def tokens_per_step(self, k: int) -> float:
        """Mean tokens committed per verification step at ``k`` (replaying the sequence)."""
        steps = self.steps_at(k)
        return 1.0 + sum(a for _, a in steps) / len(steps) if steps else math.nan


def read_trace(path: str, *, k_max: int | None = None) -> list[TraceRequest]:
    """A specplan acceptance trace (JSONL, one request a line); bad input names file:line:field."""
    out = []
    for n, rec in _records(path):
        at = f"{path}:{n}"
        for f in ("request", "task", "language", "temperature"):
            if f not in rec:
                raise SpecplanError(f"{at}: {f}: missing (each line needs request, task, language, temperature and accepted or acc_len)")
        temp = rec["temperature"]
        if not isinstance(temp, (int, float)) or isinstance(temp, bool) or not 0 <= temp <= 100:  # as segments
            raise SpecplanError(f"{at}: temperature: expected a number in 0..100, got {echo(temp, 60)}")
        base = (str(rec["request"]), str(rec["task"]), str(rec["language"]), float(temp))
        if "accepted" in rec:
            k = rec.get("k")
            if not isinstance(k, int) or isinstance(k, bool) or k < 1:
                raise SpecplanError(f"{at}: k: expected the draft length (an integer >= 1), got {echo(k, 60)}")
            if k_max is not None and k > k_max:
                raise SpecplanError(f"{at}: k: {k} exceeds k_max={k_max}")
            vals = _ints(rec["accepted"], f"{at}: accepted", lo=0, hi=k, nullable=True)
            out.append(TraceRequest(*base, "steps", vals, k))
        elif "acc_len" in rec:
            out.append(TraceRequest(*base, "positions", _ints(rec["acc_len"], f"{at}: acc_len", lo=1)))
        else:
            raise SpecplanError(f"{at}: accepted: missing (give accepted per step, or acc_len per position)")
    if not out:
        raise SpecplanError(f"{path}: no trace records")
    return out


def read_specdecode_bench(
    path: str, method: str, *, task: str = "any", language: str = "any", temperature: float = 0.0
) -> list[TraceRequest]:
    """SpecDecode-Bench's ``combined_*.jsonl`` (``acc_<method>.acc_len``), read from the user's
    own copy (the data has no license here: never vendored). ``method``: ``eagle`` or ``ngram``.
    The file carries no task labels: every request gets ``task:language:temperature``."""
    field = f"acc_{method}"
    out = []
    for n, rec in _records(path):
        at = f"{path}:{n}"
        acc = rec.get(field)
        if not isinstance(acc, dict) or "acc_len" not in acc:
            raise SpecplanError(f"{at}: {field}.acc_len: missing (SpecDecode-Bench layout: {{'{field}': {{'acc_len': [...]}}}})")
        vals = _ints(acc["acc_len"], f"{at}: {field}.acc_len", lo=1)
        out.append(TraceRequest(str(rec.get("id", n)), task, language, float(temperature), "positions", vals))
    if not out:
        raise SpecplanError(f"{path}: no trace records")
    return out


def _vllm_stats(rec: dict) -> dict | None:
    """The ``speculative_decoding_stats`` object of one logged response, wherever vLLM put it: the
    record itself, a choice's ``speculative_decoding_stats``, or ``metrics.speculative_decoding``."""
    if "per_step_accepted" in rec:
        return rec
    for choice in rec.get("choices") or []:
        if isinstance(choice, dict) and isinstance(choice.get("speculative_decoding_stats"), dict):
            return choice["speculative_decoding_stats"]
    m = rec.get("metrics")
    if isinstance(m, dict) and isinstance(m.get("speculative_decoding"), dict):
        return m["speculative_decoding"]
    return None


def read_vllm_per_request(
    path: str, *, task: str = "any", language: str = "any", temperature: float = 0.0
) -> list[TraceRequest]:
    """vLLM's per-request acceptance (``--per-request-spec-decode-metrics detailed``, PR #48915;
    docs ``features/speculative_decoding/acceptance_metrics.md``), one logged response a line.

    Each line is a response (its choice's ``speculative_decoding_stats``, or the top-level
    ``metrics.speculative_decoding`` of earlier releases) or the stats object alone; it needs
    ``num_spec_tokens`` (k) and the ``detailed`` arrays ``per_step_accepted`` and
    ``per_step_drafted``. A step that drafted nothing is a step without a proposal (``null`` in
    specplan's layout). Responses without stats (``null``: not speculated) are skipped. No task
    labels: every request gets ``task:language:temperature``.
    """
    out = []
    for n, rec in _records(path):
        at = f"{path}:{n}"
        stats = _vllm_stats(rec)
        if stats is None:
            if "choices" in rec or "metrics" in rec:
                continue  # a response vLLM did not speculate on
            raise SpecplanError(f"{at}: per_step_accepted: missing (run vLLM with --per-request-spec-decode-metrics detailed)")
        k = stats.get("num_spec_tokens")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise SpecplanError(f"{at}: num_spec_tokens: expected the draft length (an integer >= 1), got {k!r}")
        for f in ("per_step_accepted", "per_step_drafted"):
            if f not in stats:
                raise SpecplanError(f"{at}: {f}: missing (vLLM writes it with --per-request-spec-decode-metrics detailed)")
        drafted = _ints(stats["per_step_drafted"], f"{at}: per_step_drafted", lo=0, hi=k)
        accepted = _ints(stats["per_step_accepted"], f"{at}: per_step_accepted", lo=0, hi=k)
        if len(drafted) != len(accepted):
            raise SpecplanError(f"{at}: per_step_accepted: {len(accepted)} steps but per_step_drafted has "
                                f"{len(drafted)}; both have one entry per verification step")
        for i, (a, d) in enumerate(zip(accepted, drafted, strict=True)):
            if a > d:
                raise SpecplanError(f"{at}: per_step_accepted[{i}]: {a} exceeds per_step_drafted[{i}] = {d} "
                                    "(a step cannot accept more than it drafted)")
        total = stats.get("num_accepted_draft_tokens")
        if isinstance(total, int) and total != sum(accepted):
            raise SpecplanError(f"{at}: num_accepted_draft_tokens: {total} but per_step_accepted sums to "
                                f"{sum(accepted)}; the two must agree")
        vals = tuple(a if d > 0 else -1 for a, d in zip(accepted, drafted, strict=True))
        rid = rec.get("id", stats.get("request_id", n))
        out.append(TraceRequest(str(rid), task, language, float(temperature), "steps", vals, k))
    if not out:
        raise SpecplanError(f"{path}: no response with speculative decoding stats")
    return out


def measured_acceptance_length(records: Sequence[TraceRequest], k: int) -> float:
    """vLLM's mean acceptance length of a trace replayed at ``k``: ``1 + accepted / drafts``,
    counting only steps with a proposal (exact at the ``k`` a steps-layout trace was run at)."""
    drafts = accepted = 0
    for r in records:
        steps = [a for proposed, a in r.steps_at(k) if proposed]
        drafts += len(steps)
        accepted += sum(steps)
    if drafts == 0:
        raise SpecplanError("acceptance trace: no step with a proposal, so no acceptance length")
    return 1.0 + accepted / drafts


def write_trace(path: str, records: Iterable[TraceRequest]) -> None:
    """Write records in specplan's layout (``steps`` as ``accepted`` with null, else ``acc_len``)."""
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            d: dict = {"request": r.request, "task": r.task, "language": r.language, "temperature": r.temperature}
            if r.layout == "steps":
                d.update(k=r.k, accepted=[None if v < 0 else v for v in r.values])
            else:
                d["acc_len"] = list(r.values)
            fh.write(json.dumps(d) + "\n")


def entry_from_trace(records: Sequence[TraceRequest], k: int) -> list[dict]:
    """Profile acceptance segments (vLLM counting, per-request rows with ``num_steps``) from a
    trace replayed at ``k``: what independent draws at each request's own rates would use."""
    groups: dict[tuple[str, str, float], list[dict]] = {}
    for r in records:
        steps = r.steps_at(k)
        per_pos = [sum(1 for p, a in steps if p and a > i) for i in range(k)]
        row = {"num_drafts": sum(1 for p, _ in steps if p), "num_steps": len(steps), "accepted_per_pos": per_pos}
        groups.setdefault((r.task, r.language, r.temperature), []).append(row)
    segs = []
    for (task, language, temp), rows in groups.items():
        drafts = sum(r["num_drafts"] for r in rows)
        per_pos = [sum(r["accepted_per_pos"][i] for r in rows) for i in range(k)]
        segs.append({"segment": {"task": task, "language": language, "temperature": temp},
                     "num_drafts": drafts, "num_steps": sum(r["num_steps"] for r in rows),
                     "num_draft_tokens": drafts * k, "num_accepted_tokens": sum(per_pos),
                     "accepted_per_pos": per_pos, "per_request": rows})
    return segs


def naive_position_survival(record: TraceRequest, k: int) -> list[float]:
    """Survival rates as if every generated position started a step (positions independent):
    ``P(commit >= i + 1)`` over all positions. Overstates tokens per step when long accepted
    runs cluster: a run of n accepted positions holds n step starts here but gets one in replay."""
    if record.layout != "positions":
        raise ValueError("naive_position_survival needs the positions layout")
    n = len(record.values)
    return [sum(1 for v in record.values if min(v, k + 1) >= i + 2) / n for i in range(k)]


def _records(path: str) -> Iterable[tuple[int, dict]]:
    text = read_text(path, "acceptance trace")
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecplanError(f"{path}:{n}: not a JSON object ({exc.msg} at column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:  # nested past recursion, or thousands of digits
            raise decode_failure(exc, path, n, "counts of at most a few digits") from None
        if not isinstance(rec, dict):
            raise SpecplanError(f"{path}:{n}: expected a JSON object per line, got {type(rec).__name__}")
        yield n, rec


def _ints(v: object, at: str, *, lo: int, hi: int | None = None, nullable: bool = False) -> tuple[int, ...]:
    if not isinstance(v, list) or not v:
        raise SpecplanError(f"{at}: expected a non-empty list of integers")
    out = []
    for i, x in enumerate(v):
        if x is None and nullable:
            out.append(-1)
            continue
        if not isinstance(x, int) or isinstance(x, bool):
            raise SpecplanError(f"{at}[{i}]: expected an integer{' or null' if nullable else ''}, got {echo(x, 60)}")
        if x < lo:
            raise SpecplanError(f"{at}[{i}]: {x} is below {lo} (counts cannot be negative)" if lo == 0 else f"{at}[{i}]: {x} is below {lo}")
        if hi is not None and x > hi:
            raise SpecplanError(f"{at}[{i}]: {x} exceeds k={hi} (a step cannot accept more than it drafted)")
        out.append(x)
    return tuple(out)
