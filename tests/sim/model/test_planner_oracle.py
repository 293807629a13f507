"""The planner (the compiled kernels, through the ``Scheduler`` facade) against its oracle
(``oracle_scheduler.py``, the same rules written readably), step by step.

Both get the same arrivals, the same ``k``, the same accepted counts and the same proposals on
random replicas (max_num_seqs 1-512, chunked prefill on and off, KV tight enough to preempt,
k 0-5, partial proposals (rows without one verified full width or as plain decodes), client timeouts, queue limits, a restart that re-queues or drops the
work, prefix caching over prompts that share prefixes); after EVERY call the plans, every request's state, the free blocks, the running and
waiting order, the queue log and the ITL samples must be the same, and the free blocks must
balance against what the running requests and the prefix cache hold. A failure names the step.
"""

from __future__ import annotations

import os
from array import array

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from sim.model.kernels import prefix_cache as pc
from sim.model.scheduler import Scheduler
from sim.model.step_plan import Request, SchedulerConfig
from tests.sim.model.oracle_scheduler import OracleScheduler

FIELDS = ("status", "computed", "generated", "blocks", "scheduled_s", "first_token_s",
          "last_burst_s", "finish_s", "num_bursts", "max_pause_s", "preemptions", "outcome",
          "num_drafts", "accepted_tokens", "ever_scheduled", "num_spec_steps", "proposes",
          "prefix_hit_tokens", "too_long")


@st.composite
def replicas(draw, cache_pressure: bool = False):
    """A replica's limits and a workload for it, from a seed (hundreds of requests are cheap);
    ``cache_pressure``: prefix caching on, KV for a few requests, arrivals close together (so
    cached blocks are shared, freed, and evicted)."""
    big = False if cache_pressure else draw(st.booleans())  # GPU-sized: hundreds running at once
    seqs = draw(st.integers(128, 512) if big else st.one_of(st.integers(1, 8), st.integers(9, 64)))
    chunked = draw(st.booleans())
    bs = draw(st.integers(1, 16))
    budget = draw(st.integers(512, 8192) if big else st.integers(2, 1024))
    k_max = draw(st.integers(0, 5))
    n = draw(st.integers(seqs, 600) if big else st.integers(1, 4 * seqs + 8))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, draw(st.integers(2, 100 if big else 300)), n)
    output = rng.integers(1, draw(st.integers(2, 60)), n)
    longest = int((prompt + output).max()) + k_max
    # KV for a few of the longest requests (several compete for blocks and preempt), or for
    # hundreds (GPU-sized batches)
    many = st.integers(16, 400)
    fold = st.integers(1, 3) if cache_pressure else many if big else st.one_of(st.integers(1, 4), many)
    kv = max(1, -(-longest // bs) * draw(fold) + draw(st.integers(-2, 6)))
    cfg = SchedulerConfig.of(
        max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=bs, kv_blocks=kv,
        chunked_prefill=chunked, queue_limit=draw(st.one_of(st.none(), st.integers(0, 40))),
        max_queue_time_s=draw(st.one_of(st.none(), st.floats(0.05, 3.0))),
        prefix_caching=cache_pressure or draw(st.booleans()),
        full_width_drafts=draw(st.booleans()),
        max_model_len=draw(st.one_of(st.none(), st.integers(2, int((prompt + output).max()) + 1))))
    timeout = draw(st.one_of(st.none(), st.floats(0.01, 1.0)))
    gap = draw(st.floats(0.00001, 0.0005) if big else st.floats(0.0002, 0.05 if not cache_pressure else 0.01))
    arrivals = np.cumsum(rng.exponential(gap, n))
    # prompts share prefixes: each of a few groups is one chain of block ids, a request takes a
    # leading part of its group's chain (up to its own full blocks), or none
    groups = draw(st.integers(1, 4))
    chain = int(prompt.max()) // bs + 1
    share = [None if rng.random() < 0.2 else
             [int(g) * chain + j for j in range(int(rng.integers(0, p // bs + 1)))]
             for g, p in zip(rng.integers(0, groups, n), prompt, strict=True)]
    specs = [(float(a), int(p), int(o), timeout if rng.random() < 0.5 else None, pre)
             for a, p, o, pre in zip(arrivals, prompt, output, share, strict=True)]
    restart = draw(st.one_of(st.none(), st.tuples(st.integers(0, 150), st.booleans())))
    proposal = draw(st.sampled_from([1.0, 0.7, 0.3]))
    return cfg, specs, k_max, restart, proposal, seed, groups * chain


def _requests(specs) -> list[Request]:
    out = []
    for i, (a, p, o, t, pre) in enumerate(specs):
        r = Request(i, i, a, p, o, timeout_s=t)
        r.prefix = pre
        out.append(r)
    return out


def _same_plan(a, b, where: str) -> None:
    ids = lambda reqs: [r.id for r in reqs]  # noqa: E731
    assert ids(a.decode) == ids(b.decode), f"{where}: decode rows"
    assert [(r.id, n) for r, n in a.prefill] == [(r.id, n) for r, n in b.prefill], f"{where}: prefill"
    assert ids(a.preempted) == ids(b.preempted), f"{where}: preempted"
    assert (a.k, a.decode_context, a.prefill_tokens, a.prefill_context, a.decode_context_max,
            a.drafting) == (b.k, b.decode_context, b.prefill_tokens, b.prefill_context,
                            b.decode_context_max, b.drafting), f"{where}: plan's shape"


def _same_state(oracle, sched, ro, rf, where: str) -> None:
    for x, y in zip(ro, rf, strict=True):
        for f in FIELDS:
            assert getattr(x, f) == getattr(y, f), f"{where}: request {x.id} {f}"
    assert oracle.free_blocks == sched.free_blocks, f"{where}: free blocks"
    assert [r.id for r in oracle.running] == [r.id for r in sched.running], f"{where}: running"
    assert [r.id for r in oracle.waiting] == [r.id for r in sched.waiting], f"{where}: waiting"
    assert oracle.queue_log == sched.queue_log, f"{where}: queue log"
    assert sorted(r.id for r in oracle.finished) == sorted(r.id for r in sched.finished), (
        f"{where}: finished")
    _ledger_balances(oracle, where)
    if oracle.cache.on:
        _same_cache(oracle.cache, sched.rp.cache, where)


def _same_cache(oc, cache, where: str) -> None:
    """The compiled cache holds what the oracle's does: the cached ids with their first copy's
    references, the held duplicates, and the eviction order."""
    refs = {u: int(cache[u, pc.REF]) for u in range(len(cache) - 1) if cache[u, pc.REF] >= 0}
    assert refs == oc.ref, f"{where}: cached ids and references"
    dups = {u: int(cache[u, pc.DUP]) for u in range(len(cache) - 1) if cache[u, pc.DUP]}
    assert dups == {u: d for u, d in oc.dups.items() if d}, f"{where}: duplicates held"
    lru, s = [], len(cache) - 1
    u = int(cache[s, pc.NEXT])
    while u != s:
        lru.append(u)
        u = int(cache[u, pc.NEXT])
    assert lru == list(oc.lru), f"{where}: eviction order"


def _ledger_balances(oracle, where: str) -> None:
    """Every block is free, a running request's own, or a held copy in the prefix cache (a
    first copy once however many share it, each duplicate once): no block leaked or freed twice."""
    cache = oracle.cache
    own = sum(r.blocks - cache.held.get(id(r), 0) for r in oracle.running)
    assert oracle.free_blocks == oracle.config.kv_blocks - own - cache.physical(), (
        f"{where}: free blocks {oracle.free_blocks} != {oracle.config.kv_blocks} - {own} own"
        f" - {cache.physical()} cached held")
    if not oracle.has_work:
        assert oracle.free_blocks == oracle.config.kv_blocks, f"{where}: blocks left held"
        assert not any(cache.dups.values()) and not cache.owner and not cache.held, (
            f"{where}: a copy left held")


# bench/mutate_kernels.py asks only whether a mutant fails, not for the smallest example
NO_SHRINK = os.environ.get("SPECPLAN_NO_SHRINK") == "1"
PHASES = [p for p in Phase if p is not Phase.shrink or not NO_SHRINK]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=PHASES)
@given(replicas())
def test_the_planner_is_its_oracle_after_every_step(case) -> None:
    _same_run(case)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=PHASES)
@given(replicas(cache_pressure=True))
def test_prefix_caching_under_kv_pressure_is_its_oracle(case) -> None:
    """Hits, shared blocks, their release and least-recently-freed eviction, step by step."""
    _same_run(case)


def _same_run(case) -> None:
    cfg, specs, k_max, restart, proposal, seed, prefix_blocks = case
    oracle, sched = OracleScheduler(cfg), Scheduler(cfg, prefix_blocks)
    ro, rf = _requests(specs), _requests(specs)
    rng = np.random.default_rng(seed + 1)
    gaps = (array("q"), array("d")), (array("q"), array("d"))
    t, nxt, step = 0.0, 0, 0
    seen: set[str] = set()
    while step < 300 and (nxt < len(specs) or oracle.has_work or sched.has_work):
        where = f"step {step} at t={t}"
        while nxt < len(specs) and specs[nxt][0] <= t:
            a = specs[nxt][0]
            assert oracle.add_request(ro[nxt], a, k_max) == sched.add_request(rf[nxt], a, k_max), where
            nxt += 1
        if restart is not None and step == restart[0]:
            if restart[1]:  # re-queued here after the cold start
                out_o, out_f = oracle.evacuate(t), sched.evacuate(t)
                for x, y in zip(out_o, out_f, strict=True):
                    oracle.adopt(x, t)
                    sched.adopt(y, t)
            else:
                out_o, out_f = oracle.drop_all(t), sched.drop_all(t)
            assert [r.id for r in out_o] == [r.id for r in out_f], f"{where}: evacuated"
            seen.add(f"a restart with {len(out_o)} in flight" if len(out_o) < 2 else "a restart")
            _same_state(oracle, sched, ro, rf, f"{where}, restart")
        k = int(rng.integers(0, k_max + 1))
        po, pf = oracle.schedule(t, k), sched.schedule(t, k)
        _same_plan(po, pf, where)
        seen.update({"preemption"} if po.preempted else set())
        seen.update({"a prefix-cache hit"} if any(r.computed for r, _ in po.prefill
                                                   if r.num_bursts == 0) and cfg.prefix_caching else set())
        seen.update({"a batch of 128+"} if len(oracle.running) >= 128 else set())
        seen.update({"a decoding row without a proposal"} if po.drafting else set())
        seen.update({"a full-width row without a proposal"} if cfg.full_width_drafts and po.k
                    and any(not r.proposes for r in po.decode) else set())
        _same_state(oracle, sched, ro, rf, f"{where}, planned")
        step += 1
        if po.empty:
            if nxt >= len(specs):
                break
            t = max(t, specs[nxt][0])
            continue
        accepted = [int(a) for a in rng.integers(0, po.k + 1, len(po.decode))]
        # the world's rule: a row without a proposal accepts nothing (on a full-width engine it
        # still fed k filled slots, so po.drafting says all rows drafted)
        accepted = [a if r.proposes else 0 for a, r in zip(accepted, po.decode, strict=True)]
        if po.drafting:
            accepted = [a if d else 0 for a, d in zip(accepted, po.drafting, strict=True)]
        end = t + 0.005 + 1e-4 * po.num_scheduled_tokens
        for x, y in zip((*po.decode, *(r for r, _ in po.prefill)),
                        (*pf.decode, *(r for r, _ in pf.prefill)), strict=True):
            x.proposes = y.proposes = bool(rng.random() < proposal)  # the proposer's say
        total = oracle.update(po, accepted, end, *gaps[0]), sched.update(pf, accepted, end, *gaps[1])
        assert total[0] == total[1], f"{where}: accepted total"
        assert gaps[0] == gaps[1], f"{where}: ITL samples"
        _same_state(oracle, sched, ro, rf, f"{where}, applied")
        if not cfg.chunked_prefill:  # a prompt is admitted whole: no running request mid-prompt
            mid = [r.id for r in sched.running if r.computed < r.prompt_tokens + r.generated - 1]
            assert not mid, f"{where}: requests {mid} mid-prompt without chunked prefill"
        t = end
    seen.update({"a prefix-cache eviction"} if oracle.cache.evictions else set())
    seen.update({"a duplicate cached"} if oracle.cache.duplicates else set())
    seen.update({"an evicted first copy kept by a duplicate"} if oracle.cache.promotions else set())
    seen.update(f"outcome {r.outcome}" for r in ro)
    for what in sorted(seen):  # what the examples reached (pytest --hypothesis-show-statistics)
        event(what)
