"""The roofline's communication rule against a closed form: a ring all-reduce moves
``2(n−1)/n`` of the message per GPU (reduce-scatter then all-gather), two per layer, plus one
logit gather moving ``(n−1)/n`` of the logits; each operation pays a fixed latency."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.estimates.gpu_specs import GpuSpec, gpu_spec
from profiler.estimates.roofline import (
    ACTIVATION_BYTES,
    Efficiency,
    comm_time,
    forward_cost,
    pass_time,
    roofline_time,
)
from profiler.hf_config import read_config

GPU = GpuSpec("test-gpu", bf16_flops=1e15, memory_bandwidth=3e12, memory_bytes=80 * 2**30,
              source="made-up figures for a closed-form check", interconnect_bandwidth=4.5e11,
              allreduce_latency_s=5e-6)
ARCH_70B = {"num_layers": 80, "hidden_size": 8192, "vocab_size": 128_256}


def ring_oracle(arch, nbytes, tokens, logit_tokens, gpu, tp) -> float:
    if tp == 1:
        return 0.0
    hidden = tokens * arch["hidden_size"] * nbytes
    allreduce = gpu.allreduce_latency_s + 2 * (tp - 1) / tp * hidden / gpu.interconnect_bandwidth
    gather = gpu.allreduce_latency_s + (tp - 1) / tp * logit_tokens * arch["vocab_size"] * nbytes / gpu.interconnect_bandwidth
    return arch["num_layers"] * 2 * allreduce + gather


@settings(max_examples=200, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8, 16]), tokens=st.integers(1, 16_384), logits=st.integers(0, 256),
       layers=st.integers(1, 128), hidden=st.integers(64, 16_384), nbytes=st.sampled_from([1, 2, 4]))
def test_comm_time_is_two_ring_allreduces_per_layer_with_factor_2_n_minus_1_over_n(
        tp, tokens, logits, layers, hidden, nbytes) -> None:
    arch = {"num_layers": layers, "hidden_size": hidden, "vocab_size": 32_000}
    assert comm_time(arch, nbytes, tokens, logits, GPU, tp) == pytest.approx(
        ring_oracle(arch, nbytes, tokens, logits, GPU, tp), rel=1e-12)


def test_70b_tp4_prefill_communication_uses_ring_factor_1_5() -> None:
    # 2(4−1)/4 = 1.5 of 8,192 tokens × 8,192 × 2 bytes per all-reduce, 160 of them
    t = comm_time(ARCH_70B, 2, 8192, 1, GPU, 4)
    bytes_per_ar = 1.5 * 8192 * 8192 * 2
    expected = 160 * (5e-6 + bytes_per_ar / 4.5e11) + 5e-6 + 0.75 * 128_256 * 2 / 4.5e11
    assert t == pytest.approx(expected, rel=1e-12)


def test_comm_time_is_zero_on_one_gpu() -> None:
    assert comm_time(ARCH_70B, 2, 4096, 1, GPU, 1) == 0.0


def test_70b_tp4_prefill_pass_prices_ring_allreduce_at_activation_width() -> None:
    """The issue's case: with the factor 2.0 -> 1.0 a 70B TP4 prefill came out ~6 % fast."""
    arch = read_config("config:llama-3.1-70b").identity["architecture"]
    gpu, eff = gpu_spec("H100"), Efficiency()
    flops, moved = forward_cost(arch, 1, 1, 8192, 0, 1, None, 4, None)
    expected = (roofline_time(flops, moved, gpu, "fp8", eff)
                + ring_oracle(arch, ACTIVATION_BYTES, 8192, 1, gpu, 4))  # fp8 weights, 16-bit activations
    assert pass_time(arch, 1, 1, 8192, 0, 1, gpu, "fp8", eff, tp=4) == pytest.approx(expected, rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 4096), tp=st.sampled_from([1, 2, 4, 8]))
def test_attention_flops_are_a_causal_sum_each_new_token_attends_the_context_and_those_before_it(n, tp) -> None:
    """Token i of n new ones attends the cached context plus i tokens: Σ (c + i) = n·c + n(n+1)/2.
    One attended key costs ``unit`` (one query, one more cached token)."""
    arch = read_config("config:llama-3.1-70b").identity["architecture"]

    def flops(new: int, ctx: int) -> float:
        return forward_cost(arch, 2, 1, new, ctx, 0, None, tp, None)[0]
    unit = flops(1, 1) - flops(1, 0)
    assert unit > 0
    assert flops(n, 0) - n * flops(1, 0) == pytest.approx(unit * (n * (n + 1) / 2 - n), rel=1e-9, abs=1e-3)
    assert flops(n, 1000) - flops(n, 0) == pytest.approx(unit * n * 1000, rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(["config:llama-3.1-8b", "config:llama-3.1-70b"]), batch=st.integers(1, 256),
       new=st.integers(1, 64), context=st.integers(0, 32_768), logits=st.integers(0, 64),
       tp=st.sampled_from([1, 2, 4, 8]), nbytes=st.sampled_from([0.5, 1, 2]), kv=st.sampled_from([None, 1, 2]))
def test_a_dense_forward_multiplies_every_weight_twice_per_token_and_reads_weights_once_plus_the_kv_cache(
        model, batch, new, context, logits, tp, nbytes, kv) -> None:
    """Closed form of a dense pass on each of ``tp`` GPUs: FLOPs = (2·P·T + 2·V·H·logits +
    layers·a·T·(c + (n+1)/2)) / tp; bytes = (P·dtype + (V·H + H)·16 bit) / tp + (B·c + T)·KV bytes
    per token (K and V of this GPU's heads in every layer); T = B·n new tokens, P the layer weights."""
    from profiler.model_shape import attention_flops_per_query, body_params

    arch = read_config(model).identity["architecture"]
    layers, hidden, vocab = arch["num_layers"], arch["hidden_size"], arch["vocab_size"]
    kv_heads = arch["num_kv_heads"] // tp if arch["num_kv_heads"] >= tp else 1
    head_dim = arch.get("head_dim") or hidden // arch["num_attention_heads"]
    kv_per_token = layers * 2 * kv_heads * head_dim * (nbytes if kv is None else kv)
    tokens = batch * new
    flops = (2 * body_params(arch) * tokens + 2 * vocab * hidden * logits
             + layers * attention_flops_per_query(arch) * tokens * (context + (new + 1) / 2)) / tp
    moved = (body_params(arch) * nbytes + (vocab * hidden + hidden) * 2) / tp + (batch * context + tokens) * kv_per_token
    got = forward_cost(arch, nbytes, batch, new, context, logits, None, tp, kv)
    assert got == (pytest.approx(flops, rel=1e-12), pytest.approx(moved, rel=1e-12))
