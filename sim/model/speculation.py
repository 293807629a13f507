"""Speculation policies: how many draft tokens ``k`` a replica uses for the current batch.

Speculation pays at small batches and costs at large ones (verification of ``k + 1`` tokens per
request is no longer free once the step is compute-bound), so serving engines switch it by
load: off above a batch size, ``k`` by batch size (vLLM's
``num_speculative_tokens_per_batch_size`` shape), or adaptively from the observed load with
hysteresis. Policies are frozen; the only state (the adaptive window) lives in a small
:class:`PolicyState` owned by the replica and passed in explicitly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

PolicyName = Literal["off", "fixed", "off_above_batch", "k_by_batch", "adaptive"]


@dataclass(slots=True)
class PolicyState:
    """Observed load of one replica: a sliding window of (step end, duration, decode batch)."""

    window: deque = field(default_factory=deque)
    weighted_sum: float = 0.0
    duration_sum: float = 0.0
    first_s: float | None = None
    on: bool = True

    def observe(self, end_s: float, duration_s: float, decode_seqs: int, window_s: float) -> None:
        """Add one step and drop steps that ended before ``end_s - window_s``."""
        if self.first_s is None:
            self.first_s = end_s - duration_s
        self.window.append((end_s, duration_s, decode_seqs))
        self.weighted_sum += duration_s * decode_seqs
        self.duration_sum += duration_s
        cutoff = end_s - window_s
        w = self.window
        while w and w[0][0] < cutoff:
            _, d, b = w.popleft()
            self.weighted_sum -= d * b
            self.duration_sum -= d

    @property
    def mean_batch(self) -> float:
        """Busy-time-weighted mean decode batch over the window (0 when nothing observed)."""
        return self.weighted_sum / self.duration_sum if self.duration_sum > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SpeculationPolicy:
    """One candidate's rule for ``k``; ``k_for(state, batch)`` is called once per step."""

    name: PolicyName
    """``off`` (baseline), ``fixed``, ``off_above_batch``, ``k_by_batch`` or ``adaptive``."""
    k: int = 0
    """Draft tokens while speculating (fixed, off_above_batch, adaptive)."""
    max_batch: int | None = None
    """off_above_batch: speculation off when more than this many requests decode."""
    k_by_batch: tuple[tuple[int, int], ...] = ()
    """k_by_batch: ``(batch_size_at_least, k)`` rows, thresholds increasing, first is 1."""
    on_below_batch: float | None = None
    """adaptive: turn speculation back on when the windowed mean batch drops below this."""
    off_above_batch: float | None = None
    """adaptive: turn it off when the windowed mean batch rises above this."""
    window_s: float | None = None
    """adaptive: length of the observation window; no switching before one full window."""

    def __post_init__(self) -> None:
        n = self.name
        if n not in ("off", "fixed", "off_above_batch", "k_by_batch", "adaptive"):
            raise ValueError(
                f"speculation policy {n!r} unknown; valid: off, fixed, off_above_batch, "
                "k_by_batch, adaptive"
            )
        if n in ("fixed", "off_above_batch", "adaptive") and self.k < 1:
            raise ValueError(f"policy {n} needs k >= 1, got {self.k}")
        if n == "off_above_batch" and (self.max_batch is None or self.max_batch < 1):
            raise ValueError(f"policy off_above_batch needs max_batch >= 1, got {self.max_batch}")
        if n == "k_by_batch":
            rows = self.k_by_batch
            if not rows or rows[0][0] != 1:
                raise ValueError("policy k_by_batch needs rows [[1, k], ...] starting at batch 1")
            for (a, _), (b, _) in zip(rows, rows[1:], strict=False):
                if b <= a:
                    raise ValueError(f"policy k_by_batch thresholds must increase, got {a} then {b}")
            if any(k < 0 for _, k in rows):
                raise ValueError("policy k_by_batch: every k must be >= 0")
        if n == "adaptive":
            lo, hi, w = self.on_below_batch, self.off_above_batch, self.window_s
            if lo is None or hi is None or not lo < hi:
                raise ValueError(
                    f"policy adaptive needs on_below_batch < off_above_batch, got {lo}, {hi}"
                )
            if w is None or not w > 0:
                raise ValueError(f"policy adaptive needs window_s > 0, got {w}")

    @property
    def k_max(self) -> int:
        """Largest ``k`` this policy can ask for."""
        if self.name == "k_by_batch":
            return max(k for _, k in self.k_by_batch)
        return 0 if self.name == "off" else self.k

    @property
    def speculates(self) -> bool:
        return self.k_max > 0

    def k_for(self, state: PolicyState, batch: int) -> int:
        """``k`` for a step whose decode batch would be ``batch`` requests (the rule is
        ``policy_kernels.k_for_batch``, which the compiled step calls; the adaptive policy
        decides from its window)."""
        if self.name == "adaptive":
            return self.k if state.on else 0
        from sim.model.policy_kernels import k_for

        return k_for(self, batch)

    def observe(self, state: PolicyState, end_s: float, duration_s: float, decode_seqs: int) -> None:
        """Feed one finished step to the adaptive policy (no-op for the others)."""
        if self.name != "adaptive":
            return
        state.observe(end_s, duration_s, decode_seqs, self.window_s)  # type: ignore[arg-type]
        if state.first_s is None or end_s - state.first_s < self.window_s:  # type: ignore[operator]
            return  # minimum observation window: no switching on a few steps
        mean = state.mean_batch
        if state.on and mean > self.off_above_batch:  # type: ignore[operator]
            state.on = False
        elif not state.on and mean < self.on_below_batch:  # type: ignore[operator]
            state.on = True

    def describe(self) -> str:
        """One line for reports."""
        n = self.name
        if n == "off":
            return "no speculation"
        if n == "fixed":
            return f"k={self.k}"
        if n == "off_above_batch":
            return f"k={self.k}, off above batch {self.max_batch}"
        if n == "k_by_batch":
            return "k by batch " + ", ".join(f"≥{b}:{k}" for b, k in self.k_by_batch)
        return (
            f"k={self.k} adaptive: off above mean batch {self.off_above_batch}, on below "
            f"{self.on_below_batch}, window {self.window_s}s"
        )


OFF = SpeculationPolicy("off")


def policy_from_candidate(candidate: Any) -> SpeculationPolicy:
    """Build the policy of a scenario candidate (``sim.contracts.candidate.Candidate``)."""
    spec = getattr(candidate, "speculation", None)
    proposer = getattr(candidate, "proposer", None)
    name = getattr(candidate, "policy", None)
    if spec == "off" or proposer is None or name is None or name == "off":
        return OFF
    adaptive = getattr(candidate, "adaptive", None)
    kbb = getattr(candidate, "k_by_batch", None) or ()
    return SpeculationPolicy(
        name=name,
        k=int(getattr(candidate, "k", 0) or 0),
        max_batch=getattr(candidate, "max_batch", None),
        k_by_batch=tuple((int(a), int(b)) for a, b in kbb),
        on_below_batch=_field(adaptive, "on_below_batch"),
        off_above_batch=_field(adaptive, "off_above_batch"),
        window_s=_field(adaptive, "window_s"),
    )


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
