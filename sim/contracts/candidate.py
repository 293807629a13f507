"""The scenario's [[candidates]]: the baseline and the speculative configurations to compare."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.contracts.dataclass_mapping import internal_field
from sim.contracts.errors import FieldError, echo
from sim.contracts.input_limits import path_problem
from sim.contracts.scenario_fields import NAME_RE, check_max_model_len
from sim.contracts.scenario_paths import path_field

Speculation = Literal["on", "off"]
PolicyName = Literal["fixed", "off_above_batch", "k_by_batch", "adaptive", "kv_fallback"]


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """Hysteresis on the mean decode batch: speculate when it is small, stop when it is large."""

    on_below_batch: float
    """Turn speculation on when the windowed mean decode batch falls below this."""
    off_above_batch: float
    """Turn speculation off when the windowed mean decode batch rises above this."""
    window_s: float = 5.0
    """Averaging window of the decode batch (seconds)."""

    def __post_init__(self) -> None:
        if self.on_below_batch < 0:
            raise FieldError("on_below_batch", f"must be ≥ 0, got {self.on_below_batch}")
        if not self.on_below_batch < self.off_above_batch:
            raise FieldError(
                "off_above_batch",
                f"must be > on_below_batch ({self.on_below_batch}), got {self.off_above_batch}",
            )
        if not self.window_s > 0:
            raise FieldError("window_s", f"must be > 0 seconds, got {self.window_s}")


@dataclass(frozen=True, slots=True)
class KvFallbackConfig:
    """Hysteresis on KV-cache use: stop speculating under memory pressure (its lookahead slots
    and a draft model's KV compete with requests for blocks), resume when it eases."""

    off_above: float
    """Turn speculation off when the share of KV blocks in use rises above this (0–1]."""
    on_below: float
    """Turn it back on when that share falls below this (lower than ``off_above``)."""
    window_s: float = 5.0
    """Minimum observation window: no switch within this many seconds of the last one (or of
    the replica's first step), so use hovering at a threshold does not flap."""

    def __post_init__(self) -> None:
        if not 0 < self.off_above <= 1:
            raise FieldError("off_above", f"must be a share of KV blocks in (0, 1], got {self.off_above}")
        if not 0 < self.on_below <= 1:
            raise FieldError("on_below", f"must be a share of KV blocks in (0, 1], got {self.on_below}")
        if not self.on_below < self.off_above:
            raise FieldError("on_below", f"must be < off_above ({self.off_above}), got {self.on_below}")
        if not self.window_s > 0:
            raise FieldError("window_s", f"must be > 0 seconds, got {self.window_s}")


MAX_K = 1024  # draft tokens per step: no drafter proposes more (breakeven --k's bound too)

_POLICY_FIELDS: dict[str, tuple[str, ...]] = {
    "fixed": ("k",),
    "off_above_batch": ("k", "max_batch"),
    "k_by_batch": ("k_by_batch",),
    "adaptive": ("k", "adaptive"),
    "kv_fallback": ("k", "kv_fallback"),
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One serving configuration to compare: the baseline or a speculative-decoding setup."""

    name: str
    """Unique candidate name ([A-Za-z0-9._+-])."""
    speculation: Speculation = "on"
    """"off" marks the baseline (no drafting); "on" needs a proposer and a policy."""
    proposer: str | None = None
    """A proposer name of the profile (e.g. "ngram", "selfdraft-l6")."""
    policy: PolicyName = "fixed"
    """How k is chosen per step: "fixed", "off_above_batch", "k_by_batch", "adaptive" or
    "kv_fallback" (the last three are idealised in-engine policies: vLLM fixes k at start-up)."""
    k: int | None = None
    """Draft tokens per decode request and step (fixed, off_above_batch, adaptive, kv_fallback)."""
    max_batch: int | None = None
    """off_above_batch: speculation is off while more than this many requests decode."""
    k_by_batch: tuple[tuple[int, int], ...] | None = None
    """k_by_batch: [[batch_size_at_least, k], …], first threshold 1, thresholds increasing."""
    schedule: Literal["auto"] | None = None
    """k_by_batch: "auto" computes ``k_by_batch`` from the profile when the run starts (the best k
    per decode batch, ``sim.model.k_schedule``) with k up to ``k``; leave ``k_by_batch`` out."""
    adaptive: AdaptiveConfig | None = None
    """adaptive: the hysteresis thresholds."""
    kv_fallback: KvFallbackConfig | None = None
    """kv_fallback: the KV-use thresholds and the minimum observation window."""
    assumed_acceptance: tuple[float, ...] | None = None
    """Optional survival rate per position (non-increasing, in [0, 1], length ≥ max k) that
    replaces the profile's acceptance for this candidate; shown as "assumed"."""
    acceptance_trace: str | None = path_field("data", None)
    """Optional per-request acceptance trace (docs/acceptance-trace-format.md; path relative to
    the scenario) that replaces the profile's acceptance: each request replays one traced
    request's sequence (``trace_replay``) or draws steps independently at its rates."""
    trace_format: Literal["specplan", "specdecode-bench-eagle", "specdecode-bench-ngram", "vllm-per-request"] = "specplan"
    """Layout of ``acceptance_trace``: specplan's JSONL, a user's own SpecDecode-Bench
    ``combined_*.jsonl`` (its ``acc_eagle`` / ``acc_ngram`` arrays; no task labels), or vLLM's
    per-request acceptance (``--per-request-spec-decode-metrics detailed``; no task labels)."""
    trace_replay: bool = True
    """True: within a request, accepted lengths follow the traced sequence; False: independent
    draws at the traced request's per-position rates (to compare)."""
    fleet: str | None = None
    """Name of a ``[fleets.NAME]`` table this candidate runs on (its profile, replica shape and
    prices); none: the scenario's [fleet]."""
    prefix_caching: bool | None = None
    """Prefix caching for this candidate (docs/prefix-caching.md); none: the fleet engine's
    ``prefix_caching``. Lets "cache on, speculation off" be a candidate of its own."""
    max_model_len: int | None = None
    """The model's context length for this candidate (vLLM ``--max-model-len``), in tokens;
    none: ``fleet.max_model_len``, else the profile's (the model's config). A request whose
    prompt + output exceeds it is rejected as vLLM rejects it (HTTP 400)."""
    computed: str | None = internal_field()
    """Set with ``k_by_batch`` when ``schedule = "auto"`` was computed: what it was computed from."""

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise FieldError("name", f"must match [A-Za-z0-9._+-]+, got {echo(self.name, 60)}")
        if self.acceptance_trace is not None:  # its form, as fleet.profile's (the OS would refuse it unnamed)
            if why := (path_problem(self.acceptance_trace) if self.acceptance_trace else "path is empty"):
                raise FieldError("acceptance_trace", f"{why}; give a JSON Lines acceptance trace file")
        check_max_model_len(self.max_model_len)
        all_params = ("proposer", "k", "max_batch", "k_by_batch", "schedule", "adaptive", "kv_fallback",
                      "assumed_acceptance")
        if self.speculation == "off":
            for p in all_params:
                if getattr(self, p) is not None:
                    raise FieldError(p, "not used by the baseline (speculation = \"off\"); remove it")
            if self.policy != "fixed":
                raise FieldError("policy", "not used by the baseline (speculation = \"off\")")
            return
        if self.proposer is None:
            raise FieldError("proposer", "required for a speculative candidate (speculation = \"on\", the "
                             "default; \"off\" for the baseline): a profile proposer")
        needed = _POLICY_FIELDS[self.policy]
        if self.schedule is not None:
            if self.policy != "k_by_batch":
                raise FieldError("schedule", f"only for policy \"k_by_batch\", not {echo(self.policy, 60)}")
            if self.k_by_batch is not None and self.computed is None:
                raise FieldError("k_by_batch", "schedule = \"auto\" computes it from the profile; give one of the two")
            if self.k is None:
                raise FieldError("k", "required by schedule = \"auto\": the largest k the computed schedule may use")
            needed = ("k", *(("k_by_batch",) if self.computed is not None else ()))
        for p in ("k", "max_batch", "k_by_batch", "adaptive", "kv_fallback"):
            given = getattr(self, p) is not None
            if p in needed and not given:
                raise FieldError(p, f"required by policy {echo(self.policy, 60)}")
            if p not in needed and given:
                raise FieldError(
                    p, f"not used by policy {echo(self.policy, 60)}; valid: {', '.join(needed)}"
                )
        if self.k is not None and not 1 <= self.k <= MAX_K:  # an acceptance trace has no k_max to stop it
            raise FieldError("k", f"must be in 1..{MAX_K} draft tokens, got {self.k}")
        if self.max_batch is not None and self.max_batch < 1:
            raise FieldError("max_batch", f"must be ≥ 1, got {self.max_batch}")
        if self.k_by_batch is not None:
            if not self.k_by_batch:
                raise FieldError("k_by_batch", "must hold at least one [batch_at_least, k] pair")
            if self.k_by_batch[0][0] != 1:
                raise FieldError("k_by_batch[0]", f"first threshold must be 1, got {self.k_by_batch[0][0]}")
            for i, (b, kk) in enumerate(self.k_by_batch):
                if i and b <= self.k_by_batch[i - 1][0]:
                    raise FieldError(f"k_by_batch[{i}]", f"thresholds must increase, got {b}")
                if not 0 <= kk <= MAX_K:
                    raise FieldError(f"k_by_batch[{i}]", f"k must be in 0..{MAX_K}, got {kk}")
            if self.max_k < 1 and self.computed is None:
                raise FieldError("k_by_batch", "at least one k must be ≥ 1 (else use the baseline)")
        if self.assumed_acceptance is not None:
            a = self.assumed_acceptance
            if len(a) < self.max_k:
                raise FieldError(
                    "assumed_acceptance",
                    f"needs ≥ max k ({self.max_k}) rates, got {len(a)}",
                )
            for i, r in enumerate(a):
                if not 0 <= r <= 1:
                    raise FieldError(f"assumed_acceptance[{i}]", f"must be in [0, 1], got {r}")
                if i and r > a[i - 1]:
                    raise FieldError(
                        f"assumed_acceptance[{i}]",
                        f"survival rates must be non-increasing, {r} > {a[i - 1]}",
                    )

    @property
    def is_baseline(self) -> bool:
        """True for the reference candidate: no speculation, and prefix caching not switched on
        for it alone (a "cache on, speculation off" candidate is compared with it)."""
        return self.speculation == "off" and self.prefix_caching is not True

    def prefix_caching_on(self, engine_default: bool) -> bool:
        """Whether it caches prompt prefixes: its own setting, else the fleet engine's."""
        return engine_default if self.prefix_caching is None else self.prefix_caching

    @property
    def speculates(self) -> bool:
        """True when the candidate drafts (it needs a proposer, acceptance and the draft's price)."""
        return self.speculation == "on"

    @property
    def max_k(self) -> int:
        """Largest k this candidate may draft in any step (0 without speculation)."""
        if not self.speculates:
            return 0
        if self.k_by_batch is not None:
            return max(kk for _, kk in self.k_by_batch)
        return int(self.k or 0)  # a schedule not yet computed: at most its k


BASELINE_NAME = "baseline"
