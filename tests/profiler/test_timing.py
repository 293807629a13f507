"""The timing primitive and the grid passes, on a tiny random-weight model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from profiler.grids.timing import plan_tasks
from profiler.grids.timing_assembly import assemble_timing
from profiler.grids.timing_grids import OOM_REASON, DraftRuntime, Measured, TimingGrids
from profiler.passes.clock import Timing, time_op, time_steps
from profiler.passes.kv_cache import crop_to
from profiler.passes.models import load_model
from sim.contracts.errors import SpecplanError

CPU = torch.device("cpu")


def tiny_grids(**over) -> TimingGrids:
    base = dict(batch=(1, 2), tokens_per_seq=(1, 3), context=(8, 24), prefill_tokens=(4, 12),
                prefill_context=(0, 8), draft_batch=(1, 2), k_max=3, draft_context=(8,),
                overhead_batch=(1,), overhead_k=(1, 3), overhead_context=8, warmup=1, repeats=2,
                prefill_repeats=1)
    base.update(over)
    return TimingGrids(**base)


def test_time_op_warms_up_sets_up_and_repeats():
    calls = {"fn": 0, "setup": 0}
    t = time_op(lambda: calls.__setitem__("fn", calls["fn"] + 1), warmup=2, repeats=5, device=CPU,
                setup=lambda: calls.__setitem__("setup", calls["setup"] + 1))
    assert calls == {"fn": 7, "setup": 7}
    assert t.repeats == 5 and 0 <= t.p10 <= t.median <= t.p90


def test_timing_from_samples_is_median_and_percentiles():
    t = Timing.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert t.median == 3.0 and t.p10 == pytest.approx(1.4) and t.p90 == pytest.approx(4.6)
    with pytest.raises(ValueError):
        Timing(2.0, 3.0, 4.0, 3)  # p10 above the median


def test_time_steps_is_cumulative():
    out = time_steps(lambda i: sum(range(2000)), 4, warmup=0, repeats=3, device=CPU)
    medians = [t.median for t in out]
    assert len(out) == 4 and medians == sorted(medians)


def test_crop_to_restores_the_context():
    m = load_model("config:tiny-llama", device="cpu")
    cache = DynamicCache(config=m.model.config)
    with torch.inference_mode():
        m.model(input_ids=torch.randint(0, 512, (2, 10)), cache=cache, use_cache=True)
        m.model(input_ids=torch.randint(0, 512, (2, 3)), cache=cache, use_cache=True)
    assert cache.get_seq_length() == 13
    crop_to(cache, 10)
    assert cache.get_seq_length() == 10


def test_grid_validation_names_the_field():
    with pytest.raises(SpecplanError, match="batch"):
        tiny_grids(batch=(2, 1))
    with pytest.raises(SpecplanError, match="overhead_k"):
        tiny_grids(overhead_k=(1, 9))


def _measure_all(target, proposers, grids):
    out = []
    with torch.inference_mode():
        for task in plan_tasks(target, proposers, grids):
            out.extend(task.run(task.points))
    return out


def test_every_grid_cell_is_measured_with_sane_shapes():
    from profiler.passes.proposers import NgramProposer, early_exit_model

    m = load_model("config:tiny-llama", device="cpu")
    g = tiny_grids()
    props = [DraftRuntime("ngram", "ngram", lookup=NgramProposer().lookup),
             DraftRuntime("selfdraft-l2", "self_draft", model=early_exit_model(m.model, 2))]
    measured = _measure_all(m, props, g)
    n_expected = (2 * 2 * 2) + (2 * 2) + 2 * (2 * 3 * 1 + 2)
    assert len(measured) == n_expected
    assert all(x.limit is None and x.median is not None and x.median >= 0 for x in measured)
    # overhead records carry the cycle and its parts, and H never goes negative
    for x in measured:
        if x.point.quantity.startswith("overhead:"):
            assert set(x.extra) == {"cycle", "draft", "verify"}
            assert 0 <= x.p10 <= x.median <= x.p90 <= x.extra["cycle"]
            assert x.extra["draft"] + x.extra["verify"] <= x.extra["cycle"] * 1.5
    sec = assemble_timing(g, ["ngram", "selfdraft-l2"], measured)
    tf = np.array(sec["target_forward"]["median"], dtype=float)
    assert tf.shape == (2, 2, 2) and np.isfinite(tf).all()
    draft = np.array(sec["proposers"]["selfdraft-l2"]["draft"]["median"], dtype=float)
    assert draft.shape == (2, 3, 1)
    # D(k) is cumulative over sequential steps: non-decreasing in k
    assert (np.diff(draft, axis=1) >= 0).all()
    assert sec["limits"] == []


def test_out_of_memory_cells_become_limits(monkeypatch: pytest.MonkeyPatch):
    from profiler.grids import grid_passes

    m = load_model("config:tiny-llama", device="cpu")
    g = tiny_grids()
    real = grid_passes.PassRunner.prefill

    def fake_prefill(self, model, batch, context, chunk=4096):
        if batch >= 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, model, batch, context, chunk)

    monkeypatch.setattr(grid_passes.PassRunner, "prefill", fake_prefill)
    measured = _measure_all(m, [], g)
    limited = [x for x in measured if x.limit]
    assert limited and all(x.limit == OOM_REASON and x.point.as_dict()["batch"] == 2 for x in limited)
    sec = assemble_timing(g, [], measured)
    tf = sec["target_forward"]["median"]
    assert tf[1][0][0] is None and tf[0][0][0] is not None
    assert {lim["quantity"] for lim in sec["limits"]} == {"target_forward"}
    assert len(sec["limits"]) == len(limited)


def test_measured_roundtrips_through_json():
    from profiler.grids.timing_grids import point

    m = Measured(point("target_forward", batch=1, tokens_per_seq=1, context=8), 0.5, 0.4, 0.6, 3, None, {"a": 1.0})
    assert Measured.from_json(m.to_json()) == m


def test_remeasure_times_cells_as_the_profile_run_does_without_autograd():
    """validate's drift check re-times cells with ``remeasure``: it must run under inference
    mode as the grid run does, or autograd bookkeeping reads as machine drift."""
    from profiler.grids.timing import remeasure
    from profiler.grids.timing_grids import Point

    tiny = load_model("config:tiny-llama", device="cpu")
    seen: list[bool] = []
    hook = tiny.model.register_forward_hook(lambda *_: seen.append(torch.is_inference_mode_enabled()))
    try:
        pts = [Point("target_forward", (("batch", 2), ("tokens_per_seq", 3), ("context", 8))),
               Point("target_prefill", (("tokens", 4), ("context", 0)))]
        got = remeasure(tiny, pts, warmup=1, repeats=2)
    finally:
        hook.remove()
    assert [m.point for m in got] == pts and all(m.median > 0 for m in got)
    assert seen and all(seen)
