"""``profile merge``'s identity rule: acceptance belongs to a target and draft pair."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from profiler.profile_io import identity_mismatch

KEYS = ("family", "num_layers", "hidden_size", "vocab_size")


def _ident(mid: str, family: str, layers: int, hidden: int, vocab: int) -> dict:
    return {"id": mid, "architecture": {"family": family, "num_layers": layers, "hidden_size": hidden,
                                        "vocab_size": vocab}}


ids = st.sampled_from(["meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b-shaped",
                       "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-FP8", "HuggingFaceTB/SmolLM2-135M-Instruct"])
shape = st.tuples(st.sampled_from(["llama", "qwen3_moe"]), st.integers(1, 128), st.integers(64, 8192),
                  st.integers(1000, 200_000))


@given(a=ids, b=ids, s=shape, key=st.sampled_from(KEYS))
def test_same_model_merges_and_any_difference_is_named(a, b, s, key) -> None:
    one = _ident(a, *s)
    assert identity_mismatch(one, _ident(a, *s)) is None
    assert identity_mismatch(one, None) is None and identity_mismatch(None, one) is None
    other = _ident(a, *s)
    other["architecture"][key] = "x" if key == "family" else s[KEYS.index(key)] + 1
    assert key in (identity_mismatch(one, other) or "")
    same_weights = {frozenset(("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b-shaped")),
                    frozenset(("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-FP8"))}
    named = identity_mismatch(one, _ident(b, *s))
    assert (named is None) == (a == b or any({a, b} <= g for g in same_weights))
