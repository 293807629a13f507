"""Import acceptance from a running vLLM server's Prometheus metrics (``/metrics``).

Why: acceptance of a model pair that cannot run here (a 70B target with its draft on GPUs) is
best taken from the engine that serves it. vLLM exports four counters (``vllm/v1/spec_decode/
metrics.py``): ``vllm:spec_decode_num_drafts``, ``…_num_draft_tokens``, ``…_num_accepted_tokens``
and ``…_num_accepted_tokens_per_pos{position="0".."k-1"}`` — exposed with a ``_total`` suffix
and ``model_name``/``engine`` labels. Engines (data-parallel ranks) are summed. Counters are
cumulative since server start; give a ``baseline`` scrape to import only the traffic in between.

Counting (vLLM ``v1/core/sched/scheduler.py`` ``update_from_output``: ``observe_draft`` is
called only ``if scheduled_spec_token_ids``): a draft is a step of one request that had a
proposal; an n-gram lookup without a match schedules the request with one token and is not
counted. So the survival rates here are vLLM's own per-position acceptance rates,
``accepted_per_pos[i] / num_drafts`` (its ``SpecDecodingProm`` docstring formula), and they hold
*given a proposal*. How often there was one is not a spec-decode counter; it follows from two
other counters when present: every decode step of a request emits ``1 + accepted`` tokens and
its prefill emits its first token, so

    verification steps = vllm:generation_tokens − vllm:request_success − num_accepted_tokens

(exact when no request was in flight at either scrape; the entry's ``num_steps``, and
``num_drafts / num_steps`` is the proposal rate). Without those counters every step is taken
to have had a proposal, and the notes say so. vLLM counts the tokens actually proposed (n-gram
may propose fewer than k); the profile requires ``num_draft_tokens == num_drafts · k_max``, so
the entry uses that product (survival rates are unaffected). Counters carry no per-request
rows, so the simulator gives every request the aggregate rates (spread unknown).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sim.contracts.errors import SpecplanError, echo, read_text

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_WANTED = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
"""Not speculative-decoding counters: with them the number of verification steps is known
(see the module docstring), hence the proposal rate."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")

_SAMPLE_RE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_LABEL_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass(frozen=True, slots=True)
class Sample:
    """One exposition line: metric name, labels, value."""

    name: str
    labels: dict[str, str]
    value: float
    line: int


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def _parse_labels(text: str, source: str, line: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL_RE.match(text, pos)
        if not m:
            raise SpecplanError(f"{source}:{line}: cannot parse labels {{{text}}}")
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return labels


def parse_exposition(text: str, source: str) -> list[Sample]:
    """Prometheus text exposition (and OpenMetrics) → samples; a malformed line is an error."""
    samples: list[Sample] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise SpecplanError(f"{source}:{number}: not a Prometheus sample line: {echo(line, 80)}")
        try:
            value = float(m.group("value"))
        except ValueError:
            raise SpecplanError(
                f"{source}:{number}: value {m.group('value')!r} is not a number"
            ) from None
        labels = _parse_labels(m.group("labels") or "", source, number)
        samples.append(Sample(m.group("name"), labels, value, number))
    return samples


def _base_name(name: str) -> str | None:
    """Map an exposed name to one of the four counters (``_total`` optional, ``_created`` not)."""
    if name.endswith("_created"):
        return None
    base = name.removesuffix("_total")
    return base if base in _WANTED else None


def read_source(source: str, *, timeout_s: float = 10.0) -> str:
    """Text of a metrics file, or of an ``http(s)://localhost|127.0.0.1|[::1]`` URL."""
    if "://" in source:
        parts = urlsplit(source)
        if parts.scheme not in ("http", "https"):
            raise SpecplanError(f"{source}: only http:// or https:// URLs can be read")
        if parts.hostname not in LOCAL_HOSTS:
            raise SpecplanError(
                f"{source}: host {parts.hostname!r} refused; metrics are read only from "
                f"{', '.join(LOCAL_HOSTS)} (save a remote server's /metrics to a file instead)"
            )
        try:
            with urllib.request.urlopen(source, timeout=timeout_s) as resp:  # noqa: S310
                return resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SpecplanError(f"{source}: cannot read metrics ({reason})") from None
    return read_text(source, "metrics", "cannot read metrics file ({exc})")


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """The four vLLM counters, summed over engines (and filtered to one model)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    models: tuple[str, ...]
    engines: int
    generation_tokens: int | None = None
    """``vllm:generation_tokens`` summed (None when the scrape lacks it)."""
    requests_finished: int | None = None
    """``vllm:request_success`` summed over finish reasons (None when absent)."""

    @property
    def num_steps(self) -> int | None:
        """Verification steps, with or without a proposal: generated − finished − accepted."""
        if self.generation_tokens is None or self.requests_finished is None:
            return None
        return self.generation_tokens - self.requests_finished - self.num_accepted_tokens

    def minus(self, base: SpecCounters) -> SpecCounters:
        """Traffic between a baseline scrape and this one."""
        k = max(len(self.accepted_per_pos), len(base.accepted_per_pos))
        mine = list(self.accepted_per_pos) + [0] * (k - len(self.accepted_per_pos))
        theirs = list(base.accepted_per_pos) + [0] * (k - len(base.accepted_per_pos))
        return SpecCounters(
            self.num_drafts - base.num_drafts,
            self.num_draft_tokens - base.num_draft_tokens,
            self.num_accepted_tokens - base.num_accepted_tokens,
            tuple(a - b for a, b in zip(mine, theirs, strict=True)),
            self.models,
            self.engines,
            _minus(self.generation_tokens, base.generation_tokens),
            _minus(self.requests_finished, base.requests_finished),
        )


def _minus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def _other_totals(text: str, source: str, model_name: str | None) -> tuple[int | None, int | None]:
    """``vllm:generation_tokens`` and ``vllm:request_success`` summed (None if absent)."""
    out: dict[str, int | None] = {GENERATION_TOKENS: None, REQUEST_SUCCESS: None}
    for s in parse_exposition(text, source):
        if s.name.endswith("_created"):
            continue
        base = s.name.removesuffix("_total")
        if base not in out or (model_name is not None and s.labels.get("model_name") != model_name):
            continue
        out[base] = (out[base] or 0) + _as_count(s.value, source, s.line)
    return out[GENERATION_TOKENS], out[REQUEST_SUCCESS]


def _as_count(value: float, source: str, line: int) -> int:
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise SpecplanError(f"{source}:{line}: counter value {value} is not a non-negative count")
    return int(value)


def spec_counters(text: str, source: str, *, model_name: str | None = None) -> SpecCounters:
    """Sum vLLM's speculative-decoding counters in one scrape."""
    samples = [(s, b) for s in parse_exposition(text, source) if (b := _base_name(s.name))]
    if not samples:
        raise SpecplanError(
            f"{source}: no vLLM speculative-decoding counters ({DRAFTS}…); is the server running "
            "with a speculative config, and is this its /metrics output?"
        )
    models = sorted({s.labels["model_name"] for s, _ in samples if "model_name" in s.labels})
    if model_name is not None:
        if model_name not in models:
            raise SpecplanError(
                f"{source}: model_name {model_name!r} not found; available: {', '.join(models) or 'none'}"
            )
        samples = [(s, b) for s, b in samples if s.labels.get("model_name") == model_name]
        models = [model_name]
    elif len(models) > 1:
        raise SpecplanError(
            f"{source}: counters for several models ({', '.join(models)}); choose one with model_name"
        )
    totals = {DRAFTS: 0, DRAFT_TOKENS: 0, ACCEPTED: 0}
    per_pos: dict[int, int] = {}
    engines: set[str] = set()
    for s, base in samples:
        count = _as_count(s.value, source, s.line)
        engines.add(s.labels.get("engine", "0"))
        if base == PER_POS:
            pos_label = s.labels.get("position")
            if pos_label is None or not pos_label.isdigit():
                raise SpecplanError(
                    f"{source}:{s.line}: {PER_POS} needs a numeric position label, got {pos_label!r}"
                )
            per_pos[int(pos_label)] = per_pos.get(int(pos_label), 0) + count
        else:
            totals[base] += count
    if not per_pos:
        raise SpecplanError(
            f"{source}: no {PER_POS} samples; per-position counts are needed (a newer vLLM "
            "exports them)"
        )
    k = max(per_pos) + 1
    gen, done = _other_totals(text, source, models[0] if len(models) == 1 else None)
    return SpecCounters(
        totals[DRAFTS],
        totals[DRAFT_TOKENS],
        totals[ACCEPTED],
        tuple(per_pos.get(i, 0) for i in range(k)),
        tuple(models),
        len(engines),
        gen,
        done,
    )


def entry_from_counters(
    counters: SpecCounters,
    source: str,
    *,
    task: str = "any",
    language: str = "any",
    temperature: float = 0.0,
    command: str | None = None,
    notes: str | None = None,
) -> dict[str, Any]:
    """Counters → a profile acceptance entry with provenance ``imported`` (no per-request rows)."""
    c = counters
    k_max = len(c.accepted_per_pos)
    if c.num_drafts <= 0:
        raise SpecplanError(
            f"{source}: {DRAFTS} is {c.num_drafts}; no drafts to import (send traffic first)"
        )
    ap = list(c.accepted_per_pos)
    if any(a < 0 for a in ap) or any(a < b for a, b in zip(ap, ap[1:], strict=False)):
        raise SpecplanError(
            f"{source}: accepted per position {ap} must be non-negative and non-increasing "
            "(was the baseline scraped after this file, or the server restarted in between?)"
        )
    if ap[0] > c.num_drafts:
        raise SpecplanError(f"{source}: position 0 accepted {ap[0]} times in {c.num_drafts} drafts")
    if sum(ap) != c.num_accepted_tokens:
        raise SpecplanError(
            f"{source}: {ACCEPTED}={c.num_accepted_tokens} differs from the sum over positions "
            f"{sum(ap)}; the scrape is inconsistent"
        )
    if temperature < 0 or not math.isfinite(temperature):
        raise SpecplanError(f"temperature={temperature}: must be a number >= 0")
    mal = 1 + c.num_accepted_tokens / c.num_drafts
    steps, steps_note = _verification_steps(c)
    parts = [
        f"vLLM Prometheus counters from {source}, summed over {c.engines} engine(s)",
        f"vLLM reported {c.num_drafts} drafts, {c.num_draft_tokens} draft tokens, "
        f"{c.num_accepted_tokens} accepted (mean acceptance length {mal:.2f})",
        "vLLM counts only steps with proposals (survival = accepted_per_pos / num_drafts, its "
        f"per-position acceptance rate); num_draft_tokens here is num_drafts*k_max={c.num_drafts * k_max}",
        steps_note,
        "no per-request rows: spread across requests unknown",
    ]
    if notes:
        parts.append(notes)
    provenance = {
        "method": "imported",
        "models": {"target": c.models[0]} if c.models else {},
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "citation": None,
        "notes": "; ".join(parts),
    }
    return {
        "provenance": provenance,
        "k_max": k_max,
        "segments": [
            {
                "segment": {"task": task, "language": language, "temperature": float(temperature)},
                "num_drafts": c.num_drafts,
                "num_draft_tokens": c.num_drafts * k_max,
                "num_accepted_tokens": c.num_accepted_tokens,
                "accepted_per_pos": ap,
                "per_request": [],
                **({"num_steps": steps} if steps is not None else {}),
            }
        ],
    }


def _verification_steps(c: SpecCounters) -> tuple[int | None, str]:
    """Verification steps (with or without a proposal) the counters imply, or None when they
    cannot say, and the note that explains which."""
    steps = c.num_steps
    if steps is not None and steps < c.num_drafts:
        steps_note = (
            f"{GENERATION_TOKENS} − {REQUEST_SUCCESS} − accepted = {steps} steps is below the "
            f"{c.num_drafts} drafts (requests in flight at the scrape?): proposal rate unknown, "
            "every step taken to have had a proposal"
        )
        steps = None
    elif steps is not None:
        steps_note = (
            f"verification steps = {GENERATION_TOKENS} {c.generation_tokens} − {REQUEST_SUCCESS} "
            f"{c.requests_finished} − accepted {c.num_accepted_tokens} = {steps}: a proposal on "
            f"{100 * c.num_drafts / steps:.1f}% of steps (exact if no request was in flight)"
        )
    else:
        steps_note = (
            f"no {GENERATION_TOKENS} / {REQUEST_SUCCESS} counters: proposal rate unknown, every "
            "step taken to have had a proposal (n-gram without a match is then overpriced)"
        )
    return steps, steps_note


def import_vllm_metrics(
    source: str,
    *,
    baseline: str | None = None,
    model_name: str | None = None,
    task: str = "any",
    language: str = "any",
    temperature: float = 0.0,
    command: str | None = None,
) -> dict[str, Any]:
    """Read ``source`` (file or local URL), optionally minus ``baseline``; return the entry."""
    counters = spec_counters(read_source(source), source, model_name=model_name)
    shown = source
    if baseline is not None:
        base = spec_counters(read_source(baseline), baseline, model_name=model_name)
        counters = counters.minus(base)
        shown = f"{source} minus baseline {baseline}"
    return entry_from_counters(
        counters, shown, task=task, language=language, temperature=temperature, command=command
    )
