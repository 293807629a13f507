"""Unset engine limits default like vLLM's OpenAI server on the profile's device; CPU profiles
keep specplan's 256 / 2048; the default applied is named in the run's sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.model.engine_defaults import engine_limits
from sim.results.runner import run_scenario

GIB = 1024**3


def scenario(engine: dict | None = None, chunked: bool = True) -> Scenario:
    eng = dict(engine or {})
    if not chunked:
        eng["chunked_prefill"] = False
    return Scenario.from_dict({
        "name": "d",
        "run": {"duration_s": 20, "warmup_s": 2, "seeds": [1]},
        "workload": {"arrival": "poisson", "rate": 1.0, "segments": [{
            "name": "chat", "share": 1.0,
            "prompt_tokens": {"dist": "fixed", "value": 4000},
            "output_tokens": {"dist": "fixed", "value": 10}}]},
        "fleet": {"engine": eng},
    })


def gpu_profile(name: str, memory_bytes: int, kind: str = "cuda") -> Profile:
    d = synthetic_profile_dict(device_memory_bytes=memory_bytes)
    d["timing"]["provenance"]["device"] = {"kind": kind, "name": name, "memory_bytes": memory_bytes,
                                           "driver": None, "count": 1}
    return Profile.from_dict(d, "gpu.json")


@pytest.mark.parametrize(("name", "mem", "tokens", "seqs"), [
    ("NVIDIA H200", 141 * 10**9, 8192, 1024),        # 131 GiB >= 70, not A100
    ("NVIDIA H100 80GB HBM3", 80 * GIB, 8192, 1024),
    ("NVIDIA A100-SXM4-80GB", 80 * GIB, 2048, 256),  # A100 excluded (vLLM PR #17885)
    ("NVIDIA L40S", 48 * 10**9, 2048, 256),          # below 70 GiB
])
def test_gpu_defaults_follow_vllm(name: str, mem: int, tokens: int, seqs: int) -> None:
    lim = engine_limits(scenario(), gpu_profile(name, mem))
    assert (lim.max_num_batched_tokens, lim.max_num_seqs) == (tokens, seqs)
    assert lim.source is not None and name in lim.source and "get_batch_defaults" in lim.source


def test_cpu_profiles_and_no_profile_keep_todays_defaults() -> None:
    cpu = Profile.from_dict(synthetic_profile_dict(device_memory_bytes=256 * GIB), "cpu.json")
    for prof in (cpu, None, gpu_profile("AMD EPYC", 256 * GIB, kind="cpu")):
        lim = engine_limits(scenario(), prof)
        assert (lim.max_num_batched_tokens, lim.max_num_seqs) == (2048, 256)


def test_explicit_limits_win_and_name_no_default() -> None:
    lim = engine_limits(scenario({"max_num_seqs": 8, "max_num_batched_tokens": 512}),
                        gpu_profile("NVIDIA H200", 141 * 10**9))
    assert (lim.max_num_batched_tokens, lim.max_num_seqs, lim.source) == (512, 8, None)
    # one set, one defaulted: vLLM caps a defaulted max_num_seqs at the token budget
    lim = engine_limits(scenario({"max_num_batched_tokens": 512}), gpu_profile("NVIDIA H200", 141 * 10**9))
    assert (lim.max_num_batched_tokens, lim.max_num_seqs) == (512, 512)
    assert lim.source is not None and "max_num_seqs 512" in lim.source and "tokens" not in lim.source.split(":")[1]


def test_default_budget_must_hold_whole_prompts_without_chunking() -> None:
    # 4000-token prompts fit the H200's 8192 but not the L40S's 2048
    engine_limits(scenario(chunked=False), gpu_profile("NVIDIA H200", 141 * 10**9))
    with pytest.raises(SpecplanError, match=r"longest prompt \(4000\) must fit the default max_num_batched_tokens \(2048\)"):
        engine_limits(scenario(chunked=False), gpu_profile("NVIDIA L40S", 48 * 10**9))


def test_tensor_parallel_profiles_use_one_gpus_memory() -> None:
    # 2 x L40S = 96 GB of replica memory, but vLLM asks one 48 GB device: small defaults
    d = synthetic_profile_dict(device_memory_bytes=2 * 48 * 10**9)
    d["replica"] = {"tensor_parallel_size": 2}
    d["timing"]["provenance"]["device"] = {"kind": "cuda", "name": "NVIDIA L40S", "count": 2}
    lim = engine_limits(scenario(), Profile.from_dict(d, "l40s-tp2.json"))
    assert (lim.max_num_batched_tokens, lim.max_num_seqs) == (2048, 256)


def test_run_sources_name_the_default(tmp_path: Path) -> None:
    res = run_scenario(scenario(), gpu_profile("NVIDIA H200", 141 * 10**9))
    line = [s for s in res.sources if s.startswith("engine:")]
    assert line == ["engine: max_num_batched_tokens 8192, max_num_seqs 1024 by default: "
                    "vLLM EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py), OpenAI server for "
                    "'NVIDIA H200' (131 GiB ≥ 70 GiB, not A100)"]
