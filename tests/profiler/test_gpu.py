"""The CUDA path: events for timing, allocator statistics for memory, NVML for device facts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_timing_and_memory_of_a_tiny_profile(tmp_path: Path):
    from profiler.grids.profile_request import ProfileRequest, ProposerRequest
    from profiler.grids.timing_grids import TimingGrids
    from profiler.run import run_profile
    from sim.contracts.profile import load_profile

    grids = TimingGrids(batch=(1, 8), tokens_per_seq=(1, 4), context=(64, 256), prefill_tokens=(16, 128),
                        prefill_context=(0, 64), draft_batch=(1, 8), k_max=3, draft_context=(64,),
                        overhead_batch=(1,), overhead_k=(1, 3), overhead_context=64, warmup=2, repeats=5,
                        prefill_repeats=3)
    out = tmp_path / "gpu.json"
    run_profile(ProfileRequest(target="config:tiny-llama", out=out, device="cuda", k_max=3, grids=grids,
                               proposers=(ProposerRequest.parse("selfdraft:2"),), progress=False))
    prof = load_profile(out)
    dev = prof.timing.provenance.device
    assert dev.kind == "cuda" and dev.memory_bytes > 0
    assert prof.memory.device_memory_bytes == dev.memory_bytes
    assert prof.memory.kv_check.relative_error == 0.0
    assert "CUDA max_memory_allocated" in prof.memory.provenance.notes
    assert prof.timing.target_forward.median[0, 0, 0] > 0


def test_cuda_events_time_real_work():
    from profiler.passes.clock import time_op

    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    small = time_op(lambda: a[:64] @ a[:, :64], warmup=2, repeats=5, device=dev)
    big = time_op(lambda: a @ a, warmup=2, repeats=5, device=dev)
    assert big.median > small.median > 0


def test_device_facts_name_the_gpu():
    from profiler.passes.device import device_facts

    facts = device_facts(torch.device("cuda:0"))
    assert facts["kind"] == "cuda" and facts["name"] and facts["memory_bytes"] > 0
