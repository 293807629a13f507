"""Speculative decoding is lossless and counts acceptance in vLLM's terms.

Tiny random Llama models in float64 (so batched and one-token passes agree to ~1e-15 and greedy
argmax never flips on rounding) stand in for real ones: the properties tested hold for any model.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from profiler.passes.proposers import (  # noqa: E402
    DraftModelProposer,
    NgramProposer,
    SelfDraftProposer,
)
from profiler.passes.speculative import (  # noqa: E402
    DraftRecord,
    SpecResult,
    speculative_generate,
    target_generate,
    verify,
)
from tests.helpers import tiny_llama as make_tiny_llama  # noqa: E402

VOCAB = 48


pytestmark = pytest.mark.usefixtures("one_torch_thread")
tiny_llama = partial(make_tiny_llama, vocab=VOCAB)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_llama(1, layers=2, hidden=16)


PROMPTS = [
    [3, 7, 11, 3, 7, 11, 3, 7, 5, 9, 2],
    [1, 2, 3, 4, 5, 6, 1, 2, 3],
    [40],
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class NoisyOracle:
    """Drafts the target's own greedy tokens but corrupts one position per step, cycling.

    Partial acceptance at every position (0..k) exercises the KV-cache rollback paths that a
    random draft (almost never accepted) and an identical one (always accepted) never reach.
    """

    kind = "draft_model"

    def __init__(self, model: torch.nn.Module) -> None:
        self.name = "noisy-oracle"
        self._inner = DraftModelProposer(model, name="oracle")
        self._step = 0

    def identity(self) -> dict:
        return self._inner.identity()

    def reset(self) -> None:
        self._inner.reset()
        self._step = 0

    def propose(self, context_ids, k, temperature, generator):
        tokens, _ = self._inner.propose(context_ids, k, 0.0, generator)
        bad = self._step % (k + 1)
        self._step += 1
        if bad < len(tokens):
            tokens[bad] = (tokens[bad] + 1) % VOCAB
        return tokens, None


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("kind", ["ngram", "draft", "selfdraft", "identical", "noisy"])
def test_greedy_is_token_identical_to_target(target, draft_model, kind, k):
    proposers = {
        "ngram": lambda: NgramProposer(1, 3),
        "draft": lambda: DraftModelProposer(draft_model, name="tiny-draft"),
        "selfdraft": lambda: SelfDraftProposer(target, 2),
        "identical": lambda: DraftModelProposer(target, name="same"),
        "noisy": lambda: NoisyOracle(target),
    }
    proposer = proposers[kind]()
    for prompt in PROMPTS:
        ref = target_generate(target, prompt, 40, 0.0, None)
        res = speculative_generate(target, proposer, prompt, 40, k, 0.0, None)
        assert list(res.tokens) == ref
        assert res.num_drafts >= 1
        # Every step commits accepted + 1 tokens (the last step may run past the budget).
        committed = sum(d.accepted + 1 for d in res.drafts)
        assert committed >= len(ref) > committed - (k + 1)
        if kind == "noisy" and len(ref) > 3 * (k + 1):
            # every acceptance count 0..k occurs, so every rollback length was exercised
            assert {d.accepted for d in res.drafts} == set(range(k + 1))


def test_greedy_eos_stops_like_target(target):
    prompt = PROMPTS[0]
    ref_full = target_generate(target, prompt, 30, 0.0, None)
    eos = ref_full[7]
    ref = target_generate(target, prompt, 30, 0.0, None, eos_token_id=eos)
    assert ref[-1] == eos and eos not in ref[:-1]
    res = speculative_generate(target, NgramProposer(1, 3), prompt, 30, 4, 0.0, None, eos)
    assert list(res.tokens) == ref


def test_identical_draft_accepts_everything_greedy(target):
    res = speculative_generate(
        target, DraftModelProposer(target, name="same"), PROMPTS[1], 36, 4, 0.0, None
    )
    assert all(d.proposed == 4 and d.accepted == 4 for d in res.drafts)
    assert res.num_accepted_tokens == res.num_draft_tokens
    assert res.num_drafts == 36 // 5 + (1 if 36 % 5 else 0)


def test_identical_draft_accepts_everything_sampling(target):
    res = speculative_generate(
        target, DraftModelProposer(target, name="same"), PROMPTS[0], 40, 3, 1.0, _gen(5)
    )
    assert res.num_accepted_tokens == res.num_draft_tokens
    assert res.accepted_per_pos() == [res.num_drafts] * 3


def test_random_draft_is_rejected_sometimes(target, draft_model):
    """Guards against a verifier that accepts everything (the identity tests alone would pass)."""
    res = speculative_generate(
        target, DraftModelProposer(draft_model, name="d"), PROMPTS[1], 40, 4, 1.0, _gen(1)
    )
    assert res.num_accepted_tokens < res.num_draft_tokens


def test_sampling_is_reproducible_with_same_generator(target, draft_model):
    runs = [
        speculative_generate(
            target, DraftModelProposer(draft_model, name="d"), PROMPTS[0], 25, 3, 0.8, _gen(42)
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Chi-square goodness of fit, pooling cells with expected count < 5; 0.1% level."""
    from math import erf, sqrt

    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = len(obs) - 1
    # Wilson–Hilferty normal approximation of the chi-square upper tail.
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / sqrt(2 / (9 * dof))
    p_value = 0.5 * (1 - erf(z / sqrt(2)))
    return p_value > 1e-3


@pytest.mark.parametrize("deterministic", [False, True])
def test_rejection_rule_first_token_follows_target(deterministic):
    """The first emitted token of the rejection rule is distributed as p, whatever q is."""
    v = 6
    rng = np.random.default_rng(7)
    p_logits = torch.tensor(rng.normal(size=(3, v)) * 1.5)
    q = torch.softmax(torch.tensor(rng.normal(size=(2, v)) * 1.5), dim=-1)
    p = torch.softmax(p_logits, dim=-1).numpy()
    gen = _gen(3)
    counts = np.zeros(v)
    n = 8000
    for _ in range(n):
        if deterministic:
            draft, qq = [2, 4], None
        else:
            draft = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(2)]
            qq = q
        accepted, nxt = verify(draft, qq, p_logits, 1.0, gen)
        first = draft[0] if accepted >= 1 else nxt
        counts[first] += 1
    assert _chi_square_ok(counts, p[0])
    assert np.abs(counts / n - p[0]).sum() / 2 < 0.03  # total variation distance


def test_rejection_rule_second_token_given_first():
    """Conditional on the first token, the second is distributed as p_2 (here p_2 fixed)."""
    v = 5
    rng = np.random.default_rng(11)
    p_logits = torch.tensor(rng.normal(size=(3, v)))
    q = torch.softmax(torch.tensor(rng.normal(size=(2, v))), dim=-1)
    p2 = torch.softmax(p_logits[1], dim=-1).numpy()
    gen = _gen(9)
    counts = np.zeros(v)
    for _ in range(8000):
        draft = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(2)]
        accepted, nxt = verify(draft, q, p_logits, 1.0, gen)
        if accepted >= 1:
            second = draft[1] if accepted >= 2 else nxt
            counts[second] += 1
    assert counts.sum() > 1000
    assert _chi_square_ok(counts, p2)


def test_speculative_sampling_first_token_matches_target_softmax(target, draft_model):
    """End to end on the tiny model: first generated token ~ softmax(target logits / T)."""
    prompt = [5, 6, 7, 8]
    temp = 0.9
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([prompt])).logits[0, -1].double()
    p = torch.softmax(logits / temp, dim=-1).numpy()
    proposer = DraftModelProposer(draft_model, name="d")
    gen = _gen(2024)
    counts = np.zeros(VOCAB)
    for _ in range(800):
        res = speculative_generate(target, proposer, prompt, 1, 2, temp, gen)
        counts[res.tokens[0]] += 1
    assert _chi_square_ok(counts, p)


def test_verify_greedy_table():
    logits = torch.full((4, 8), -1.0)
    logits[0, 3] = 1.0
    logits[1, 5] = 1.0
    logits[2, 1] = 1.0
    logits[3, 6] = 1.0
    assert verify([3, 5, 1], None, logits, 0.0, None) == (3, 6)  # all kept + bonus
    assert verify([3, 5, 2], None, logits, 0.0, None) == (2, 1)  # correction at pos 3
    assert verify([0, 5, 1], None, logits, 0.0, None) == (0, 3)
    assert verify([], None, logits[:1], 0.0, None) == (0, 3)  # nothing proposed: plain decode


@pytest.mark.parametrize(
    ("records", "k", "drafts", "draft_tokens", "accepted", "per_pos", "vllm"),
    [
        ([(3, 3), (3, 1), (3, 0)], 3, 3, 9, 4, [2, 1, 1], (3, 9, 4)),
        ([(0, 0), (2, 2), (4, 1)], 4, 3, 12, 3, [2, 1, 0, 0], (2, 6, 3)),
        ([(0, 0), (0, 0)], 2, 2, 4, 0, [0, 0], (0, 0, 0)),
        ([(5, 5)] * 4, 5, 4, 20, 20, [4, 4, 4, 4, 4], (4, 20, 20)),
    ],
)
def test_counting_table(records, k, drafts, draft_tokens, accepted, per_pos, vllm):
    res = SpecResult(tokens=(), drafts=tuple(DraftRecord(p, a) for p, a in records), k=k)
    assert res.num_drafts == drafts
    assert res.num_draft_tokens == draft_tokens == drafts * k
    assert res.num_accepted_tokens == accepted == sum(res.accepted_per_pos())
    assert res.accepted_per_pos() == per_pos
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))
    assert tuple(res.vllm_view().values()) == vllm


def test_counting_rejects_impossible_records():
    with pytest.raises(ValueError):
        DraftRecord(proposed=2, accepted=3)
    with pytest.raises(ValueError):
        SpecResult(tokens=(), drafts=(DraftRecord(4, 0),), k=3)


def test_accepted_per_pos_non_increasing_on_real_run(target, draft_model):
    res = speculative_generate(
        target, DraftModelProposer(draft_model, name="d"), PROMPTS[0], 40, 5, 0.0, None
    )
    per_pos = res.accepted_per_pos()
    assert len(per_pos) == 5
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))
    assert per_pos[0] <= res.num_drafts


def test_bad_arguments(target):
    with pytest.raises(ValueError, match="k=0"):
        speculative_generate(target, NgramProposer(), [1, 2], 5, 0, 0.0, None)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(target, NgramProposer(), [], 5, 2, 0.0, None)
    assert speculative_generate(target, NgramProposer(), [1, 2], 0, 2, 0.0, None).tokens == ()
