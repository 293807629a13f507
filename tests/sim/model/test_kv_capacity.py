"""Usable KV cache from the documented memory formula."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.synthetic import GIB, synthetic_profile, synthetic_profile_dict
from sim.model.kv_capacity import kv_blocks, kv_capacity, kv_tokens

MIB = 1024**2


def with_draft_model(memory: dict | None) -> Profile:
    d = synthetic_profile_dict(device_memory_bytes=16 * GIB, target_weight_bytes=2 * GIB,
                               activation_peak_bytes=512 * MIB, target_kv_bytes_per_token=131072)
    d["proposers"]["small"] = {"kind": "draft_model", "model": copy.deepcopy(d["target"])}
    if memory is not None:
        d["memory"]["proposers"]["small"] = memory
    return Profile.from_dict(d, "t.json")


def test_target_alone_matches_the_formula() -> None:
    p = synthetic_profile(device_memory_bytes=16 * GIB, target_weight_bytes=2 * GIB,
                          activation_peak_bytes=512 * MIB, target_kv_bytes_per_token=131072)
    cap = kv_capacity(p, 0.9, 16)
    budget = int(0.9 * 16 * GIB) - 2 * GIB - 512 * MIB
    tokens = budget // 131072
    assert cap.budget_bytes == budget
    assert cap.kv_blocks == tokens // 16
    assert cap.kv_tokens == (tokens // 16) * 16
    assert cap.kv_tokens % 16 == 0 and cap.kv_tokens <= tokens
    assert kv_tokens(p, 0.9, 16) == cap.kv_tokens and kv_blocks(p, 0.9, 16) == cap.kv_blocks


def test_ngram_proposer_costs_no_memory() -> None:
    p = synthetic_profile()
    assert kv_capacity(p, 0.8, 16, "ngram").kv_tokens == kv_capacity(p, 0.8, 16).kv_tokens


def test_resident_draft_takes_weights_activations_and_kv_per_token() -> None:
    mem = {"weight_bytes": 1 * GIB, "kv_bytes_per_token": 32768, "activation_peak_bytes": 100 * MIB}
    p = with_draft_model(mem)
    alone = kv_capacity(p, 0.9, 16)
    both = kv_capacity(p, 0.9, 16, "small")
    budget = int(0.9 * 16 * GIB) - 2 * GIB - 512 * MIB - 1 * GIB - 100 * MIB
    assert both.budget_bytes == budget
    assert both.bytes_per_token == 131072 + 32768
    assert both.kv_blocks == (budget // (131072 + 32768)) // 16
    assert both.kv_tokens < alone.kv_tokens


def test_draft_model_without_memory_entry_is_refused() -> None:
    p = with_draft_model(None)
    with pytest.raises(SpecplanError, match=r"t\.json: memory\.proposers\.small: missing"):
        kv_capacity(p, 0.9, 16, "small")


def test_unknown_proposer_is_refused() -> None:
    with pytest.raises(SpecplanError, match="unknown proposer 'eagle'"):
        kv_capacity(synthetic_profile(), 0.9, 16, "eagle")


def test_nothing_fits_says_how_much_memory_is_missing() -> None:
    p = synthetic_profile(device_memory_bytes=2 * GIB, target_weight_bytes=2 * GIB, activation_peak_bytes=0)
    with pytest.raises(SpecplanError) as info:
        kv_capacity(p, 0.5, 16)
    msg = str(info.value)
    # usable 1 GiB, weights 2 GiB: 1 GiB + one block (16 * 131072 bytes) missing
    assert f"{GIB + 16 * 131072} bytes) more memory needed for one block of 16 tokens" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("proposer", [None, "ngram"])
def test_nothing_fits_names_every_memory_field_it_used(proposer: str | None) -> None:
    """Any one of them may be the wrong number: the line names them all (and the draft's)."""
    p = synthetic_profile(device_memory_bytes=GIB, target_weight_bytes=2 * GIB)
    with pytest.raises(SpecplanError) as info:
        kv_capacity(p, 0.9, 16, proposer)
    msg = str(info.value)
    for name in ("device_memory_bytes", "target_weight_bytes", "activation_peak_bytes", "target_kv_bytes_per_token"):
        assert name in msg
    assert ("memory.proposers.ngram" in msg) == (proposer is not None)


@settings(max_examples=100, deadline=None)
@given(u=st.floats(0.3, 1.0), block=st.integers(1, 256))
def test_capacity_is_whole_blocks_and_fits_the_budget(u: float, block: int) -> None:
    p = synthetic_profile()
    cap = kv_capacity(p, u, block)
    assert cap.kv_tokens == cap.kv_blocks * block
    assert cap.kv_tokens * cap.bytes_per_token <= cap.budget_bytes
    assert (cap.kv_blocks + 1) * block * cap.bytes_per_token > cap.budget_bytes


def with_reserve(reserve: int) -> Profile:
    d = synthetic_profile_dict(device_memory_bytes=16 * GIB, target_weight_bytes=2 * GIB,
                               activation_peak_bytes=512 * MIB, target_kv_bytes_per_token=131072)
    d["memory"]["reserve"] = {"bytes": reserve, "rule": "--reserve-gb (test)"}
    return Profile.from_dict(d, "t.json")


@settings(max_examples=100, deadline=None)
@given(reserve=st.integers(0, 8 * GIB), u=st.floats(0.7, 1.0), block=st.sampled_from([1, 16, 64]))
def test_a_reserve_shrinks_kv_capacity_by_reserve_over_bytes_per_token(reserve: int, u: float, block: int) -> None:
    """Memory kept for other applications never holds KV: the budget loses exactly the reserve,
    and the token count reserve / bytes per token (give or take the rounding to whole blocks)."""
    base, kept = kv_capacity(with_reserve(0), u, block), kv_capacity(with_reserve(reserve), u, block)
    assert base.budget_bytes - kept.budget_bytes == reserve
    lost = base.kv_tokens - kept.kv_tokens
    assert abs(lost - reserve / kept.bytes_per_token) <= block + 1


def test_a_reserve_that_leaves_no_block_says_so() -> None:
    with pytest.raises(SpecplanError, match=r"less memory\.reserve"):
        kv_capacity(with_reserve(12 * GIB), 0.9, 16)
