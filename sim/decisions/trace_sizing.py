"""How a recorded trace is sized: the fleet its capacity is searched on, and the replicas it
needs per window of time (the fleet an autoscaler would follow).

Why: one fleet size for a whole trace is what a static deployment buys; an autoscaled one
(llm-d's workload-variant autoscaler, a KEDA/HPA rule on queue depth) holds fewer replicas in
the quiet windows and more in the peak. Its cost is the *mean* GPUs over the windows, its
headroom the *peak*; both come from simulating each window, not from dividing its rate by a
per-replica capacity (a trace's bursts do not split that way; sim/decisions/capacity.py).

The rule: the trace is replayed at the target rate (its one slice, every gap divided alike:
``Scenario.with_load_scale``) and cut into windows of ``window_s`` replayed seconds; each
window's requests are simulated alone, from an empty fleet, and it needs the fewest replicas
that carry them across the seeds (the same integer search and carry rule as the whole trace's
count, ``fleet_sizing.fewest_replicas``). Not modelled: the time a new replica takes to start, and the backlog one
window hands the next. A window with fewer requests than the SLO percentile needs is not judged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.decisions.load_scaling import arrival_rate
from sim.decisions.sustain import SustainCriteria
from sim.results.plain_numbers import rate as plain_rate

SOURCE = ("simulated: each window's requests alone from an empty fleet, the fewest replicas that carry "
          "them at the SLO across the seeds (the whole trace's rule); replica start-up time and backlog "
          "carried between windows not modelled")


@dataclass(frozen=True, slots=True)
class WindowNeed:
    """One window of the replayed trace and the replicas each candidate needs for it."""

    t0: float
    """Start of the window, seconds of the run at the target rate."""
    t1: float
    trace_t0: float
    """The same window in the trace's own seconds (after its first row)."""
    trace_t1: float
    requests: int
    replicas: Mapping[str, int | None]
    """Per candidate: the fewest replicas that carry the window (None: not judged or not carried)."""
    status: Mapping[str, str]
    """Per candidate: why ``replicas`` is what it is (the integer search's words, "too few requests …")."""

    @property
    def rate(self) -> float:
        return self.requests / (self.t1 - self.t0)


@dataclass(frozen=True, slots=True)
class WindowSizing:
    """Replicas per window for every candidate, and the peak and mean GPUs they add up to."""

    window_s: float
    target_rate: float
    candidates: tuple[str, ...]
    windows: tuple[WindowNeed, ...]
    gpus_per_replica: Mapping[str, int]
    static_replicas: Mapping[str, int | None]
    """The whole trace's fleet (capacity's count) for comparison."""
    seeds: tuple[int, ...]

    def judged(self, name: str) -> list[WindowNeed]:
        return [w for w in self.windows if w.replicas.get(name) is not None]

    def peak_replicas(self, name: str) -> int | None:
        ws = self.judged(name)
        return max(int(w.replicas[name]) for w in ws) if ws else None  # type: ignore[arg-type]

    def mean_replicas(self, name: str) -> float | None:
        """Time-weighted mean over the judged windows (the last one may be shorter)."""
        ws = self.judged(name)
        span = sum(w.t1 - w.t0 for w in ws)
        return sum(int(w.replicas[name]) * (w.t1 - w.t0) for w in ws) / span if span > 0 else None  # type: ignore[arg-type]

    def lines(self) -> list[str]:
        """The terminal section: one row per window, then peak and mean GPUs per candidate."""
        names = self.candidates
        head = (f"replicas needed per {self.window_s:g} s window of the trace at {self.target_rate:.4g} req/s "
                f"({SOURCE}; seeds {', '.join(map(str, self.seeds))}):")
        w0 = max(14, *(len(_span(w)) for w in self.windows)) if self.windows else 14
        cols = [max(len(n), 9) for n in names]
        out = [head, f"  {'window (run s)':<{w0}} {'requests':>8} {'req/s':>7}  "
                     + "  ".join(f"{n:>{c}}" for n, c in zip(names, cols, strict=True))]
        for w in self.windows:
            cells = ["-" if w.replicas.get(n) is None else str(w.replicas[n]) for n in names]
            out.append(f"  {_span(w):<{w0}} {w.requests:>8} {w.rate:>7.3g}  "
                       + "  ".join(f"{c:>{k}}" for c, k in zip(cells, cols, strict=True)))
        for label, fn in (("peak GPUs", self.peak_gpus), ("mean GPUs", self.mean_gpus),
                          ("static fleet GPUs", self.static_gpus)):
            cells = [_num(fn(n)) for n in names]
            out.append(f"  {label:<{w0 + 17}}  " + "  ".join(f"{c:>{k}}" for c, k in zip(cells, cols, strict=True)))
        out += [f"  {n}: {why}" for n in names for why in self._gaps(n)]
        out.append("  peak: what a fixed fleet sized per window must hold; mean: the GPU-hours per hour an "
                   "autoscaler that followed the windows exactly would pay; static: capacity's count for the "
                   "whole trace")
        return out

    def peak_gpus(self, name: str) -> float | None:
        p = self.peak_replicas(name)
        return None if p is None else float(p * self.gpus_per_replica[name])

    def mean_gpus(self, name: str) -> float | None:
        m = self.mean_replicas(name)
        return None if m is None else m * self.gpus_per_replica[name]

    def static_gpus(self, name: str) -> float | None:
        n = self.static_replicas.get(name)
        return None if n is None else float(n * self.gpus_per_replica[name])

    def _gaps(self, name: str) -> list[str]:
        """Windows left out of the peak and mean, grouped by why."""
        why: dict[str, list[str]] = {}
        for w in self.windows:
            if w.replicas.get(name) is None:
                why.setdefault(w.status[name], []).append(_span(w))
        return [f"{len(spans)} window(s) not in the peak and mean ({', '.join(spans[:4])}"
                f"{', …' if len(spans) > 4 else ''}): {reason}" for reason, spans in why.items()]

    def to_json(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s, "target_rate": self.target_rate, "seeds": list(self.seeds),
            "source": SOURCE,
            "windows": [{"t0_s": w.t0, "t1_s": w.t1, "trace_t0_s": w.trace_t0, "trace_t1_s": w.trace_t1,
                         "requests": w.requests, "rate": w.rate, "replicas": dict(w.replicas),
                         "status": dict(w.status)} for w in self.windows],
            "candidates": {n: {"peak_replicas": self.peak_replicas(n), "mean_replicas": self.mean_replicas(n),
                               "peak_gpus": self.peak_gpus(n), "mean_gpus": self.mean_gpus(n),
                               "static_replicas": self.static_replicas.get(n), "static_gpus": self.static_gpus(n),
                               "gpus_per_replica": self.gpus_per_replica[n],
                               "windows_judged": len(self.judged(n))} for n in self.candidates},
        }


def _span(w: WindowNeed) -> str:
    return f"{w.t0:g}–{w.t1:g}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def trace_fleet(load: Any, scenario: Any, chosen: Sequence[str], target: float,
                 seeds: Sequence[int], criteria: SustainCriteria, max_replicas: int,
                 say: Callable[[str], None], memo: dict[Any, Any] | None = None) -> int:
    """The fleet a trace's capacity is searched on: the scenario's, or more when the trace at the
    target needs more (the baseline's fewest replicas, else the first candidate's). Why: a
    trace's groups of requests land on one replica whatever the rate, so a fleet too small for
    them carries no rate at all and its capacity would say nothing. ``memo``: the plan's probes at
    the target, so the lead candidate's count later costs nothing more."""
    from sim.decisions.fleet_sizing import fewest_replicas  # the integer search, one home

    fleet = int(scenario.fleet.replicas)
    lead = scenario.baseline.name if scenario.baseline.name in chosen else chosen[0]
    say(f"{lead}: replicas the trace needs at {plain_rate(target)} (where capacity is searched)")
    n = fewest_replicas(load, lead, target, target / fleet, seeds, criteria, max_replicas, memo).n
    if n is None or n <= fleet:
        return fleet
    load.notes.add(f"capacity searched on {n} replicas, the fewest on which {lead} carries the trace at "
                   f"{plain_rate(target)} (the scenario's fleet.replicas = {fleet} does not); capacity shown "
                   "per replica of that fleet")
    return n


def check_windows(scenario: Any, window_s: float, target_rate: float | None = None) -> float:
    """Refuse, in one line, what cannot be sized per window (before any simulation runs);
    returns the replayed trace's length in seconds at ``target_rate`` (default its own rate)."""
    w = scenario.workload
    if w.arrival != "trace" or w.trace is None:
        raise SpecplanError(f"--per-window: sizes the windows of a recorded trace; this scenario's "
                            f"workload.arrival is {w.arrival!r} (give arrival = \"trace\")")
    if scenario.fleet.restart is not None:
        raise SpecplanError("--per-window: a scenario with [fleet.restart] has one fleet through the "
                            "restart; remove the restart to size windows")
    if not (math.isfinite(window_s) and window_s > 0):
        raise SpecplanError(f"--per-window: must be a number of seconds > 0, got {window_s:g}")
    rate = arrival_rate(scenario)
    target = rate if target_rate is None else target_rate
    if not (math.isfinite(target) and target > 0):
        raise SpecplanError(f"--target-rate: must be > 0 req/s, got {target}")
    end = float(scenario.with_load_scale(target / rate).run.duration_s)
    if window_s > end:
        raise SpecplanError(f"--per-window: {window_s:g} s is longer than the replayed trace ({end:.6g} s at "
                            f"{target:.6g} req/s); give ≤ {end:.6g}")
    return end


def window_scenarios(scenario: Any, target_rate: float, window_s: float) -> list[tuple[float, float, Any]]:
    """(t0, t1, scenario replaying only that window's requests, or None for a window without
    any) for each window of the trace at ``target_rate``; every request of the replay falls in
    exactly one window.

    A boundary between two windows is moved to halfway between the trace rows on either side of
    it (never more than half a gap): a row that sat on it could otherwise fall in both windows
    or in neither, by rounding, and a group of requests on one millisecond is never split."""
    from sim.contracts.trace import read_trace

    check_windows(scenario, window_s, target_rate)
    sc = scenario.with_load_scale(target_rate / arrival_rate(scenario))
    t, end = sc.workload.trace, float(sc.run.duration_s)
    off = read_trace(t).offsets_s
    first, last = t.start_s, t.start_s + t.window_s  # the slice, in trace seconds
    n_win = max(1, math.ceil(end / window_s - 1e-9))
    cuts = [first]
    for k in range(1, n_win):
        cut = first + k * window_s * t.rate_scale
        i = int(np.searchsorted(off, cut, side="left"))
        if 0 < i < len(off) and off[i] < last:
            cut = 0.5 * (off[i - 1] + off[i])
        cuts.append(min(max(cut, cuts[-1]), last))
    cuts.append(last)
    out: list[tuple[float, float, Any]] = []
    for k in range(n_win):
        t0, t1 = k * window_s, min((k + 1) * window_s, end)
        a, b = cuts[k], cuts[k + 1]
        part = None if not b > a else sc.with_overrides(
            {"workload.trace.start_s": a, "workload.trace.window_s": b - a,
             "run.duration_s": (b - a) / t.rate_scale, "run.warmup_s": 0.0})
        if part is not None and not (part.workload.mean_rate(part.run.duration_s) or 0.0) > 0:
            part = None  # no row lies in it
        out.append((t0, t1, part))
    return out


def size_windows(scenario: Any, profile: Any, window_s: float, *, target_rate: float,
                 seeds: Sequence[int], candidates: Sequence[str], criteria: SustainCriteria,
                 static_replicas: Mapping[str, int | None], max_replicas: int = 256,
                 progress: Callable[[str], None] | None = None) -> WindowSizing:
    """Replicas each candidate needs per window (module docstring: the rule)."""
    from sim.decisions.fleet_sizing import fewest_replicas  # the integer search, reused
    from sim.decisions.simulated_load import SimulatedLoad
    from sim.results.runner import candidate_profiles

    say = progress or (lambda _m: None)
    if not scenario.run.drain:
        scenario = scenario.with_overrides({"run.drain": True})  # a window's backlog is judged, not cut
    profiles = candidate_profiles(scenario, profile, [scenario.candidate(n) for n in candidates])
    lead = next((profiles[n] for n in candidates if scenario.candidate(n).fleet is None), profiles[candidates[0]])
    named = profiles if scenario.has_named_fleets else None
    needs = []
    for t0, t1, part in window_scenarios(scenario, target_rate, window_s):
        span = float(part.run.duration_s) if part is not None else t1 - t0  # boundaries between rows
        n_req = 0 if part is None else round((part.workload.mean_rate(span) or 0.0) * span)
        tr = scenario.workload.trace if part is None else part.workload.trace
        trace_t0, trace_t1 = (tr.start_s, tr.start_s) if part is None else (tr.start_s, tr.start_s + tr.window_s)
        reps: dict[str, int | None] = {}
        status: dict[str, str] = {}
        for name in candidates:
            if n_req < criteria.min_measured:
                reps[name] = None
                status[name] = (f"too few requests to judge ({n_req}; p{criteria.percentile:g} needs ≥ "
                                f"{criteria.min_measured}; a longer --per-window)")
                continue
            say(f"{name}: replicas for the window {t0:g}–{t1:g} s ({n_req} requests)")
            rate = arrival_rate(part)  # the window's own rate: its requests as they arrive
            whole = static_replicas.get(name) or 1
            guess = max(1, math.ceil(whole * rate / target_rate - 1e-9))
            load = SimulatedLoad(part, lead, criteria, 0, None, profiles=named)
            size = fewest_replicas(load, name, rate, rate / guess, seeds, criteria, max_replicas)
            reps[name] = size.n
            status[name] = size.status
        needs.append(WindowNeed(t0, t1, trace_t0, trace_t1, n_req, reps, status))
    gpus = {n: scenario.fleet_for(n).gpus_per_replica for n in candidates}
    return WindowSizing(float(window_s), float(target_rate), tuple(candidates), tuple(needs), gpus,
                        dict(static_replicas), tuple(int(s) for s in seeds))


def windows_of_plan(scenario: Any, profile: Any, report: Any, answer: Any, window_s: float,
                    progress: Callable[[str], None] | None = None) -> WindowSizing:
    """``size_windows`` at a capacity plan's target rate, on its seeds and candidates, beside
    the whole-trace fleet its answer names (``specplan capacity --per-window``)."""
    names = [c.candidate for c in report.candidates]
    if not names:
        raise SpecplanError("--per-window: the capacity plan has no candidates to size")
    facts = answer.whole.facts
    return size_windows(scenario, profile, window_s, target_rate=report.candidates[0].target_rate,
                        seeds=report.candidates[0].seeds, candidates=names, criteria=report.criteria,
                        static_replicas={n: facts.candidate(n).replicas for n in names}, progress=progress)


__all__ = ["SOURCE", "trace_fleet", "check_windows", "WindowNeed", "WindowSizing", "size_windows", "window_scenarios", "windows_of_plan"]
