"""The speculation policies' choice of ``k`` for a decode batch, compiled: the one home of that rule.

``SpeculationPolicy.k_for`` (Python: the real serving loop, the adaptive policy's fallback) and
the compiled step (``run_kernel``) both call ``k_for_batch``; only the adaptive policy, whose
window of past steps lives in Python (``PolicyState``), decides on its own.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from sim.model.kernel_cache import njit
from sim.model.plan_kernels import num_decoding

# pol (int64): policy kind, k, max_batch, then (threshold, k) rows of k_by_batch
P_KIND, P_K, P_MAX_BATCH, P_ROWS = range(4)
POL_OFF, POL_FIXED, POL_OFF_ABOVE, POL_BY_BATCH = range(4)
_KINDS = {"off": POL_OFF, "fixed": POL_FIXED, "off_above_batch": POL_OFF_ABOVE, "k_by_batch": POL_BY_BATCH}


@njit
def k_for_batch(pol, batch):
    """``k`` for a step whose decode batch would be ``batch`` requests: fixed; off; off above a
    batch size; by batch size (the last row whose threshold the batch reaches)."""
    kind = pol[P_KIND]
    if kind == POL_FIXED:
        return pol[P_K]
    if kind == POL_OFF:
        return 0
    if kind == POL_OFF_ABOVE:
        return pol[P_K] if batch <= pol[P_MAX_BATCH] else 0
    k = pol[P_ROWS + 1]
    for j in range((pol.shape[0] - P_ROWS) // 2):
        if batch >= pol[P_ROWS + 2 * j]:
            k = pol[P_ROWS + 2 * j + 1]
        else:
            break
    return k


@njit
def policy_k(pol, rp, rq):
    """``k`` for replica ``rp``'s next step (its decode batch counted only when the rule reads it)."""
    kind = pol[P_KIND]
    if kind == POL_FIXED or kind == POL_OFF:
        return k_for_batch(pol, 0)
    return k_for_batch(pol, num_decoding(rp, rq))


def policy_array(policy) -> np.ndarray | None:
    """A ``SpeculationPolicy`` as the kernels read it; None for the adaptive one (its window of
    past steps is kept in Python)."""
    if policy.name not in _KINDS:
        return None
    rows = [x for row in policy.k_by_batch for x in row]
    return np.array([_KINDS[policy.name], policy.k, policy.max_batch or 0, *rows], np.int64)


@lru_cache(maxsize=256)
def _cached(policy) -> np.ndarray | None:
    return policy_array(policy)


def k_for(policy, batch: int) -> int:
    """``k_for_batch`` for a (non-adaptive) ``SpeculationPolicy`` object, from Python."""
    try:
        pol = _cached(policy)
    except TypeError:  # an unhashable policy (a list inside): built each call
        pol = policy_array(policy)
    return int(k_for_batch(pol, batch))
