"""Multi-turn conversations that resend their history: the workload they generate and what the
prefix cache makes of it (docs/prefix-caching.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.lengths import LengthDist
from sim.contracts.profile import load_profile
from sim.contracts.scenario import RunConfig, load_scenario
from sim.contracts.workload_config import ConversationConfig, SegmentConfig, WorkloadConfig
from sim.results.simulation import simulate_once
from sim.workload.workload import generate_arrays, generate_requests
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

CACHE = {"name": "cache", "speculation": "off", "prefix_caching": True}


def _scenario(tmp_path, conversation, *, arrival=None, seg=None):
    text = scenario_toml(
        "conv", run={"duration_s": 200, "warmup_s": 0, "seeds": [1]},
        workload=arrival or {"arrival": "poisson", "rate": 0.05},
        segments=[{**(seg or segment(prompt=70, output=30)), "conversation": conversation}],
        fleet={"profile": "profile.json"}, candidates=[BASELINE, CACHE])
    return load_scenario(write_scenario(tmp_path, text))


def test_three_turns_hit_what_the_previous_turn_cached(tmp_path) -> None:
    """Prompt 70, answers 30, user messages 20, 16-token blocks. Turn 0 (70 tokens) caches 4 full
    blocks (64 tokens) and hits nothing. Turn 1 (70 + 30 + 20 = 120) hits those 64: its block 4
    (tokens 64–79) holds turn 0's prompt end and answer, which the engine model never hashed.
    Turn 2 (120 + 50 = 170) hits turn 1's 7 full prompt blocks, 112 tokens."""
    sc = _scenario(tmp_path, {"turns": 3, "gap_s": 20.0, "user_tokens": 20})
    specs = generate_requests(sc, rng=np.random.SeedSequence(1).spawn(2)[0])
    turns = [s for s in specs if s.prefix_spans[0] == specs[0].prefix_spans[0]]
    assert [s.prompt_tokens for s in turns] == [70, 120, 170]
    one = [replace(s, id=j) for j, s in enumerate(turns)]
    prof = load_profile(sc.require_profile_path())
    on = simulate_once(sc, prof, "cache", 1, requests=one).requests.sort("id")
    off = simulate_once(sc, prof, "baseline", 1, requests=one).requests.sort("id")
    # each turn arrived after the previous one ended (else it could not hit all of it)
    assert (on["arrival_s"][1:].to_numpy() > on["finish_s"][:-1].to_numpy()).all()
    assert on["prefix_hit_tokens"].to_list() == [0, 64, 112]
    assert off["prefix_hit_tokens"].to_list() == [0, 0, 0]


lengths = st.one_of(st.integers(1, 300).map(lambda v: {"dist": "fixed", "value": v}),
                    st.tuples(st.integers(1, 200), st.integers(0, 200)).map(
                        lambda t: {"dist": "uniform", "min": t[0], "max": t[0] + t[1]}))


@settings(max_examples=40, deadline=None)
@given(turns=st.integers(1, 6), gap=st.floats(0.01, 30.0), user=st.integers(1, 500),
       prompt=lengths, output=lengths, shared=st.integers(0, 120), seed=st.integers(0, 2**32 - 1))
def test_turns_arrive_in_order_and_resend_their_history(turns, gap, user, prompt, output, shared,
                                                        seed) -> None:
    def seg(name, conv):
        return SegmentConfig(name, 1.0, LengthDist(**prompt), LengthDist(**output),
                             shared_prefix_tokens=shared, conversation=conv)

    run = RunConfig(duration_s=60.0)
    conv = ConversationConfig(turns, gap, user)
    with_c = WorkloadConfig("poisson", (seg("chat", conv), seg("other", None)), rate=1.5)
    plain = WorkloadConfig("poisson", (seg("chat", None), seg("other", None)), rate=1.5)
    seq = np.random.SeedSequence(seed)
    arr = generate_arrays(with_c, run, seq)
    specs = generate_requests(with_c, run, seq)
    base = generate_arrays(plain, run, seq)
    assert np.all(np.diff(arr["arrival_s"]) >= 0) and (arr["arrival_s"] < 60.0).all()
    assert [s.prompt_tokens for s in specs] == arr["prompt_tokens"].tolist()
    # first turns and the other segment are the workload without conversations (common numbers)
    first = arr["turn"] == 0
    for k in ("arrival_s", "segment", "prompt_tokens", "output_tokens"):
        assert np.array_equal(arr[k][first], base[k])
    assert (arr["conversation"][arr["segment"] == 1] == -1).all()
    for c in np.unique(arr["conversation"][arr["conversation"] >= 0]).tolist():
        rows = np.flatnonzero(arr["conversation"] == c)
        assert arr["turn"][rows].tolist() == list(range(len(rows))) and len(rows) <= turns
        assert np.array_equal(np.diff(arr["prompt_tokens"][rows]), arr["output_tokens"][rows][:-1] + user)
        for a, b in zip(rows[:-1].tolist(), rows[1:].tolist(), strict=True):
            assert specs[b].prefix_spans[:-1] == specs[a].prefix_spans  # the history, resent
        for r in rows.tolist():
            assert sum(t for _, t in specs[r].prefix_spans) == specs[r].prompt_tokens


@pytest.mark.parametrize(("conv", "field"), [
    ({"turns": 0, "gap_s": 5.0, "user_tokens": 20}, "turns"),
    ({"turns": 3, "gap_s": 0.0, "user_tokens": 20}, "gap_s"),
    ({"turns": 3, "gap_s": 5.0, "user_tokens": 0}, "user_tokens"),
    ({"turns": 3, "gap_s": 5.0}, "user_tokens"),
])
def test_bad_conversation_fields_are_named(tmp_path, conv, field) -> None:
    with pytest.raises(SpecplanError, match=rf"conversation\.?{field}|{field}") as e:
        _scenario(tmp_path, conv)
    assert "\n" not in str(e.value)


def test_conversations_need_open_loop_generated_arrivals(tmp_path) -> None:
    with pytest.raises(SpecplanError, match=r"segments\[0\]\.conversation.*concurrency"):
        _scenario(tmp_path, {"turns": 2, "gap_s": 5.0, "user_tokens": 8},
                  arrival={"arrival": "concurrency", "concurrency": 2})


def test_a_segment_without_conversations_has_no_turn_columns(tmp_path) -> None:
    text = scenario_toml("plain", run={"duration_s": 20, "warmup_s": 0, "seeds": [1]},
                         workload={"arrival": "poisson", "rate": 1.0}, segments=[segment()],
                         fleet={"profile": "profile.json"}, candidates=[BASELINE])
    sc = load_scenario(write_scenario(tmp_path, text))
    assert set(generate_arrays(sc.workload, sc.run, np.random.SeedSequence(3))) == {
        "arrival_s", "segment", "prompt_tokens", "output_tokens"}
