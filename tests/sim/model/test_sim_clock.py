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


def test_the_queue_order_fleet_kernels_emulate() -> None:
    """``sim.model.kernels.fleet_kernels`` replays SimPy's queue: events at the same time and priority
    in the order they were scheduled (one id counter), a succeeded event (a replica's wake-up)
    scheduled at once with the normal priority, a process's end an event of its own at the
    time it returns (a replica's horizon stops there), ``run(until)`` an urgent event."""
    env = simpy.Environment()
    order = []
    wake = env.event()

    def replica(name, delay):
        yield env.timeout(delay)
        order.append(name)

    def arrivals():
        yield urgent_timeout(env, 1.0)
        wake.succeed()  # scheduled now (t=1), after the step ends already due at t=1
        order.append("arrival")

    def woken():
        yield wake
        order.append("woken")

    env.process(replica("b", 1.0))
    env.process(replica("a", 1.0))
    env.process(arrivals())
    env.process(woken())
    env.run(until=1.0 + 1e-9)
    assert order == ["arrival", "b", "a", "woken"], "SimPy's tie order changed"
    env = simpy.Environment()

    def ends():
        yield env.timeout(0.5)

    env.process(ends())
    env.step()  # the process starts
    env.step()  # its timeout: it returns at 0.5
    assert env.peek() == 0.5, "a process's end is no longer an event of its own"
    env = simpy.Environment()
    seen = []

    def at_stop():
        yield urgent_timeout(env, 2.0)  # scheduled after run(until=2.0) created its stop
        seen.append(env.now)

    env.process(at_stop())
    env.run(until=2.0)
    assert seen == [] and env.now == 2.0, "run(until) no longer stops before urgent events due then"


def test_an_interrupt_runs_at_once_and_its_sender_ends_as_a_normal_event() -> None:
    """What ``fleet_kernels._restart`` emulates of ``Fleet.restart_at``: the interrupt is urgent
    (the interrupted process runs before normal events already due at that instant), the
    sending process's end is a normal event queued next, events the interrupted process then
    schedules come after it, and the event it had waited for still fires with nobody waiting."""
    env = simpy.Environment()
    order = []

    def replica():
        step = env.timeout(5.0)
        try:
            yield step
            order.append("step end seen")
        except simpy.Interrupt:
            order.append(("interrupted", env.now))
            wake = env.event()
            wake.succeed()
            yield wake
            order.append("own event")
        yield env.timeout(10.0)

    def other():
        yield env.timeout(1.0)  # a normal event due at the restart's instant, queued later
        order.append("other")

    proc = env.process(replica())

    def restart():
        yield env.timeout(1.0)
        proc.interrupt("restart")

    sender = env.process(restart())
    env.process(other())

    def watch():
        yield sender
        order.append("sender ended")

    env.process(watch())
    env.run(until=6.0)
    assert order == [("interrupted", 1.0), "other", "sender ended", "own event"], \
        "SimPy's interrupt is no longer urgent, or a process's end no longer a normal event"



def test_processes_started_together_time_out_in_the_order_started() -> None:
    """What ``client_kernels`` relies on to take a client timer's id when its process is made: a
    process's start is an urgent event at the instant it was made (it runs before a step's end
    already due then), so processes made at one instant schedule their first urgent timeouts in
    the order they were made."""
    env = simpy.Environment()
    order = []

    def later(name, delay):
        order.append(f"{name} starts")
        yield urgent_timeout(env, delay)
        order.append(name)

    def step_end(name, spawn):
        yield env.timeout(1.0)  # normal events at t=1: steps' ends, in the order scheduled
        order.append(name)
        if spawn:
            env.process(later("made-first", 0.5))
            env.process(later("made-second", 0.5))

    env.process(step_end("end-a", True))
    env.process(step_end("end-b", False))
    env.run()
    assert order == ["end-a", "made-first starts", "made-second starts", "end-b", "made-first",
                     "made-second"], "SimPy's process-start order changed"
