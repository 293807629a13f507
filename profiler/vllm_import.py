"""Import acceptance from a running vLLM server's Prometheus metrics (``/metrics``).

Why: acceptance of a model pair that cannot run here (a 70B target with its draft on GPUs) is
best taken from the engine that serves it. vLLM exports four counters (``vllm/v1/spec_decode/
metrics.py``): ``vllm:spec_decode_num_drafts``, ``…_num_draft_tokens``, ``…_num_accepted_tokens``
and ``…_num_accepted_tokens_per_pos{position="0".."k-1"}`` — exposed with a ``_total`` suffix
and ``model_name``/``engine`` labels. Engines (data-parallel ranks) are summed. Counters are
cumulative since server start; give a ``baseline`` scrape to import only the traffic in between.

Differences from measured entries, recorded in the provenance notes: vLLM counts a draft only
when tokens were proposed and counts the tokens actually proposed (n-gram may propose fewer
than k); the profile requires ``num_draft_tokens == num_drafts · k_max``, so the imported entry
uses that product and positions never proposed count as not accepted. Counters carry no
per-request rows, so the simulator gives every request the aggregate rates (spread unknown).
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

from sim.contracts.errors import SpecplanError, read_text

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_WANTED = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)
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
            raise SpecplanError(f"{source}:{number}: not a Prometheus sample line: {line[:80]!r}")
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
        )


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
    return SpecCounters(
        totals[DRAFTS],
        totals[DRAFT_TOKENS],
        totals[ACCEPTED],
        tuple(per_pos.get(i, 0) for i in range(k)),
        tuple(models),
        len(engines),
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
    parts = [
        f"vLLM Prometheus counters from {source}, summed over {c.engines} engine(s)",
        f"vLLM reported {c.num_drafts} drafts, {c.num_draft_tokens} draft tokens, "
        f"{c.num_accepted_tokens} accepted (mean acceptance length {mal:.2f})",
        "vLLM counts only steps with proposals; num_draft_tokens here is num_drafts*k_max "
        f"={c.num_drafts * k_max}, unproposed positions count as not accepted",
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
            }
        ],
    }


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
