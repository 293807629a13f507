"""How long a restarted replica serves nothing, and where that number comes from.

Why one home: the fleet's restart (the kernels' downtime), the decision's restart window and the
run's source lines must use the same seconds and say the same origin. A scenario's
``fleet.restart.cold_start_s`` is the user's choice; without it the profile's measured cold start
(``cold_start``: load plus the first request's extra time on the profiled machine) is used; and
only without both a default, labelled assumed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.contracts.fleet_config import RestartConfig

DEFAULT_COLD_START_S = 60.0
"""Assumed when neither the scenario nor the profile gives one: a minute to reload and warm up
(the value the shipped restart scenarios typed before cold starts were measured)."""


@dataclass(frozen=True)
class ColdStartChoice:
    seconds: float
    method: str
    """``scenario`` (set by the user), the profile section's method (``measured``, …) or ``assumed``."""
    words: str
    """Where it comes from, for a window's label and a run's sources."""


def cold_start_of(restart: RestartConfig, profile: Any | None) -> ColdStartChoice:
    """The restart's cold start: the scenario's, else the profile's, else the assumed default."""
    if restart.cold_start_s is not None:
        return ColdStartChoice(float(restart.cold_start_s), "scenario", "set in the scenario")
    cold = getattr(profile, "cold_start", None)
    if cold is not None:
        dev = cold.provenance.device
        on = f" on {dev.kind} '{dev.name}'" if dev is not None else ""
        return ColdStartChoice(float(cold.cold_start_s), cold.provenance.method,
                               f"{cold.provenance.method}{on} (profile {profile.name}: load {cold.load_s:.1f} s "
                               f"+ {cold.cold_start_s - cold.load_s:.1f} s first request beyond a warm one)")
    return ColdStartChoice(DEFAULT_COLD_START_S, "assumed",
                           "assumed default: the profile has no measured cold start "
                           "(`specplan profile` measures one; or set fleet.restart.cold_start_s)")


def resolved(restart: RestartConfig | None, profile: Any | None) -> RestartConfig | None:
    """The restart with its cold start in seconds, as the fleet runs it."""
    if restart is None or restart.cold_start_s is not None:
        return restart
    return dataclasses.replace(restart, cold_start_s=cold_start_of(restart, profile).seconds)


def source_line(restart: RestartConfig | None, profile: Any | None) -> str | None:
    """A run's source line for its restart's cold start; None without a restart."""
    if restart is None:
        return None
    c = cold_start_of(restart, profile)
    return f"restart cold start: {c.seconds:.3g} s, {c.words}"


__all__ = ["DEFAULT_COLD_START_S", "ColdStartChoice", "cold_start_of", "resolved", "source_line"]
