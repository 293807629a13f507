"""A fleet whose arrivals are taken inside the compiled loop (``fleet_kernels``): routed among
several replicas, or inline by a lone one (``fleet_kernels._alone``).

The replicas' states are stacked (each ``Replica`` field one row per replica) so one kernel call
holds them all; each ``RoutedReplica`` keeps views of its row, which is what the router's reads,
the queue log and the records see. Replica 0's SimPy process runs the kernel to the end (back to
Python only to grow a log or refill the uniforms; a restart included), then moves SimPy's clock
to where the emulated queue ended; the others' processes end at once. Records are those of one SimPy process
per replica and an arrival process, bit for bit (``tests/sim/results/test_golden_frames.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.model.drivers.compiled_replica import CompiledReplica
from sim.model.kernels import arrival_kernels as ak
from sim.model.kernels import client_kernels as ck
from sim.model.kernels import fleet_clock as fclock
from sim.model.kernels import fleet_kernels as fk
from sim.model.kernels import kernel_entry as ke
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import run_kernel as rk
from sim.model.kernels.kernel_state import doubled
from sim.model.kernels.policy_kernels import grown, policy_array
from sim.model.sim_clock import jump
from sim.model.speculation import after_restart
from sim.model.step_plan import Request


class RoutedReplica(CompiledReplica):
    """One replica of a fleet run by ``FleetLoop`` (its ``rp`` a view of the stacked state)."""

    takes_arrivals = True
    loop: FleetLoop

    def submit(self, req: Request, now: float) -> None:
        raise RuntimeError("a fleet routed in the kernel takes its arrivals itself; nothing submits to it")

    def mark_routed(self, requests: Sequence[Request]) -> None:
        if self.index == 0:
            av = self.loop.av
            for req, r in zip(requests, av.routed[: int(av.arrived[0])].tolist(), strict=False):
                req.replica = r

    def run(self):
        """Replica 0's process runs the whole fleet; the others' end at once."""
        if self.index == 0:
            yield from self.loop.run()


class FleetLoop:
    """The stacked state, the arrivals and the emulated event queue of one fleet."""

    def __init__(self, fleet, replicas: list[RoutedReplica], requests: Sequence[Request],
                 clients: ck.Clients | None = None) -> None:
        spec = fleet.spec
        self.fleet = fleet
        self.replicas = replicas
        self.st = ks.Replica(*(np.stack([getattr(rep.rp, f) for rep in replicas]) for f in ks.Replica._fields))
        # per replica: a kv_fallback's own state, an adaptive one's window
        self.pol = np.stack([policy_array(spec.policy) for _ in replicas])
        self._views()
        self.cl = ck.no_clients() if clients is None else clients
        """Closed-loop clients (``sim.model.drivers.clients``): arrivals made in the kernel."""
        if clients is None:
            self.av = ak.arrivals(requests, spec.scheduler.max_queue_time_s)
        else:
            self.av = ck.client_arrivals(len(requests), spec.scheduler.max_queue_time_s)
        restart = spec.restart
        back = policy_array(after_restart(spec.policy, restart))
        self.fc = fclock.new_clock(len(replicas), spec.routing == "least_outstanding",
                               None if spec.drain else spec.duration_s, restart, back,
                               spec.scheduler.max_num_seqs + len(requests))
        for rep in replicas:
            rep.loop = self

    def _views(self) -> None:
        for r, rep in enumerate(self.replicas):
            rep.rp = ks.Replica(*(a[r] for a in self.st))
            rep.pol = self.pol[r]

    def _grow(self) -> None:
        """Room for a step's worst case in every log (``CompiledReplica._grow_logs``), every
        replica's queue log widened together (for a restart's evacuation, what it asked for)."""
        seqs = int(self.st.cfg[0, ks.C_SEQS])
        self.replicas[0].arrays.grow_logs(2 * seqs)
        used = int(self.st.meta[:, ks.M_QLOG].max())
        entries = max(2 * seqs + 1, int(self.fc.g[fclock.G_ROOM]), int(self.cl.g[ck.CG_ROOM]))
        qlog = self.st.qlog
        while used + 2 * entries > qlog.shape[1]:
            qlog = np.stack([doubled(row, used) for row in qlog])
        pol = grown(self.pol)  # an adaptive policy's window ring, when one is full
        if qlog is not self.st.qlog or pol is not self.pol:
            self.st = self.st._replace(qlog=qlog)
            self.pol = pol
            self._views()

    def run(self):
        """The fleet to the end in the kernel; SimPy's clock left where the queue ended."""
        rep0 = self.replicas[0]
        arrays = rep0.arrays
        env = self.fleet.env
        assert rep0.pol is not None and rep0.timer is not None
        while True:
            why = ke.run_fleet(ke.fields(self.st), ke.fields(arrays.rq), ke.fields(arrays.lg), self.pol,
                               ke.fields(rep0.timer.arrays), ke.fields(self.av), ke.fields(self.fc),
                               ke.fields(self.cl))
            if why == rk.NEED_LOGS:
                self._grow()
            elif why == rk.NEED_UNIFORMS:
                arrays.refill()
            else:
                break
        now = float(self.fc.f[fclock.F_NOW])
        if why == fk.STUCK:
            raise RuntimeError(f"fleet: work queued but nothing schedulable at t={float(self.fc.f[fclock.F_ACT_T])}")
        if why == ck.POOL_OUT:
            self.fleet.pool_ran_out(float(self.cl.f[ck.CF_OUT_T]))
        if why == fk.STOPPED:  # SimPy's own stop comes at the same time
            yield env.event()
        jump(env, now)


def build(fleet, arrays, timer, track: bool, requests: Sequence[Request],
          clients: ck.Clients | None = None) -> list[RoutedReplica]:
    """The fleet's replicas, run together in the kernel (with ``clients``, their arrivals made
    there: ``ClientFleet``, which reads ``loop`` after the run)."""
    replicas = [RoutedReplica(fleet, i, arrays, timer, track) for i in range(fleet.spec.replicas)]
    FleetLoop(fleet, replicas, requests, clients)
    return replicas
