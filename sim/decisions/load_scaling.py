"""A scenario at another load or run length, its traffic's shape kept: what capacity probes run.

A recorded trace is scaled in time, never re-sliced: a probe at another rate replays the same
requests with every gap divided alike (``Scenario.with_load_scale``; docs/decisions.md,
"Traces at another rate")."""

from __future__ import annotations

from typing import Any

from sim.contracts.errors import SpecplanError
from sim.model.cold_start import DEFAULT_COLD_START_S


def arrival_rate(scenario: Any) -> float:
    """Mean arrival rate of the scenario (req/s): what capacity is expressed in."""
    w = scenario.workload
    rate = w.mean_rate(scenario.run.duration_s)
    if w.arrival == "concurrency":
        raise SpecplanError(f"{scenario.origin or 'scenario'}: workload.arrival: capacity searches "
                            "the arrival rate, and closed-loop clients have none (their load is "
                            "workload.concurrency); compare N instead: specplan sweep SCENARIO "
                            "--vary workload.concurrency=1,8,32,64,128")
    if rate is None or not rate > 0:
        raise SpecplanError(f"{scenario.origin or 'scenario'}: workload.arrival: capacity scales the "
                            f"arrival rate, so it needs poisson, gamma or piecewise arrivals with a "
                            f"rate > 0, got {w.arrival!r}")
    return float(rate)


def with_duration(scenario: Any, duration_s: float) -> Any:
    """The scenario with a shorter (or longer) run, warm-up scaled alike — refused when the
    scenario's time structure (piecewise points, a restart) would fall outside the new run."""
    if not duration_s > 0:
        raise SpecplanError(f"--duration: must be > 0 s, got {duration_s}")
    w, f = scenario.workload, scenario.fleet
    if w.piecewise is not None and w.piecewise.shape != "daily":
        last = max(t for t, _ in w.piecewise.points)
        if duration_s < last:
            raise SpecplanError(f"--duration: {duration_s:g} s would cut the piecewise arrival "
                                f"profile (last point at {last:g} s); give ≥ {last:g} s")
    cold = None if f.restart is None else (  # unset: the default (the profile's own is read at run time)
        DEFAULT_COLD_START_S if f.restart.cold_start_s is None else f.restart.cold_start_s)
    if f.restart is not None and cold is not None and duration_s <= f.restart.at_s + cold:
        end = f.restart.at_s + cold
        raise SpecplanError(f"--duration: {duration_s:g} s would cut the restart (at {f.restart.at_s:g} s, "
                            f"serving again at {end:g} s); give > {end:g} s")
    run = scenario.run
    warm = run.warmup_s * duration_s / run.duration_s
    return scenario.with_overrides({"run.duration_s": float(duration_s), "run.warmup_s": warm})


def at_load(scenario: Any, rate: float, replicas: int, min_requests: int = 0) -> Any:
    """The scenario with its mean arrival rate scaled to ``rate`` and ``replicas`` replicas.

    The traffic's shape (burstiness, piecewise profile, segment mix) is kept; only its level
    changes (``Scenario.with_load_scale``). With stationary arrivals (poisson, gamma) and no
    restart, the run is lengthened so that at least ``min_requests`` arrive after warm-up: a
    percentile judged on a handful of requests is noise, and simulation cost grows with the
    number of requests, not with simulated time, so this keeps every probe equally cheap.
    """
    sc = scenario.with_load_scale(rate / arrival_rate(scenario))
    over: dict[str, Any] = {}
    if int(replicas) != int(scenario.fleet.replicas):
        over["fleet.replicas"] = int(replicas)
    run = scenario.run
    if (min_requests > 0 and scenario.workload.arrival in ("poisson", "gamma")
            and scenario.fleet.restart is None):
        need = run.warmup_s + min_requests / rate
        if need > run.duration_s:
            over["run.duration_s"] = float(need)
    return sc.with_overrides(over) if over else sc


def trace_probe_note(scenario: Any, rate: float) -> str:
    """What a probe of a trace scenario replays at ``rate``, in the fields `specplan simulate`
    takes, so the fleet a capacity search names can be confirmed on exactly those requests."""
    sc = scenario.with_load_scale(rate / arrival_rate(scenario))
    t, run = sc.workload.trace, sc.run
    n = round(arrival_rate(sc) * run.duration_s)
    return (f"trace {t.resolved_path.name}: every probe replays the same {n} requests (trace seconds "
            f"{t.start_s:g}–{t.start_s + t.window_s:g}) with every gap divided alike, so its bursts "
            f"stay bursts; at {rate:.4g} req/s that is workload.trace = {{start_s = {t.start_s:.12g}, "
            f"window_s = {t.window_s:.12g}, rate_scale = {t.rate_scale:.12g}}}, run.duration_s = "
            f"{run.duration_s:.12g}, run.warmup_s = {run.warmup_s:.12g} (the same run `specplan "
            f"simulate` confirms the fleet with)")
