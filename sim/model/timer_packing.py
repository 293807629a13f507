"""A Python step timer packed into the compiled price kernel's arrays (``pack``), or None when the
compiled loops cannot run it. Why apart from ``kernels/price_kernels``: the kernels are sealed
(they import nothing of the model around them); packing reads the timer's Python objects."""

from __future__ import annotations

import numpy as np

from sim.model.kernels import price_kernels as pk
from sim.model.step_time import FixedStepTimer, ProfileStepTimer


def pack(timer, proposer: str | None) -> pk.PackedTimer | None:
    """The compiled form of ``timer`` for a candidate drafting with ``proposer``; None when the
    compiled loops cannot run it: a machine-speed timeline (its ratios change each step; the
    timer writes them in as it prices each step itself), a random or custom timer, or a proposer
    the profile cannot time (the timer raises its one-line error for it)."""
    if type(timer) is FixedStepTimer:
        tm = pk.timer_constants(pk.KIND_FIXED, False, 1.0, 1.0, 0.0, timer.seconds_per_step)
        return pk.PackedTimer(tm, np.full(pk.N_SLOTS, -1, np.int64), [], timer)
    if type(timer) is not ProfileStepTimer or timer.speed is not None:
        return None
    if proposer is not None and proposer not in timer._draft:
        return None
    return timer.packed(proposer)
