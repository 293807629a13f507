"""Bottlenecks by saturation: hand-built records for each rule, a property over generated step
logs, and scenarios built to be limited by one resource, judged at their capacity point."""

from __future__ import annotations

import functools

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sim.contracts.synthetic import synthetic_profile
from sim.decisions.bottleneck import (
    ENGINE_LIMITS,
    Saturation,
    attribute,
    bottlenecks_frame,
    speculation_share,
)
from sim.decisions.bottleneck_text import describe, format_bottlenecks, limit_label

W = (0.0, 10.0)
LIMITS = {"max_num_seqs": 8, "max_num_batched_tokens": 256}


def steps(n: int = 100, gap: float = 0.0, dur: float = 0.1, kv: float = 0.3, queue: int = 0,
          k: int = 0, seqs: int = 4, accepted: int = 0, prefill: int = 0, preempted: int = 0) -> pl.DataFrame:
    """``n`` steps of ``dur`` seconds separated by ``gap`` idle seconds, from t = 0."""
    t = [i * (dur + gap) for i in range(n)]
    return pl.DataFrame({
        "candidate": ["c"] * n, "seed": [1] * n, "replica": [0] * n, "t_start_s": t,
        "duration_s": [dur] * n, "decode_seqs": [seqs] * n, "prefill_tokens": [prefill] * n,
        "k": [k] * n, "draft_tokens": [k * seqs] * n, "accepted_tokens": [accepted] * n,
        "queue_len": [queue] * n, "kv_used_blocks": [int(kv * 1000)] * n,
        "kv_total_blocks": [1000] * n, "preempted": [preempted] * n, "drafting_seqs": [seqs if k else 0] * n,
    })


def requests(n: int = 20, wait: float = 0.0, prefill: float = 0.2, preemptions: int = 0,
             prompt: int = 100) -> pl.DataFrame:
    arr = [float(i) for i in range(n)]
    return pl.DataFrame({
        "candidate": ["c"] * n, "seed": [1] * n, "replica": [0] * n, "id": list(range(n)),
        "segment": ["s"] * n, "arrival_s": arr, "scheduled_s": [a + wait for a in arr],
        "first_token_s": [a + wait + prefill for a in arr], "finish_s": [a + wait + prefill + 2 for a in arr],
        "prompt_tokens": [prompt] * n, "output_tokens": [50] * n, "generated_tokens": [50] * n,
        "num_bursts": [10] * n, "max_pause_s": [0.1] * n, "preemptions": [preemptions] * n,
        "outcome": ["completed"] * n, "in_window": [True] * n,
    })


def judge(st: pl.DataFrame, req: pl.DataFrame | None = None, **kw):
    return attribute("c", requests() if req is None else req, st, window=W, replicas=1, **LIMITS, **kw)


def test_busy_all_the_time_at_a_quarter_of_capacity_is_not_a_bottleneck() -> None:
    b = judge(steps(dur=0.1), margins={"tpot": 0.97}, rate=1.0, capacity=4.0)
    assert b.busy_fraction == pytest.approx(1.0)
    assert b.limit == "none" and not b.saturated and b.load_fraction == 0.25
    assert "not saturated" == limit_label(b) and "25% of its capacity" in describe(b)


def test_light_load_without_a_known_capacity_is_not_saturated() -> None:
    b = judge(steps(dur=0.1, gap=0.3), margins={"ttft": 0.2, "tpot": 0.4})
    assert b.limit == "none" and b.slo == "tpot" and b.slo_margin == pytest.approx(0.4)


@pytest.mark.parametrize(("st", "req", "limit"), [
    # requests wait while the batch is full and tokens are well under the budget
    (steps(queue=3, seqs=8), None, "max_num_seqs"),
    # requests wait while prefill chunks fill the step's token budget
    (steps(queue=3, seqs=2, prefill=254), None, "token_budget"),
    # requests wait while the KV cache has no room for another prompt (100 tokens: 7 blocks)
    (steps(queue=3, seqs=2, kv=0.995), None, "kv"),
    # a running request preempted: KV, whatever else is full
    (steps(queue=1, seqs=8, preempted=1), requests(preemptions=1), "kv"),
])
def test_an_engine_limit_holding_requests_back_is_named(st, req, limit) -> None:
    b = judge(st, req, margins={"ttft": 1.0}, rate=4.0, capacity=4.0)
    assert b.limit == limit and b.blocked[limit] == pytest.approx(1.0)
    assert sum(b.blocked.values()) == pytest.approx(1.0)


def test_nothing_held_back_at_capacity_is_compute_per_step_against_the_binding_slo() -> None:
    b = judge(steps(seqs=6), margins={"ttft": 0.3, "tpot": 1.01}, rate=4.0, capacity=4.0)
    assert b.limit == "compute" and b.slo == "tpot"
    assert limit_label(b) == "compute per step against the TPOT SLO"
    # the same run with the SLO far away and no capacity known: not saturated
    assert judge(steps(seqs=6), margins={"tpot": 0.5}).limit == "none"


def test_a_limit_must_hold_requests_back_long_enough_to_be_named() -> None:
    mixed = pl.concat([steps(n=10, queue=2, seqs=8), steps(n=90, seqs=5).with_columns(
        pl.col("t_start_s") + 1.0)])
    b = judge(mixed, margins={"tpot": 1.0}, rate=4.0, capacity=4.0)
    assert b.blocked["max_num_seqs"] == pytest.approx(0.1)
    assert b.limit == "compute"  # 10 % < Saturation.blocked
    assert judge(mixed, margins={"tpot": 1.0}, rate=4.0, capacity=4.0,
                 rule=Saturation(blocked=0.05)).limit == "max_num_seqs"


@settings(max_examples=60, deadline=None)
@given(queue=hs.lists(hs.integers(0, 3), min_size=5, max_size=30),
       seqs=hs.lists(hs.integers(1, 8), min_size=5, max_size=30),
       prefill=hs.lists(hs.integers(0, 300), min_size=5, max_size=30),
       kv=hs.lists(hs.floats(0.0, 1.0), min_size=5, max_size=30),
       load=hs.floats(0.05, 3.0), margin=hs.floats(0.0, 3.0))
def test_saturation_rule_holds_on_any_step_log(queue, seqs, prefill, kv, load, margin) -> None:
    n = min(len(queue), len(seqs), len(prefill), len(kv))
    st = pl.DataFrame({
        "t_start_s": [0.1 * i for i in range(n)], "duration_s": [0.1] * n, "decode_seqs": seqs[:n],
        "prefill_tokens": prefill[:n], "k": [0] * n, "drafting_seqs": [0] * n, "accepted_tokens": [0] * n,
        "queue_len": queue[:n], "kv_used_blocks": [int(x * 1000) for x in kv[:n]],
        "kv_total_blocks": [1000] * n, "preempted": [0] * n})
    b = judge(st, margins={"tpot": margin}, rate=load, capacity=1.0)
    rule = Saturation()
    waiting = sum(0.1 for q in queue[:n] if q > 0) / (0.1 * n)
    assert sum(b.blocked.values()) == pytest.approx(waiting)  # every waiting step charged once
    if load < rule.light_load:
        assert b.limit == "none"  # below capacity nothing limits, however busy
    elif b.limit in ENGINE_LIMITS:
        assert b.blocked[b.limit] >= rule.blocked
        assert b.blocked[b.limit] == max(b.blocked.values())
    else:
        assert b.limit == "compute" and max(b.blocked.values()) < rule.blocked


def test_speculation_share_from_profile_grids() -> None:
    # draft 5 ms/token/seq: at b=4, k=4 D = 0.2 ms + 80 ms, H = 0.3 + 0.08 ms → 80.58 ms
    prof = synthetic_profile(draft_per_token_s=0.005, acceptance_rates=(0.7, 0.5, 0.35, 0.25, 0.18))
    st = steps(dur=0.2, gap=0.2, k=4, seqs=4, accepted=4)
    assert speculation_share(st, prof, "ngram", context=125.0) == pytest.approx(0.08058 / 0.2, rel=1e-6)
    assert speculation_share(steps(), prof, None, 100.0) == 0.0
    b = judge(st, margins={"tpot": 1.0}, rate=1.0, capacity=1.0, profile=prof, proposer="ngram")
    assert b.limit == "compute" and "drafting and overhead 40% of step time" in describe(b)


def test_frame_and_lines() -> None:
    items = [judge(steps(queue=2, seqs=8), margins={"ttft": 1.0}, rate=2.0, capacity=2.0)]
    df = bottlenecks_frame(items)
    assert df["limit"].to_list() == ["max_num_seqs"] and df["blocked_max_num_seqs"].to_list() == [1.0]
    assert df["saturated"].to_list() == [True]
    assert format_bottlenecks(items)[0].startswith("c at 2 req/s per replica: running-request limit")


# ----------------------------------------------------------------------------------------------
# through the simulator: scenarios built so that one resource caps capacity


def _scenario(engine: dict, slo: dict, prompt: int = 256, output: int = 64):
    from sim.contracts.scenario import Scenario

    return Scenario.from_dict({
        "name": "limits",
        "run": {"duration_s": 60, "warmup_s": 10, "seeds": [1]},
        "workload": {"arrival": "poisson", "rate": 2.0, "segments": [
            {"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": prompt},
             "output_tokens": {"dist": "fixed", "value": output},
             "acceptance": {"task": "chat", "language": "en"}}]},
        "slo": slo,
        "fleet": {"engine": engine, "price_per_gpu_hour": 1.0},
        "candidates": [{"name": "baseline", "speculation": "off"}],
    }, "<limits>")


CASES = {
    # two running requests at most; steps cheap, SLO loose: the batch limit caps the rate
    "max_num_seqs": (dict(max_num_seqs=2), dict(ttft_ms=2000), {}),
    # 64 tokens per step for 512-token prompts: prefill chunks fill the budget
    "token_budget": (dict(max_num_batched_tokens=64, max_num_seqs=256), dict(ttft_ms=3000),
                     {"per_token_s": 0.0}),
    # ~1,000 tokens of KV (12 MB per token): three 320-token requests fill it
    "kv": (dict(max_num_seqs=256), dict(ttft_ms=3000), {"target_kv_bytes_per_token": 12_000_000}),
    # every running request adds 2 ms to a step: a 30 ms TPOT SLO caps the batch near 10
    "compute": (dict(max_num_seqs=256), dict(tpot_ms=30, ttft_ms=5000), {"per_seq_s": 0.002}),
}


@functools.cache
def _plan(limit: str):
    """The capacity plan of one case (kept: the light-load test reuses the compute case's)."""
    from sim.decisions.capacity import plan_capacity

    engine, slo, prof = CASES[limit]
    prompt = 512 if limit == "token_budget" else 256
    return plan_capacity(_scenario(engine, slo, prompt=prompt), synthetic_profile(**prof),
                         rel_tol=0.15, max_evals=7, load_fractions=(0.5,), min_requests=100,
                         profile_band=False)


@pytest.mark.parametrize("limit", list(CASES))
def test_a_scenario_limited_by_one_resource_names_it_at_its_capacity_point(limit: str) -> None:
    rep = _plan(limit)
    (b,) = rep.bottlenecks
    (cap,) = rep.candidates
    assert cap.mean > 0 and b.rate == pytest.approx(cap.mean) and b.capacity == pytest.approx(cap.mean)
    assert b.limit == limit, describe(b)
    if limit == "compute":
        assert b.slo == "tpot"


def test_a_quarter_of_capacity_in_the_simulator_is_not_saturated() -> None:
    from sim.decisions.bottleneck import attribute_result
    from sim.decisions.sustain import criteria_from_scenario
    from sim.results.runner import run_scenario

    engine, slo, prof = CASES["compute"]
    sc, profile = _scenario(engine, slo), synthetic_profile(**prof)
    cap = _plan("compute").candidates[0].mean
    res = run_scenario(sc.with_overrides({"workload.rate": cap / 4}), profile)
    (b,) = attribute_result(res, profile, criteria=criteria_from_scenario(sc), rate=cap / 4,
                            capacities={"baseline": cap})
    assert b.limit == "none" and b.load_fraction == pytest.approx(0.25)
    assert b.busy_fraction > 0 and b.slo_margin < 1.0 and not any(b.blocked.values())
