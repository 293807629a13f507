"""Rows joining and leaving the decode batch (what a padded engine pays for) as the compiled
fleet counts them, against ``DecodeBatchRows`` over the ``Scheduler`` facade (the real loop's
count), on the same requests and step times (exact binary fractions: no rounding ties)."""

from __future__ import annotations

import numpy as np

from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.scheduler import Scheduler
from sim.model.speculation import OFF
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_protocol import DecodeBatchRows

CFG = SchedulerConfig.of(max_num_seqs=3, max_num_batched_tokens=16, block_size=4, kv_blocks=200)


def _timer(shape) -> float:
    return (1 + shape.decode_seqs + (shape.prefill_tokens > 0)) / 64


def _requests() -> list[Request]:
    rng = np.random.default_rng(5)
    return [Request(i, i, float(i) / 8, int(rng.integers(1, 12)), int(rng.integers(1, 9)))
            for i in range(30)]


def test_compiled_counts_are_decode_batch_rows() -> None:
    seen = []

    def timer(shape):
        seen.append((shape.decode_seqs, shape.rows_joined, shape.rows_left))
        return _timer(shape)

    Fleet(FleetSpec(CFG, OFF), timer).run(_requests())
    sched, rows, want, now = Scheduler(CFG), DecodeBatchRows(), [], 0.0
    pending = _requests()
    while pending or sched.has_work:
        while pending and pending[0].arrival_s <= now:
            req = pending.pop(0)
            sched.add_request(req, req.arrival_s)
        plan = sched.schedule(now)
        if plan.empty:
            now = pending[0].arrival_s
            continue
        want.append((len(plan.decode), *rows.change([r.id for r in plan.decode])))
        dt = (1 + len(plan.decode) + (plan.prefill_tokens > 0)) / 64
        sched.update(plan, None, now + dt)
        now += dt
    assert seen == want
    assert any(j == 0 and left == 0 and d > 0 for d, j, left in want), "some batch stayed the same"
    assert any(left > 0 for _, _, left in want) and any(j > 0 for _, j, _ in want)
