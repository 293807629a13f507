"""Closed-loop clients: ``workload.concurrency`` clients, each sending its next request when its
last one ends (finished, timed out or rejected), after a think time (``think_time_s``, fixed or
exponential with that mean, ``think_time_dist``).

The client sees an answer whole: a request's per-request overhead (``fleet.request_overhead``,
paid before the engine, docs/scenario-format.md) lies between the client sending it and the
engine receiving it, so a client's cycle is overhead + engine time + think time, and Little's law
holds with the latency the results report (E2E, overhead included): N = X · (E2E + think).

Why a module of its own: open-loop arrival times are fixed before the run (``workload.py``);
here they depend on how the fleet serves, so arrivals are made during the run. Requests come
from a pool in the order clients send them: the k-th request sent takes the pool's row k, whose
segment, lengths and acceptance rates depend only on the seed and k (drawn in blocks of
``BLOCK`` from streams named by the block). Every candidate of a seed therefore serves the same
requests in the same order of sending (common random numbers); only which client sends which,
and when, follows the fleet, as with ``vllm bench serve --max-concurrency``.

How an end is learned: the clients look at their in-flight rows after each step, expiry and
restart. Where the fleet kernel can run them (``_in_kernel``: a compiled timer and built-in
policy, one overhead and one timeout for all, no restart at 0 s) it does, clients included
(``sim.model.kernels.client_kernels``: one kernel call for the run); else every replica returns to
SimPy after each step (``ClientReplica``), the reference semantics the kernel's records equal bit
for bit (``tests/sim/model/test_client_kernel_rules.py``).
A pool too small for the run (the clients sent every row before ``run.duration_s``) is grown
from the rate it was used at, and the run is repeated: rows already drawn stay the same.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.fleet_config import RequestOverhead
from sim.contracts.scenario import Scenario
from sim.contracts.work_limits import workload_size
from sim.contracts.workload_config import WorkloadConfig
from sim.model import timer_packing
from sim.model.drivers import routed_fleet
from sim.model.drivers.compiled_replica import CompiledReplica
from sim.model.drivers.engine import Fleet, FleetSpec, StepTimer
from sim.model.fleet_arrays import FleetArrays
from sim.model.kernels import client_kernels as ck
from sim.model.kernels import kernel_state as ks
from sim.model.kernels.policy_kernels import policy_array
from sim.model.sim_clock import urgent_timeout
from sim.model.step_plan import Request
from sim.model.step_protocol import FleetRun
from sim.workload.prefix_blocks import block_ids
from sim.workload.workload import RequestSpec, child_stream, segment_spans

BLOCK = 1024
"""Pool rows drawn per stream (the pool grows by whole blocks; a row never changes)."""
_POOL = 3
"""The pool's child stream under the workload's SeedSequence (0..2 are ``workload.py``'s)."""
_MAX_TRIES = 12


class PoolExhausted(Exception):
    """The clients sent every pooled request at ``at_s``, before they were to stop."""

    def __init__(self, at_s: float) -> None:
        super().__init__(at_s)
        self.at_s = at_s


def pool_specs(workload: WorkloadConfig, seq: np.random.SeedSequence, n: int) -> list[RequestSpec]:
    """The pool's first ``n`` requests (arrival 0.0 until sent): row k's segment and lengths
    come from block ``k // BLOCK``'s streams, so a larger pool starts with the same rows."""
    names = workload.segment_names
    out: list[RequestSpec] = []
    for b in range(math.ceil(n / BLOCK)):
        seg = child_stream(seq, _POOL, b, 0).choice(len(names), size=BLOCK, p=workload.shares)
        prompt = np.empty(BLOCK, np.int64)
        output = np.empty(BLOCK, np.int64)
        for i, s in enumerate(workload.segments):
            mask = seg == i
            m = int(mask.sum())
            assert s.prompt_tokens is not None and s.output_tokens is not None
            prompt[mask] = s.prompt_tokens.sample(child_stream(seq, _POOL, b, 1, i, 0), m)
            output[mask] = s.output_tokens.sample(child_stream(seq, _POOL, b, 1, i, 1), m)
        take = min(BLOCK, n - b * BLOCK)
        spans = segment_spans(workload, seg, lambda g, b=b: child_stream(seq, _POOL, b, 3, g))
        out.extend(
            RequestSpec(b * BLOCK + j, 0.0, p, o, names[g], workload.client_timeout_s, prefix_spans=sp)
            for j, (g, p, o, sp) in enumerate(zip(seg[:take].tolist(), prompt[:take].tolist(),
                                                   output[:take].tolist(), spans[:take], strict=True)))
    return out


def pool_thinks(workload: WorkloadConfig, seq: np.random.SeedSequence, n: int) -> float | np.ndarray:
    """The think time after each of the pool's first ``n`` requests: the fixed one, or
    exponential draws from each block's own stream (the same rows in a pool of any size)."""
    mean = float(workload.think_time_s)
    if workload.think_time_dist == "fixed":
        return mean
    blocks = [child_stream(seq, _POOL, b, 2).exponential(mean, BLOCK) for b in range(math.ceil(n / BLOCK))]
    return np.concatenate(blocks)[:n]


def pool_overheads(overhead: RequestOverhead, specs: Sequence[RequestSpec]) -> float | np.ndarray:
    """Each pool row's overhead outside the engine (``RequestOverhead.seconds``, the one rule
    the latencies add too): one number when it does not depend on the prompt."""
    if overhead.per_prompt_token_ms == 0:
        return float(overhead.seconds(0))  # type: ignore[arg-type]
    return np.asarray(overhead.seconds(np.fromiter((s.prompt_tokens for s in specs), np.float64, len(specs))))


def grown(size: int, at_s: float, duration_s: float, clients: int) -> int:
    """The pool for a repeated run: the rate the last one was used at, over the whole run."""
    want = 2.0 * size if at_s <= 0 else 1.25 * size * duration_s / at_s + clients
    return BLOCK * math.ceil(max(want, size + 1) / BLOCK)


class ClientReplica(CompiledReplica):
    """A replica whose clients look at their requests after every step (and expiry), so they
    see each end."""

    def _finish(self, start: float, dt: float, end: float) -> None:
        super()._finish(start, dt, end)
        self.fleet.poll(end)

    def expire(self, now: float) -> None:
        super().expire(now)
        self.fleet.poll(now)

    def _restart(self):
        steps = super()._restart()
        first = next(steps)  # in-flight work re-routed or dropped: dropped requests have ended
        self.fleet.poll(float(self.fleet.env.now))
        yield first
        yield from steps


class ClientFleet(Fleet):
    """``Fleet`` driven by closed-loop clients instead of an arrival schedule."""

    def __init__(self, spec: FleetSpec, step_timer: StepTimer, accept_rng: np.random.Generator | None,
                 clients: int, think_s: float | np.ndarray, stop_s: float,
                 overhead_s: float | np.ndarray = 0.0, kernel: bool = True) -> None:
        super().__init__(spec, step_timer, accept_rng)
        self.kernel = kernel
        """False: always the SimPy reference driver (``ClientReplica``), even where the fleet
        kernel could run the clients (``_in_kernel``)."""
        self._loop = None
        self.clients = int(clients)
        self.think_s = think_s if isinstance(think_s, np.ndarray) else float(think_s)
        """Seconds from a request's end to its client's next: one for all, or one per pool row
        (the think time after that request)."""
        self.overhead_s = overhead_s if isinstance(overhead_s, np.ndarray) else float(overhead_s)
        """Seconds from a client sending a request to the engine receiving it (the per-request
        overhead outside the engine): one for all, or one per pool row."""
        self._no_overhead = not np.any(np.asarray(overhead_s) > 0)
        self.stop_s = float(stop_s)
        """Clients send nothing at or after this time (the run's ``duration_s``)."""
        self.sent = 0
        """Rows sent so far (row k is the k-th request sent)."""
        self.row_of = np.full(self.clients, -1, np.int64)
        """Each client's request in flight (-1: none)."""
        self._due: deque[int] = deque()
        """Clients to send now, in order."""
        self._held: list[int] = []
        """Clients whose request was refused the instant it was sent (no think time): they send
        again after the next step, not in the same instant."""

    def _replicas(self, requests: Sequence[Request], track: bool) -> list:
        """In the fleet kernel when it can run them (``_in_kernel``), else every replica stepping
        through SimPy (``ClientReplica``), the reference semantics."""
        spec = self.spec
        arrays = FleetArrays(requests, self.k_max, self.accept_rng,
                             slack=2 * spec.scheduler.max_num_seqs * spec.replicas, replay=self.replay)
        timer = timer_packing.pack(self.step_timer, spec.proposer)
        if self._in_kernel(timer, requests):
            think = self.think_s if isinstance(self.think_s, np.ndarray) else np.full(len(requests), self.think_s)
            cl = ck.new_clients(self.clients, think[: len(requests)], self.stop_s, float(self.overhead_s),
                                requests[0].timeout_s if requests else None)
            replicas = routed_fleet.build(self, arrays, timer, track, requests, cl)
            self._loop = replicas[0].loop
            return replicas
        self._loop = None
        return [ClientReplica(self, i, arrays, timer, track) for i in range(spec.replicas)]

    def _in_kernel(self, timer, requests: Sequence[Request]) -> bool:
        """The fleet kernel runs the clients (``client_kernels``) where it runs the open-loop
        fleet (a compiled timer, a built-in policy, no restart at 0 s) and every request reaches
        the engine in the order sent (one overhead for all) with one timeout for all; else SimPy."""
        restart = self.spec.restart
        timeouts = {r.timeout_s for r in requests}
        thinks = self.think_s
        return (self.kernel and timer is not None and policy_array(self.spec.policy) is not None
                and (restart is None or restart.at_s > 0) and not isinstance(self.overhead_s, np.ndarray)
                and len(timeouts) <= 1 and all(t is None or t > 0 for t in timeouts)
                and (not isinstance(thinks, np.ndarray) or len(thinks) >= len(requests)))

    def pool_ran_out(self, at_s: float) -> None:
        """The kernel's clients sent every pooled request at ``at_s``."""
        raise PoolExhausted(at_s)

    def _arrivals(self, requests: Sequence[Request]):
        """Every client's first request at time 0, then only what ``poll`` releases."""
        self._due.extend(range(self.clients))
        self._send_due(float(self.env.now))
        return
        yield  # a SimPy process

    def poll(self, now: float) -> None:
        """Clients whose request has ended send again at its end + think time."""
        if self._held:
            self._due.extend(self._held)
            self._held.clear()
        rows = self.row_of
        live = np.flatnonzero(rows >= 0)
        if live.size:
            ints = self.replicas[0].arrays.rq.ints
            for c in live[ints[rows[live], ks.STATUS] == ks.DONE].tolist():
                self._ended(c, now)
        self._send_due(now)

    def _ended(self, client: int, now: float) -> None:
        """Its request ended in the engine (the engine's own limits: learned when it applied
        them, so the next is sent at the end + think, or now when that has passed)."""
        r = int(self.row_of[client])
        self.row_of[client] = -1
        fin = float(self.replicas[0].arrays.rq.floats[r, ks.FINISH])
        think = self._think(r)
        at = fin + think
        if think == 0 and fin == self.requests[r].arrival_s and self._no_overhead:
            self._held.append(client)  # refused on arrival: resend after the next step
        elif at <= now:
            self._due.append(client)
        else:
            self.env.process(self._later(client, at - now))

    def _think(self, row: int) -> float:
        t = self.think_s
        return float(t[row]) if isinstance(t, np.ndarray) else t

    def _overhead(self, row: int) -> float:
        o = self.overhead_s
        return float(o[row]) if isinstance(o, np.ndarray) else o

    def _later(self, client: int, delay: float):
        yield urgent_timeout(self.env, delay)
        self._due.append(client)
        self._send_due(float(self.env.now))

    def _send_due(self, now: float) -> None:
        due = self._due
        while due:
            c = due.popleft()
            if now >= self.stop_s:
                continue  # the client stops sending
            r = self.sent
            if r >= len(self.requests):
                raise PoolExhausted(now)
            self.sent = r + 1
            self.row_of[c] = r
            over = self._overhead(r)
            self.requests[r].arrival_s = now + over  # the engine's arrival (records, deadlines)
            if over > 0:
                self.env.process(self._reaches(c, r, over))
            else:
                self._submit(c, r, now)

    def _reaches(self, client: int, row: int, after_s: float):
        """The request reaches the engine after its overhead outside it."""
        yield urgent_timeout(self.env, after_s)
        self._submit(client, row, float(self.env.now))
        self._send_due(float(self.env.now))  # a refusal lets its client send again at once

    def _submit(self, client: int, row: int, now: float) -> None:
        """Row ``row`` to the router; a refusal on arrival ends it now."""
        assert self.router is not None
        req = self.requests[row]
        self.replicas[self.router.pick()].submit(req, now)
        if self.replicas[0].arrays.rq.ints[row, ks.STATUS] == ks.DONE:  # refused on arrival
            self._ended(client, now)
        elif req.timeout_s is not None:
            self.env.process(self._gives_up(client, row, req.timeout_s))

    def _gives_up(self, client: int, row: int, after_s: float):
        """The client's own timeout: it moves on at the deadline, whenever the engine notices."""
        yield urgent_timeout(self.env, after_s)
        if self.row_of[client] == row:
            self.row_of[client] = -1
            now = float(self.env.now)
            think = self._think(row)
            if think > 0:
                self.env.process(self._later(client, think))
            else:
                self._due.append(client)
                self._send_due(now)

    def run(self, requests: Sequence[Request], write_back: bool = True) -> FleetRun:
        """The run, cut to the requests the clients sent."""
        out = super().run(requests, write_back)
        if self._loop is not None:  # the kernel sent them: their engine arrivals are its
            self.sent = int(self._loop.cl.g[ck.CG_SENT])
            for req, t in zip(requests, self._loop.av.arr_s[: self.sent].tolist(), strict=False):
                req.arrival_s = t
            self._loop = None
        n = self.sent
        cols = None if out.columns is None else {k: v[:n] for k, v in out.columns.items()}
        return FleetRun(list(requests[:n]), out.steps, out.gap_idx, out.gap_s, out.end_s,
                        out.queue_log, cols)


def run_clients(scenario: Scenario, spec: FleetSpec, timer: StepTimer,
                work_ss: np.random.SeedSequence, rates_ss: np.random.SeedSequence,
                draw_ss: np.random.SeedSequence,
                build: Callable[[list[RequestSpec], np.random.Generator], list[Request]],
                block_size: int | None = None) -> FleetRun:
    """Simulate the scenario's clients until ``run.duration_s`` (then in-flight work drains, or
    not, as ``run.drain`` says). ``build`` turns a block of the pool into requests with their
    acceptance, drawn from the block's own stream of ``rates_ss``; the pool is grown and the run
    repeated when it ran out (its rows never change, so candidates stay on common requests).
    ``block_size``: prefix caching on, the pool's shared prompt blocks named for the cache."""
    w, stop = scenario.workload, float(scenario.run.duration_s)
    clients = int(w.concurrency or 1)
    # first guess: every client busy the whole run at 2 ms a step (too small costs a repeat)
    size = BLOCK * max(1, math.ceil(min(workload_size(w, scenario.run)[0], 1e9) / BLOCK))
    for _ in range(_MAX_TRIES):
        specs = pool_specs(w, work_ss, size)
        reqs: list[Request] = []
        for b in range(0, size, BLOCK):
            reqs.extend(build(specs[b:b + BLOCK], child_stream(rates_ss, b // BLOCK)))
        for i, req in enumerate(reqs):
            req.idx = i
        if block_size is not None:  # prefix caching: blocks named over the whole pool, up front
            for req, ids in zip(reqs, block_ids(specs, block_size), strict=True):
                req.prefix = ids
        over = scenario.fleet.request_overhead
        fleet = ClientFleet(spec, timer, np.random.default_rng(draw_ss), clients,
                            pool_thinks(w, work_ss, size), stop,
                            0.0 if over is None else pool_overheads(over, specs))
        try:
            return fleet.run(reqs, write_back=False)
        except PoolExhausted as exc:
            size = grown(size, exc.at_s, stop, clients)
    raise SpecplanError(f"workload.concurrency: the clients needed more than {size} requests in "
                        f"{stop:g} s; shorten run.duration_s or add think_time_s")
