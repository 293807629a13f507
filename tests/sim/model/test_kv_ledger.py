"""The KV ledger (``sim/model/kernels/kv_blocks.py``): one writer, and a balance that always holds.

The ledger is each request's block count (``Requests.ints[:, BLOCKS]``), a replica's free count
(``meta[M_FREE]``) and its evictable count (``meta[M_EVICT]``); the prefix cache's map
(``prefix_cache``) moves blocks between held and evictable. Two rules:

- only ``kv_blocks`` writes those fields and drives the prefix cache (checked on the source
  text, as ``tests/test_architecture.py`` checks imports), the opening balance included
  (``kv_blocks.open_ledger``: every block free), with no exception;
- after every call into the compiled planner, on generated runs (preemption, prefix caching with
  eviction and duplicates, timeouts, restarts): free + each request's own blocks + the cache's
  held copies == the replica's blocks, no count is negative, the evictable ones are the cached
  ids nobody holds (and counted free), and a replica with no work holds nothing.

The planner-oracle test compares the same counts with the oracle's; this one needs no oracle.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.synthetic import synthetic_profile
from sim.model.drivers.engine import Fleet, FleetSpec, build_replicas
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import prefix_cache as pc
from sim.model.scheduler import Scheduler
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer
from tests.sim.model.test_planner_oracle import PHASES, _requests, replicas

REPO = Path(__file__).resolve().parents[3]
LEDGER = {"BLOCKS", "M_FREE", "M_EVICT"}
OWNER = "sim/model/kernels/kv_blocks.py"
CACHE_MOVES = {"take_hit", "evict", "register", "release", "clear", "longest_hit"}


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(node) if isinstance(n, ast.Name | ast.Attribute)}


def _ledger_writes(text: str) -> list[tuple[int, str, str]]:
    """(line, enclosing function, field) of every assignment to a subscript whose index names a
    ledger field (``x[r, ks.BLOCKS] = ``, ``m[ks.M_FREE] += ``, ``iv[[..., ks.BLOCKS]] = ``)."""
    found = []

    def targets(node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.Tuple | ast.List):
            return [x for e in node.elts for x in targets(e)]
        return [node]

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef) else func
            if isinstance(child, ast.Assign | ast.AugAssign | ast.AnnAssign):
                for t in (child.targets if isinstance(child, ast.Assign) else [child.target]):
                    for sub in targets(t):
                        if isinstance(sub, ast.Subscript):
                            found.extend((child.lineno, func, f) for f in sorted(_names(sub.slice) & LEDGER))
            visit(child, name)

    visit(ast.parse(text), "<module>")
    return found


def test_only_kv_blocks_writes_the_kv_ledger() -> None:
    bad = []
    for path in sorted((REPO / "sim").rglob("*.py")) + sorted((REPO / "profiler").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel == OWNER:
            continue
        bad += [f"{rel}:{line} in {func}: writes {field}"
                for line, func, field in _ledger_writes(path.read_text(encoding="utf-8"))]
    assert not bad, "the KV ledger is kv_blocks.py's to write; call its functions:\n" + "\n".join(bad)


def test_the_ledger_scan_sees_every_form_of_a_write() -> None:
    """The scan above finds the forms a write takes (so its silence means something) and not
    a read."""
    src = ("def f(rq, m, iv):\n    rq.ints[r, ks.BLOCKS] += 1\n    m[ks.M_FREE] = 0\n"
           "    iv[[ks.PROMPT, ks.BLOCKS]] = (1, 2)\n    a, m[M_EVICT] = 1, 2\n    x = m[ks.M_FREE]\n")
    assert _ledger_writes(src) == [(2, "f", "BLOCKS"), (3, "f", "M_FREE"), (4, "f", "BLOCKS"),
                                   (5, "f", "M_EVICT")]


def test_only_kv_blocks_drives_the_prefix_cache() -> None:
    """The cache's moves change the ledger's counts, so nothing else in ``sim`` calls them."""
    bad = []
    for path in sorted((REPO / "sim").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel in (OWNER, "sim/model/kernels/prefix_cache.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "prefix_cache" in (
                    node.module + "".join(f".{a.name}" for a in node.names)):
                bad.append(f"{rel}:{node.lineno}: imports the prefix cache")
            elif isinstance(node, ast.Import) and any("prefix_cache" in a.name for a in node.names):
                bad.append(f"{rel}:{node.lineno}: imports the prefix cache")
    assert not bad, "only kv_blocks.py drives the prefix cache:\n" + "\n".join(bad)
    assert CACHE_MOVES <= set(vars(pc)), "a cache move was renamed: update CACHE_MOVES"


_POLICIES = (SpeculationPolicy("fixed", k=2),
             SpeculationPolicy("adaptive", k=2, on_below_batch=1, off_above_batch=3, window_s=1.0))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 600), st.booleans(), st.sampled_from(_POLICIES))
def test_every_replica_a_driver_builds_opens_with_every_block_free(replicas, kv_blocks, prefix, policy):
    """The opening balance (``kv_blocks.open_ledger``) reaches every replica that is built: the
    ``Scheduler`` facade's and the fleet's (the kernel-run one for a built-in policy, the SimPy
    one for the adaptive policy Python chooses k for), before anything arrives."""
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=kv_blocks,
                             prefix_caching=prefix)
    built = [Scheduler(cfg).rp]
    spec = FleetSpec(cfg, policy, proposer="ngram", replicas=replicas)
    fleet = Fleet(spec, ProfileStepTimer(synthetic_profile()), np.random.default_rng(0))
    reqs = [Request(i, i, 0.1 * i, 8, 8, "s", 600.0, [-0.3, -0.1]) for i in range(3)]
    built += [rep.rp for rep in build_replicas(fleet, reqs, track=False)]
    assert len(built) == 1 + replicas
    for rp in built:
        assert (int(rp.meta[ks.M_FREE]), int(rp.meta[ks.M_EVICT])) == (kv_blocks, 0)


def _balances(s: Scheduler, where: str) -> None:
    """The compiled ledger of ``s`` balances (see the module)."""
    rp, ints = s.rp, s.rq.ints[: len(s._reqs)]
    total, free, evict = int(rp.cfg[ks.C_KV]), int(rp.meta[ks.M_FREE]), int(rp.meta[ks.M_EVICT])
    blocks, held = ints[:, ks.BLOCKS], ints[:, ks.PFX_HELD]
    assert (blocks >= 0).all() and (held <= blocks).all(), f"{where}: a request's count below 0"
    running = set(rp.run_idx[: rp.meta[ks.M_NRUN]].tolist())
    idle = [r for r in range(len(ints)) if r not in running and blocks[r]]
    assert not idle, f"{where}: requests {idle} hold blocks without running"
    cache = rp.cache[:-1]
    cached_held = int((cache[:, pc.REF] > 0).sum() + cache[:, pc.DUP].sum())
    own = int((blocks - held).sum())
    assert 0 <= free <= total, f"{where}: free {free} outside [0, {total}]"
    assert free + own + cached_held == total, (
        f"{where}: free {free} + own {own} + cached held {cached_held} != {total}")
    assert evict == int((cache[:, pc.REF] == 0).sum()) and 0 <= evict <= free, (
        f"{where}: evictable {evict} is not the cached ids nobody holds, or not counted free")
    if not s.has_work:
        assert free == total, f"{where}: {total - free} blocks left held with no work"


def _run(case, check) -> None:
    """Drive a Scheduler through ``case`` (``test_planner_oracle.replicas``), ``check`` after
    every call."""
    cfg, specs, k_max, restart, proposal, seed, prefix_blocks = case
    s = Scheduler(cfg, prefix_blocks)
    reqs = _requests(specs)
    rng = np.random.default_rng(seed + 1)
    t, nxt, step = 0.0, 0, 0
    while step < 300 and (nxt < len(specs) or s.has_work):
        where = f"step {step} at t={t}"
        while nxt < len(specs) and specs[nxt][0] <= t:
            s.add_request(reqs[nxt], specs[nxt][0], k_max)
            nxt += 1
            check(s, f"{where}, arrival")
        if restart is not None and step == restart[0]:
            if restart[1]:
                for r in s.evacuate(t):
                    s.adopt(r, t)
            else:
                s.drop_all(t)
            check(s, f"{where}, restart")
        plan = s.schedule(t, int(rng.integers(0, k_max + 1)))
        check(s, f"{where}, planned")
        step += 1
        if plan.empty:
            if nxt >= len(specs):
                break
            t = max(t, specs[nxt][0])
            continue
        accepted = [int(a) if r.proposes else 0
                    for a, r in zip(rng.integers(0, plan.k + 1, len(plan.decode)), plan.decode, strict=True)]
        if plan.drafting:
            accepted = [a if d else 0 for a, d in zip(accepted, plan.drafting, strict=True)]
        for r in (*plan.decode, *(r for r, _ in plan.prefill)):
            r.proposes = bool(rng.random() < proposal)
        end = t + 0.005 + 1e-4 * plan.num_scheduled_tokens
        s.update(plan, accepted, end)
        check(s, f"{where}, applied")
        t = end


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=PHASES)
@given(replicas())
def test_kv_ledger_balances_after_every_call(case) -> None:
    _run(case, _balances)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=PHASES)
@given(replicas(cache_pressure=True))
def test_kv_ledger_balances_under_prefix_cache_eviction(case) -> None:
    _run(case, _balances)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 2000), st.integers(0, 8), st.sampled_from([1, 2, 16, 32]),
       st.integers(1, 400))
def test_a_request_fits_at_all_exactly_when_its_longest_form_needs_no_more_blocks_than_the_replica_has(
        prompt, output, k_max, block_size, total):
    """Admission's "could it ever run here" (``kv_blocks.fits_at_all``): prompt, every output
    token and a step's lookahead drafts, rounded up to whole blocks, within the replica's blocks;
    the boundary (exactly as many blocks as there are) fits."""
    from sim.model.kernels import kv_blocks as kv

    need = math.ceil((prompt + output + k_max) / block_size)
    assert kv.fits_at_all(prompt, output, k_max, block_size, total) == (need <= total)
    assert kv.fits_at_all(prompt, output, k_max, block_size, need)  # exactly enough blocks
