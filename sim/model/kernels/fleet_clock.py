"""The fleet kernel's emulated event queue (``FleetClock``) and its call of the routing rule.

Why a module of its own: the fleet's step loop (``fleet_kernels``) and the closed-loop clients
(``client_kernels``) both hand requests to replicas, so both read which replica is idle or down,
route by ``route_kernels.pick`` (the rule's one home) and take SimPy event ids from the one
counter here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model.kernels import route_kernels
from sim.model.kernels.kernel_cache import njit

# a replica's pending event (FleetClock.kind)
IDLE, STEP, WAKE, ACTIVE, DOWN = range(5)
# the arrival process's pending event (g[G_ARR_KIND])
A_NONE, A_HAND, A_END, A_START = range(4)
# FleetClock.g (int64)
(G_COUNTER, G_ACTIVE, G_FINISHING, G_ARR_KIND, G_ARR_ID, G_STOP_ID, G_RR, G_LEAST, G_RESTART_REP,
 G_DROP, G_ROOM, G_STARTED, G_EXTRA, G_RESTART_ID) = range(14)
"""``G_EXTRA``: ghosts queued, plus one while a replica is down (0: every lookup's fast path).
``G_RESTART_ID``: the restart timeout's id, taken when the arrival process starts (0 with
closed-loop clients: it then wins every tie with a normal event, as their SimPy order has it)."""
G_GHOST = 14
"""Ids of the ghosts (events nobody waits on) from here, ``N_GHOSTS`` of them."""
N_GHOSTS = 3
G_CLIENT_ID = G_GHOST + N_GHOSTS
"""The id of the clients' earliest timer (``client_kernels``; its time ``F_CLIENT_T``)."""
N_G = G_CLIENT_ID + 1
# FleetClock.f (float64)
F_NOW, F_ACT_T, F_ARR_T, F_STOP_T, F_RESTART_T, F_COLD = range(6)
F_GHOST = 6
"""The ghosts' times (inf: none) from here."""
F_CLIENT_T = F_GHOST + N_GHOSTS
"""The time of the clients' earliest timer (inf: none), kept here so the fleet's lookup of its
next event reads two numbers, not the clients' state."""
N_F = F_CLIENT_T + 1


class FleetClock(NamedTuple):
    """The emulated event queue: each replica's pending event, the arrival process's, the stop."""

    kind: np.ndarray
    """Per replica: IDLE (waiting for an arrival), STEP (a step ends at ``ev_t``), WAKE
    (woken at ``ev_t``), ACTIVE (its process is running now), DOWN (restarting until ``ev_t``)."""
    ev_t: np.ndarray
    ev_id: np.ndarray
    start: np.ndarray
    """Per replica: the pending step's start and duration."""
    dt: np.ndarray
    g: np.ndarray
    f: np.ndarray
    back: np.ndarray
    """The policy row a restarted replica comes back with (its fallback, afresh)."""
    out: np.ndarray
    """Room for the rows a restart evacuates (kernels allocate nothing)."""


def new_clock(replicas: int, least_outstanding: bool, stop_s: float | None, restart,
              back: np.ndarray, room: int) -> FleetClock:
    """The queue as SimPy holds it after ``env.run`` is called: the processes' starts at 0 (the
    replicas', ids 0..n-1, each then waits for work; the arrival process's, id n), the stop, a
    restart's timeout (``restart``, a ``RestartConfig``; its id taken once the arrival process
    has started), the policy row its replica comes back with and ``room`` rows for its
    evacuation (a replica's most requests in flight)."""
    g = np.zeros(N_G, np.int64)
    f = np.zeros(N_F, np.float64)
    f[F_GHOST:] = np.inf  # the ghosts and the clients' timer: none
    g[G_ARR_KIND] = A_START  # its start: hands over nothing before its first arrival
    g[G_ARR_ID] = replicas
    g[G_COUNTER] = replicas + 1
    g[G_ACTIVE] = -1
    g[G_LEAST] = least_outstanding
    g[G_STOP_ID] = -1
    f[F_STOP_T] = np.inf
    f[F_RESTART_T] = np.inf
    if restart is not None:
        f[F_RESTART_T] = restart.at_s
        f[F_COLD] = restart.cold_start_s
        g[G_RESTART_REP] = restart.replica
        g[G_DROP] = restart.on_restart == "drop"
    if stop_s is not None:
        g[G_STOP_ID] = g[G_COUNTER]
        g[G_COUNTER] += 1
        f[F_STOP_T] = stop_s
    return FleetClock(np.full(replicas, IDLE, np.int64), np.zeros(replicas), np.zeros(replicas, np.int64),
                      np.zeros(replicas), np.zeros(replicas), g, f,
                      back, np.zeros(room, np.int64))


@njit
def pick(st, fc):
    """The replica for the next request over the fleet's stacked state: ``route_kernels.pick``,
    the routing rule's one home."""
    return route_kernels.pick(st.meta, fc.kind, DOWN, fc.g[G_RR], fc.g[G_LEAST] != 0)


@njit
def new_id(fc):
    """The next SimPy event id (one counter, advanced in the order SimPy schedules)."""
    i = fc.g[G_COUNTER]
    fc.g[G_COUNTER] = i + 1
    return i


@njit
def wake(fc, r, t):
    """An arrival queued at replica ``r`` at ``t``: an idle one is woken (``CompiledReplica._kick``:
    a normal event now, its id taken now); a busy, already woken or down one is not."""
    if fc.kind[r] == IDLE:
        fc.kind[r] = WAKE
        fc.ev_t[r] = t
        fc.ev_id[r] = new_id(fc)
