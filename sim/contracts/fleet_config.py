"""The scenario's [fleet] table (profile, replicas, engine limits, admission, a restart, prices)
and the named [fleets.NAME] shapes a candidate may run on instead."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sim.contracts.dataclass_mapping import internal_field
from sim.contracts.errors import FieldError, echo
from sim.contracts.input_limits import path_problem
from sim.contracts.scenario_fields import check_max_model_len, resolve_path
from sim.contracts.scenario_paths import path_field

RoutingName = Literal["round_robin", "least_outstanding"]
OnRestart = Literal["reroute", "drop"]
Fallback = Literal["baseline", "same"]
KvLayout = Literal["paged", "padded"]
ServingEngine = Literal["vllm", "sglang", "trtllm"]
VllmRunner = Literal["v2", "v1"]
Provenance = Literal["assumed", "measured", "published", "imported", "calibrated"]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Per-replica engine limits, in vLLM's terms."""

    max_num_seqs: int | None = None
    """Most requests in the running batch (vLLM max_num_seqs); none: the engine's default for
    the profile's device (sim/model/engine_defaults.py: 1024 on GPUs with ≥ 70 GiB other than A100,
    else 256)."""
    max_num_batched_tokens: int | None = None
    """Token budget of one engine step, drafts included (vLLM max_num_batched_tokens); none:
    the engine's default for the profile's device (8192 on GPUs with ≥ 70 GiB other than A100,
    else 2048)."""
    block_size: int = 16
    """Tokens per KV-cache block (paged attention)."""
    memory_utilization: float = 0.9
    """Fraction of device memory the engine may use, in (0, 1] (vLLM gpu_memory_utilization)."""
    chunked_prefill: bool = True
    """Split long prompts over several steps; when false a prompt must fit one step's budget."""
    kv_layout: KvLayout = "paged"
    """``paged``: a decode step costs the batch's mean context (vLLM's paged attention);
    ``padded``: every row is padded to the longest context (Hugging Face ``generate``-style
    batching, and ``specplan validate``'s own real serving loop)."""
    prefix_caching: bool = False
    """Cache full prompt blocks by prefix and skip their prefill on a hit (vLLM
    ``--enable-prefix-caching``; docs/prefix-caching.md); a candidate may override it."""
    name: ServingEngine = "vllm"
    """The serving engine the plan is for: ``vllm``, ``sglang`` or ``trtllm``. Its speculative
    step rules (whether a row without an n-gram match is verified at full width) and the form
    of the emitted config follow it (``sim/model/serving_engine.py``)."""
    runner: VllmRunner | None = None
    """vLLM's model runner, where its behaviour differs: ``v2`` (Model Runner V2, vLLM's
    default on GPUs) or ``v1`` (the older runner, ``VLLM_USE_V2_MODEL_RUNNER=0``, and vLLM's
    CPU backend); none: ``v2`` on GPU profiles, ``v1`` on CPU profiles. Only for ``vllm``."""
    version: str | None = None
    """The engine's release (e.g. ``"0.12.0"``), said beside every result and emitted config;
    none: its current release."""
    max_model_len: int | None = None
    """vLLM's ``--max-model-len`` where engine arguments live; the same setting as
    ``fleet.max_model_len`` (give it in one of the two)."""

    def __post_init__(self) -> None:
        if self.runner is not None and self.name != "vllm":
            raise FieldError("runner", f"only vLLM has runner generations; {self.name!r} takes none "
                             "(remove runner, or set name = \"vllm\")")
        if self.version is not None and not re.fullmatch(r"\d+(\.\d+){0,3}([.+-]?[0-9A-Za-z.]+)?", self.version):
            raise FieldError("version", f"must be a release number like \"0.12.0\", got {echo(self.version)}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise FieldError(name, f"must be ≥ 1, got {v}")
        if not 0 < self.memory_utilization <= 1:
            raise FieldError(
                "memory_utilization", f"must be in (0, 1], got {self.memory_utilization}"
            )
        check_max_model_len(self.max_model_len)


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Load shedding at each replica's queue."""

    queue_limit: int | None = None
    """Waiting requests per replica beyond this are rejected on arrival; none: unbounded."""
    max_queue_time_s: float | None = None
    """A request still waiting (not yet scheduled) this long is rejected; none: never."""

    def __post_init__(self) -> None:
        if self.queue_limit is not None and self.queue_limit < 0:
            raise FieldError("queue_limit", f"must be ≥ 0, got {self.queue_limit}")
        if self.max_queue_time_s is not None and not self.max_queue_time_s > 0:
            raise FieldError("max_queue_time_s", f"must be > 0 seconds, got {self.max_queue_time_s}")


@dataclass(frozen=True, slots=True)
class RestartConfig:
    """One replica restart during the run (deploy, crash) and what speculation does after it."""

    at_s: float
    """Simulated time of the restart (seconds, within the run)."""
    cold_start_s: float | None = None
    """Seconds the replica serves nothing while it loads weights and warms up (≥ 0); omitted:
    the profile's measured cold start, else a default that says it is assumed
    (sim/model/cold_start.py)."""
    replica: int = 0
    """Index of the restarting replica (0-based, < fleet.replicas)."""
    on_restart: OnRestart = "reroute"
    """"reroute": in-flight requests go back to the router; "drop": they are lost."""
    fallback: Fallback = "baseline"
    """"baseline": after the restart the candidate serves without speculation;
    "same": it comes back with the candidate's configuration."""

    def __post_init__(self) -> None:
        if self.at_s < 0:
            raise FieldError("at_s", f"must be ≥ 0 seconds, got {self.at_s}")
        if self.cold_start_s is not None and self.cold_start_s < 0:
            raise FieldError("cold_start_s", f"must be ≥ 0 seconds, got {self.cold_start_s}")
        if self.replica < 0:
            raise FieldError("replica", f"must be ≥ 0, got {self.replica}")


@dataclass(frozen=True, slots=True)
class RequestOverhead:
    """Time every request spends outside the engine (API server, tokenisation, detokenisation
    lag), paid before it reaches the engine: it adds to TTFT and E2E and leaves TPOT, ITL and
    the engine's batching unchanged (docs/scenario-format.md, "Per-request overhead")."""

    fixed_ms: float = 0.0
    """Per request, whatever its length (HTTP handling, request parsing, the stream's
    detokenisation lag), milliseconds ≥ 0."""
    per_prompt_token_ms: float = 0.0
    """Per prompt token (tokenisation, chat template), milliseconds ≥ 0."""
    source: Provenance = "assumed"
    """Where the numbers come from: "assumed" until someone measures them."""
    citation: str | None = None
    """What measured (or published) them; required unless ``source`` is "assumed"."""

    def __post_init__(self) -> None:
        if not 0 <= self.fixed_ms <= 600_000:
            raise FieldError("fixed_ms", f"must be in [0, 600000] ms, got {self.fixed_ms}")
        if not 0 <= self.per_prompt_token_ms <= 1_000:
            raise FieldError("per_prompt_token_ms", f"must be in [0, 1000] ms, got {self.per_prompt_token_ms}")
        if self.source != "assumed" and not (self.citation or "").strip():
            raise FieldError("citation", f"required when source is {echo(self.source, 60)}: what measured the overhead")

    def seconds(self, prompt_tokens: object) -> object:
        """Overhead in seconds for ``prompt_tokens`` (a number or a numpy array)."""
        return (self.fixed_ms + self.per_prompt_token_ms * prompt_tokens) / 1000.0  # type: ignore[operator]

    @property
    def source_line(self) -> str:
        """The provenance line results print."""
        cite = f": {self.citation}" if self.citation else ""
        return (f"request overhead outside the engine: {self.fixed_ms:g} ms + {self.per_prompt_token_ms:g} ms "
                f"per prompt token, added to TTFT and E2E ({self.source}{cite}; fleet.request_overhead)")


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """What serves the traffic: the calibration profile, replicas, engine limits and prices."""

    profile: str | None = path_field("profile", None)
    """Calibration profile JSON (relative to the scenario's folder, then the cwd); none: the
    caller must pass a profile."""
    replicas: int = 1
    """Identical engine replicas behind the router (≥ 1); capacity counts these."""
    tensor_parallel_size: int = 1
    """GPUs per replica that shard the model's weights and KV cache (tensor parallelism); must
    equal the profile's ``replica.tensor_parallel_size`` (timing is per replica shape)."""
    pipeline_parallel_size: int = 1
    """Pipeline stages per replica; only 1 is modelled (the step-time model has no pipeline
    stages or bubbles), so anything else is refused."""
    routing: RoutingName = "least_outstanding"
    """"round_robin" or "least_outstanding" (fewest unfinished requests)."""
    price_per_gpu_hour: float | None = None
    """$ per GPU-hour (device-hour on a CPU replica); a replica costs ``gpus_per_replica`` ×
    this; none: cost is not computed."""
    draft_price_per_hour: float = 0.0
    """$ per hour of separate draft hardware per replica (whole replica, not per GPU), if any."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Engine limits of every replica."""
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    """Queue limits of every replica."""
    restart: RestartConfig | None = None
    """Optional replica restart during the run."""
    request_overhead: RequestOverhead | None = None
    """Per-request time outside the engine, added to TTFT and E2E; none: zero (the frames then
    have no ``overhead_s`` column)."""
    max_model_len: int | None = None
    """The model's context length (vLLM ``--max-model-len``), in tokens; none: the profile's
    (``target.max_model_len``, from the model's config). A request whose prompt + output exceeds
    it is rejected on arrival as vLLM rejects it (HTTP 400), counted in ``rejected_too_long``."""
    base_dir: str | None = internal_field()
    """Folder of the scenario file (set by the loader) for resolving ``profile``."""

    def __post_init__(self) -> None:
        if self.profile is not None and not self.profile:
            raise FieldError("profile", "must name a profile JSON file")
        if self.profile is not None and (why := path_problem(self.profile)):
            raise FieldError("profile", why)
        if self.replicas < 1:
            raise FieldError("replicas", f"must be ≥ 1, got {self.replicas}")
        check_max_model_len(self.max_model_len)
        if self.max_model_len is not None and self.engine.max_model_len is not None:
            raise FieldError("max_model_len", "given twice (also as fleet.engine.max_model_len): set it in one place")
        if self.tensor_parallel_size < 1:
            raise FieldError(
                "tensor_parallel_size", f"must be ≥ 1 GPUs per replica, got {self.tensor_parallel_size}"
            )
        if self.pipeline_parallel_size != 1:
            raise FieldError(
                "pipeline_parallel_size",
                f"{self.pipeline_parallel_size} is not supported: the step-time model has no "
                "pipeline stages or bubbles; valid: 1 (use tensor_parallel_size to spread a model "
                "over GPUs)",
            )
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour < 0:
            raise FieldError("price_per_gpu_hour", f"must be ≥ 0 $/h, got {self.price_per_gpu_hour}")
        if self.draft_price_per_hour < 0:
            raise FieldError(
                "draft_price_per_hour", f"must be ≥ 0 $/h, got {self.draft_price_per_hour}"
            )
        if self.restart is not None and self.restart.replica >= self.replicas:
            raise FieldError(
                "restart.replica",
                f"must be < replicas ({self.replicas}), got {self.restart.replica}",
            )

    @property
    def context_length(self) -> tuple[int | None, str]:
        """The scenario's ``max_model_len`` (None: the profile's) and the key that gave it."""
        if self.engine.max_model_len is not None:
            return self.engine.max_model_len, "fleet.engine.max_model_len"
        return self.max_model_len, "fleet.max_model_len"

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica occupies (tensor × pipeline parallel size): what price_per_gpu_hour
        is multiplied by."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def profile_path(self) -> Path | None:
        """Absolute path of the profile (scenario folder first, then the cwd); may not exist."""
        return None if self.profile is None else resolve_path(self.profile, self.base_dir)


@dataclass(frozen=True, slots=True)
class NamedFleet:
    """A ``[fleets.NAME]`` table: the hardware a candidate may run on instead of [fleet]'s.

    Why only these fields: a comparison of hardware must differ in hardware only, so replicas,
    engine limits, admission, routing, a restart and the request overhead stay [fleet]'s for
    every candidate (the same traffic meets the same engine settings). The one exception is the
    context length: a device with less memory may have to serve a shorter ``max_model_len``
    (vLLM refuses to start when one sequence of that length does not fit its KV cache)."""

    profile: str = path_field("profile")
    """Calibration profile JSON of this hardware (relative to the scenario's folder, then the cwd)."""
    tensor_parallel_size: int = 1
    """GPUs per replica; must equal the profile's ``replica.tensor_parallel_size``."""
    price_per_gpu_hour: float | None = None
    """$ per GPU-hour of this hardware; required when [fleet] has a price (and refused when it
    has none), so either every candidate is priced or none is."""
    draft_price_per_hour: float = 0.0
    """$ per hour of separate draft hardware per replica, if any."""
    max_model_len: int | None = None
    """The context length on this hardware; none: [fleet]'s (else the profile's)."""
    base_dir: str | None = internal_field()
    """Folder of the scenario file (set by the loader) for resolving ``profile``."""

    def __post_init__(self) -> None:
        check_max_model_len(self.max_model_len)
        if not self.profile:
            raise FieldError("profile", "must name a profile JSON file")
        if why := path_problem(self.profile):
            raise FieldError("profile", why)
        if self.tensor_parallel_size < 1:
            raise FieldError(
                "tensor_parallel_size", f"must be ≥ 1 GPUs per replica, got {self.tensor_parallel_size}"
            )
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour < 0:
            raise FieldError("price_per_gpu_hour", f"must be ≥ 0 $/h, got {self.price_per_gpu_hour}")
        if self.draft_price_per_hour < 0:
            raise FieldError("draft_price_per_hour", f"must be ≥ 0 $/h, got {self.draft_price_per_hour}")

    def applied_to(self, fleet: FleetConfig) -> FleetConfig:
        """[fleet] with this hardware: profile, replica shape and prices replaced, the rest kept."""
        import dataclasses

        length = {}
        if self.max_model_len is not None:  # this hardware's length replaces [fleet]'s, wherever given
            length = {"max_model_len": self.max_model_len,
                      "engine": dataclasses.replace(fleet.engine, max_model_len=None)}
        return dataclasses.replace(
            fleet, profile=self.profile, tensor_parallel_size=self.tensor_parallel_size,
            price_per_gpu_hour=self.price_per_gpu_hour, draft_price_per_hour=self.draft_price_per_hour,
            base_dir=self.base_dir, **length,
        )
