"""A finished run's logs are freed by reference counting alone, and its steps are read without
being held twice (issue 39 item 5: peak memory of the Azure hour; ``bench/bench_memory.py``)."""

from __future__ import annotations

import gc
import weakref
from array import array
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.model import timer_packing
from sim.model.drivers.engine import Fleet
from sim.model.fleet_arrays import FleetArrays
from sim.model.step_protocol import ROW_WIDTH, StepLog
from sim.model.step_time import ProfileStepTimer
from tests.sim.model.test_properties import _PROFILE, _copy, fleets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.booleans(), st.one_of(st.none(), st.floats(0.1, 4.0)))
def test_run_logs_freed_without_a_collection(case, python, stop_s) -> None:
    """The fleet is a reference cycle that only the collector frees: its logs must not wait
    for it. The step log goes when ``run`` returns; the ITL logs with the last view of them.
    Steps priced compiled or in Python, drained or stopped mid-step."""
    spec, reqs = case
    spec = replace(spec, proposer="ngram" if spec.proposer else None)
    if stop_s is not None:
        spec = replace(spec, drain=False, duration_s=stop_s)
    seen: dict[str, weakref.ref] = {}
    release = FleetArrays.release_logs

    def spy(self: FleetArrays) -> None:
        seen.update({n: weakref.ref(getattr(self.lg, n)) for n in ("steps", "gap_idx", "gap_s")})
        release(self)

    gc.disable()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(FleetArrays, "release_logs", spy)
            if python:  # the timer not packed: each step priced in Python (a generator per replica)
                mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
            fleet = Fleet(spec, ProfileStepTimer(_PROFILE), np.random.default_rng(0))
            run = fleet.run(_copy(reqs), write_back=False)
        assert seen, "the fleet did not let go of its logs"
        assert seen["steps"]() is None  # the steps live on as columns only
        assert seen["gap_s"]() is not None  # still read by the run's ITL samples
        del run
        assert seen["gap_idx"]() is None and seen["gap_s"]() is None
        assert fleet.replicas  # the fleet itself stays inspectable
    finally:
        gc.enable()


def _old_from_flat(flat: array) -> dict[str, list]:
    """The oracle: the conversion as first written (all integer columns converted at once)."""
    m = np.frombuffer(flat, dtype=np.float64).reshape(-1, ROW_WIDTH) if len(flat) else np.empty((0, ROW_WIDTH))
    ints = m[:, [0, 3, 4, 5, 6, 7, 8, 9, 10, 11]].astype(np.int64)
    return {"replica": ints[:, 0], "t_start_s": m[:, 1], "duration_s": m[:, 2], "decode_seqs": ints[:, 1],
            "prefill_tokens": ints[:, 2], "k": ints[:, 3], "draft_tokens": ints[:, 9] * ints[:, 3],
            "drafting_seqs": ints[:, 9], "accepted_tokens": ints[:, 4], "queue_len": ints[:, 5],
            "kv_used_blocks": ints[:, 6], "kv_total_blocks": ints[:, 7], "preempted": ints[:, 8]}


_ROWS = st.lists(st.tuples(st.integers(0, 7), st.floats(0, 1e4), st.floats(0, 10),
                           *(st.integers(0, 2**40) for _ in range(ROW_WIDTH - 3))), max_size=30)


@settings(max_examples=100, deadline=None)
@given(_ROWS, st.booleans())
def test_step_columns_are_the_rows(rows, as_numpy) -> None:
    """Each column of ``StepLog.from_flat`` is the rows' values, bit for bit, whether the rows
    come as the real loop's ``array`` or as a view of the compiled engine's log."""
    flat = array("d", [float(v) for row in rows for v in row])
    log = StepLog.from_flat(np.frombuffer(flat, np.float64) if as_numpy else flat)
    want = _old_from_flat(flat)
    assert len(log) == len(rows)
    for name, values in want.items():
        got = getattr(log, name)
        assert got.typecode == ("d" if name in ("t_start_s", "duration_s") else "q")
        assert np.frombuffer(got, values.dtype).tobytes() == np.ascontiguousarray(values).tobytes(), name
