"""The drafter's passes as profiler/imported/aic_grids.py composes them from the database's per-op
times (issue 37 item 1: a speculative step priced by its parts, each as the engine runs it).

A fake engine with linear, separable ops stands in for aiconfigurator-core, so the rules are
checked without the package: each op's cost is known in closed form, and a test zeroes every op
but the one whose row count it checks.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.imported.aic_grids import GridBuilder
from tests.helpers import LinearEngine

US = 1e-3  # one microsecond in the engine's milliseconds




@settings(max_examples=100, deadline=None)
@given(b=st.integers(1, 512), k=st.integers(1, 8), c=st.sampled_from([128, 1024, 8192]))
def test_each_draft_pass_scores_one_position_per_row(b: int, k: int, c: int) -> None:
    """vLLM's proposer computes logits at each row's last position only, in the first pass too
    (``eagle.py`` ``propose``: ``compute_logits(last_hidden_states[last_token_indices])``): k
    passes of the LM head over b rows, never over the b(k+1) tokens the first pass runs."""
    gb = GridBuilder(LinearEngine(logits=5 * US))
    assert gb.draft(b, k, c) == pytest.approx(k * 5 * US * b)


@settings(max_examples=100, deadline=None)
@given(b=st.integers(1, 512), k=st.integers(1, 8), c=st.sampled_from([128, 1024, 8192]))
def test_the_first_draft_pass_runs_its_layers_over_every_scheduled_token(b: int, k: int, c: int) -> None:
    """The layers of the first pass run over each row's k+1 verified positions (the draft's KV
    and hidden states catch up with the target's), the k-1 later passes over one token a row."""
    gb = GridBuilder(LinearEngine(gemm=2 * US, logits=1e-9))
    assert gb.draft(b, k, c) == pytest.approx(2 * US * (b * (k + 1) + (k - 1) * b), rel=1e-6)


def test_the_draft_grid_holds_draft_in_seconds() -> None:
    gb = GridBuilder(LinearEngine(gemm=2 * US, attn=0.01 * US, logits=5 * US))
    g = gb.draft_grid([1, 8], 3, [128, 1024])
    assert g["axes"] == {"batch": [1, 8], "k": [1, 2, 3], "context": [128, 1024]}
    assert g["median"][1][2][1] == pytest.approx(gb.draft(8, 3, 1024) * 1e-3)


@settings(max_examples=200, deadline=None)
@given(b=st.integers(1, 512), s=st.integers(1, 9), c=st.sampled_from([128, 1024, 8192]), g=st.sampled_from([1, 4, 8, 16, 64]))
def test_fa3_verification_attention_costs_one_decode_per_tile_of_packed_query_heads(b: int, s: int, c: int, g: int) -> None:
    """vLLM's FlashAttention-3 on Hopper packs a KV head's g query heads into a tile's 128 rows for
    every varlen call (hopper/heuristics.h should_pack_gqa), loading the KV once per tile: a row's
    s queries cost its one-query decode attention times ceil(s·g/128) / ceil(g/128) — no more
    while they fit one tile, whatever the database's prefill attention says."""
    gb = GridBuilder(LinearEngine(attn=0.01 * US), pack_gqa_group=g)
    want = gb.decode_attention(b, 1, c) * -(-s * g // 128) / -(-g // 128)
    assert gb.decode_attention(b, s, c) == pytest.approx(want)
    if s * g <= 128:
        assert gb.decode_attention(b, s, c) == gb.decode_attention(b, 1, c)


def test_without_packed_gqa_the_extra_queries_are_priced_from_prefill_attention() -> None:
    """Other engines and GPUs keep the database's extra prefill-attention time for s-1 queries."""
    gb = GridBuilder(LinearEngine(attn=0.01 * US))
    assert gb.decode_attention(4, 4, 1024) > gb.decode_attention(4, 1, 1024)


@pytest.mark.parametrize(("backend", "system", "cfg", "want"), [
    ("vllm", "h100_sxm", {"num_attention_heads": 32, "num_key_value_heads": 8}, 4),
    ("vllm", "h200_sxm", {"num_attention_heads": 64, "num_key_value_heads": 8}, 8),
    ("vllm", "h100_sxm", {"num_attention_heads": 16}, 1),
    ("vllm", "b200_sxm", {"num_attention_heads": 32, "num_key_value_heads": 8}, None),
    ("sglang", "h100_sxm", {"num_attention_heads": 32, "num_key_value_heads": 8}, None),
])
def test_packed_gqa_is_claimed_only_for_vllm_on_hopper(backend: str, system: str, cfg: dict, want) -> None:
    from profiler.imported.aic_step_terms import fa3_pack_gqa_group

    assert fa3_pack_gqa_group(backend, system, cfg) == want
