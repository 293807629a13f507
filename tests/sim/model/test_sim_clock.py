"""The SimPy behaviour ``sim.model.sim_clock`` relies on, pinned: a SimPy upgrade that changes it
fails here, with a message saying what the simulator assumed, before the golden frames drift."""

from __future__ import annotations

import simpy
from simpy.events import NORMAL, URGENT

from sim.model.sim_clock import jump, urgent_timeout


def test_jump_moves_the_clock_and_later_timeouts_count_from_there() -> None:
    env = simpy.Environment()
    seen = []

    def proc():
        jump(env, 2.5)  # a compiled replica ran its steps up to 2.5
        assert env.now == 2.5
        yield env.timeout(0.5)
        seen.append(env.now)

    def other():
        yield env.timeout(4.0)  # scheduled before the jump: still due at 4.0
        seen.append(env.now)

    env.process(other())
    env.process(proc())
    env.run()
    assert seen == [3.0, 4.0], "SimPy no longer keeps its clock in env._now"


def test_an_urgent_timeout_goes_before_normal_events_due_at_the_same_time() -> None:
    assert URGENT < NORMAL, "SimPy's priorities changed order"
    env = simpy.Environment()
    order = []

    def step_end():
        yield env.timeout(1.0)  # scheduled first, normal priority
        order.append("step end")

    def arrival():
        yield urgent_timeout(env, 1.0)  # scheduled later, at the same time: processed first
        order.append("arrival")

    env.process(step_end())
    env.process(arrival())
    env.run()
    assert order == ["arrival", "step end"], "an urgent event no longer precedes a normal one"


def test_an_urgent_timeout_is_a_triggered_event_with_no_value() -> None:
    env = simpy.Environment()
    ev = urgent_timeout(env, 0.25)
    assert ev.triggered and ev.ok and ev.value is None
    assert env.peek() == 0.25
    env.run()
    assert env.now == 0.25 and ev.processed
