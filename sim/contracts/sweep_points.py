"""Summary points of a measured sweep: what published sweeps and dashboards give, per load.

Why its own contract: `vllm bench serve --save-detailed` files carry every request, but a paper,
a blog post or a dashboard gives a few numbers per load — TPOT p50, output tok/s, a speed-up, an
acceptance length — for the baseline and the speculative method. ``specplan calibrate --points
FILE`` reads them from a small TOML file (docs/fidelity.md, "Calibrating from a published
sweep"); each point names its source, so every number printed beside it says where it came from.

    name = "eagle3-sglang-llama8b-h100"
    load = "concurrency"                 # "concurrency" (N closed-loop clients) | "rate" (req/s)
    source = "citation for every point"  # a point's own `source` overrides it
    [[points]]
    load = 1
    baseline = { output_tok_s = 158.34 }
    speculative = { output_tok_s = 373.25 }
    [[points]]
    load = 64
    speedup = 1.38                       # speculative ÷ baseline of `speedup_of`
    speedup_of = "output_tok_s"

A side may name a `vllm bench serve --save-result` file instead (``baseline = { vllm_result =
"base-64.json" }``, relative to the points file): its median TPOT, TTFT, E2EL and output
throughput are read, with or without ``--save-detailed``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sim.contracts.errors import SpecplanError, echo, read_text

LoadKind = Literal["concurrency", "rate"]
LOAD_KINDS: tuple[str, ...] = ("concurrency", "rate")
SIDE_FIELDS: tuple[str, ...] = ("tpot_p50_ms", "ttft_p50_ms", "e2el_p50_ms", "output_tok_s")
"""What a side (baseline or speculative) may give: p50 latencies as vLLM defines them, and output
tokens per second."""
SPEC_ONLY_FIELDS: tuple[str, ...] = ("acceptance_length", "acceptance_rate")
"""The speculative side may also give its mean acceptance length (vLLM: 1 + accepted / drafts)
or its draft acceptance rate (accepted / draft tokens; acceptance length = 1 + k · rate)."""
HIGHER_IS_BETTER: frozenset[str] = frozenset({"output_tok_s"})
VLLM_SUMMARY: dict[str, str] = {"median_tpot_ms": "tpot_p50_ms", "median_ttft_ms": "ttft_p50_ms",
                                "median_e2el_ms": "e2el_p50_ms", "output_throughput": "output_tok_s"}
"""A `vllm bench serve --save-result` file's summary fields (with or without --save-detailed) and
what they give a side: ``baseline = { vllm_result = "base-n8.json" }``."""
POINT_KEYS: tuple[str, ...] = ("load", "source", "baseline", "speculative", "speedup", "speedup_of",
                               "read_from_figure", "note")
TOP_KEYS: tuple[str, ...] = ("name", "load", "source", "candidate", "description", "fit_to", "points")
FIT_TO: tuple[str, ...] = ("acceptance_length", "speedup", "tpot_p50_ms", "output_tok_s", "e2el_p50_ms")
"""What the lightest point's acceptance may be fitted to; by default the first the point gives, in
this order: the acceptance itself; the speed-up (a bias the two sides share, such as a host
overhead, cancels, so the scale does not absorb it); then the speculative side's TPOT p50, output
tok/s, E2EL p50 (TTFT hardly moves with acceptance)."""


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One load of a measured sweep, as its source writes it."""

    load: float
    """Clients (``concurrency``) or requests per second (``rate``)."""
    source: str
    """Where these numbers were written (paper, post, table), quoted enough to find them."""
    line: int
    """Line of the point's ``[[points]]`` header in the file, for messages."""
    baseline: dict[str, float]
    speculative: dict[str, float]
    speedup: float | None = None
    """A speed-up the source writes directly (speculative ÷ baseline of ``speedup_of``, as a
    ratio where higher is better), when it gives no absolute numbers."""
    speedup_of: str = "output_tok_s"
    read_from_figure: bool = False
    """True only when a number was read off a plot; printed beside the point."""
    note: str = ""

    def measured_speedup(self) -> float | None:
        """The written speed-up, else the ratio of the two sides' ``speedup_of`` (or of the first
        quantity both sides give), higher is better; None when neither is written."""
        if self.speedup is not None:
            return self.speedup
        for q in (self.speedup_of, *SIDE_FIELDS):
            b, s = self.baseline.get(q), self.speculative.get(q)
            if b is not None and s is not None:
                return s / b if q in HIGHER_IS_BETTER else b / s
        return None

    def speedup_quantity(self) -> str | None:
        """The quantity ``measured_speedup`` is a ratio of."""
        if self.speedup is not None:
            return self.speedup_of
        for q in (self.speedup_of, *SIDE_FIELDS):
            if q in self.baseline and q in self.speculative:
                return q
        return None


@dataclass(frozen=True, slots=True)
class SweepPoints:
    """A measured sweep: its loads from the lightest up, one kind of load for all."""

    origin: str
    name: str
    load_kind: LoadKind
    points: tuple[SweepPoint, ...]
    candidate: str | None = None
    description: str = ""
    fit_to: str | None = None
    """What the lightest load's acceptance is fitted to (``FIT_TO``); None: the first given."""


def _header_lines(text: str) -> list[int]:
    """Line numbers of each ``[[points]]`` header, in order (tomllib keeps no positions)."""
    return [i + 1 for i, ln in enumerate(text.splitlines()) if re.match(r"\s*\[\[\s*points\s*\]\]", ln)]


def _positive(v: Any, loc: str, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise SpecplanError(f"{loc}: expected {what} (a number > 0), got {echo(v, 60)}")
    return float(v)


def vllm_summary(path: Path, loc: str, kind: str, load: float) -> dict[str, float]:
    """The summary numbers of one `vllm bench serve --save-result` run, checked against the
    point's load (``max_concurrency`` for clients, ``request_rate`` for a rate)."""
    import json

    from sim.contracts.input_limits import read_text_limited

    text = read_text_limited(path, "vLLM results")
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise SpecplanError(f"{loc}: {path}: not one JSON object ({exc}); give one `vllm bench serve --save-result` "
                            "run per file") from None
    if not isinstance(obj, dict):
        raise SpecplanError(f"{loc}: {path}: expected a JSON object, got {type(obj).__name__}")
    ran = obj.get("max_concurrency") if kind == "concurrency" else obj.get("request_rate")
    if isinstance(ran, bool) or not isinstance(ran, int | float) or float(ran) != load:
        flag = "--max-concurrency" if kind == "concurrency" else "--request-rate"
        raise SpecplanError(f"{loc}: {path}: ran with {flag} {echo(ran, 20)}, but the point's load is {load:g}; "
                            "give the run of this load")
    out = {}
    for key, q in VLLM_SUMMARY.items():
        v = obj.get(key)
        if v is not None:
            out[q] = _positive(v, f"{loc}: {path}: {key}", q.replace("_", " "))
    if not out:
        raise SpecplanError(f"{loc}: {path}: none of {', '.join(VLLM_SUMMARY)}; is it a `vllm bench serve "
                            "--save-result` file?")
    return out


def _side(raw: Any, loc: str, allowed: tuple[str, ...], run: tuple[Path, str, float] | None = None) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise SpecplanError(f"{loc}: expected a table such as {{ tpot_p50_ms = 12.5 }}, got {echo(raw, 60)}")
    out = {}
    if "vllm_result" in raw:
        name = raw["vllm_result"]
        if not isinstance(name, str) or run is None:
            raise SpecplanError(f"{loc}.vllm_result: expected a file name, got {echo(name, 60)}")
        out = vllm_summary(run[0] / name, f"{loc}.vllm_result", run[1], run[2])
    for key, v in raw.items():
        if key == "vllm_result":
            continue
        if key in out:
            raise SpecplanError(f"{loc}.{key}: also read from vllm_result; give it once")
        if key not in allowed:
            raise SpecplanError(f"{loc}.{key}: unknown measurement; valid: {', '.join(allowed)}, vllm_result")
        out[key] = _positive(v, f"{loc}.{key}", "milliseconds" if key.endswith("_ms") else key.replace("_", " "))
    if "acceptance_length" in out and out["acceptance_length"] < 1:
        raise SpecplanError(f"{loc}.acceptance_length: a mean acceptance length is >= 1 (1 + accepted / drafts), "
                            f"got {out['acceptance_length']:g}")
    if "acceptance_rate" in out and out["acceptance_rate"] > 1:
        raise SpecplanError(f"{loc}.acceptance_rate: a rate of accepted draft tokens is in (0, 1], "
                            f"got {out['acceptance_rate']:g}")
    if "acceptance_length" in out and "acceptance_rate" in out:
        raise SpecplanError(f"{loc}: give acceptance_length or acceptance_rate, not both")
    return out


def _point(raw: Any, i: int, line: int, origin: str, default_source: str | None, kind: str) -> SweepPoint:
    at = f"{origin}:{line}: points[{i}]"
    if not isinstance(raw, dict):
        raise SpecplanError(f"{at}: expected a [[points]] table")
    for key in raw:
        if key not in POINT_KEYS:
            raise SpecplanError(f"{at}.{key}: unknown field; valid: {', '.join(POINT_KEYS)}")
    if "load" not in raw:
        raise SpecplanError(f"{at}.load: missing; the clients (concurrency) or requests/s (rate) of this point")
    load = _positive(raw["load"], f"{at}.load", "a load")
    runs = [side["vllm_result"] for side in (raw.get("baseline"), raw.get("speculative"))
            if isinstance(side, dict) and isinstance(side.get("vllm_result"), str)]
    source = raw.get("source", default_source or (f"vllm bench serve --save-result: {', '.join(runs)}" if runs else None))
    if not isinstance(source, str) or not source.strip():
        raise SpecplanError(f"{at}.source: missing; every point says where its numbers were written "
                            "(or set a top-level source)")
    run = (Path(origin).parent, kind, load)
    base = _side(raw.get("baseline", {}), f"{at}.baseline", SIDE_FIELDS, run)
    spec = _side(raw.get("speculative", {}), f"{at}.speculative", SIDE_FIELDS + SPEC_ONLY_FIELDS, run)
    speedup = _positive(raw["speedup"], f"{at}.speedup", "a speed-up ratio") if "speedup" in raw else None
    of = raw.get("speedup_of", "output_tok_s")
    if of not in SIDE_FIELDS:
        raise SpecplanError(f"{at}.speedup_of: expected one of {', '.join(SIDE_FIELDS)}, got {echo(of, 60)}")
    fig = raw.get("read_from_figure", False)
    if not isinstance(fig, bool):
        raise SpecplanError(f"{at}.read_from_figure: expected true or false, got {echo(fig, 60)}")
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise SpecplanError(f"{at}.note: expected a string, got {echo(note, 60)}")
    p = SweepPoint(load, source.strip(), line, base, spec, speedup, of, fig, note)
    if not base and not spec and speedup is None:
        raise SpecplanError(f"{at}: no measurement; give baseline = {{...}}, speculative = {{...}} or speedup")
    if speedup is not None and of in base and of in spec:
        raise SpecplanError(f"{at}.speedup: both sides give {of} already; the speed-up is their ratio")
    return p


def parse_sweep_points(data: dict[str, Any], origin: str, text: str = "") -> SweepPoints:
    """Validate a decoded points file; ``text`` (the file) gives the points' line numbers."""
    for key in data:
        if key not in TOP_KEYS:
            raise SpecplanError(f"{origin}: {key}: unknown field; valid: {', '.join(TOP_KEYS)}")
    kind = data.get("load")
    if kind not in LOAD_KINDS:
        raise SpecplanError(f"{origin}: load: expected \"concurrency\" (N closed-loop clients) or \"rate\" "
                            f"(Poisson requests/s), got {echo(kind, 60)}")
    name = data.get("name", Path(origin).stem)
    cand = data.get("candidate")
    for key, v in (("name", name), ("candidate", cand), ("description", data.get("description", ""))):
        if v is not None and not isinstance(v, str):
            raise SpecplanError(f"{origin}: {key}: expected a string, got {echo(v, 60)}")
    src = data.get("source")
    if src is not None and not isinstance(src, str):
        raise SpecplanError(f"{origin}: source: expected a string, got {echo(src, 60)}")
    raw = data.get("points")
    if not isinstance(raw, list) or len(raw) < 2:
        n = len(raw) if isinstance(raw, list) else 0
        raise SpecplanError(f"{origin}: points: a sweep needs at least two [[points]] (the lightest load is fitted, "
                            f"the others are held out); got {n}")
    lines = _header_lines(text) if text else []
    pts = [_point(r, i, lines[i] if i < len(lines) else 0, origin, src, kind) for i, r in enumerate(raw)]
    seen: dict[float, int] = {}
    for p in pts:
        if p.load in seen:
            raise SpecplanError(f"{origin}:{p.line}: points: load {p.load:g} appears twice (also line {seen[p.load]}); "
                                "one point per load")
        seen[p.load] = p.line
    pts.sort(key=lambda p: p.load)
    light = pts[0]
    fit_to = data.get("fit_to")
    if fit_to is not None and fit_to not in FIT_TO:
        raise SpecplanError(f"{origin}: fit_to: expected one of {', '.join(FIT_TO)}, got {echo(fit_to, 60)}")
    given = fit_targets(light)
    if not given:
        raise SpecplanError(f"{origin}:{light.line}: points (load {light.load:g}, the lightest): nothing to fit "
                            "acceptance on; give its speculative side (acceptance_length, tpot_p50_ms, ...) or "
                            "its speedup")
    if fit_to is not None and fit_to not in given:
        raise SpecplanError(f"{origin}:{light.line}: fit_to = {fit_to!r}, but the lightest point (load {light.load:g}) "
                            f"gives only {', '.join(given)}")
    return SweepPoints(origin, name, kind, tuple(pts), cand, str(data.get("description", "")), fit_to)


def fit_targets(p: SweepPoint) -> list[str]:
    """What ``p`` gives that acceptance can be fitted to, in ``FIT_TO`` order."""
    have = {q for q in p.speculative if q in FIT_TO}
    if "acceptance_rate" in p.speculative:
        have.add("acceptance_length")
    if p.measured_speedup() is not None:
        have.add("speedup")
    return [q for q in FIT_TO if q in have]


def load_sweep_points(path: str | Path) -> SweepPoints:
    """Read and validate a points file; a ``SpecplanError`` naming file, line and field otherwise."""
    from sim.contracts.scenario import parse_toml_text

    p = Path(path)
    text = read_text(p, "points")
    return parse_sweep_points(parse_toml_text(text, str(p)), str(p), text)
