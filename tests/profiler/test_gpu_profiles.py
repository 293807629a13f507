"""Sanity of the shipped GPU profiles against physics (no GPU, no aiconfigurator needed).

Llama-3.1-8B bf16 holds 16 GB of weights; at the H200's 4.8 TB/s reading them once takes
3.3 ms, so a batch-1 decode step at context 1k must cost more than that and, with overheads,
stay within a few ms of it (issue 16's bars: between 4 and 9 ms).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.contracts.profile import load_profile
from sim.model.step_time import ProfileStepTimer, StepShape

ROOT = Path(__file__).resolve().parents[2] / "profiles"
GPU = ["llama-3.1-8b-h200-vllm.json", "llama-3.1-8b-h100-vllm.json", "llama-3.1-70b-h100-tp4-vllm.json"]


@pytest.mark.parametrize("name", GPU)
def test_shipped_gpu_profiles_are_small_and_say_where_numbers_come_from(name: str) -> None:
    path = ROOT / name
    assert path.stat().st_size < 1_000_000
    p = load_profile(path)
    assert p.timing.provenance.method == "imported" and p.memory.provenance.method == "imported"
    assert p.timing.step_composition == "fused"
    # the engine's per-step host time, estimated from NVIDIA's silicon (profiler/imported/engine_overhead.py)
    assert p.timing.step_overhead is not None and p.timing.step_overhead.provenance.method == "estimated"
    kinds = {"llama-3.2-1b": "draft_model", "eagle3": "eagle3", "ngram": "ngram"}
    if name == "llama-3.1-8b-h100-vllm.json":  # + SpecDecode-Bench's EAGLE-1 head (bench/specdecode_bench_targets.py)
        kinds["eagle"] = "eagle"
    assert {n: x.kind for n, x in p.proposers.items()} == kinds
    # the speculative step's parts the database does not time, each with its own provenance
    assert p.timing.sampler is not None and p.timing.sampler.provenance.method == "estimated"
    assert p.timing.cuda_graphs is not None and p.timing.cuda_graphs.capture_sizes[-1] == 512
    for pname, entry in p.acceptance.items():  # measured > published > assumed (profiler/imported/published_library.py)
        want = "published" if pname == "eagle3" and "8b" in name else "assumed"
        assert entry.provenance.method == want, (pname, entry.provenance.method)
    assert p.acceptance["ngram"].segments[0].proposal_rate == pytest.approx(0.206, rel=1e-2)
    for name, pt in p.timing.proposers.items():
        assert (pt.prefill is not None or name == "ngram") and pt.overhead_provenance.method == "assumed"


def test_h200_8b_decode_step_at_batch_1_context_1k_is_between_4_and_9_ms() -> None:
    p = load_profile(ROOT / "llama-3.1-8b-h200-vllm.json")
    timer = ProfileStepTimer(p)
    step = timer(StepShape(1, 1024.0, 0, None))
    assert 4e-3 <= step <= 9e-3
    kernels = step - timer.step_overhead_s
    weights_read_s = p.memory.target_weight_bytes / 4.8e12
    assert kernels > weights_read_s  # above the bandwidth floor


@pytest.mark.parametrize("name", GPU)
def test_verification_of_k_plus_1_tokens_costs_at_most_1_1_decode_steps(name: str) -> None:
    tf = load_profile(ROOT / name).timing.target_forward
    c = tf.axes[2].index(1024.0)
    decode = tf.median[0, 0, c]
    for k in range(1, 5):
        assert tf.median[0, k, c] <= 1.1 * decode, (k, tf.median[0, k, c], decode)
        assert tf.median[0, k, c] >= decode


@pytest.mark.parametrize("name", GPU)
def test_step_time_grows_with_total_context_at_large_batch(name: str) -> None:
    timer = ProfileStepTimer(load_profile(ROOT / name))
    for b in (64, 256, 1024):
        times = np.array([timer(StepShape(b, float(c), 0, None)) for c in range(256, 32768, 256)])
        assert np.all(np.diff(times) > 0), b  # no flat regions, no dips


def test_70b_tp4_replica_holds_the_sharded_weights_and_kv() -> None:
    p = load_profile(ROOT / "llama-3.1-70b-h100-tp4-vllm.json")
    assert p.replica.tensor_parallel_size == 4
    assert p.memory.target_kv_bytes_per_token == 2 * 80 * 8 * 128 * 2  # layers x KV heads x head dim x K,V x bf16
    assert p.memory.device_memory_bytes == 4 * 85899345920  # 4 x 80 GiB
    assert 135e9 < p.memory.target_weight_bytes < 146e9  # 70.6 B parameters x 2 bytes
