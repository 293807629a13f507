"""Routing has one home: ``route_kernels.pick``, held to a readable oracle, called by both drivers.

The oracle is the SimPy driver's Python router as it was before the rule was compiled: round
robin from its turn over the replicas that are up (all of them when none is), or the fewest
running + waiting requests, ties to the lowest index.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model import router
from sim.model.kernels import fleet_clock
from sim.model.kernels import fleet_kernels as fk
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import route_kernels as rk


def oracle_pick(outstanding: list[int], up: list[bool], turn: int, least: bool) -> int:
    n = len(outstanding)
    candidates = [i for i in range(n) if up[i]] or list(range(n))
    if not least:
        return next((turn + s) % n for s in range(n) if (turn + s) % n in candidates)
    return min(candidates, key=lambda i: (outstanding[i], i))


def _meta(running: list[int], waiting: list[int]) -> np.ndarray:
    meta = np.zeros((len(running), ks.N_META), np.int64)
    meta[:, ks.M_NRUN] = running
    meta[:, ks.M_NWAIT] = waiting
    return meta


@settings(max_examples=400, deadline=None)
@given(data=st.data(), n=st.integers(1, 9), least=st.booleans())
def test_routing_picks_the_turn_or_the_least_outstanding_among_replicas_up(data, n, least) -> None:
    running = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    waiting = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    up = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    turn = data.draw(st.integers(0, n - 1))
    down = np.array([0 if u else fk.DOWN for u in up], np.int64)
    got = rk.pick(_meta(running, waiting), down, fk.DOWN, turn, least)
    assert got == oracle_pick([a + b for a, b in zip(running, waiting, strict=True)], up, turn, least)


class _Rep:
    def __init__(self, running: int, waiting: int, up: bool) -> None:
        self.up = up
        self.rp = ks.Replica(*[None] * len(ks.Replica._fields))._replace(meta=_meta([running], [waiting])[0])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 6), least=st.booleans())
def test_the_simpy_router_routes_by_the_compiled_rule_and_moves_its_turn(data, n, least) -> None:
    states = data.draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.booleans()),
                                min_size=n, max_size=n))
    reps = [_Rep(*s) for s in states]
    r = router.Router("least_outstanding" if least else "round_robin", reps)
    turn = 0
    for _ in range(3):
        got = r.pick()
        want = oracle_pick([a + b for a, b, _ in states], [u for _, _, u in states], turn, least)
        assert got == want
        turn = (want + 1) % n


def test_no_second_routing_rule_in_the_drivers() -> None:
    """The fleet kernel's ``pick`` (``fleet_clock``, its clients' too) and the SimPy router only
    call ``route_kernels.pick``: a comparison of outstanding counts written there again would be
    a second rule."""
    for fn in (fleet_clock.pick.py_func, router.Router.pick):
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        calls = {ast.unparse(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}
        assert calls & {"pick", "rk.pick", "route_kernels.pick"}, fn
        assert not any(isinstance(c, ast.Compare) and any(isinstance(o, ast.Lt) for o in c.ops)
                       for c in ast.walk(tree)), f"{fn.__qualname__} compares outstanding counts itself"
    for mod in (fk, fleet_clock):
        assert "outstanding(" not in inspect.getsource(mod)
