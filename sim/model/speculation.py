"""Speculation policies: how many draft tokens ``k`` a replica uses for the current batch.

Speculation pays at small batches and costs at large ones (verification of ``k + 1`` tokens per
request is no longer free once the step is compute-bound), so serving engines switch it by
load: off above a batch size, ``k`` by batch size (vLLM's
``num_speculative_tokens_per_batch_size`` shape), adaptively from the observed load with
hysteresis, or off under KV-cache pressure (``kv_fallback``: off above a KV-use threshold, back
on below a lower one). Policies are frozen; their only state (the adaptive window, the fallback's
on/off and last switch) lives in a small :class:`PolicyState` owned by the replica and passed in
explicitly. Only ``off`` and ``fixed`` are what vLLM can run today (its ``speculative_config`` is
fixed at start-up); the load- and KV-dependent ones are idealised in-engine policies
(``sim.decisions.vllm_config.engine_support``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

PolicyName = Literal["off", "fixed", "off_above_batch", "k_by_batch", "adaptive", "kv_fallback"]
POLICY_NAMES = ("off", "fixed", "off_above_batch", "k_by_batch", "adaptive", "kv_fallback")


@dataclass(slots=True)
class PolicyState:
    """Observed load of one replica: a sliding window of (step end, duration, decode batch). The
    SimPy driver's and the serving loop's form; the fleet kernel keeps the same window in the
    policy's array (``policy_kernels.observe``), held to this one step by step."""

    window: deque = field(default_factory=deque)
    weighted_sum: float = 0.0
    duration_sum: float = 0.0
    first_s: float | None = None
    on: bool = True
    pol: Any = None
    """kv_fallback: its kernel array (``policy_kernels.policy_array``), state included."""

    def kernel_array(self, policy: SpeculationPolicy) -> Any:
        """The kv_fallback policy's array with this replica's state, made on first use."""
        if self.pol is None:
            from sim.model.kernels.policy_kernels import policy_array

            self.pol = policy_array(policy)
        return self.pol

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
    """``off`` (baseline), ``fixed``, ``off_above_batch``, ``k_by_batch``, ``adaptive`` or
    ``kv_fallback``."""
    k: int = 0
    """Draft tokens while speculating (fixed, off_above_batch, adaptive, kv_fallback)."""
    max_batch: int | None = None
    """off_above_batch: speculation off when more than this many requests decode."""
    k_by_batch: tuple[tuple[int, int], ...] = ()
    """k_by_batch: ``(batch_size_at_least, k)`` rows, thresholds increasing, first is 1."""
    on_below_batch: float | None = None
    """adaptive: turn speculation back on when the windowed mean batch drops below this."""
    off_above_batch: float | None = None
    """adaptive: turn it off when the windowed mean batch rises above this."""
    window_s: float | None = None
    """adaptive: length of the observation window; no switching before one full window.
    kv_fallback: the least time between two switches (and before the first)."""
    kv_off_above: float | None = None
    """kv_fallback: speculation off when the share of KV blocks in use rises above this."""
    kv_on_below: float | None = None
    """kv_fallback: back on when it falls below this (lower: hysteresis)."""

    def __post_init__(self) -> None:
        n = self.name
        if n not in POLICY_NAMES:
            raise ValueError(f"speculation policy {n!r} unknown; valid: {', '.join(POLICY_NAMES)}")
        if n in ("fixed", "off_above_batch", "adaptive", "kv_fallback") and self.k < 1:
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
        if n == "kv_fallback":
            hi, lo, w = self.kv_off_above, self.kv_on_below, self.window_s
            if hi is None or lo is None or not (0 < lo < hi <= 1):
                raise ValueError(
                    f"policy kv_fallback needs 0 < kv_on_below < kv_off_above <= 1, got {lo}, {hi}"
                )
            if w is None or not w > 0:
                raise ValueError(f"policy kv_fallback needs window_s > 0, got {w}")

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
        decides from its window; kv_fallback reads the replica's KV use: ``policy_kernels.policy_k``)."""
        if self.name == "adaptive":
            return self.k if state.on else 0
        if self.name == "kv_fallback":
            raise ValueError("policy kv_fallback reads the replica's KV use: call policy_kernels.policy_k")
        from sim.model.kernels.policy_kernels import k_for

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
        if n == "kv_fallback":
            return (f"k={self.k}, off above {self.kv_off_above:.0%} KV use, on below "
                    f"{self.kv_on_below:.0%}, at least {self.window_s:g}s between switches")
        return (
            f"k={self.k} adaptive: off above mean batch {self.off_above_batch}, on below "
            f"{self.on_below_batch}, window {self.window_s}s"
        )


OFF = SpeculationPolicy("off")


def after_restart(policy: SpeculationPolicy, restart: Any) -> SpeculationPolicy:
    """The policy a replica serves with once a restart (``RestartConfig``, or None) brings it
    back: off when the restart falls back to the baseline, else its own (started afresh by
    whoever builds its state). One home for both drivers."""
    return OFF if restart is not None and restart.fallback == "baseline" else policy


def policy_from_candidate(candidate: Any) -> SpeculationPolicy:
    """Build the policy of a scenario candidate (``sim.contracts.candidate.Candidate``)."""
    spec = getattr(candidate, "speculation", None)
    proposer = getattr(candidate, "proposer", None)
    name = getattr(candidate, "policy", None)
    if spec == "off" or proposer is None or name is None or name == "off":
        return OFF
    adaptive = getattr(candidate, "adaptive", None)
    kvf = getattr(candidate, "kv_fallback", None)
    kbb = getattr(candidate, "k_by_batch", None) or ()
    return SpeculationPolicy(
        name=name,
        k=int(getattr(candidate, "k", 0) or 0),
        max_batch=getattr(candidate, "max_batch", None),
        k_by_batch=tuple((int(a), int(b)) for a, b in kbb),
        on_below_batch=_field(adaptive, "on_below_batch"),
        off_above_batch=_field(adaptive, "off_above_batch"),
        window_s=_field(kvf if name == "kv_fallback" else adaptive, "window_s"),
        kv_off_above=_field(kvf, "off_above"),
        kv_on_below=_field(kvf, "on_below"),
    )


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
