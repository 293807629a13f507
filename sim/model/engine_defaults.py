"""Engine limits a scenario leaves unset, defaulted the way the engine would on that device.

``vllm serve`` (the OpenAI-compatible server) picks ``max_num_batched_tokens`` and
``max_num_seqs`` from the GPU it runs on: vLLM's ``EngineArgs.get_batch_defaults``
(``vllm/engine/arg_utils.py``) uses 8192 tokens / 1024 sequences when the device has at least
70 GiB and is not an A100 (PR #17885: large budgets cost A100 throughput), else 2048 / 256, and
then caps the sequences at the token budget. A planner that keeps 2048 / 256 for an H100 or H200
plans a different engine than the one deployed. The device is the profile's (timing provenance
device name; one GPU's memory = the memory section's replica total ÷ tensor_parallel_size, as
vLLM asks each device). CPU profiles (and runs without a profile) keep
specplan's historical 2048 / 256, so earlier results stand; vLLM's own CPU backend would use
2048·world / 128·world for the server, which specplan does not claim to model.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.model.step_plan import EngineLimits

__all__ = ["EngineLimits", "ModelLength", "device_defaults", "engine_limits", "model_length"]

GIB = 1024**3
LARGE_GPU_BYTES = 70 * GIB
"""vLLM's threshold for its larger defaults (``device_memory >= 70 * GiB_bytes``)."""
LARGE_GPU = (8192, 1024)
"""(max_num_batched_tokens, max_num_seqs) of vLLM's OpenAI server on GPUs ≥ 70 GiB, not A100."""
OTHER_GPU = (2048, 256)
"""The same on other GPUs (and A100)."""
CPU_DEFAULT = (2048, 256)
"""specplan's defaults for CPU profiles and runs without a profile (unchanged since v1)."""
VLLM_SOURCE = "vLLM EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py), OpenAI server"


def device_defaults(profile: Profile | None) -> tuple[int, int, str]:
    """(tokens, seqs, why) for the profile's device."""
    if profile is None:
        return (*CPU_DEFAULT, "specplan's default without a profile")
    dev = profile.timing.provenance.device or profile.memory.provenance.device
    kind = (dev.kind if dev is not None else "cpu").lower()
    if kind == "cpu":
        return (*CPU_DEFAULT, "specplan's default for CPU profiles (kept so earlier results stand)")
    name = dev.name if dev is not None else "unnamed GPU"
    mem = profile.memory.device_memory_bytes // profile.replica.tensor_parallel_size  # one GPU's
    gib = f"{mem / GIB:.0f} GiB"
    if mem >= LARGE_GPU_BYTES and "a100" not in name.lower():
        return (*LARGE_GPU, f"{VLLM_SOURCE} for '{name}' ({gib} ≥ 70 GiB, not A100)")
    why = "A100" if "a100" in name.lower() else f"{gib} < 70 GiB"
    return (*OTHER_GPU, f"{VLLM_SOURCE} for '{name}' ({why})")


def engine_limits(scenario: Scenario, profile: Profile | None, *,
                  max_model_len: int | None = None) -> EngineLimits:
    """The scenario's engine limits, as the one object that carries them to the kernel row:
    unset ones defaulted for the profile's device; ``max_model_len`` the candidate's context
    length (``model_length``; None: nothing refused for length)."""
    eng = scenario.fleet.engine
    same = {"block_size": eng.block_size, "chunked_prefill": eng.chunked_prefill,
            "max_model_len": max_model_len}
    if eng.max_num_seqs is not None and eng.max_num_batched_tokens is not None:
        return EngineLimits(eng.max_num_seqs, eng.max_num_batched_tokens, **same)
    tokens, seqs, why = device_defaults(profile)
    applied = []
    if eng.max_num_batched_tokens is None:
        applied.append(f"max_num_batched_tokens {tokens}")
    else:
        tokens = eng.max_num_batched_tokens
    if eng.max_num_seqs is None:
        seqs = min(seqs, tokens)  # vLLM caps a defaulted max_num_seqs at the token budget
        applied.append(f"max_num_seqs {seqs}")
    else:
        seqs = eng.max_num_seqs
    if eng.max_num_batched_tokens is None and not eng.chunked_prefill:
        _check_prompts_fit(scenario, tokens)
    return EngineLimits(seqs, tokens, **same, source=f"engine: {', '.join(applied)} by default: {why}")


def _check_prompts_fit(scenario: Scenario, tokens: int) -> None:
    if scenario.workload.arrival == "trace":
        return
    for i, s in enumerate(scenario.workload.segments):
        ub = s.prompt_tokens.upper_bound if s.prompt_tokens is not None else None
        if ub is None or ub > tokens:
            raise SpecplanError(
                f"{scenario.origin or 'scenario'}: workload.segments[{i}].prompt_tokens: longest "
                f"prompt ({'unbounded: set max' if ub is None else ub}) must fit the default "
                f"max_num_batched_tokens ({tokens}) when chunked_prefill = false; set "
                "fleet.engine.max_num_batched_tokens or a max"
            )


@dataclass(frozen=True)
class ModelLength:
    """The context length a candidate's engine runs with (vLLM ``max_model_len``) and why."""

    tokens: int | None
    """None: neither the scenario nor the profile names one, so nothing is refused for length."""
    source: str
    """One line for the run's sources: where the number came from."""
    note: str | None = None
    """Said in the notes when the scenario asks for more than the model's config declares."""


def model_length(scenario: Scenario, profile: Profile | None, candidate) -> ModelLength:
    """``max_model_len``: the candidate's, else [fleet]'s, else the profile's (the model's config,
    as vLLM derives it from ``max_position_embeddings``)."""
    model = profile.target.max_model_len if profile is not None else None
    mine, (fleet, key) = candidate.max_model_len, scenario.fleet_for(candidate).context_length
    if candidate.fleet is not None and (scenario.fleets or {})[candidate.fleet].max_model_len is not None:
        key = f"fleets.{candidate.fleet}.max_model_len"
    if mine is None and fleet is None:
        if model is None:
            return ModelLength(None, "max_model_len: unknown (the profile's target records none; set "
                                     "fleet.max_model_len): no request is refused for its length")
        return ModelLength(model, f"max_model_len {model:,} tokens: the model's config "
                                  f"(profile target.max_model_len, {profile.target.id})")
    tokens = mine if mine is not None else fleet
    where = f"candidate {candidate.name!r} max_model_len" if mine is not None else key
    note = None
    if model is not None and tokens > model:
        note = (f"{where} {tokens:,} exceeds the model's context length {model:,} (its config); vLLM "
                "refuses to start so unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (quality past it is not modelled)")
    return ModelLength(tokens, f"max_model_len {tokens:,} tokens: {where}", note)
