"""Proposers: vLLM's prompt lookup, early-exit self-draft and cached draft models."""

from __future__ import annotations

from functools import partial

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from profiler.passes.proposers import (  # noqa: E402
    DraftModelProposer,
    NgramProposer,
    Proposer,
    SelfDraftProposer,
    early_exit_model,
)
from sim.contracts.errors import SpecplanError  # noqa: E402
from tests.helpers import tiny_llama as make_tiny_llama  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
tiny_llama = partial(make_tiny_llama, vocab=40, max_positions=256)


@pytest.mark.parametrize(
    ("ids", "min_n", "max_n", "k", "expected"),
    [
        # vLLM's docstring example: [4,2,3] has no earlier match, [2,3] does; only 3 follow.
        ([1, 2, 3, 4, 2, 3], 2, 3, 4, [4, 2, 3]),
        ([1, 2, 3, 4, 2, 3], 2, 3, 2, [4, 2]),
        # the longest matching suffix wins over a shorter one matching elsewhere
        ([9, 5, 6, 7, 1, 8, 6, 7, 2, 5, 6, 7], 1, 3, 1, [1]),
        # among equal-length matches the earliest occurrence wins (as in vLLM)
        ([7, 8, 1, 7, 8, 2, 7, 8], 2, 2, 1, [1]),
        # nothing matches
        ([1, 2, 3, 4, 5], 1, 3, 3, []),
        # below min_n: no proposal even though a 1-gram matches
        ([1, 2, 3, 1], 2, 3, 3, []),
        ([1, 2, 3, 1], 1, 3, 3, [2, 3, 1]),
        # too short a context
        ([4], 1, 2, 3, []),
        # a match overlapping the suffix is allowed (repetition)
        ([5, 5, 5, 5], 1, 3, 3, [5]),
    ],
)
def test_ngram_lookup_table(ids, min_n, max_n, k, expected):
    assert NgramProposer(min_n, max_n).lookup(ids, k) == expected


def test_ngram_accepts_tensors_and_is_deterministic():
    p = NgramProposer(1, 2)
    tokens, q = p.propose(torch.tensor([[1, 2, 3, 1, 2]]), 2, 0.7, None)
    assert tokens == [3, 1] and q is None
    assert isinstance(p, Proposer)
    assert p.identity() == {"kind": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2}


@pytest.mark.parametrize(("lo", "hi"), [(0, 2), (3, 2)])
def test_ngram_bad_bounds(lo, hi):
    with pytest.raises(SpecplanError, match="prompt_lookup"):
        NgramProposer(lo, hi)


def test_bad_name_refused():
    with pytest.raises(SpecplanError, match="proposer name"):
        NgramProposer(name="my ngram")


def test_self_draft_equals_truncated_target():
    """Early exit = a model with only the first L layers of the target's weights."""
    target = tiny_llama(0, layers=4)
    shallow = early_exit_model(target, 2)
    assert shallow.model.layers[0] is target.model.layers[0]
    assert shallow.lm_head is target.lm_head
    cfg = transformers.LlamaConfig(**{**target.config.to_dict(), "num_hidden_layers": 2})
    ref = transformers.LlamaForCausalLM(cfg).to(torch.float64).eval()
    missing, unexpected = ref.load_state_dict(
        {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.")
         or int(k.split(".")[2]) < 2},
        strict=False,
    )
    assert not missing and not unexpected
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.inference_mode():
        a = shallow(input_ids=ids).logits
        b = ref(input_ids=ids).logits
        full = target(input_ids=ids).logits
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, full)  # really fewer layers


def test_self_draft_identity_and_bounds():
    target = tiny_llama(0, layers=4)
    p = SelfDraftProposer(target, 3)
    ident = p.identity()
    assert p.name == "selfdraft-l3"
    assert ident["kind"] == "self_draft" and ident["layers"] == [0, 1, 2]
    assert "3 of 4" in ident["note"]
    with pytest.raises(SpecplanError, match="between 1 and 4"):
        SelfDraftProposer(target, 5)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_draft_cache_reuse_matches_fresh_drafting(temperature):
    """Cropping and reusing the draft KV cache gives the same proposals as starting afresh."""
    draft = tiny_llama(3, layers=2)
    cached = DraftModelProposer(draft, name="cached")
    fresh = DraftModelProposer(draft, name="fresh")
    context = [1, 2, 3, 4, 5, 6]
    for step in range(6):
        g1 = torch.Generator().manual_seed(step)
        g2 = torch.Generator().manual_seed(step)
        fresh.reset()
        t1, q1 = cached.propose(context, 4, temperature, g1)
        t2, q2 = fresh.propose(context, 4, temperature, g2)
        assert t1 == t2
        if temperature == 0.0:
            assert q1 is None and q2 is None
        else:
            assert q1.shape == (4, 40)
            torch.testing.assert_close(q1, q2)
            torch.testing.assert_close(q1.sum(-1), torch.ones(4, dtype=q1.dtype))
        # keep part of the draft (as a verifier would) plus a "correction" token
        keep = step % 4
        context = context + t1[:keep] + [(t1[keep] + 1) % 40]


def test_draft_model_identity_from_loaded_model():
    class Loaded:
        def __init__(self, model):
            self.model = model
            self.tokenizer = None
            self.identity = {"id": "org/Tiny-Draft v2", "source": "local", "sha256": None}

    p = DraftModelProposer(Loaded(tiny_llama(4, layers=1)))
    assert p.name == "Tiny-Draft-v2"
    assert p.identity() == {"kind": "draft_model", "model": Loaded(None).identity}
