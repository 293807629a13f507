"""Exact record frames of a three-request run, worked out by hand (SimPy log-fixture style).

Engine limits: 2 sequences, 8-token budget, 4-token blocks, 0.1 s per step. A: prompt 6, 3
tokens out, arrives 0.0; B: prompt 10, 2 out, 0.05; C: prompt 3, 2 out, 0.12.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sim.contracts.fleet_config import RestartConfig
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer
from sim.results.records import REQUEST_SCHEMA, STEP_SCHEMA, requests_frame, steps_frame

CFG = SchedulerConfig.of(max_num_seqs=2, max_num_batched_tokens=8, block_size=4, kv_blocks=100)


def three(rates: tuple[list[float], list[float], list[float]] | None = None) -> list[Request]:
    spec = [(0, 0.0, 6, 3), (1, 0.05, 10, 2), (2, 0.12, 3, 2)]
    out = []
    for i, (rid, t, p, o) in enumerate(spec):
        neg = [-r for r in rates[i]] if rates else None
        out.append(Request(i, rid, t, p, o, "chat", None, neg))
    return out


def expected_requests(rows: list[tuple]) -> pl.DataFrame:
    cols = [
        "scheduled_s", "first_token_s", "finish_s", "generated_tokens", "num_bursts",
        "max_pause_s", "num_drafts", "accepted_tokens",
    ]
    data: dict[str, list] = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    n = len(rows)
    frame = {
        "candidate": ["c"] * n,
        "seed": [7] * n,
        "replica": [0] * n,
        "id": [0, 1, 2],
        "segment": ["chat"] * n,
        "arrival_s": [0.0, 0.05, 0.12],
        "scheduled_s": data["scheduled_s"],
        "first_token_s": data["first_token_s"],
        "finish_s": data["finish_s"],
        "prompt_tokens": [6, 10, 3],
        "output_tokens": [3, 2, 2],
        "generated_tokens": data["generated_tokens"],
        "num_bursts": data["num_bursts"],
        "max_pause_s": data["max_pause_s"],
        "preemptions": [0] * n,
        "outcome": ["completed"] * n,
        "in_window": [True] * n,
        "num_drafts": data["num_drafts"],
        "accepted_tokens": data["accepted_tokens"],
        "num_spec_steps": data["num_drafts"],  # every step proposed
        "prefix_hit_tokens": [0] * n,  # prefix caching off
        "too_long": [False] * n,
    }
    return pl.DataFrame(frame, schema=REQUEST_SCHEMA)


def expected_steps(cols: dict[str, list]) -> pl.DataFrame:
    n = len(cols["t_start_s"])
    frame = {
        "candidate": ["c"] * n,
        "seed": [7] * n,
        "replica": [0] * n,
        "t_start_s": cols["t_start_s"],
        "duration_s": [0.1] * n,
        "decode_seqs": cols["decode_seqs"],
        "prefill_tokens": cols["prefill_tokens"],
        "k": cols["k"],
        "draft_tokens": cols["draft_tokens"],
        "accepted_tokens": cols["accepted_tokens"],
        "queue_len": cols["queue_len"],
        "kv_used_blocks": cols["kv_used_blocks"],
        "kv_total_blocks": [100] * n,
        "preempted": [0] * n,
        "drafting_seqs": [d if k else 0 for d, k in zip(cols["decode_seqs"], cols["k"], strict=True)],
    }
    return pl.DataFrame(frame, schema=STEP_SCHEMA)


def test_trace_without_speculation() -> None:
    run = Fleet(FleetSpec(CFG), FixedStepTimer(0.1)).run(three())
    # t=0.0 A prefills 6 | 0.1 A decodes, B prefills 7 of 10 | 0.2 A decodes, B prefills 3,
    # C waits (2 seqs) | 0.3 A done; B decodes, C prefills 3 | 0.4 B done; C decodes | 0.5 C done
    assert_frame_equal(
        requests_frame(run, "c", 7, 0.0),
        expected_requests(
            [
                (0.0, 0.1, 0.3, 3, 3, 0.1, 0, 0),
                (0.1, 0.3, 0.4, 2, 2, 0.1, 0, 0),
                (0.3, 0.4, 0.5, 2, 2, 0.1, 0, 0),
            ]
        ),
    )
    assert_frame_equal(
        steps_frame(run, "c", 7),
        expected_steps(
            {
                "t_start_s": [0.0, 0.1, 0.2, 0.3, 0.4],
                "decode_seqs": [0, 1, 1, 1, 1],
                "prefill_tokens": [6, 7, 3, 3, 0],
                "k": [0] * 5,
                "draft_tokens": [0] * 5,
                "accepted_tokens": [0] * 5,
                "queue_len": [0, 0, 1, 0, 0],
                "kv_used_blocks": [2, 4, 5, 4, 1],
            }
        ),
    )


def test_trace_with_deterministic_speculation() -> None:
    """k = 2; A accepts everything (rates 1, 1), B nothing (0, 0), C one token (1, 0)."""
    reqs = three(([1.0, 1.0], [0.0, 0.0], [1.0, 0.0]))
    spec = FleetSpec(CFG, SpeculationPolicy("fixed", k=2), proposer="p")
    run = Fleet(spec, FixedStepTimer(0.1), np.random.default_rng(0)).run(reqs)
    # t=0.0 A prefills 6 | 0.1 A decodes 1+2 (3 blocks: lookahead), B prefills 5 of 10;
    # A accepts 2 + bonus -> capped at 3 tokens, done at 0.2 | 0.2 B prefills 5, C prefills 3
    # | 0.3 B and C decode 1+2 each; B accepts 0 (1 token), C accepts 1 (capped at 2): both done
    assert_frame_equal(
        requests_frame(run, "c", 7, 0.0),
        expected_requests(
            [
                (0.0, 0.1, 0.2, 3, 2, 0.1, 1, 2),
                (0.1, 0.3, 0.4, 2, 2, 0.1, 1, 0),
                (0.2, 0.3, 0.4, 2, 2, 0.1, 1, 1),
            ]
        ),
    )
    assert_frame_equal(
        steps_frame(run, "c", 7),
        expected_steps(
            {
                "t_start_s": [0.0, 0.1, 0.2, 0.3],
                "decode_seqs": [0, 1, 0, 2],
                "prefill_tokens": [6, 5, 8, 0],
                "k": [0, 2, 0, 2],
                "draft_tokens": [0, 2, 0, 4],
                "accepted_tokens": [0, 2, 0, 1],
                "queue_len": [0, 0, 0, 0],
                "kv_used_blocks": [2, 5, 4, 6],
            }
        ),
    )


def restart_run(on_restart: str, replicas: int = 1, extra: list[Request] | None = None):
    a = Request(0, 0, 0.0, 4, 10, "chat", None, [-1.0, -1.0])
    reqs = [a, *(extra or [])]
    spec = FleetSpec(
        SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=100),
        SpeculationPolicy("fixed", k=2),
        proposer="p",
        replicas=replicas,
        restart=RestartConfig(at_s=0.25, replica=0, cold_start_s=1.0, on_restart=on_restart,
                            fallback="baseline"),
    )
    fleet = Fleet(spec, FixedStepTimer(0.1), np.random.default_rng(0))
    return fleet.run(reqs), a


def test_restart_reroute_to_same_replica_recomputes_and_falls_back_to_baseline() -> None:
    run, a = restart_run("reroute")
    # 0.0 prefill (token 1) | 0.1 decode k=2, all accepted (tokens 2-4) | 0.2 step cut at 0.25
    # down until 1.25 | recompute 4 + 4 tokens (token 5) | 5 plain decode steps (k=0: baseline)
    assert a.outcome == "completed" and a.generated == 10
    assert a.finish_s == pytest.approx(1.85)
    assert a.max_pause_s == pytest.approx(1.15)
    assert a.num_drafts == 1 and a.preemptions == 0
    steps = steps_frame(run, "c", 0)
    assert steps["t_start_s"].to_list() == pytest.approx([0.0, 0.1, 1.25, 1.35, 1.45, 1.55, 1.65, 1.75])
    assert steps["prefill_tokens"].to_list() == [4, 0, 8, 0, 0, 0, 0, 0]
    assert steps["k"].to_list() == [0, 2, 0, 0, 0, 0, 0, 0]


def test_restart_drop_loses_in_flight_work_and_queues_new_arrivals() -> None:
    b = Request(1, 1, 0.5, 4, 1, "chat", None, [-1.0, -1.0])
    run, a = restart_run("drop", extra=[b])
    assert a.outcome == "rejected" and a.finish_s == pytest.approx(0.25) and a.blocks == 0
    # b arrives while the only replica is down: it waits for the cold start to end
    assert b.outcome == "completed" and b.scheduled_s == pytest.approx(1.25)


def test_restart_reroutes_to_another_replica() -> None:
    run, a = restart_run("reroute", replicas=2)
    assert a.replica == 1 and a.outcome == "completed"
    steps = steps_frame(run, "c", 0)
    on_1 = steps.filter(pl.col("replica") == 1)
    assert on_1["t_start_s"][0] == pytest.approx(0.25) and on_1["prefill_tokens"][0] == 8
    # replica 1 kept the candidate's speculation (only the restarted one falls back)
    assert on_1["k"].to_list()[1:] == [2] * (on_1.height - 1)


def test_without_drain_in_flight_requests_end_unfinished() -> None:
    spec = FleetSpec(CFG, drain=False, duration_s=0.35)
    run = Fleet(spec, FixedStepTimer(0.1)).run(three())
    outcomes = [r.outcome for r in run.requests]
    assert outcomes == ["completed", "unfinished", "unfinished"]  # A ends at 0.3 (see above)
    assert run.requests[1].finish_s is None and run.end_s == pytest.approx(0.35)


def test_routing_round_robin_and_least_outstanding() -> None:
    def routed(routing: str) -> list[int]:
        reqs = [Request(i, i, 0.15 * i, 4, 20 if i == 0 else 1) for i in range(5)]
        spec = FleetSpec(CFG, replicas=2, routing=routing)
        run = Fleet(spec, FixedStepTimer(0.1)).run(reqs)
        return [r.replica for r in run.requests]

    assert routed("round_robin") == [0, 1, 0, 1, 0]
    # request 0 stays 2 s on replica 0; each one-token request is done (one 0.1 s step)
    # before the next arrives, so replica 1 always has fewer outstanding
    assert routed("least_outstanding") == [0, 1, 1, 1, 1]
