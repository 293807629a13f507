"""A Python step timer packed into the compiled price kernel's arrays (``pack``), or None when it
has parts only Python prices. Why apart from ``kernels/price_kernels``: the kernels are sealed
(they import nothing of the model around them); packing reads the timer's Python objects."""

from __future__ import annotations

import numpy as np

from sim.model.kernels import price_kernels as pk
from sim.model.step_time import FixedStepTimer, ProfileStepTimer


def pack(timer, proposer: str | None) -> pk.PackedTimer | None:
    """The compiled form of ``timer`` for a candidate drafting with ``proposer``; None when it
    has parts only Python prices (a machine-speed timeline, a random or custom timer)."""
    slot = np.full(pk.N_SLOTS, -1, np.int64)
    if type(timer) is FixedStepTimer:
        tm = pk.timer_constants(pk.KIND_FIXED, False, 1.0, 1.0, 0.0, timer.seconds_per_step)
        return pk.PackedTimer(tm, slot, [], timer)
    if type(timer) is not ProfileStepTimer or timer.speed is not None:
        return None
    if proposer is not None and proposer not in timer._draft:
        return None  # the Python timer raises its one-line error for this
    grids: list = []

    def put(s: int, grid) -> None:
        if grid is None:
            return
        for g, known in enumerate(grids):
            if known is grid:
                slot[s] = g
                return
        slot[s] = len(grids)
        grids.append(grid)

    tm = timer.tm
    if timer.fused:
        for s, grid in ((pk.DENSE, timer._dense), (pk.LOGITS, timer._logits), (pk.DATTN, timer._dattn),
                        (pk.PATTN, timer._pattn)):
            put(s, grid)
    else:
        put(pk.FWD, timer._forward)
        put(pk.PREFILL, timer._prefill)
    if proposer is not None:
        put(pk.DRAFT, timer._draft[proposer])
        put(pk.OVERHEAD, timer._overhead[proposer])
        put(pk.DPF_STEP, timer._draft_prefill.get(proposer))
    if timer.attached is not None:
        put(pk.DPF_ATTACHED, timer._draft_prefill.get(timer.attached))
    put(pk.JOIN, timer._join)
    put(pk.LEAVE, timer._leave)
    if any(g._n > 3 for g in grids):
        return None
    return pk.PackedTimer(tm, slot, grids, timer)
