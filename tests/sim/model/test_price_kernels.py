"""The compiled step timer (``sim.model.kernels.price_kernels``) against ``ProfileStepTimer.price``.

Random step shapes, inside and far outside each profile's grids, on a summed CPU profile with
padded-batch grids (paged and padded layouts, with the drift scales) and on a fused GPU profile
with a draft model: the same seconds, bit for bit, and the same counts (steps, lookups and
extrapolations per grid axis, unpriced padded changes) once the compiled counts are added back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.contracts.profile import load_profile
from sim.model.kernels import price_kernels as pk
from sim.model.step_time import FixedStepTimer, ProfileStepTimer
from sim.model.timer_packing import pack

REPO = Path(__file__).resolve().parents[3]
CASES = {
    "cpu-paged": ("smollm2-135m-cpu.json", "ngram", {"kv_layout": "paged"}),
    "cpu-padded": ("smollm2-135m-cpu.json", "ngram", {"kv_layout": "padded", "scale": 1.07,
                                                      "prefill_scale": 0.93}),
    "gpu-fused-draft": ("llama-3.1-8b-h200-vllm.json", "llama-3.2-1b", {}),
    "gpu-fused-eagle3": ("llama-3.1-8b-h200-vllm.json", "eagle3", {"kv_layout": "padded"}),
}


def _shapes(rng: np.random.Generator, n: int, k_max: int):
    for _ in range(n):
        b = int(rng.choice([0, 1, 2, 7, 64, 300, 2000])) if rng.random() < 0.5 else int(rng.integers(0, 600))
        k = int(rng.integers(0, k_max + 1)) if b else 0
        n_pf = 0 if b and rng.random() < 0.4 else int(rng.integers(1 if not b else 0, 20000))
        c_mean = float(rng.integers(0, 40000) // 16 * 16)
        c_max = c_mean + float(rng.integers(0, 5000) // 16 * 16)
        drafting = -1 if rng.random() < 0.6 or not b else int(rng.integers(0, b + 1))
        joined, left = (int(rng.integers(0, 3)), int(rng.integers(0, 4))) if rng.random() < 0.5 else (0, 0)
        yield b, c_mean, k, n_pf, float(rng.integers(0, 30000)), c_max, joined, left, drafting


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_price_is_the_python_price(case: str) -> None:
    name, proposer, kw = CASES[case]
    profile = load_profile(REPO / "profiles" / name)
    py, comp = ProfileStepTimer(profile, **kw), ProfileStepTimer(profile, **kw)
    for t in (py, comp):
        t.attach_proposer(proposer)
    packed = pack(comp, proposer)
    assert packed is not None
    rng = np.random.default_rng(7)
    for b, c_mean, k, n, c0, c_max, joined, left, drafting in _shapes(rng, 3000, 4):
        want = py.price(b, c_mean, k, proposer if k else None, n, c0, c_max, 0.0, joined, left,
                        None if drafting < 0 else drafting)
        got = pk.price(packed.arrays, (b, c_mean, k, n, c0, c_max, joined, left, drafting))
        assert got == want, (case, b, c_mean, k, n, c0, c_max, joined, left, drafting)
    packed.unpack()
    assert comp.steps == py.steps == 3000
    assert comp.unpriced_changes == py.unpriced_changes
    assert comp.extrapolations() == py.extrapolations()
    assert comp.extrapolations(), "the shapes should reach outside the grids"
    assert [g.calls for g in comp.grids()] == [g.calls for g in py.grids()]
    assert comp.describe_extrapolations() == py.describe_extrapolations()


def test_timers_only_python_can_run_are_not_packed() -> None:
    from sim.model.machine_speed import SpeedTimeline

    profile = load_profile(REPO / "profiles" / "smollm2-135m-cpu.json")
    timeline = SpeedTimeline((0.0,), (1.1,), (0.0,), (1.0,))
    assert pack(ProfileStepTimer(profile, speed=timeline), None) is None
    assert pack(lambda shape: 0.01, None) is None
    assert pack(ProfileStepTimer(profile), "no-such-proposer") is None
    fixed = pack(FixedStepTimer(0.25), None)
    assert fixed is not None
    assert pk.price(fixed.arrays, (3, 0.0, 0, 0, 0.0, 0.0, 0, 0, -1)) == 0.25
