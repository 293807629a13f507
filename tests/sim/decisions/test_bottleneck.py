"""Bottleneck attribution on hand-built record frames: each suspect is flagged by its measure."""

from __future__ import annotations

import polars as pl
import pytest

from sim.contracts.synthetic import synthetic_profile
from sim.decisions.bottleneck import (
    attribute,
    attributions_frame,
    format_attributions,
    speculation_share,
)


def steps(n: int = 100, gap: float = 0.0, dur: float = 0.1, kv: float = 0.3, queue: int = 0,
          k: int = 0, seqs: int = 4, accepted: int = 0) -> pl.DataFrame:
    """``n`` steps of ``dur`` seconds separated by ``gap`` idle seconds, from t = 0."""
    t = [i * (dur + gap) for i in range(n)]
    return pl.DataFrame({
        "candidate": ["c"] * n, "seed": [1] * n, "replica": [0] * n, "t_start_s": t,
        "duration_s": [dur] * n, "decode_seqs": [seqs] * n, "prefill_tokens": [0] * n,
        "k": [k] * n, "draft_tokens": [k * seqs] * n, "accepted_tokens": [accepted] * n,
        "queue_len": [queue] * n, "kv_used_blocks": [int(kv * 1000)] * n,
        "kv_total_blocks": [1000] * n, "preempted": [0] * n,
    })


def requests(n: int = 20, wait: float = 0.0, prefill: float = 0.2, preemptions: int = 0) -> pl.DataFrame:
    arr = [float(i) for i in range(n)]
    return pl.DataFrame({
        "candidate": ["c"] * n, "seed": [1] * n, "replica": [0] * n, "id": list(range(n)),
        "segment": ["s"] * n, "arrival_s": arr, "scheduled_s": [a + wait for a in arr],
        "first_token_s": [a + wait + prefill for a in arr], "finish_s": [a + wait + prefill + 2 for a in arr],
        "prompt_tokens": [100] * n, "output_tokens": [50] * n, "generated_tokens": [50] * n,
        "num_bursts": [10] * n, "max_pause_s": [0.1] * n, "preemptions": [preemptions] * n,
        "outcome": ["completed"] * n, "in_window": [True] * n,
    })


W = (0.0, 10.0)


def test_headroom() -> None:
    a = attribute("c", requests(), steps(gap=0.1), window=W, replicas=1)
    assert a.primary == "none" and a.flags == ()
    assert a.busy_fraction == pytest.approx(0.5, abs=0.01)
    assert "headroom" in a.evidence()


def test_kv_capacity_needs_preemptions_and_full_kv() -> None:
    a = attribute("c", requests(preemptions=1), steps(gap=0.1, kv=0.99), window=W, replicas=1)
    assert a.primary == "kv" and a.kv_use_tw == pytest.approx(0.495, abs=0.01) and a.kv_peak == 0.99
    assert a.preemptions_per_100 == pytest.approx(100.0)
    assert "preemptions" in a.evidence()
    # full KV without preemptions is not (yet) a bottleneck
    assert "kv" not in attribute("c", requests(), steps(kv=0.99), window=W, replicas=1).flags


def test_compute_busy_with_short_queue() -> None:
    a = attribute("c", requests(wait=0.01), steps(dur=0.1), window=W, replicas=1)
    assert a.primary == "compute" and a.busy_fraction == pytest.approx(1.0)
    assert a.queue_share_of_ttft < 0.5 and a.mean_decode_batch == pytest.approx(4.0)
    assert "mean decode batch 4.0" in a.evidence()
    assert "compute" not in attribute("c", requests(), steps(dur=0.1), window=W, replicas=2).flags


def test_queueing_share_of_ttft() -> None:
    a = attribute("c", requests(wait=1.8, prefill=0.2), steps(dur=0.1), window=W, replicas=1)
    assert a.primary == "queueing" and a.queue_share_of_ttft == pytest.approx(0.9)
    assert a.queue_delay_ms_mean == pytest.approx(1800.0)
    assert "compute" not in a.flags  # busy, but the queue says the problem is waiting


def test_speculation_overhead_from_profile_grids() -> None:
    # draft 5 ms/token/seq: at b=4, k=4 D = 0.2 ms + 80 ms, H = 0.3 + 0.08 ms → 80.58 ms
    prof = synthetic_profile(draft_per_token_s=0.005, acceptance_rates=(0.7, 0.5, 0.35, 0.25, 0.18))
    st = steps(dur=0.2, gap=0.2, k=4, seqs=4, accepted=4)
    share = speculation_share(st, prof, "ngram", context=125.0)
    assert share == pytest.approx(0.08058 / 0.2, rel=1e-6)
    a = attribute("c", requests(), st, window=W, replicas=1, profile=prof, proposer="ngram")
    assert a.primary == "speculation" and a.mean_acceptance_length == pytest.approx(2.0)
    assert a.mean_k == 4
    cheap = synthetic_profile(acceptance_rates=(0.7, 0.5, 0.35, 0.25, 0.18))
    b = attribute("c", requests(), st, window=W, replicas=1, profile=cheap, proposer="ngram")
    assert "speculation" not in b.flags
    assert speculation_share(steps(), prof, None, 100.0) == 0.0


def test_frame_and_lines() -> None:
    attrs = [attribute("c", requests(wait=1.8), steps(), window=W, replicas=1, rate=2.0)]
    df = attributions_frame(attrs)
    assert df["primary"].to_list() == ["queueing"] and df["rate"].to_list() == [2.0]
    assert "evidence" in df.columns
    assert "queueing" in format_attributions(attrs)[0]


def test_a_busy_replica_with_a_small_batch_has_headroom_when_the_limits_are_known() -> None:
    # busy 100 % at batch 4 of 256 (tokens 4 of 2048): a quarter-load continuous batcher
    a = attribute("c", requests(wait=0.01), steps(dur=0.1), window=W, replicas=1,
                  max_num_seqs=256, max_num_batched_tokens=2048)
    assert a.busy_fraction == pytest.approx(1.0) and a.batch_fill == pytest.approx(4 / 256)
    assert a.primary == "none" and "headroom" in a.evidence()
    full = attribute("c", requests(wait=0.01), steps(dur=0.1, seqs=4), window=W, replicas=1,
                     max_num_seqs=4, max_num_batched_tokens=2048)
    assert full.primary == "compute" and "100% of the engine's batch limits" in full.evidence()


def test_a_quarter_load_simulation_reports_no_bottleneck() -> None:
    from sim.decisions.capacity import plan_capacity
    from tests.sim.decisions.test_capacity import dd1_profile, dd1_scenario

    sc = dd1_scenario().with_overrides({"fleet.engine.max_num_seqs": 64})
    rep = plan_capacity(sc, dd1_profile(), candidates=["baseline"], rel_tol=0.1, max_evals=8,
                        load_fractions=(0.25,))
    (a,) = [x for x in rep.bottlenecks if x.candidate == "baseline"]
    assert a.busy_fraction >= 0.9 and a.batch_fill < 0.8  # busy, yet far from its limits
    assert a.primary == "none", a.evidence()
