"""Prefix caching through the whole pipeline: scenario keys, workload sharing, records, summary.

The shipped scenario (a 2,000-token system prompt at low load) must show what the issue's bar
asks: TTFT falls and TPOT does not move; the verdict splits the gain by cause.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.decisions.answer import answer_of
from sim.decisions.answer_text import lines
from sim.results import metric_names as mn
from sim.results.runner import run_scenario
from sim.results.simulation import simulate_once
from sim.workload.workload import generate_requests
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "scenarios" / "prefix-cache-system-prompt.toml"


def _row(res, col: str) -> float:
    return float(res.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)[col][0])


def test_a_shared_system_prompt_cuts_ttft_and_leaves_tpot_at_low_load() -> None:
    sc = load_scenario(SHIPPED).with_overrides({"run.duration_s": 300})
    prof = load_profile(sc.require_profile_path())
    off, on = (simulate_once(sc, prof, name, 1) for name in ("baseline", "cache"))
    ttft = mn.latency_col(mn.TTFT, "median")
    tpot = mn.latency_col(mn.TPOT, "median")
    assert _row(on, ttft) < 0.5 * _row(off, ttft)
    assert _row(on, tpot) == pytest.approx(_row(off, tpot), rel=0.03)
    # 2,000 of 2,100–2,400 prompt tokens are shared: every request after the first hits them all
    assert 0.8 < _row(on, mn.PREFIX_HIT_RATE) < 0.96 and _row(off, mn.PREFIX_HIT_RATE) == 0.0
    hits = on.requests["prefix_hit_tokens"].to_numpy()
    assert hits[0] == 0 and (hits[1:] == 2000).all()  # 125 blocks of 16, cached by the first
    assert _row(on, mn.PREFILL_SAVED) == float(on.requests.filter(pl.col("in_window"))["prefix_hit_tokens"].sum())
    # the same requests (common random numbers): caching changes no arrival or length
    assert on.requests["prompt_tokens"].equals(off.requests["prompt_tokens"])


def test_the_verdict_says_which_gain_is_cachings(tmp_path) -> None:
    sc = load_scenario(SHIPPED).with_overrides({"run.duration_s": 200, "run.seeds": [1, 2]})
    result = run_scenario(sc, load_profile(sc.require_profile_path()))
    text = "\n".join(lines(answer_of(result), wrap=False))
    both = next(t for t in text.splitlines() if t.startswith("by cause: cache+eagle3-k3 vs baseline"))
    # TTFT's gain is caching's (large, negative), TPOT's speculation's
    ttft_part = both.split("TTFT p95 ")[1].split(";")[0]
    caching = float(ttft_part.split("prefix caching ")[1].split(" +")[0].split(" ")[0])
    assert caching < -20
    tpot_part = both.split("TPOT p95 ")[1]
    assert float(tpot_part.split("speculation ")[1]) < -1


def test_a_no_speculation_candidate_with_caching_is_not_the_baseline(tmp_path) -> None:
    text = scenario_toml(
        "pc", run={"duration_s": 30, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 2.0},
        segments=[{**segment(prompt=300, output=8), "shared_prefix_tokens": 256}],
        fleet={"profile": "profile.json"},
        candidates=[BASELINE, {"name": "cache", "speculation": "off", "prefix_caching": True}],
    )
    sc = load_scenario(write_scenario(tmp_path, text))
    assert sc.baseline.name == "baseline" and sc.speculative == ()
    specs = generate_requests(sc, rng=np.random.SeedSequence(1).spawn(2)[0])
    assert {s.prefix_spans for s in specs} == {((-1, 256),)}


def test_shared_prefix_tokens_must_be_a_count(tmp_path) -> None:
    text = scenario_toml(
        "pc", run={"duration_s": 30, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 2.0},
        segments=[{**segment(), "shared_prefix_tokens": -5}], fleet={"profile": "profile.json"},
        candidates=[BASELINE])
    with pytest.raises(SpecplanError, match="shared_prefix_tokens"):
        load_scenario(write_scenario(tmp_path, text))


def test_mooncake_hash_ids_feed_the_cache(tmp_path) -> None:
    """Three Mooncake rows: the second repeats the first's two 512-token blocks, the third
    shares only the first block. With 16-token engine blocks: 64 and 32 blocks hit (1,024 and
    512 tokens), by hand."""
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 3]},
            {"timestamp": 2000, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 4]},
            {"timestamp": 4000, "input_length": 700, "output_length": 4, "hash_ids": [1, 5]}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = scenario_toml(
        "mc", run={"duration_s": 10, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "trace", "trace": {"path": "t.jsonl", "format": "mooncake"}},
        segments=[{"name": "chat", "share": 1.0, "acceptance": {"task": "chat", "language": "en"}}],
        fleet={"profile": "profile.json"},
        candidates=[{"name": "cache", "speculation": "off", "prefix_caching": True}])
    sc = load_scenario(write_scenario(tmp_path, text))
    res = simulate_once(sc, load_profile(sc.require_profile_path()), "cache", 1)
    assert res.requests["prefix_hit_tokens"].to_list() == [0, 1024, 512]


def _rag(tmp_path, docs: dict, rate: float = 20.0):
    text = scenario_toml(
        "rag", run={"duration_s": 100, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "poisson", "rate": rate},
        segments=[{**segment(prompt=300, output=4), "shared_prefix_tokens": 64, "documents": docs},
                  {**segment(name="other", prompt=100, output=4)}],
        fleet={"profile": "profile.json"}, candidates=[BASELINE])
    return load_scenario(write_scenario(tmp_path, text))


def test_rag_requests_share_the_system_prompt_and_their_document(tmp_path) -> None:
    """System prompt 64 tokens (4 blocks of 16), documents 128 (8 blocks): two requests with the
    same document share 12 leading blocks, with different ones 4; the other segment none."""
    from sim.workload.prefix_blocks import block_ids

    sc = _rag(tmp_path, {"count": 3, "tokens": 128, "zipf": 0.0})
    specs = generate_requests(sc, rng=np.random.SeedSequence(1).spawn(2)[0])
    ids = block_ids(specs, 16)
    rag = [(s.prefix_spans[1][0], ids[i]) for i, s in enumerate(specs) if s.segment == "chat"]
    assert all(ids[i] is None for i, s in enumerate(specs) if s.segment == "other")
    assert len({d for d, _ in rag}) == 3
    (d0, a), *rest = rag
    for d, b in rest[:50]:
        common = next((j for j in range(len(a)) if a[j] != b[j]), len(a))
        assert common == (12 if d == d0 else 4)


def test_documents_follow_their_zipf_popularity_and_are_common_to_candidates(tmp_path) -> None:
    sc = _rag(tmp_path, {"count": 50, "tokens": 32, "zipf": 1.2}, rate=60.0)
    seq = np.random.SeedSequence(1).spawn(2)[0]
    specs = generate_requests(sc, rng=seq)
    docs = np.array([s.prefix_spans[1][0] for s in specs if s.segment == "chat"])
    top = docs.max()  # rank 1 has the largest (least negative) id
    p1 = sc.workload.segments[0].documents.probabilities()[0]
    share, n = float((docs == top).mean()), len(docs)
    assert abs(share - p1) < 4 * np.sqrt(p1 * (1 - p1) / n)
    again = generate_requests(sc, rng=np.random.SeedSequence(1).spawn(2)[0])
    assert [s.prefix_spans for s in again] == [s.prefix_spans for s in specs]
