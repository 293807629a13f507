"""Prefix caching (``sim/model/kernels/prefix_cache.py``): hits, sharing, eviction, known by hand.

Each case drives the compiled planner through the ``Scheduler`` facade on a tiny replica whose
every block is counted here, and checks the oracle (``oracle_scheduler.py``) says the same.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.scheduler import Scheduler
from sim.model.step_plan import Request, SchedulerConfig
from sim.workload.prefix_blocks import block_ids
from sim.workload.workload import RequestSpec
from tests.sim.model.oracle_scheduler import OracleScheduler

BS = 4


def _cfg(kv: int, caching: bool = True, budget: int = 64) -> SchedulerConfig:
    return SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=budget, block_size=BS,
                           kv_blocks=kv, prefix_caching=caching)


def _req(i: int, prompt: int, output: int, prefix: list[int] | None) -> Request:
    r = Request(i, i, 0.0, prompt, output)
    r.prefix = None if prefix is None else np.array(prefix, np.int64)
    return r


def _run_alone(s, req, t: float) -> float:
    """Admit ``req`` at ``t`` and run steps until it ends; returns the time after."""
    assert s.add_request(req, t)
    while req.outcome is None:
        plan = s.schedule(t)
        t += 1.0
        s.update(plan, None, t)
    return t


@pytest.mark.parametrize("make", [lambda c: Scheduler(c, prefix_blocks=8), OracleScheduler])
def test_a_second_request_skips_the_shared_blocks_and_shares_them(make) -> None:
    """Two 14-token prompts sharing their first 3 blocks (12 tokens): the first computes 14,
    the second finds 12 cached — the hit is capped by has - 1 = 13 tokens to whole blocks —
    and prefills 2; with both running, the shared blocks are held once."""
    s = make(_cfg(kv=20))
    a, b = _req(0, 14, 3, [0, 1, 2]), _req(1, 14, 3, [0, 1, 2])
    assert s.add_request(a, 0.0)
    p = s.schedule(0.0)
    assert [(r.id, n) for r, n in p.prefill] == [(0, 14)]
    s.update(p, None, 1.0)
    assert s.free_blocks == 20 - 4  # 14 tokens + the sampled one: 4 blocks
    assert s.add_request(b, 1.0)
    p = s.schedule(1.0)
    assert [(r.id, n) for r, n in p.prefill] == [(1, 2)]
    assert p.prefill_context == 12.0  # the chunk attends to its cached 12 tokens
    assert b.computed == 12 and b.blocks == 4 and b.prefix_hit_tokens == 12
    # a holds 4 blocks (3 shared), b shares those 3 and adds 1 of its own: 5 in use
    assert s.free_blocks == 20 - 5
    assert a.prefix_hit_tokens == 0


@pytest.mark.parametrize("make", [lambda c: Scheduler(c, prefix_blocks=8), OracleScheduler])
def test_a_whole_prompt_hit_still_computes_its_last_block(make) -> None:
    """A 12-token prompt of 3 cached blocks hits only 2 (at most has - 1 = 11 tokens): 4
    tokens are prefilled, not 0 (vLLM recomputes the last token for its logits)."""
    s = make(_cfg(kv=20))
    t = _run_alone(s, _req(0, 12, 1, [0, 1, 2]), 0.0)
    b = _req(1, 12, 2, [0, 1, 2])
    assert s.add_request(b, t)
    p = s.schedule(t)
    assert [(r.id, n) for r, n in p.prefill] == [(1, 4)]
    assert b.prefix_hit_tokens == 8


@pytest.mark.parametrize("make", [lambda c: Scheduler(c, prefix_blocks=8), OracleScheduler])
def test_freed_blocks_stay_cached_until_an_allocation_needs_them(make) -> None:
    """Blocks of a finished request count free but stay cached; a request that needs every
    block evicts them, least recently freed first, and a later request then misses."""
    s = make(_cfg(kv=4))
    t = _run_alone(s, _req(0, 8, 1, [0, 1]), 0.0)
    assert s.free_blocks == 4
    t = _run_alone(s, _req(1, 9, 1, [0, 1]), t)  # hits both (8 <= 9 - 1), computes 1
    c = _req(2, 15, 1, [5, 6, 7])  # 16 tokens at its end: all 4 blocks, both cached ones evicted
    t = _run_alone(s, c, t)
    assert c.prefix_hit_tokens == 0
    d = _req(3, 9, 1, [0, 1])
    assert s.add_request(d, t)
    s.schedule(t)
    assert d.prefix_hit_tokens == 0 and d.computed == 0


def test_the_hit_rate_of_a_tiny_trace_is_known_by_hand() -> None:
    """Three 20-token requests in turn, the first 8 tokens (2 blocks) a shared system prompt:
    the first finds nothing, the others 8 tokens each: 16 of 60 prompt tokens hit."""
    specs = [RequestSpec(i, float(i), 20, 2, "s", None, ((-1, 8),)) for i in range(3)]
    ids = block_ids(specs, BS)
    assert [list(x) for x in ids] == [[0, 1]] * 3
    s = Scheduler(_cfg(kv=40), prefix_blocks=2)
    t = 0.0
    reqs = []
    for i, spec in enumerate(specs):
        r = _req(i, spec.prompt_tokens, spec.output_tokens, list(ids[i]))
        reqs.append(r)
        t = _run_alone(s, r, t)
    hits = [r.prefix_hit_tokens for r in reqs]
    assert hits == [0, 8, 8]
    assert sum(hits) / sum(r.prompt_tokens for r in reqs) == pytest.approx(16 / 60)


def test_caching_off_ignores_prefixes() -> None:
    s = Scheduler(_cfg(kv=20, caching=False))
    t = _run_alone(s, _req(0, 14, 1, [0, 1, 2]), 0.0)
    b = _req(1, 14, 1, [0, 1, 2])
    _run_alone(s, b, t)
    assert b.prefix_hit_tokens == 0


def test_block_ids_chain_trace_hashes_into_engine_blocks() -> None:
    """Mooncake-style 8-token hash blocks mapped to 4-token engine blocks: equal ids only where
    everything before is equal too; a partial block gets none."""
    a = RequestSpec(0, 0.0, 17, 1, "s", None, ((7, 8), (8, 8), (9, 8)))
    b = RequestSpec(1, 0.0, 24, 1, "s", None, ((7, 8), (8, 8), (5, 8)))
    c = RequestSpec(2, 0.0, 16, 1, "s", None, ((3, 8), (8, 8)))
    ia, ib, ic = block_ids([a, b, c], 4)
    assert len(ia) == 4 and len(ib) == 6 and len(ic) == 4  # 17 tokens: 4 full blocks
    assert list(ia) == list(ib[:4])  # hashes 7, 8 agree
    assert ib[4] not in ia
    assert not set(ic) & set(ia)  # same hash 8 at position 1 after a different 0: different


def _block_ids_by_dict(specs, bs):
    """The readable twin of ``block_ids``: a dict filled request by request, block by block."""
    from bisect import bisect_right
    from itertools import accumulate

    chains: dict = {}
    blocks: dict = {}
    out = []
    for s in specs:
        if not s.prefix_spans:
            out.append(None)
            continue
        ends = list(accumulate(t for _, t in s.prefix_spans))
        nodes, node = [], -1
        for h, _ in s.prefix_spans:
            node = chains.setdefault((node, h), len(chains))
            nodes.append(node)
        n = min(s.prompt_tokens, ends[-1]) // bs
        out.append(np.array([blocks.setdefault((nodes[bisect_right(ends, (i + 1) * bs - 1)], i), len(blocks))
                             for i in range(n)], np.int64))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200),
                          st.lists(st.tuples(st.integers(-3, 3), st.integers(1, 60)), max_size=4)),
                max_size=25),
       st.integers(1, 20))
def test_block_ids_number_blocks_as_a_dict_would(reqs, bs) -> None:
    """Vectorised naming equals the dict's: the same ids, numbered in order of first appearance."""
    specs = [RequestSpec(i, 0.0, p, 5, "s", None, prefix_spans=tuple(sp)) for i, (p, sp) in enumerate(reqs)]
    for got, want in zip(block_ids(specs, bs), _block_ids_by_dict(specs, bs), strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert got.tolist() == want.tolist()


@pytest.mark.parametrize("make", [lambda c: Scheduler(c, prefix_blocks=8), OracleScheduler])
def test_a_request_that_computed_a_cached_block_still_caches_its_later_blocks(make) -> None:
    """a = ids [0, 1, 2] and b = [0, 1, 3] arrive together and compute their shared blocks 0, 1
    at once; a caches them first, b keeps duplicates and caches its own block 3 (vLLM
    ``cache_full_blocks`` never de-duplicates). c = [0, 1, 3] then hits 3 blocks (12 of its 14
    tokens), as in vLLM, where a rule that stopped at b's first duplicate gave it only a's 2
    (8 tokens). (vLLM, caching a's blocks when it schedules them, would let b hit them already:
    docs/prefix-caching.md, "When a block is cached".)"""
    s = make(_cfg(kv=20))
    a, b = _req(0, 14, 1, [0, 1, 2]), _req(1, 14, 1, [0, 1, 3])
    assert s.add_request(a, 0.0) and s.add_request(b, 0.0)
    p = s.schedule(0.0)
    assert [(r.id, n) for r, n in p.prefill] == [(0, 14), (1, 14)]
    assert a.prefix_hit_tokens == b.prefix_hit_tokens == 0
    s.update(p, None, 1.0)  # both prompts done, 1 output token each: both finish
    assert a.outcome == b.outcome == "completed"
    # every block is free again; a's 0, 1, 2 and b's 3 stay cached, b's copies of 0, 1 dropped
    assert s.free_blocks == 20
    c = _req(2, 14, 1, [0, 1, 3])
    assert s.add_request(c, 1.0)
    p = s.schedule(1.0)
    assert [(r.id, n) for r, n in p.prefill] == [(2, 2)]
    assert c.prefix_hit_tokens == 12


@pytest.mark.parametrize("make", [lambda c: Scheduler(c, prefix_blocks=8), OracleScheduler])
def test_a_held_duplicate_keeps_its_block_cached_when_the_first_copy_is_evicted(make) -> None:
    """Identical prompts a and b (ids [0, 1], 8 tokens) run at once on a 6-block replica; a
    ends after 1 token, b goes on holding duplicates of blocks 0, 1. Next step b's decode takes
    an empty block and d, an unrelated 11-token prompt, needs 3: the last empty one and both of
    a's cached copies, evicted. c = [0, 1] (9 tokens) arriving while b still runs hits both
    blocks, 8 tokens, through b's copies (vLLM's map still holds them); a rule that let b's
    copies go uncached made c miss."""
    s = make(_cfg(kv=6, budget=64))
    a, b = _req(0, 8, 1, [0, 1]), _req(1, 8, 12, [0, 1])
    assert s.add_request(a, 0.0) and s.add_request(b, 0.0)
    p = s.schedule(0.0)
    s.update(p, None, 1.0)
    assert a.outcome == "completed" and b.outcome is None
    assert b.blocks == 2  # its 8 computed tokens: both blocks duplicates of a's
    assert s.free_blocks == 6 - 2  # a's 2 cached copies evictable (counted free)
    d = _req(2, 11, 1, [5, 6])  # 3 blocks at its end: the empty one and both of a's copies
    assert s.add_request(d, 1.0)
    p = s.schedule(1.0)
    assert [(r.id, n) for r, n in p.prefill] == [(2, 11)]
    assert s.free_blocks == 0
    s.update(p, None, 2.0)
    assert d.outcome == "completed"
    c = _req(3, 9, 1, [0, 1])
    assert s.add_request(c, 2.0)
    p = s.schedule(2.0)
    assert c.prefix_hit_tokens == 8 and c.computed == 8
