"""The scenario's [[two_routes]]: a speculative pool and a baseline pool behind a router by load.

Why a table of its own: vLLM fixes ``speculative_config`` at start-up, so a load-dependent
policy (k by batch, a load cut-off, the KV fallback) is idealised in one engine; what a team can
deploy today is two pools, one speculating and one not, and a router that sends a request to
the speculative pool while the load it sees is low. This names the two candidates that make the
pools and the router's rule; the decision sizes and prices them together
(``sim.decisions.two_route``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sim.contracts.errors import FieldError, echo
from sim.contracts.scenario_fields import NAME_RE

RouteRule = Literal["rate", "overflow"]


@dataclass(frozen=True, slots=True)
class TwoRouteConfig:
    """One two-route deployment to size and price beside the scenario's candidates."""

    name: str
    """Label of the option in every surface ("eagle3-two-route")."""
    speculative: str
    """The speculative candidate whose configuration the speculative pool runs (its fleet too)."""
    baseline: str = "baseline"
    """The baseline candidate (speculation = "off") the other pool runs (its fleet too)."""
    rule: RouteRule = "rate"
    """``rate``: a request goes to the speculative pool when all arrivals of the last ``window_s``
    seconds (this one included), per second, are at most the threshold, else to the baseline
    pool (speculation on or off for all traffic, as an in-engine cut-off would be).
    ``overflow``: it goes to the speculative pool when the requests the router sent there in the
    last ``window_s`` seconds (this one included), per second, are at most the threshold, else to
    the baseline pool (the speculative pool filled up to its capacity, the rest spills over)."""
    window_s: float = 10.0
    """The router's counting window (seconds)."""
    threshold_rps: float | None = None
    """The router's threshold (req/s); unset: searched with the pools' replicas (the speculative
    pool's capacity at the SLO, its replicas × the candidate's capacity per replica, and
    quartiles of the load the router sees; ``sim.decisions.two_route_sizing``)."""
    speculative_replicas: int | None = None
    """Replicas of the speculative pool; unset: sized (see docs/decisions.md)."""
    baseline_replicas: int | None = None
    """Replicas of the baseline pool; unset: sized."""
    idealised: str | None = None
    """A candidate with a load-dependent in-engine policy to show beside this option."""

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise FieldError("name", f"must match [A-Za-z0-9._+-]+, got {echo(self.name, 60)}")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise FieldError("window_s", f"must be a finite number of seconds > 0, got {self.window_s}")
        t = self.threshold_rps
        if t is not None and not (math.isfinite(t) and t > 0):
            raise FieldError("threshold_rps", f"must be a finite rate > 0 req/s (or unset: the "
                             f"speculative pool's capacity), got {t}")
        for f in ("speculative_replicas", "baseline_replicas"):
            v = getattr(self, f)
            if v is not None and not 0 <= v <= 4096:
                raise FieldError(f, f"must be a whole number in 0..4096 (or unset: sized), got {v}")
        if self.speculative_replicas == 0 and self.baseline_replicas == 0:
            raise FieldError("baseline_replicas", "one pool needs at least one replica; both are 0")


def check_two_routes(routes: Sequence[TwoRouteConfig], candidates: Sequence[Any]) -> None:
    """Each [[two_routes]] names a speculative and a baseline candidate, and a name of its own."""
    names = {c.name: c for c in candidates}
    spec = [n for n, c in names.items() if not c.is_baseline]
    base = [n for n, c in names.items() if c.is_baseline]
    seen: set[str] = set()
    for i, r in enumerate(routes):
        where = f"two_routes[{i}]"
        if r.name in names or r.name in seen:
            raise FieldError(f"{where}.name", f"{echo(r.name, 60)} is already a candidate or route name")
        seen.add(r.name)
        if r.speculative not in spec:
            raise FieldError(f"{where}.speculative", f"{echo(r.speculative, 60)} is not a speculative candidate; "
                             f"valid: {', '.join(spec) or 'none'}")
        if r.baseline not in base:
            raise FieldError(f"{where}.baseline", f"{echo(r.baseline, 60)} is not a baseline candidate "
                             f"(speculation = \"off\"); valid: {', '.join(base)}")
        if r.idealised is not None and r.idealised not in spec:
            raise FieldError(f"{where}.idealised", f"{echo(r.idealised, 60)} is not a speculative candidate; "
                             f"valid: {', '.join(spec) or 'none'}")
