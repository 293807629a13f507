"""The n-gram replay reproduces speculative decoding's steps exactly at temperature 0."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from profiler.measured_acceptance.ngram_replay import replay_steps, target_continuations  # noqa: E402
from profiler.passes.proposers import NgramProposer  # noqa: E402
from profiler.passes.speculative import speculative_generate  # noqa: E402
from tests.helpers import tiny_llama  # noqa: E402


def test_replay_matches_speculative_generate_at_temperature_0() -> None:
    model = tiny_llama(3, vocab=12)  # a small vocabulary repeats itself: lookups find matches
    prop = NgramProposer(2, 4)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 12, (n,), generator=g).tolist() for n in (9, 14, 20)]
    k, new = 4, 24
    conts = target_continuations(model, prompts, new + k, 0.0)
    for p, cont in zip(prompts, conts, strict=True):
        ref = speculative_generate(model, prop, p, new, k, 0.0, None, None)
        got = replay_steps(prop.lookup, p, cont, k, new)
        assert got.tokens == ref.tokens
        assert got.drafts == ref.drafts  # same steps, proposals and accepted counts
    assert any(d.proposed == 0 for r in conts for d in replay_steps(prop.lookup, prompts[0], r, k, new).drafts)


def test_replay_by_hand() -> None:
    def lookup(ids, k):  # proposes the next 2 tokens of the sequence 1..9 when it can
        return [t for t in (ids[-1] + 1, ids[-1] + 2) if ids[-1] % 2 == 0][:k]

    r = replay_steps(lookup, [0], [1, 2, 3, 9, 9, 9, 9, 9], 2, 5)
    # ids end 0: propose 1,2 -> both kept, bonus 3 | ends 3: nothing -> emit 9 | 9: nothing ...
    assert [(d.proposed, d.accepted) for d in r.drafts] == [(2, 2), (0, 0), (0, 0)]
    assert r.tokens == (1, 2, 3, 9, 9)
    with pytest.raises(ValueError, match="need max_new_tokens"):
        replay_steps(lookup, [0], [1, 2], 2, 5)
