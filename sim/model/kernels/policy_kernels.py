"""The speculation policies' choice of ``k`` for a step, compiled: the one home of that rule.

``SpeculationPolicy.k_for`` (Python: the real serving loop, the adaptive policy's fallback) and
the compiled step (``run_kernel``) both call ``k_for_batch``; the KV-pressure fallback's rule is
``kv_fallback_k``, which the compiled step and the real serving loop (``StepCycle``) call through
``policy_k``; only the adaptive policy, whose window of past steps lives in Python
(``PolicyState``), decides on its own.
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
POL_OFF, POL_FIXED, POL_OFF_ABOVE, POL_BY_BATCH, POL_KV = range(5)
_KINDS = {"off": POL_OFF, "fixed": POL_FIXED, "off_above_batch": POL_OFF_ABOVE,
          "k_by_batch": POL_BY_BATCH, "kv_fallback": POL_KV}


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
def policy_k(pol, rp, rq, now):
    """``k`` for replica ``rp``'s next step, planned at ``now`` (its decode batch counted only
    when the rule reads it; the KV use the fallback reads is the last plan's)."""
    kind = pol[P_KIND]
    if kind == POL_FIXED or kind == POL_OFF:
        return k_for_batch(pol, 0)
    if kind == POL_KV:
        return kv_fallback_k(pol, rp.meta[ks.M_KVNOTE], rp.cfg[ks.C_KV], now)
    return k_for_batch(pol, num_decoding(rp, rq))


def policy_array(policy) -> np.ndarray | None:
    """A ``SpeculationPolicy`` as the kernels read it, a new array each call (a kv_fallback one
    carries its replica's state); None for the adaptive one (its window is kept in Python)."""
    if policy.name not in _KINDS:
        return None
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
