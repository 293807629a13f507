"""A fleet's only replica, taking its own arrivals in the compiled loop (``arrival_kernels``).

With one replica the router has nothing to choose, so the run needs no arrival process: the
replica's kernel submits each arrival at the instant SimPy would have, and applies client
timeouts and queue-time limits itself. SimPy clocks only what stops the kernel: the run's end,
an idle replica, or a log or the uniforms running out. Records are those of the
one-event-per-arrival loop bit for bit (``tests/sim/results/test_golden_frames.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.model.drivers.compiled_replica import CompiledReplica
from sim.model.fleet_arrays import FleetArrays
from sim.model.kernels import arrival_kernels as ak
from sim.model.kernels import kernel_entry as ke
from sim.model.kernels import price_kernels as pk
from sim.model.kernels import run_kernel as rk
from sim.model.sim_clock import jump
from sim.model.step_plan import Request


class SoloReplica(CompiledReplica):
    """The fleet's only replica; ``run`` takes the arrivals ``Fleet._arrivals`` would hand over."""

    takes_arrivals = True

    def __init__(self, fleet, arrays: FleetArrays, timer: pk.PackedTimer, track: bool,
                 requests: Sequence[Request]) -> None:
        super().__init__(fleet, 0, arrays, timer, track)
        self.av = ak.arrivals(requests, fleet.spec.scheduler.max_queue_time_s)
        self.av_fields = ke.fields(self.av)

    def submit(self, req: Request, now: float) -> None:
        raise RuntimeError("a lone compiled replica takes its arrivals itself; nothing submits to it")

    def mark_routed(self, requests: Sequence[Request]) -> None:
        for req in requests[: int(self.av.arrived[0])]:
            req.replica = 0

    def run(self):
        """Everything up to the run's stop or an idle replica in one kernel call; the step that
        would end at or after the stop on SimPy's clock (it never ends: the run stops first)."""
        env = self.fleet.env
        assert self.timer is not None and self.pol is not None
        while True:
            t = float(env.now)
            while True:
                rp, rq, lg, ta = self.seams()
                why, t, dt = ke.advance_alone(rp, rq, lg, self.pol, ta, self.av_fields, t, float(env.peek()))
                rp = rq = lg = ta = None  # not held across a wait: the run may end there, its logs let go (``release``)
                again = self.serviced(why, t, dt)
                if again is None:
                    break
                t = again
            jump(env, t)  # the kernel's time: the last step's end or arrival (no event lies before it)
            if why == rk.IDLE:  # no arrival left before the stop: wait for the end of the run
                yield from self._idle(t)
                continue
            self._submit_until(env.peek(), strict=True)  # arrivals before the stop, during this step
            yield env.timeout(dt)
            self._finish(t, dt, env.now)

    def serviced(self, why: int, t: float, dt: float) -> float | None:
        """After a kernel call that stopped for room: grow the logs, or refill the uniforms and
        apply the step that waited for them; the time to call again from. None: it stopped for
        SimPy (idle, or a step that crosses the run's stop)."""
        if why == rk.NEED_LOGS:
            self._grow_logs()
            return t
        if why == rk.NEED_UNIFORMS:
            self.arrays.refill()
            self._finish(t, dt, t + dt)
            return t + dt
        return None

    def _submit_until(self, upto: float, strict: bool) -> None:
        while not ak.submit_until(self.rp, self.arrays.rq, self.av, float(upto), strict):
            self._grow_logs()
