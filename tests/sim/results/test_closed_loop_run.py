"""A closed-loop scenario through ``simulate_once``: candidates of a seed serve the same requests
in the same order of sending (common random numbers), and a run repeated on a grown pool is the
run a large enough first pool would have given."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.model.drivers import clients
from sim.results.simulation import simulate_once
from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment, write_scenario

TEXT = scenario_toml(
    "closed", run={"duration_s": 6, "warmup_s": 1, "seeds": [1]},
    workload={"arrival": "concurrency", "concurrency": 6, "think_time_s": 0.05,
              "think_time_dist": "exponential"},
    segments=[segment("a", 0.6, {"dist": "uniform", "min": 20, "max": 120},
                      {"dist": "uniform", "min": 4, "max": 40}),
              segment("b", 0.4, 60, {"dist": "lognormal", "median": 20, "sigma": 0.7, "min": 2, "max": 80})],
    fleet={"profile": "profile.json", "replicas": 2, "price_per_gpu_hour": 2.0},
    engine={"max_num_seqs": 8, "max_num_batched_tokens": 256, "block_size": 16},
    slo={"ttft_ms": 1000, "tpot_ms": 200}, candidates=[BASELINE, NGRAM_K3])

KEYS = ["id", "segment", "prompt_tokens", "output_tokens"]


@pytest.fixture
def loaded(tmp_path: Path):
    sc = load_scenario(write_scenario(tmp_path, TEXT))
    return sc, load_profile(sc.profile_path)


def test_candidates_serve_common_requests(loaded) -> None:
    sc, prof = loaded
    base = simulate_once(sc, prof, "baseline", 1).requests
    spec = simulate_once(sc, prof, "ngram-k3", 1).requests
    n = min(base.height, spec.height)
    assert n > 50 and base.height != spec.height  # the faster candidate sends more
    assert_frame_equal(base.sort("id").select(KEYS).head(n), spec.sort("id").select(KEYS).head(n))
    assert base["id"].sort().to_list() == list(range(base.height))
    s = simulate_once(sc, prof, "ngram-k3", 1).summary.filter(pl.col("segment") == "all")
    assert s["output_throughput"][0] > 0 and s["request_goodput"][0] > 0


def test_grown_pool_repeats_the_same_run(loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 16 rows: a first pool of one block runs out and the run is repeated on a larger
    one; a first pool far too large gives the same records."""
    sc, prof = loaded
    monkeypatch.setattr(clients, "BLOCK", 16)
    monkeypatch.setattr(clients, "workload_size", lambda w, run: (1.0, 1.0))
    sizes: list[int] = []
    real = clients.pool_specs
    monkeypatch.setattr(clients, "pool_specs", lambda w, seq, n: sizes.append(n) or real(w, seq, n))
    small = simulate_once(sc, prof, "ngram-k3", 1).requests
    assert sizes[0] == 16 and len(sizes) > 1 and small.height > 16
    monkeypatch.setattr(clients, "workload_size", lambda w, run: (50_000.0, 1.0))
    large = simulate_once(sc, prof, "ngram-k3", 1).requests
    assert sizes[-1] >= 50_000
    assert_frame_equal(small, large)


CACHED = scenario_toml(
    "closed-cached", run={"duration_s": 6, "warmup_s": 1, "seeds": [1]},
    workload={"arrival": "concurrency", "concurrency": 6},
    segments=[{**segment("a", 0.5, {"dist": "uniform", "min": 40, "max": 120}, 8),
               "documents": {"count": 3, "tokens": 32, "zipf": 1.0}},
              {**segment("b", 0.5, 60, 8), "shared_prefix_tokens": 32}],
    fleet={"profile": "profile.json", "replicas": 2, "price_per_gpu_hour": 2.0},
    engine={"max_num_seqs": 8, "max_num_batched_tokens": 256, "block_size": 16, "prefix_caching": True},
    slo={"ttft_ms": 1000, "tpot_ms": 200}, candidates=[BASELINE, NGRAM_K3])


def test_closed_loop_clients_hit_the_prefix_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients' requests carry their segment's shared blocks: segment b's 32-token system prompt
    (two full blocks) hits once cached, a document hits its 32 tokens; only full blocks hit; a
    run repeated on a grown pool names the same blocks (the same hits, record for record)."""
    sc = load_scenario(write_scenario(tmp_path, CACHED))
    prof = load_profile(sc.profile_path)
    reqs = simulate_once(sc, prof, "ngram-k3", 1).requests
    hits = reqs.group_by("segment").agg(pl.col("prefix_hit_tokens").unique().sort())
    assert {s: set(h) for s, h in hits.iter_rows()} == {"a": {0, 32}, "b": {0, 32}}
    b = reqs.filter(pl.col("segment") == "b")["prefix_hit_tokens"]
    assert b.len() > 50 and (b == 32).mean() > 0.9  # only the first few, before the prompt is cached
    monkeypatch.setattr(clients, "BLOCK", 16)
    monkeypatch.setattr(clients, "workload_size", lambda w, run: (1.0, 1.0))
    small = simulate_once(sc, prof, "ngram-k3", 1).requests
    monkeypatch.setattr(clients, "workload_size", lambda w, run: (50_000.0, 1.0))
    assert_frame_equal(small, simulate_once(sc, prof, "ngram-k3", 1).requests)


def test_littles_law_with_200_ms_overhead(tmp_path: Path) -> None:
    """The issue's case: 4 clients, no think time, 200 ms per-request overhead outside the engine.
    Before the fix the clients resent at the engine's finish and X · E2E read 4.87 (21.9 % high);
    now X · E2E = N within 3 %, with X the summary's throughput and E2E its mean (overhead in)."""
    text = scenario_toml(
        "little", run={"duration_s": 120, "warmup_s": 20, "seeds": [1]},
        workload={"arrival": "concurrency", "concurrency": 4},
        segments=[segment("a", 1.0, {"dist": "uniform", "min": 20, "max": 200},
                          {"dist": "uniform", "min": 10, "max": 120})],
        fleet={"profile": "profile.json"}, engine={"max_num_seqs": 16, "max_num_batched_tokens": 512},
        candidates=[BASELINE]) + "[fleet.request_overhead]\nfixed_ms = 200\n"
    sc = load_scenario(write_scenario(tmp_path, text))
    res = simulate_once(sc, load_profile(sc.profile_path), "baseline", 1)
    row = res.summary.filter(pl.col("segment") == "all").row(0, named=True)
    x, r = row["request_throughput"], row["e2el_ms_mean"] / 1000.0
    assert 3.5 < x < 4.0 and 1.0 < r < 1.2  # ~3.75 req/s at ~1.06 s, 0.2 s of it overhead
    assert x * r == pytest.approx(4.0, rel=0.03)
