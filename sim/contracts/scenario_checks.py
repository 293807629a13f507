"""The scenario's cross-table rules: names and baselines, named fleets, restarts, prompt fit,
acceptance keys (each table checks its own fields)."""

from __future__ import annotations

from typing import Any

from sim.contracts.errors import FieldError, clip, echo
from sim.contracts.scenario_fields import NAME_RE
from sim.contracts.two_route import check_two_routes


def check_scenario(sc: Any) -> None:
    """Every rule that ties the scenario's tables together; one line naming the field at fault."""
    seen: set[str] = set()
    based: set[str | None] = set()  # one baseline per fleet: hardware compared without speculation
    for i, c in enumerate(sc.candidates):
        if c.name in seen:
            raise FieldError(f"candidates[{i}].name", f"duplicate candidate name {echo(c.name, 60)}")
        seen.add(c.name)
        if c.is_baseline and c.fleet in based:
            raise FieldError(
                f"candidates[{i}].speculation", "at most one baseline (speculation = \"off\")"
                + (" per fleet" if sc.fleets else "") + (f" (fleet {echo(c.fleet, 60)})" if c.fleet else "")
            )
        if c.is_baseline:
            based.add(c.fleet)
    _check_fleets(sc)
    check_two_routes(sc.two_routes, sc.candidates)
    r = sc.fleet.restart
    if r is not None and r.at_s >= sc.run.duration_s:
        raise FieldError(
            "fleet.restart.at_s",
            f"must be < run.duration_s ({sc.run.duration_s}), got {r.at_s}",
        )
    eng = sc.fleet.engine
    if not eng.chunked_prefill and sc.workload.arrival != "trace":
        budget = eng.max_num_batched_tokens  # None: the device's default, checked at run time
        for i, s in enumerate(sc.workload.segments):
            assert s.prompt_tokens is not None  # checked by WorkloadConfig
            ub = s.prompt_tokens.upper_bound
            if ub is None or (budget is not None and ub > budget):
                raise FieldError(
                    f"workload.segments[{i}].prompt_tokens",
                    f"longest prompt ({'unbounded: set max' if ub is None else ub}) must fit "
                    f"fleet.engine.max_num_batched_tokens ({budget or 'engine default'}) when "
                    "chunked_prefill = false",
                )
    needs_key = [c for c in sc.candidates if c.speculates and c.assumed_acceptance is None
                 and not (c.acceptance_trace is not None and c.trace_format != "specplan")]
    if needs_key:
        for i, s in enumerate(sc.workload.segments):
            if s.acceptance is None:
                raise FieldError(
                    f"workload.segments[{i}].acceptance",
                    f"required by candidate {echo(needs_key[0].name, 60)} (or give it "
                    "assumed_acceptance): {task, language} of a profile acceptance segment",
                )


def _check_fleets(sc: Any) -> None:
    """Every ``fleet = NAME`` names a [fleets] table; prices on every fleet used or on none."""
    named = sc.fleets or {}
    for name in named:
        if not NAME_RE.match(name):
            raise FieldError(f"fleets.{clip(name, 60)}", "a fleet name must match [A-Za-z0-9._+-]+")
    for i, c in enumerate(sc.candidates):
        if c.fleet is not None and c.fleet not in named:
            raise FieldError(f"candidates[{i}].fleet", f"no [fleets.{clip(c.fleet, 60)}] table; valid: "
                             f"{', '.join(named) or 'none defined (add a [fleets.NAME] table)'}")
    used = {c.fleet for c in sc.candidates}
    if len(used) < 2:
        return
    priced = {n: (sc.fleet if n is None else named[n]).price_per_gpu_hour is not None for n in used}
    if len(set(priced.values())) > 1:
        bare = next(n for n, p in priced.items() if not p)
        raise FieldError(
            "fleet.price_per_gpu_hour" if bare is None else f"fleets.{bare}.price_per_gpu_hour",
            "required: other fleets the candidates run on are priced, and hardware compared "
            "without its price cannot be ranked by cost (or remove every price)")
