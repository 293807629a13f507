"""Reference passes in a real run's idle gaps: what they time, when they run, what they report."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from profiler.grids.timing import ReferencePasses  # noqa: E402
from profiler.grids.timing_grids import Point  # noqa: E402
from profiler.live.idle_probes import IdleProbes  # noqa: E402
from profiler.passes.models import load_model  # noqa: E402
from sim.fidelity.drift import DriftCell  # noqa: E402

FWD = (("batch", 2), ("tokens_per_seq", 3), ("context", 8))
PRE = (("tokens", 4), ("context", 0))


def test_reference_passes_time_one_pass_under_inference_mode_and_restore_the_context():
    tiny = load_model("config:tiny-llama", device="cpu")
    passes = ReferencePasses(tiny, [Point("target_forward", FWD), Point("target_prefill", PRE)])
    seen: list[bool] = []
    calls: list[int] = []

    def hook(_m, _a, kw):
        calls.append(kw["input_ids"].shape[1])
        seen.append(torch.is_inference_mode_enabled())

    handle = tiny.model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        times = [passes.time(i) for i in (0, 0, 1)]
    finally:
        handle.remove()
    assert all(t > 0 for t in times) and seen and all(seen)
    # a warm-up and a timed pass per call: 3 new tokens per row, then a 4-token prefill
    assert calls == [3, 3, 3, 3, 4, 4]
    cache = passes._cells[0][1]
    assert cache is not None and cache.get_seq_length() == 8  # cropped back to its context every time


class FakePasses:
    WARMUP = 1

    def __init__(self, n: int, seconds: float = 0.01) -> None:
        self.points = tuple(range(n))
        self.seconds = seconds
        self.timed: list[int] = []

    def time(self, i: int) -> float:
        self.timed.append(i)
        return self.seconds


def _cells() -> list[DriftCell]:
    return [DriftCell("target_forward", FWD, 0.02), DriftCell("target_forward", FWD, 0.04),
            DriftCell("target_prefill", PRE, 0.5)]


def test_a_probe_runs_only_when_it_surely_fits_before_the_next_arrival():
    fake = FakePasses(3)
    probes = IdleProbes(fake, _cells(), min_interval_s=0.0, safety=2.0, margin_s=0.1)
    probes.start_run(1.5)  # machine 1.5x slower than profiled: 2 passes x 1.5 x 2 x the profile time
    assert probes(0.0, 0.21) is False and fake.timed == []  # 2 x 0.02 x 1.5 x 2 + 0.1 = 0.22 > 0.21
    assert probes(0.0, 0.23) is True and fake.timed == [0]
    # the prefill cell (2 x 0.5 x 1.5 x 2 + 0.1 = 3.1 s) is due next, but does not fit: a decode cell runs
    assert probes(1.0, 1.0) is True and fake.timed == [0, 1]
    assert probes(2.0, 10.0) is True and fake.timed == [0, 1, 2]
    samples = probes.samples()
    assert [(s.t_s, s.kind) for s in samples] == [(0.0, "decode"), (1.0, "decode"), (2.0, "prefill")]
    assert samples[2].ratio == pytest.approx(0.01 / 0.5)
    frame = probes.frame()
    assert frame.columns == ["t_s", "cell", "kind", "seconds", "profile_s", "ratio"] and frame.height == 3
    probes.start_run(1.0)
    assert probes.records == [] and probes.samples() == []


def test_probes_keep_their_interval_and_give_prefill_one_turn_in_three():
    fake = FakePasses(3)
    probes = IdleProbes(fake, _cells(), min_interval_s=1.0)
    ran = [probes(t * 0.5, 100.0) for t in range(24)]
    assert ran == [True, False] * 12  # one every second
    kinds = [probes.cells[i].kind for i in fake.timed]
    assert kinds.count("prefill") == 4 and len(kinds) == 12
    assert fake.timed[:2] == [0, 2]  # decode, then prefill, then decode cells in turn
    assert [i for i in fake.timed if i < 2][:4] == [0, 1, 0, 1]


def test_idle_probes_need_one_cell_per_pass():
    with pytest.raises(ValueError, match="one cell per reference pass"):
        IdleProbes(FakePasses(2), _cells())
