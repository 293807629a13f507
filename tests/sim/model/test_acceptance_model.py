"""Acceptance counting in vLLM's terms, draws of accepted tokens, segment matching, bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile, synthetic_profile_dict
from sim.model.acceptance import (
    AcceptanceModel,
    SpecDecodeCounters,
    draw_accepted,
    draw_accepted_many,
    mean_acceptance_length,
    mean_length_interval,
)
from tests.helpers import NGRAM_K2, scenario_toml, segment

# (drafts as (k, accepted)), expected drafts, draft tokens, accepted, accepted per position, mean AL
COUNTING = [
    ([(3, 0)], 1, 3, 0, [0, 0, 0], 1.0),
    ([(3, 3)], 1, 3, 3, [1, 1, 1], 4.0),
    ([(3, 1), (3, 2), (3, 0)], 3, 9, 3, [2, 1, 0], 2.0),
    ([(2, 2), (4, 1)], 2, 6, 3, [2, 1, 0, 0], 2.5),
    ([(0, 0), (1, 1)], 1, 1, 1, [1], 2.0),  # k = 0 is no draft
    ([(5, 5), (5, 4), (5, 3), (5, 2)], 4, 20, 14, [4, 4, 3, 2, 1], 4.5),
]


@pytest.mark.parametrize(("steps", "drafts", "draft_tokens", "accepted", "per_pos", "mal"), COUNTING)
def test_counting_in_vllm_terms(
    steps: list[tuple[int, int]], drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], mal: float
) -> None:
    c = SpecDecodeCounters()
    for k, a in steps:
        c.add(k, a)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (drafts, draft_tokens, accepted)
    assert c.accepted_per_pos == per_pos
    assert sum(c.accepted_per_pos) == c.num_accepted_tokens
    assert c.mean_acceptance_length == pytest.approx(mal)
    assert all(a >= b for a, b in zip(c.accepted_per_pos, c.accepted_per_pos[1:], strict=False))


def test_counter_refuses_more_accepted_than_drafted() -> None:
    with pytest.raises(ValueError):
        SpecDecodeCounters().add(2, 3)


@pytest.mark.parametrize(
    ("rates", "k", "expected"),
    [([1.0, 1.0, 1.0], 3, 3), ([1.0, 1.0, 1.0], 2, 2), ([0.0, 0.0], 2, 0), ([0.9, 0.5], 0, 0), ([1.0, 0.0, 0.0], 3, 1)],
)
def test_draw_accepted_deterministic_edges(rates: list[float], k: int, expected: int) -> None:
    rng = np.random.default_rng(0)
    assert all(draw_accepted(rates, k, rng) == expected for _ in range(50))


def test_draw_accepted_refuses_k_beyond_rates() -> None:
    with pytest.raises(ValueError, match="k_max"):
        draw_accepted([0.5, 0.2], 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="k_max"):
        mean_acceptance_length([0.5], 2)


def test_draw_accepted_matches_survival_rates_statistically() -> None:
    s = [0.8, 0.6, 0.4, 0.3]
    k = 4
    n = 100_000
    rng = np.random.default_rng(12345)
    draws = np.array([draw_accepted(s, k, rng) for _ in range(n)])
    # P(N >= i) = s_i  =>  E[N] = sum s_i, E[N^2] = sum (2i - 1) s_i
    mean = sum(s)
    var = sum((2 * i - 1) * si for i, si in enumerate(s, start=1)) - mean**2
    assert abs(draws.mean() - mean) < 5 * np.sqrt(var / n)
    assert mean_acceptance_length(s, k) == pytest.approx(1 + mean)
    # each position survives with s_i unconditionally and s_i / s_{i-1} given the previous one
    prev = 1.0
    for i, si in enumerate(s, start=1):
        p_hat = (draws >= i).mean()
        assert abs(p_hat - si) < 5 * np.sqrt(si * (1 - si) / n)
        given_prev = (draws >= i).sum() / (draws >= i - 1).sum()
        m = (draws >= i - 1).sum()
        q = si / prev
        assert abs(given_prev - q) < 5 * np.sqrt(q * (1 - q) / m) + 1e-12
        prev = si


def test_draw_accepted_many_uses_the_same_stream_as_scalar_draws() -> None:
    rows = np.array([[0.9, 0.7, 0.5], [0.5, 0.2, 0.1], [0.99, 0.98, 0.97], [0.3, 0.3, 0.0]] * 50)
    scalar_rng, many_rng = np.random.default_rng(3), np.random.default_rng(3)
    scalar = [draw_accepted(r.tolist(), 2, scalar_rng) for r in rows]
    np.testing.assert_array_equal(draw_accepted_many(rows, 2, many_rng), scalar)


def test_segments_match_task_language_and_temperature_exactly() -> None:
    p = synthetic_profile(segments=[("chat", "en", 0.0), ("chat", "en", 1.0), ("code", "any", 0.2)])
    m = AcceptanceModel.from_profile(p, "ngram", {"a": ("chat", "en", 0.0), "c": ("code", "sv", 0.2), "d": ("chat", "en", 1.0)})
    assert str(m.segment("a").key) == "chat:en:0"
    assert m.segment("a").note is None
    assert str(m.segment("c").key) == "code:any:0.2"  # the entry says it covers any language
    assert m.segment("c").note == "code:sv:0.2 uses the entry code:any:0.2"
    assert str(m.segment("d").key) == "chat:en:1"
    assert m.k_max == 5
    assert m.source.startswith("acceptance[ngram]: assumed")
    assert any("segment a -> chat:en:0 (21 requests" in line for line in m.describe())


def test_a_temperature_without_an_entry_fails_naming_both() -> None:
    """Issue 21: temperature-0 traffic ran on the 0.7 entry with no note; now it is an error."""
    p = synthetic_profile(segments=[("chat", "en", 0.7)])
    with pytest.raises(SpecplanError, match=r"scenario segment 'a': temperature 0 has no entry for chat:en; profile has 0\.7"):
        AcceptanceModel.from_profile(p, "ngram", {"a": ("chat", "en", 0.0)})


def test_a_named_fallback_is_used_and_noted() -> None:
    p = synthetic_profile(segments=[("chat", "en", 0.7)])
    m = AcceptanceModel.from_profile(p, "ngram", {"a": ("chat", "en", 0.0)}, {"a": "chat:en:0.7"})
    assert str(m.segment("a").key) == "chat:en:0.7"
    assert "using the named fallback entry chat:en:0.7" in (m.segment("a").note or "")
    with pytest.raises(SpecplanError, match="acceptance.fallback 'chat:en:0.5' names no entry"):
        AcceptanceModel.from_profile(p, "ngram", {"a": ("chat", "en", 0.0)}, {"a": "chat:en:0.5"})


def test_unmatched_segment_lists_available_keys() -> None:
    p = synthetic_profile(segments=[("chat", "en", 0.0), ("code", "en", 0.0)])
    with pytest.raises(SpecplanError, match=r"scenario segment 'x'.*chat:sv has no entry; profile has chat:en:0, code:en:0"):
        AcceptanceModel.from_profile(p, "ngram", {"x": ("chat", "sv", 0.0)})


def test_missing_acceptance_entry_suggests_assumed() -> None:
    p = synthetic_profile(acceptance_rates=None)
    with pytest.raises(SpecplanError, match="no acceptance entry for proposer 'ngram'.*assumed_acceptance"):
        AcceptanceModel.from_profile(p, "ngram", {"x": ("chat", "en", 0.0)})


def test_request_rates_bootstrap_measured_rows_and_skip_rows_without_drafts() -> None:
    d = synthetic_profile_dict(per_request_rows=5)
    seg = d["acceptance"]["ngram"]["segments"][0]
    seg["per_request"].append({"num_drafts": 0, "accepted_per_pos": [0, 0, 0, 0, 0]})
    p = Profile.from_dict(d, "t")
    m = AcceptanceModel.from_profile(p, "ngram", {"s": ("chat", "en", 0.0)})
    expected = {tuple(a / r["num_drafts"] for a in r["accepted_per_pos"]) for r in seg["per_request"] if r["num_drafts"]}
    rng = np.random.default_rng(9)
    seen = {tuple(m.request_rates("s", rng)) for _ in range(400)}
    assert seen == expected  # every measured row is drawn, nothing else
    assert m.spread_known("s")
    a = [tuple(m.request_rates("s", np.random.default_rng(4))) for _ in range(3)]
    assert a[0] == a[1] == a[2]  # same seed, same draw


def test_batched_request_draws_equal_one_draw_per_request() -> None:
    """``draw_requests`` (what a run uses) gives each request the row ``request_acceptance``
    would, from the same stream, segments with and without per-request rows mixed."""
    d = synthetic_profile_dict(segments=[("chat", "en", 0.0), ("code", "en", 0.0)], per_request_rows=7)
    d["acceptance"]["ngram"]["segments"][1]["per_request"] = []  # code: aggregate only
    p = Profile.from_dict(d, "t")
    m = AcceptanceModel.from_profile(p, "ngram", {"a": ("chat", "en", 0.0), "b": ("code", "en", 0.0)})
    order = ["a", "b", "a", "a", "b", "a"] * 40
    one = np.random.default_rng(11)
    expected = []
    for s in order:
        rates, proposal = m.request_acceptance(s, one)
        expected.append(([-r for r in rates.tolist()], proposal))
    many = np.random.default_rng(11)
    assert m.draw_requests(order, many) == expected
    assert many.random() == one.random()  # the stream is left where per-request draws leave it


def test_no_per_request_rows_gives_aggregate_rates() -> None:
    p = synthetic_profile(per_request_rows=0, acceptance_rates=(0.6, 0.3))
    m = AcceptanceModel.from_profile(p, "ngram", {"s": ("chat", "en", 0.0)})
    np.testing.assert_allclose(m.request_rates("s", np.random.default_rng(0)), [0.6, 0.3])
    assert not m.spread_known("s")
    assert "spread unknown" in m.describe()[1]


def test_assumed_rates_validate_and_serve_any_segment() -> None:
    m = AcceptanceModel.from_assumed([0.7, 0.5, 0.35])
    np.testing.assert_allclose(m.request_rates("whatever", np.random.default_rng(0)), [0.7, 0.5, 0.35])
    assert m.source == "acceptance[assumed]: assumed survival rates 0.7, 0.5, 0.35"
    assert m.mean_acceptance_length("x", 2) == pytest.approx(2.2)
    named = AcceptanceModel.from_assumed([0.7], segments=["a"], proposer="ngram")
    with pytest.raises(KeyError):
        named.segment("b")
    with pytest.raises(SpecplanError, match="non-increasing"):
        AcceptanceModel.from_assumed([0.5, 0.6])
    with pytest.raises(SpecplanError, match=r"in \[0, 1\]"):
        AcceptanceModel.from_assumed([1.5])
    with pytest.raises(SpecplanError, match="k=4 exceeds k_max=3"):
        m.check_k(4)


# ---------------------------------------------------------------------------------------------
# how certain a segment's mean acceptance length is


def test_mean_length_interval_exact_on_a_tiny_example() -> None:
    # requests: (drafts, accepted per position); k=2 counts the first two positions
    drafts = [10, 10, 20]
    accepted = np.array([[4, 2, 1], [2, 0, 0], [6, 4, 2]])
    mal, half, n = mean_length_interval(drafts, accepted, 2)
    a = np.array([6, 2, 10])  # accepted within k=2
    ratio = a.sum() / 40
    resid = a - ratio * np.array(drafts)
    assert (mal, n) == (pytest.approx(1 + ratio), 3)
    assert half == pytest.approx(1.96 * np.sqrt(3 / 2 * (resid**2).sum()) / 40)
    assert mean_length_interval(drafts, accepted, 3)[0] == pytest.approx(1 + 21 / 40)


def test_mean_length_interval_shrinks_with_more_requests_and_is_unbounded_for_one() -> None:
    rows = np.array([[3, 1], [0, 0], [2, 2], [1, 0]])
    few = mean_length_interval([5] * 4, rows, 2)
    many = mean_length_interval([5] * 40, np.tile(rows, (10, 1)), 2)
    assert few[0] == pytest.approx(many[0])
    assert many[1] < few[1] / 3  # ~ 1/sqrt(10) narrower
    assert mean_length_interval([5], rows[:1], 2)[1] == np.inf
    with pytest.raises(ValueError, match="k_max"):
        mean_length_interval([5], rows[:1], 3)


def test_model_precision_uses_each_requests_drafts() -> None:
    d = synthetic_profile_dict(per_request_rows=0)
    seg = d["acceptance"]["ngram"]["segments"][0]
    seg["per_request"] = [{"num_drafts": 10, "accepted_per_pos": [4, 2, 1, 0, 0]},
                          {"num_drafts": 30, "accepted_per_pos": [3, 0, 0, 0, 0]}]
    seg.update(num_drafts=40, num_draft_tokens=200, num_accepted_tokens=10, accepted_per_pos=[7, 2, 1, 0, 0])
    m = AcceptanceModel.from_profile(Profile.from_dict(d, "t"), "ngram", {"s": ("chat", "en", 0.0)})
    mal, half, n = m.precision("s", 2)
    assert (mal, n) == (pytest.approx(1 + 9 / 40), 2)  # weighted by drafts, not 1 + mean of rates
    assert half > 0
    assert m.precision("s", 2)[:2] == mean_length_interval([10, 30], np.array([[4, 2], [3, 0]]), 2)[:2]
    no_rows = AcceptanceModel.from_profile(synthetic_profile(per_request_rows=0), "ngram", {"s": ("chat", "en", 0.0)})
    assert no_rows.precision("s", 2)[2] == 0


THIN_SCENARIO = scenario_toml(
    'thin',
    run={'duration_s': 20, 'warmup_s': 0, 'seeds': [1]},
    workload={'arrival': 'poisson', 'rate': 1.0},
    segments=[segment()],
    fleet={'profile': 'profile.json'},
    candidates=[NGRAM_K2],
)


@pytest.mark.parametrize(
    ("rows", "expect"),
    [(3, "acceptance rests on few measured requests for segment(s) chat (3 requests: "),
     (0, "acceptance spread across requests unknown for segment(s) chat"),
     (21, None)],
)
def test_simulate_says_when_measured_acceptance_is_thin(tmp_path, rows: int, expect: str | None) -> None:
    from sim.contracts.scenario import load_scenario
    from sim.results.runner import run_scenario
    from tests.helpers import write_scenario

    # 6 drafts per request at these rates are ~16-18 tokens, the scenario's output length
    sc = load_scenario(write_scenario(tmp_path, THIN_SCENARIO, per_request_rows=rows, drafts_per_request=6))
    notes = run_scenario(sc).notes
    thin = [n for n in notes if "acceptance" in n]
    if expect is None:
        assert thin == []
    else:
        assert any(expect in n for n in thin), notes


def test_measured_output_tokens_counts_each_steps_tokens() -> None:
    d = synthetic_profile_dict(per_request_rows=0)
    seg = d["acceptance"]["ngram"]["segments"][0]
    # 10 steps emitting 1 + (4+2+1)/10 tokens each = 17; 30 steps with 3 accepted = 33; 20 steps = 20
    seg["per_request"] = [{"num_drafts": 10, "accepted_per_pos": [4, 2, 1, 0, 0]},
                          {"num_drafts": 30, "accepted_per_pos": [3, 0, 0, 0, 0]},
                          {"num_drafts": 20, "accepted_per_pos": [0, 0, 0, 0, 0]}]
    seg.update(num_drafts=60, num_draft_tokens=300, num_accepted_tokens=10, accepted_per_pos=[7, 2, 1, 0, 0])
    m = AcceptanceModel.from_profile(Profile.from_dict(d, "t"), "ngram", {"s": ("chat", "en", 0.0)})
    assert m.measured_output_tokens("s") == pytest.approx(20.0)  # median of 17, 33, 20
    no_rows = AcceptanceModel.from_profile(synthetic_profile(per_request_rows=0), "ngram", {"s": ("chat", "en", 0.0)})
    assert np.isnan(no_rows.measured_output_tokens("s"))


@pytest.mark.parametrize(
    ("drafts", "output", "expect"),
    [(6, 16, None),  # ~17 tokens measured, 16 simulated
     (100, 16, "over 1.5x longer"),  # ~300 tokens measured
     (2, 16, "over 1.5x shorter")],  # ~6 tokens measured
)
def test_simulate_says_when_acceptance_was_measured_on_other_answer_lengths(
    tmp_path, drafts: int, output: int, expect: str | None
) -> None:
    from sim.contracts.scenario import load_scenario
    from sim.results.runner import run_scenario
    from tests.helpers import write_scenario

    text = THIN_SCENARIO.replace('value = 16', f'value = {output}')
    sc = load_scenario(write_scenario(tmp_path, text, drafts_per_request=drafts))
    notes = [n for n in run_scenario(sc).notes if "answer length" in n]
    if expect is None:
        assert notes == []
    else:
        assert len(notes) == 1 and expect in notes[0], notes
        assert notes[0].startswith("ngram-k2: acceptance was measured on answers over 1.5x")
        assert "than the simulated outputs for segment(s) chat (~" in notes[0]
