"""The planner's rules without SimPy, through the ``Scheduler`` facade over the compiled kernels
(the API the real serving loop uses): budgets, chunking, KV blocks, preemption, admission, and
table-driven acceptance counting (vLLM's spec-decode scheduler tests style)."""

from __future__ import annotations

import pytest

from sim.model.scheduler import Scheduler
from sim.model.speculation import PolicyState, SpeculationPolicy
from sim.model.step_plan import DONE, RUNNING, WAITING, Request, SchedulerConfig


def cfg(**kw) -> SchedulerConfig:
    base = dict(max_num_seqs=8, max_num_batched_tokens=64, block_size=2, kv_blocks=100)
    base.update(kw)
    return SchedulerConfig.of(**base)


def prefilled(sched: Scheduler, req: Request, now: float = 0.0) -> None:
    """Admit ``req`` and run its whole prompt in one step (first token sampled)."""
    sched.add_request(req, now)
    plan = sched.schedule(now)
    assert [r for r, _ in plan.prefill] == [req]
    sched.update(plan, None, now + 1.0)
    assert req.generated == 1 and req.first_token_s == now + 1.0


# (k, accepted, output_tokens) -> (generated after the step, computed, blocks held, done)
# prompt 8, block size 2: after prefill computed 8, 4 blocks; a decode step feeds 1 + k tokens.
ACCEPTANCE_TABLE = [
    # no speculation: one token a step
    (0, 0, 20, 2, 9, 5, False),
    # k = 3, all rejected: bonus token only, 3 drafts rolled back, lookahead block freed
    (3, 0, 20, 2, 9, 5, False),
    (3, 1, 20, 3, 10, 5, False),
    (3, 2, 20, 4, 11, 6, False),
    # all accepted: 3 drafts + bonus committed
    (3, 3, 20, 5, 12, 6, False),
    # output cap: only 2 more tokens wanted, the request ends and frees every block
    (3, 3, 3, 3, 12, 0, True),
    (1, 1, 20, 3, 10, 5, False),
]


@pytest.mark.parametrize("k,accepted,out,gen,computed,blocks,done", ACCEPTANCE_TABLE)
def test_acceptance_counting(k, accepted, out, gen, computed, blocks, done) -> None:
    sched = Scheduler(cfg())
    req = Request(0, 0, 0.0, 8, out)
    prefilled(sched, req)
    plan = sched.schedule(1.0, k)
    assert plan.decode == (req,) and plan.k == k
    assert plan.num_scheduled_tokens == 1 + k
    # lookahead: blocks for computed + 1 + k tokens are held during the step
    assert req.blocks == -(-(8 + 1 + k) // 2)
    total = sched.update(plan, [accepted], 2.0)
    assert total == (accepted if k else 0)
    assert req.generated == gen
    assert req.computed == computed
    assert req.blocks == blocks
    assert (req.status == DONE) is done
    assert sched.free_blocks == 100 - blocks
    assert req.num_drafts == (1 if k else 0)
    assert req.accepted_tokens == (accepted if k else 0)
    # invariant of vLLM's counting: one token (the last sampled) is not yet computed
    if not done:
        assert req.num_tokens - req.computed == 1


def test_k_clamped_to_token_budget() -> None:
    sched = Scheduler(cfg(max_num_batched_tokens=3))
    req = Request(0, 0, 0.0, 2, 10)
    prefilled(sched, req)
    plan = sched.schedule(1.0, 5)
    assert plan.k == 2 and plan.num_scheduled_tokens == 3


def test_running_first_then_waiting_fcfs_within_budget() -> None:
    sched = Scheduler(cfg(max_num_batched_tokens=10, block_size=4))
    a = Request(0, 0, 0.0, 4, 10)
    prefilled(sched, a)
    b = Request(1, 1, 0.5, 6, 5)
    c = Request(2, 2, 0.6, 6, 5)
    sched.add_request(b, 0.5)
    sched.add_request(c, 0.6)
    plan = sched.schedule(1.0, 2)
    # a decodes with 1 + 2 tokens; b gets a 7-token budget: its whole 6-token prompt; c gets 1
    assert plan.decode == (a,)
    assert plan.prefill == ((b, 6), (c, 1))
    assert plan.num_scheduled_tokens == 10
    assert b.scheduled_s == 1.0 and c.scheduled_s == 1.0


def test_chunked_prefill_off_needs_whole_prompt() -> None:
    sched = Scheduler(cfg(max_num_batched_tokens=10, chunked_prefill=False))
    a = Request(0, 0, 0.0, 8, 5)
    b = Request(1, 1, 0.0, 5, 5)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    plan = sched.schedule(0.0)
    assert plan.prefill == ((a, 8),)  # b (5 tokens) does not fit the 2 left: FCFS, no chunk
    too_long = Request(2, 2, 0.0, 11, 5)
    assert not sched.add_request(too_long, 0.0)
    assert too_long.outcome == "rejected"


def test_chunked_prefill_splits_prompt() -> None:
    sched = Scheduler(cfg(max_num_batched_tokens=10))
    a = Request(0, 0, 0.0, 25, 2)
    sched.add_request(a, 0.0)
    chunks = []
    t = 0.0
    while a.generated == 0:
        plan = sched.schedule(t)
        chunks.append((plan.prefill[0][1], plan.prefill_context))
        t += 1.0
        sched.update(plan, None, t)
    assert chunks == [(10, 0.0), (10, 10.0), (5, 20.0)]


def test_max_num_seqs_limits_running() -> None:
    sched = Scheduler(cfg(max_num_seqs=2))
    reqs = [Request(i, i, 0.0, 4, 4) for i in range(3)]
    for r in reqs:
        sched.add_request(r, 0.0)
    plan = sched.schedule(0.0)
    assert [r.id for r, _ in plan.prefill] == [0, 1]
    assert reqs[2].status == WAITING and len(sched.waiting) == 1


def test_preemption_by_recompute_newest_first() -> None:
    # 6 blocks of 2 tokens; three requests with 4-token prompts take 2 blocks each
    sched = Scheduler(cfg(kv_blocks=6))
    reqs = [Request(i, i, 0.0, 4, 6) for i in range(3)]
    for r in reqs:
        sched.add_request(r, 0.0)
    plan = sched.schedule(0.0)
    sched.update(plan, None, 1.0)
    assert sched.free_blocks == 0
    # each decoding request now needs a third block: the newest (2) is preempted
    plan = sched.schedule(1.0)
    assert plan.preempted == (reqs[2],)
    assert plan.decode == (reqs[0], reqs[1])
    assert reqs[2].status == WAITING and reqs[2].computed == 0 and reqs[2].blocks == 0
    assert reqs[2].preemptions == 1
    assert sched.waiting[0] is reqs[2]
    assert sched.used_blocks() == 6
    sched.update(plan, None, 2.0)
    # recompute: prompt + generated tokens are prefilled again once blocks free up
    assert reqs[2].generated == 1


def test_preempts_itself_when_it_is_the_newest() -> None:
    sched = Scheduler(cfg(kv_blocks=5, block_size=2))
    a, b = Request(0, 0, 0.0, 4, 6), Request(1, 1, 0.0, 4, 2)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    sched.update(sched.schedule(0.0), None, 1.0)
    assert sched.free_blocks == 1
    # a takes the last block; b (the newest) then needs one and preempts itself
    plan = sched.schedule(1.0)
    assert plan.decode == (a,) and plan.preempted == (b,)
    assert b.status == WAITING and b.preemptions == 1 and sched.free_blocks == 2
    assert sched.running == [a]


def test_queue_limit_rejects_on_arrival() -> None:
    sched = Scheduler(cfg(queue_limit=1))
    a, b = Request(0, 0, 0.0, 4, 4), Request(1, 1, 0.1, 4, 4)
    assert sched.add_request(a, 0.0)
    assert not sched.add_request(b, 0.1)
    assert b.outcome == "rejected" and b.finish_s == 0.1 and b.status == DONE


def test_request_larger_than_kv_is_rejected() -> None:
    sched = Scheduler(cfg(kv_blocks=4, block_size=2))
    big = Request(0, 0, 0.0, 6, 4)  # needs 5 blocks at its longest
    assert not sched.add_request(big, 0.0)
    assert big.outcome == "rejected"


def test_max_queue_time_rejects_waiting_requests() -> None:
    sched = Scheduler(cfg(max_num_seqs=1, max_queue_time_s=2.0))
    a, b = Request(0, 0, 0.0, 4, 100), Request(1, 1, 0.5, 4, 4)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.5)
    plan = sched.schedule(0.0)
    sched.update(plan, None, 1.0)
    sched.update(sched.schedule(1.0), None, 2.0)
    sched.schedule(3.0)
    assert b.outcome == "rejected" and b.finish_s == 2.5  # the deadline, not the check time
    assert a.status == RUNNING


def test_client_timeout_frees_kv() -> None:
    sched = Scheduler(cfg())
    a = Request(0, 0, 0.0, 8, 100, timeout_s=1.5)
    prefilled(sched, a)
    assert a.blocks > 0
    plan = sched.schedule(2.0)
    assert plan.empty
    assert a.outcome == "timed_out" and a.finish_s == 1.5
    assert a.blocks == 0 and sched.free_blocks == 100 and not sched.running


def test_timed_out_waiting_request_leaves_queue() -> None:
    sched = Scheduler(cfg(max_num_seqs=1))
    a = Request(0, 0, 0.0, 4, 100)
    b = Request(1, 1, 0.0, 4, 4, timeout_s=1.0)
    sched.add_request(a, 0.0)
    sched.add_request(b, 0.0)
    sched.update(sched.schedule(0.0), None, 1.0)
    sched.schedule(1.0)
    assert b.outcome == "timed_out" and not sched.waiting


@pytest.mark.parametrize(
    "policy,batch,k",
    [
        (SpeculationPolicy("fixed", k=3), 50, 3),
        (SpeculationPolicy("off_above_batch", k=4, max_batch=8), 8, 4),
        (SpeculationPolicy("off_above_batch", k=4, max_batch=8), 9, 0),
        (SpeculationPolicy("k_by_batch", k_by_batch=((1, 5), (8, 3), (32, 1), (64, 0))), 1, 5),
        (SpeculationPolicy("k_by_batch", k_by_batch=((1, 5), (8, 3), (32, 1), (64, 0))), 7, 5),
        (SpeculationPolicy("k_by_batch", k_by_batch=((1, 5), (8, 3), (32, 1), (64, 0))), 8, 3),
        (SpeculationPolicy("k_by_batch", k_by_batch=((1, 5), (8, 3), (32, 1), (64, 0))), 100, 0),
    ],
)
def test_policies(policy, batch, k) -> None:
    assert policy.k_for(PolicyState(), batch) == k


def test_adaptive_policy_hysteresis_and_minimum_window() -> None:
    pol = SpeculationPolicy("adaptive", k=4, on_below_batch=4, off_above_batch=10, window_s=1.0)
    st = PolicyState()
    t = 0.0
    # heavy load, but no switching before one full window has been observed
    for _ in range(5):
        t += 0.1
        pol.observe(st, t, 0.1, 20)
    assert pol.k_for(st, 20) == 4
    for _ in range(6):
        t += 0.1
        pol.observe(st, t, 0.1, 20)
    assert pol.k_for(st, 20) == 0
    # between the thresholds: stays off (hysteresis)
    for _ in range(20):
        t += 0.1
        pol.observe(st, t, 0.1, 6)
    assert pol.k_for(st, 6) == 0
    for _ in range(20):
        t += 0.1
        pol.observe(st, t, 0.1, 2)
    assert pol.k_for(st, 2) == 4


def test_policy_validation_messages() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        SpeculationPolicy("off_above_batch", k=3)
    with pytest.raises(ValueError, match="on_below_batch < off_above_batch"):
        SpeculationPolicy("adaptive", k=3, on_below_batch=5, off_above_batch=5, window_s=1)
    with pytest.raises(ValueError, match="starting at batch 1"):
        SpeculationPolicy("k_by_batch", k_by_batch=((2, 3),))


def test_engine_draws_match_sim_acceptance_draw_accepted() -> None:
    """The engine's inverse-CDF draw (``draw_kernels``, uniforms in chunks of 4,096) is
    sim.model.acceptance.draw_accepted, draw for draw."""
    import numpy as np

    from sim.model.acceptance import draw_accepted
    from sim.model.fleet_arrays import UNIFORM_CHUNK
    from sim.model.kernels.draw_kernels import _bisect

    rates = [0.9, 0.6, 0.6, 0.2]
    neg = np.array([[-r for r in rates]])
    rng = np.random.default_rng(42)
    uni = np.concatenate([rng.random(UNIFORM_CHUNK) for _ in range(3)])
    ref = np.random.default_rng(42)
    for i in range(10_000):
        k = i % 5
        assert _bisect(neg, 0, -uni[i], k) == draw_accepted(rates, k, ref)


def test_decode_context_mean_and_longest_at_block_resolution() -> None:
    """A padded engine pays the longest decoding row; the plan carries it beside the mean."""
    sched = Scheduler(cfg(block_size=4))
    reqs = [Request(i, i, 0.0, p, 20) for i, p in enumerate((8, 16, 40))]
    for r in reqs:
        prefilled(sched, r)
    ctx = [r.computed for r in reqs]
    assert ctx == [10, 17, 40]  # the first two decoded while the others were prefilled
    plan = sched.schedule(2.0)
    assert plan.decode == tuple(reqs)
    # mean 22.3 -> 24 and longest 40, both at block (4-token) resolution
    assert plan.decode_context == 24.0
    assert plan.decode_context_max == 40.0


def test_queue_limit_zero_rejects_every_arrival() -> None:
    sched = Scheduler(cfg(queue_limit=0))
    a = Request(0, 0, 0.0, 4, 4)
    assert not sched.add_request(a, 0.0)
    assert a.outcome == "rejected" and not sched.waiting
