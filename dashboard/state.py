"""The dashboard's view state: which files, which what-ifs, as a URL query string.

A view is a scenario name, a profile name, the what-if overrides (``Scenario.with_overrides``
dotted paths, e.g. ``candidates[ngram-k3].k``), the load factors of the sweep and how many
seeds to run. It round-trips through the URL so a view can be shared and reloaded. Only the
what-if paths listed in ``ALLOWED`` may come from a URL: nothing a browser sends can change
which files the simulator reads (``fleet.profile``, ``workload.trace.path``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from sim.contracts.errors import SpecplanError, echo
from sim.contracts.scenario import Scenario

DEFAULT_LOAD_FACTORS: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0)
"""Load sweep of the interactive view, as multiples of the scenario's arrival rate."""
MAX_LOAD_POINTS = 8
MAX_SEEDS = 10

_NAME = r"[A-Za-z0-9._+-]+"
ALLOWED: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"workload\.(rate|burstiness|arrival|client_timeout_s)",
    r"workload\.trace\.rate_scale",
    rf"workload\.segments\[{_NAME}\]\.share",
    r"fleet\.(replicas|price_per_gpu_hour|draft_price_per_hour|routing)",
    r"fleet\.engine\.(memory_utilization|max_num_seqs|max_num_batched_tokens)",
    r"slo\.(ttft_ms|tpot_ms|e2el_ms|pause_ms|percentile)",
    rf"candidates\[{_NAME}\]\.(k|policy|max_batch|k_by_batch|schedule|adaptive|kv_fallback)",
    rf"candidates\[{_NAME}\]\.adaptive\.(on_below_batch|off_above_batch|window_s)",
    r"run\.(duration_s|warmup_s)",
))
RESERVED = ("scenario", "profile", "load", "seeds")

Kind = Literal["number", "int", "choice", "optional_number"]

DEFAULT_MAX_BATCH = 16
"""Batch cut-off given to a candidate switched to ``off_above_batch`` without one."""
DEFAULT_ADAPTIVE = {"on_below_batch": 8, "off_above_batch": 24, "window_s": 5.0}
"""Hysteresis given to a candidate switched to ``adaptive`` (the scenario-format example)."""


@dataclass(frozen=True, slots=True)
class ViewState:
    """Everything a shared link carries."""

    scenario: str | None = None
    """A scenarios/ file name; None when the scenario was uploaded (uploads are not in URLs)."""
    profile: str | None = None
    """A profiles/ file name; None: the scenario's own profile (or the uploaded one)."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """What-if overrides, dotted paths of ``Scenario.with_overrides`` (None removes a field)."""
    load_factors: tuple[float, ...] = DEFAULT_LOAD_FACTORS
    """Sweep points as multiples of the scenario's arrival rate (1.0 is the scenario itself)."""
    seeds: int = 1
    """How many of the scenario's seeds to run (the interactive view runs one by default)."""

    def __post_init__(self) -> None:
        for key in self.overrides:
            check_key(key)
        if not self.load_factors or len(self.load_factors) > MAX_LOAD_POINTS:
            raise SpecplanError(f"load: give 1 to {MAX_LOAD_POINTS} load factors, got {len(self.load_factors)}")
        for f in self.load_factors:
            if not (math.isfinite(f) and 0 < f <= 100):
                raise SpecplanError(f"load: each factor must be in (0, 100], got {f}")
        if not 1 <= self.seeds <= MAX_SEEDS:
            raise SpecplanError(f"seeds: must be 1..{MAX_SEEDS}, got {self.seeds}")


def check_key(key: str) -> str:
    """``key`` if it is a what-if path the dashboard accepts, else a SpecplanError."""
    if not any(p.fullmatch(key) for p in ALLOWED):
        raise SpecplanError(
            f"URL: {echo(key, 80)} is not a what-if setting; valid: workload.rate, workload.burstiness, "
            "workload.segments[NAME].share, fleet.replicas, fleet.engine.memory_utilization, "
            "slo.ttft_ms|tpot_ms|e2el_ms|pause_ms, fleet.price_per_gpu_hour, candidates[NAME].k|policy|max_batch"
        )
    return key


def parse_value(text: str) -> Any:
    """A URL value: ``none`` (remove the field), true/false, int, float, a JSON-ish list of
    numbers (``[[1,5],[8,3]]``), else the string (policy names)."""
    t = text.strip()
    low = t.lower()
    if low in ("none", "null", ""):
        return None
    if low in ("true", "false"):
        return low == "true"
    if re.fullmatch(r"[-+]?\d+", t):
        return int(t)
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(v):
            raise SpecplanError(f"URL: value {t!r} is not a finite number")
        return v
    if t.startswith("["):
        return _parse_list(t)
    return t


def _parse_list(t: str) -> list[Any]:
    """Nested lists of numbers only (k_by_batch); no eval."""
    if not re.fullmatch(r"[\[\]\d.,\s+-]+", t):
        raise SpecplanError(f"URL: list value {echo(t, 60)} may only hold numbers")
    import json

    try:
        v = json.loads(t)
    except ValueError:
        raise SpecplanError(f"URL: cannot read list value {echo(t, 60)}") from None
    return v


def format_value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return repr(v)  # keep "3.0" a float so it round-trips with its type
    if isinstance(v, list | tuple):
        return "[" + ",".join(format_value(x) for x in v) + "]"
    return str(v)


def to_search(state: ViewState) -> str:
    """The URL query string (with leading ``?``) of a view."""
    pairs: list[tuple[str, str]] = []
    if state.scenario:
        pairs.append(("scenario", state.scenario))
    if state.profile:
        pairs.append(("profile", state.profile))
    if state.load_factors != DEFAULT_LOAD_FACTORS:
        pairs.append(("load", ",".join(f"{f:g}" for f in state.load_factors)))
    if state.seeds != 1:
        pairs.append(("seeds", str(state.seeds)))
    pairs += [(k, format_value(v)) for k, v in sorted(state.overrides.items())]
    return "?" + urlencode(pairs, safe="[],.") if pairs else ""


def from_search(search: str | None) -> ViewState:
    """Parse a URL query string; a bad or unknown parameter is a SpecplanError naming it."""
    q = (search or "").lstrip("?")
    scenario = profile = None
    factors = DEFAULT_LOAD_FACTORS
    seeds = 1
    overrides: dict[str, Any] = {}
    for key, value in parse_qsl(q, keep_blank_values=True):
        if key == "scenario":
            scenario = value or None
        elif key == "profile":
            profile = value or None
        elif key == "load":
            factors = parse_load_factors(value)
        elif key == "seeds":
            if not re.fullmatch(r"\d{1,3}", value):
                raise SpecplanError(f"URL: seeds: expected a whole number 1..{MAX_SEEDS}, got {echo(value, 20)}")
            seeds = int(value)
        else:
            overrides[check_key(key)] = parse_value(value)
    return ViewState(scenario, profile, overrides, factors, seeds)


def parse_load_factors(text: str) -> tuple[float, ...]:
    """``"0.5, 1, 2"`` → (0.5, 1.0, 2.0), sorted, duplicates dropped, 1.0 always included (the
    scenario's own load is the run whose details the other charts show)."""
    out = {1.0}
    for part in str(text).replace(";", ",").split(","):
        part = part.strip().rstrip("x×")
        if not part:
            continue
        try:
            f = float(part)
        except ValueError:
            raise SpecplanError(f"load factors: {echo(part, 20)} is not a number; write e.g. 0.5, 1, 2") from None
        if not (math.isfinite(f) and 0 < f <= 100):
            raise SpecplanError(f"load factors: each must be in (0, 100], got {echo(part, 20)}")
        out.add(f)
    if len(out) > MAX_LOAD_POINTS:
        raise SpecplanError(f"load factors: at most {MAX_LOAD_POINTS} points, got {len(out)}")
    return tuple(sorted(out))


# --------------------------------------------------------------------------------------------
# what-if controls


@dataclass(frozen=True, slots=True)
class WhatIf:
    """One control of the what-if panel, bound to a scenario path."""

    key: str
    """``with_overrides`` path."""
    label: str
    group: str
    kind: Kind
    value: Any
    """The scenario's own value (before overrides)."""
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    step: float | str | None = None
    options: tuple[str, ...] = ()


def whatif_fields(scenario: Scenario) -> list[WhatIf]:
    """The controls a scenario offers, with its own values; what a user may change without
    editing files."""
    w, f, s = scenario.workload, scenario.fleet, scenario.slo
    out: list[WhatIf] = []
    if w.rate is not None:
        out.append(WhatIf("workload.rate", "arrival rate", "Traffic", "number", w.rate, "req/s", 1e-6, None, "any"))
        out.append(WhatIf("workload.burstiness", "burstiness (1 = Poisson, < 1 burstier)", "Traffic", "number",
                          w.burstiness, "", 1e-3, None, "any"))
    if w.trace is not None:
        out.append(WhatIf("workload.trace.rate_scale", "trace speed-up", "Traffic", "number", w.trace.rate_scale,
                          "×", 1e-6, None, "any"))
    if len(w.segments) > 1:
        for seg in w.segments:
            out.append(WhatIf(f"workload.segments[{seg.name}].share", f"share of {seg.name}", "Traffic",
                              "number", seg.share, "", 1e-9, None, "any"))
    out.append(WhatIf("fleet.replicas", "replicas", "Fleet", "int", f.replicas, "", 1, 1024, 1))
    out.append(WhatIf("fleet.engine.memory_utilization", "memory utilization", "Fleet", "number",
                      f.engine.memory_utilization, "fraction", 0.01, 1.0, 0.01))
    out.append(WhatIf("fleet.engine.max_num_seqs", "max running requests (empty: engine default)", "Fleet",
                      "optional_number", f.engine.max_num_seqs, "", 1, None, 1))
    for name, words in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E latency"), ("pause", "stream pause")):
        out.append(WhatIf(f"slo.{name}_ms", f"SLO {words}",
                          "SLO", "optional_number", getattr(s, f"{name}_ms"), "ms", 1e-6, None, "any"))
    out.append(WhatIf("fleet.price_per_gpu_hour", "price per device-hour", "Prices", "optional_number",
                      f.price_per_gpu_hour, "$/h", 0, None, "any"))
    out.append(WhatIf("fleet.draft_price_per_hour", "draft hardware per hour", "Prices", "number",
                      f.draft_price_per_hour, "$/h", 0, None, "any"))
    for c in scenario.speculative:
        policies = ("fixed", "off_above_batch", "adaptive") + (
            (c.policy,) if c.policy in ("k_by_batch", "kv_fallback") else ())
        out.append(WhatIf(f"candidates[{c.name}].policy", f"{c.name}: policy", "Candidates", "choice",
                          c.policy, "", options=policies))
        if c.policy != "k_by_batch" or c.schedule is not None:  # a computed schedule's largest k
            out.append(WhatIf(f"candidates[{c.name}].k", f"{c.name}: k", "Candidates", "int", c.k,
                              "tokens", 1, None, 1))
        out.append(WhatIf(f"candidates[{c.name}].max_batch", f"{c.name}: speculation off above batch size",
                          "Candidates", "optional_number", c.max_batch, "requests", 1, None, 1))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return a == b


def _coerce(field_: WhatIf, raw: Any) -> Any:
    if raw is None or raw == "":
        if field_.kind == "optional_number":
            return None
        raise SpecplanError(f"{field_.label}: a value is required")
    if field_.kind == "choice":
        if raw not in field_.options:
            raise SpecplanError(f"{field_.label}: {raw!r} is not valid; valid: {', '.join(field_.options)}")
        return raw
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise SpecplanError(f"{field_.label}: expected a number, got {echo(str(raw), 20)}") from None
    if not math.isfinite(v):
        raise SpecplanError(f"{field_.label}: expected a finite number, got {raw}")
    if field_.kind == "int" or (field_.step == 1):
        if not v.is_integer():
            raise SpecplanError(f"{field_.label}: expected a whole number, got {raw}")
        return int(v)
    return v


def overrides_from_controls(scenario: Scenario, values: Mapping[str, Any]) -> dict[str, Any]:
    """Turn control values into the overrides that differ from the scenario.

    Keeps links short (only changes travel) and translates what a single control cannot say
    alone: burstiness ≠ 1 on a Poisson workload switches arrivals to gamma; a policy change
    fills the fields the new policy needs (from the other controls or the scenario) and removes
    the ones it does not use.
    """
    fields = {f.key: f for f in whatif_fields(scenario)}
    typed: dict[str, Any] = {}
    for key, raw in values.items():
        if key in fields:
            typed[key] = _coerce(fields[key], raw)
    out = {k: v for k, v in typed.items() if not _same(v, fields[k].value)}
    b = typed.get("workload.burstiness")
    if b is not None and scenario.workload.arrival == "poisson" and not _same(b, 1.0):
        out["workload.arrival"] = "gamma"
    for c in scenario.speculative:
        pre = f"candidates[{c.name}]"
        for key in (f"{pre}.policy", f"{pre}.k", f"{pre}.max_batch"):
            out.pop(key, None)
        policy = typed.get(f"{pre}.policy", c.policy)
        k = typed.get(f"{pre}.k", c.k)
        if k is None and policy != "k_by_batch":
            k = c.max_k
        max_batch = typed.get(f"{pre}.max_batch", c.max_batch)
        want: dict[str, Any] = {"policy": policy, "k": None, "max_batch": None, "adaptive": None,
                                "k_by_batch": None, "kv_fallback": None, "schedule": None}
        if policy == "k_by_batch" and c.schedule is not None:  # computed from the profile, up to k
            want["schedule"], want["k"] = c.schedule, k
        elif policy == "k_by_batch":
            want["k_by_batch"] = c.k_by_batch
        else:
            want["k"] = k
        if policy == "off_above_batch":
            want["max_batch"] = max_batch if max_batch is not None else DEFAULT_MAX_BATCH
        cur_adaptive = None if c.adaptive is None else {
            "on_below_batch": c.adaptive.on_below_batch, "off_above_batch": c.adaptive.off_above_batch,
            "window_s": c.adaptive.window_s}
        if policy == "adaptive":
            want["adaptive"] = cur_adaptive or dict(DEFAULT_ADAPTIVE)
        cur_kvf = None if c.kv_fallback is None else {
            "off_above": c.kv_fallback.off_above, "on_below": c.kv_fallback.on_below,
            "window_s": c.kv_fallback.window_s}
        if policy == "kv_fallback":  # offered only to a candidate that has its thresholds
            want["kv_fallback"] = cur_kvf
        have = {"policy": c.policy, "k": c.k, "max_batch": c.max_batch, "adaptive": cur_adaptive,
                "k_by_batch": c.k_by_batch, "kv_fallback": cur_kvf, "schedule": c.schedule}
        for name, v in want.items():
            if not _same(v, have[name]):
                out[f"{pre}.{name}"] = v
    for key in out:
        check_key(key)
    return out


def control_values(scenario: Scenario, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What each control shows: the override if any, else the scenario's own value."""
    return {f.key: overrides.get(f.key, f.value) for f in whatif_fields(scenario)}


def apply(scenario: Scenario, state: ViewState) -> Scenario:
    """The scenario the view runs: overrides applied (a candidate named for its k renamed for
    the new one, ``follow_k``), seeds cut to ``state.seeds``."""
    s = follow_k(scenario, scenario.with_overrides(dict(state.overrides))) if state.overrides else scenario
    seeds = list(s.run.seeds)[: state.seeds]
    if len(seeds) < state.seeds:  # more seeds asked than the file lists: extend past its largest
        seeds += [max(seeds) + i + 1 for i in range(state.seeds - len(seeds))]
    if tuple(seeds) != s.run.seeds:
        s = s.with_overrides({"run.seeds": seeds})
    return s


def follow_k(base: Scenario, changed: Scenario) -> Scenario:
    """``changed`` with every candidate whose name carries its k (``draft-1b-k3``, ``k3-eagle``)
    renamed for the k a what-if gave it (``draft-1b-k5``), so no chart, table or verdict shows
    a k the run did not use. A new name another candidate already has gets ``-whatif`` added."""
    renames: dict[str, str] = {}
    taken = set(changed.candidate_names)
    for old, new in zip(base.candidates, changed.candidates, strict=True):
        if old.k is None or new.k is None or old.k == new.k:
            continue
        tags = list(re.finditer(rf"(?<![A-Za-z0-9])k{old.k}(?![0-9])", new.name))
        if not tags:
            continue
        t = tags[-1]
        name = f"{new.name[:t.start()]}k{new.k}{new.name[t.end():]}"
        if name in taken:
            name = f"{name}-whatif"
        taken.add(name)
        renames[new.name] = name
    if not renames:
        return changed
    return changed.with_overrides({f"candidates[{o}].name": n for o, n in renames.items()})


def with_overrides(state: ViewState, overrides: Mapping[str, Any], *, load_factors: Sequence[float] | None = None,
                   seeds: int | None = None) -> ViewState:
    """A copy of ``state`` with new overrides (and optionally load factors and seed count)."""
    return ViewState(state.scenario, state.profile, dict(overrides),
                     tuple(load_factors) if load_factors is not None else state.load_factors,
                     seeds if seeds is not None else state.seeds)
