"""The two places the simulator reaches into SimPy's private state, and why each is safe.

``tests/sim/model/test_sim_clock.py`` pins the SimPy behaviour both rely on, so an upgrade that
changes it fails there first rather than in the golden frames.
"""

from __future__ import annotations

import simpy
from simpy.events import URGENT


def jump(env: simpy.Environment, t: float) -> None:
    """Set the clock to ``t`` without an event: a compiled replica ran its steps up to ``t``
    (each ending before the next scheduled event), so no event lies between now and ``t`` and
    SimPy would have reached ``t`` through them with nothing else happening. SimPy keeps the
    time in ``env._now`` and only ever moves it when it pops an event."""
    env._now = t


def urgent_timeout(env: simpy.Environment, delay: float) -> simpy.Event:
    """A timeout processed before the normal events due at the same time (steps' ends), so an
    arrival at the instant a step ends is queued when the next step is planned. SimPy orders
    events by (time, priority, id) and a triggered event is one with ``_ok`` and ``_value``
    set; ``Timeout`` itself always schedules with the normal priority."""
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    env.schedule(ev, URGENT, delay)
    return ev
