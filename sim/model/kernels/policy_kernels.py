"""The speculation policies' choice of ``k`` for a step, compiled: the one home of that rule.

``SpeculationPolicy.k_for`` (Python: the real serving loop, the adaptive policy's fallback) and
the compiled step (``run_kernel``) both call ``k_for_batch``; the KV-pressure fallback's rule is
``kv_fallback_k``, which the compiled step and the real serving loop (``StepCycle``) call through
``policy_k``; the adaptive policy's window of past steps lives in its array too (``observe``,
fed each finished step; its Python form, ``PolicyState``, serves the SimPy driver and the real
serving loop and is held to this one by ``tests/sim/model/test_adaptive_kernel.py`` and the
drivers' equivalence property).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from sim.model.kernels import kernel_state as ks
from sim.model.kernels.kernel_cache import njit
from sim.model.kernels.plan_kernels import num_decoding

# pol (float64): policy kind, k, max_batch, then (threshold, k) rows of k_by_batch — or, for
# kv_fallback, its thresholds and window and then its state (on, time of the last switch), which
# the kernel writes: a kv_fallback array belongs to one replica (``policy_array`` builds a new one)
P_KIND, P_K, P_MAX_BATCH, P_ROWS = range(4)
P_KV_OFF_ABOVE, P_KV_ON_BELOW, P_KV_WINDOW, P_KV_ON, P_KV_SINCE = range(3, 8)
POL_OFF, POL_FIXED, POL_OFF_ABOVE, POL_BY_BATCH, POL_KV, POL_ADAPTIVE = range(6)
_KINDS = {"off": POL_OFF, "fixed": POL_FIXED, "off_above_batch": POL_OFF_ABOVE,
          "k_by_batch": POL_BY_BATCH, "kv_fallback": POL_KV, "adaptive": POL_ADAPTIVE}
# adaptive: its thresholds and window, then its state (on, the first step's start, the window's
# weighted and duration sums, the ring's head and length), then a ring of (end, duration, decode
# batch) per step in the window, ``RING`` steps at first (``grown`` doubles it from Python)
(P_AD_ON_BELOW, P_AD_OFF_ABOVE, P_AD_WINDOW, P_AD_ON, P_AD_FIRST, P_AD_WSUM, P_AD_DSUM, P_AD_HEAD,
 P_AD_N, P_AD_RING) = range(3, 13)
RING = 64


@njit
def k_for_batch(pol, batch):
    """``k`` for a step whose decode batch would be ``batch`` requests: fixed; off; off above a
    batch size; by batch size (the last row whose threshold the batch reaches)."""
    kind = pol[P_KIND]
    if kind == POL_FIXED:
        return int(pol[P_K])
    if kind == POL_OFF:
        return 0
    if kind == POL_OFF_ABOVE:
        return int(pol[P_K]) if batch <= pol[P_MAX_BATCH] else 0
    k = int(pol[P_ROWS + 1])
    for j in range((pol.shape[0] - P_ROWS) // 2):
        if batch >= pol[P_ROWS + 2 * j]:
            k = int(pol[P_ROWS + 2 * j + 1])
        else:
            break
    return k


@njit
def kv_fallback_k(pol, used, total, now):
    """``k`` of the KV-pressure fallback for a step planned at ``now``, when the last plan left
    ``used`` of ``total`` KV blocks in use (the step frame's ``kv_used_blocks`` of the replica's
    previous step; 0 after an idle moment). Speculation goes off when that use is above
    ``off_above``, back on when it is below ``on_below`` (hysteresis); it never switches within
    ``window_s`` of the last switch, nor of the replica's start (its first plan: the run's start
    or its return from a restart) — the minimum observation window: no flapping inside it.
    Updates the state held in ``pol``."""
    if np.isnan(pol[P_KV_SINCE]):
        pol[P_KV_SINCE] = now
    if now - pol[P_KV_SINCE] >= pol[P_KV_WINDOW]:
        use = used / total
        if pol[P_KV_ON] != 0.0:
            if use > pol[P_KV_OFF_ABOVE]:
                pol[P_KV_ON] = 0.0
                pol[P_KV_SINCE] = now
        elif use < pol[P_KV_ON_BELOW]:
            pol[P_KV_ON] = 1.0
            pol[P_KV_SINCE] = now
    return int(pol[P_K]) if pol[P_KV_ON] != 0.0 else 0


@njit
def observe(pol, end, duration, decode_seqs):
    """Feed one finished step to the adaptive policy (nothing for the others): the step joins
    the window, steps that ended before ``end - window_s`` leave it (sums added and taken away in
    ``PolicyState.observe``'s order, so the mean is the same float); after one full window since
    the first step, off above ``off_above_batch``, back on below ``on_below_batch``. The ring
    has room (``has_room`` before the step was planned)."""
    if pol[P_KIND] != POL_ADAPTIVE:
        return
    if np.isnan(pol[P_AD_FIRST]):
        pol[P_AD_FIRST] = end - duration
    cap = (pol.shape[0] - P_AD_RING) // 3
    head, n = int(pol[P_AD_HEAD]), int(pol[P_AD_N])
    j = P_AD_RING + 3 * ((head + n) % cap)
    pol[j], pol[j + 1], pol[j + 2] = end, duration, decode_seqs
    n += 1
    pol[P_AD_WSUM] += duration * decode_seqs
    pol[P_AD_DSUM] += duration
    cutoff = end - pol[P_AD_WINDOW]
    while n and pol[P_AD_RING + 3 * head] < cutoff:
        j = P_AD_RING + 3 * head
        pol[P_AD_WSUM] -= pol[j + 1] * pol[j + 2]
        pol[P_AD_DSUM] -= pol[j + 1]
        head = (head + 1) % cap
        n -= 1
    pol[P_AD_HEAD], pol[P_AD_N] = head, n
    if end - pol[P_AD_FIRST] < pol[P_AD_WINDOW]:
        return  # minimum observation window: no switching on a few steps
    mean = pol[P_AD_WSUM] / pol[P_AD_DSUM] if pol[P_AD_DSUM] > 0 else 0.0
    if pol[P_AD_ON] != 0.0 and mean > pol[P_AD_OFF_ABOVE]:
        pol[P_AD_ON] = 0.0
    elif pol[P_AD_ON] == 0.0 and mean < pol[P_AD_ON_BELOW]:
        pol[P_AD_ON] = 1.0


@njit
def has_room(pol):
    """False when an adaptive policy's ring is full: a step must not be planned (its ``observe``
    would overflow) until Python has grown it (``grown``)."""
    return pol[P_KIND] != POL_ADAPTIVE or pol[P_AD_N] < (pol.shape[0] - P_AD_RING) // 3


def grown(pol: np.ndarray) -> np.ndarray:
    """The fleet's policy rows (one per replica) with every adaptive ring that is full doubled,
    its steps laid out from the ring's start; the same array when none is full."""
    full = [r for r in range(pol.shape[0]) if not has_room(pol[r])]
    if not full:
        return pol
    cap = (pol.shape[1] - P_AD_RING) // 3
    out = np.zeros((pol.shape[0], P_AD_RING + 6 * cap), np.float64)
    for r, row in enumerate(pol):
        head, n = int(row[P_AD_HEAD]), int(row[P_AD_N])
        out[r, :P_AD_RING] = row[:P_AD_RING]
        if row[P_KIND] == POL_ADAPTIVE:
            ring = row[P_AD_RING:].reshape(cap, 3)
            out[r, P_AD_RING:P_AD_RING + 3 * n] = np.roll(ring, -head, axis=0)[:n].ravel()
            out[r, P_AD_HEAD] = 0
        else:
            out[r, :pol.shape[1]] = row
    return out


@njit
def policy_k(pol, rp, rq, now):
    """``k`` for replica ``rp``'s next step, planned at ``now`` (its decode batch counted only
    when the rule reads it; the KV use the fallback reads is the last plan's)."""
    kind = pol[P_KIND]
    if kind == POL_FIXED or kind == POL_OFF:
        return k_for_batch(pol, 0)
    if kind == POL_KV:
        return kv_fallback_k(pol, rp.meta[ks.M_KVNOTE], rp.cfg[ks.C_KV], now)
    if kind == POL_ADAPTIVE:
        return int(pol[P_K]) if pol[P_AD_ON] != 0.0 else 0
    return k_for_batch(pol, num_decoding(rp, rq))


def policy_array(policy) -> np.ndarray | None:
    """A ``SpeculationPolicy`` as the kernels read it, a new array each call (a kv_fallback one
    carries its replica's state: a kv_fallback's switch, an adaptive one's window); None for a
    policy the kernels do not know."""
    if policy.name not in _KINDS:
        return None
    if policy.name == "adaptive":
        return np.concatenate([[POL_ADAPTIVE, policy.k, 0, policy.on_below_batch, policy.off_above_batch,
                                policy.window_s, 1.0, np.nan, 0.0, 0.0, 0, 0], np.zeros(3 * RING)])
    if policy.name == "kv_fallback":
        return np.array([POL_KV, policy.k, 0, policy.kv_off_above, policy.kv_on_below,
                         policy.window_s, 1.0, np.nan], np.float64)
    rows = [x for row in policy.k_by_batch for x in row]
    return np.array([_KINDS[policy.name], policy.k, policy.max_batch or 0, *rows], np.float64)


@lru_cache(maxsize=256)
def _cached(policy) -> np.ndarray | None:
    return policy_array(policy)


def k_for(policy, batch: int) -> int:
    """``k_for_batch`` for a stateless ``SpeculationPolicy`` (not adaptive, not kv_fallback),
    from Python."""
    try:
        pol = _cached(policy)
    except TypeError:  # an unhashable policy (a list inside): built each call
        pol = policy_array(policy)
    return int(k_for_batch(pol, batch))
