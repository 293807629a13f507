"""A profile's optional ``cold_start`` section: how long a restarted replica serves nothing.

Why its own section: a restart's cold start is a fact of the machine and the model, not of the
scenario, so a scenario's restart without ``cold_start_s`` takes it from here (measured), and
only without it falls back to a default that says it is assumed (sim/model/cold_start.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.contracts.errors import join_path
from sim.contracts.profile_identity import IdentityReader, Provenance


@dataclass(frozen=True)
class RequestTimes:
    ttft_s: float
    """The prefill of the request's prompt to its first token."""
    first_step_s: float
    """The decode step after it."""


@dataclass(frozen=True)
class ColdStart:
    """Load and first request after the load (docs/profile-format.md, ``cold_start``)."""

    provenance: Provenance
    load_s: float
    """Tokenizer and weights read and placed on the device (target and draft models)."""
    cold_start_s: float
    """Seconds out of service: ``load_s`` plus the first request's time beyond a warm one."""
    prompt_tokens: int | None = None
    first_request: RequestTimes | None = None
    """The process's first request after the load."""
    warm_request: RequestTimes | None = None
    """The same request once warm."""

    def describe(self) -> str:
        """``12.3 s measured on cpu 'AMD EPYC 7B13' …`` (a restart's source line)."""
        return f"{self.cold_start_s:.1f} s {self.provenance.describe()}"


class ColdStartReader(IdentityReader):
    """Reads the cold_start section."""

    def cold_start(self, v: Any, path: str) -> ColdStart | None:
        if v is None:
            return None
        v = self.obj(v, path, ("provenance", "load_s", "cold_start_s"),
                     ("prompt_tokens", "first_request", "warm_request"))
        prov = self.provenance(v["provenance"], join_path(path, "provenance"))
        load = self.num(v["load_s"], join_path(path, "load_s"), minimum=0)
        cold = self.num(v["cold_start_s"], join_path(path, "cold_start_s"), minimum=0)
        if cold < load:
            raise self.fail(join_path(path, "cold_start_s"), f"must be >= load_s ({load:g}), got {cold:g}")
        return ColdStart(
            provenance=prov,
            load_s=load,
            cold_start_s=cold,
            prompt_tokens=self.int_(v.get("prompt_tokens"), join_path(path, "prompt_tokens"), minimum=1, nullable=True),
            first_request=self._times(v.get("first_request"), join_path(path, "first_request")),
            warm_request=self._times(v.get("warm_request"), join_path(path, "warm_request")),
        )

    def _times(self, v: Any, path: str) -> RequestTimes | None:
        if v is None:
            return None
        v = self.obj(v, path, ("ttft_s", "first_step_s"))
        return RequestTimes(self.num(v["ttft_s"], join_path(path, "ttft_s"), minimum=0),
                            self.num(v["first_step_s"], join_path(path, "first_step_s"), minimum=0))
