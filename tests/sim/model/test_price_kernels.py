"""One pricing rule: ``ProfileStepTimer`` prices through the compiled kernel, held to its oracle.

The compiled ``price_kernels.price`` is the rule's one home; ``ProfileStepTimer.price`` calls it,
and the readable Python composition lives in ``tests/sim/model/price_oracle.py``. Random step
shapes, inside and far outside each profile's grids, on a summed CPU profile with padded-batch
grids (paged and padded layouts, with the drift scales and a speed timeline) and on a fused GPU
profile with a draft model: the same seconds, bit for bit, and the same counts (steps, lookups
and extrapolations per grid axis, unpriced padded changes).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.profile import load_profile
from sim.model.kernels import price_kernels as pk
from sim.model.machine_speed import SpeedTimeline
from sim.model.step_time import FixedStepTimer, ProfileStepTimer
from sim.model.timer_packing import pack
from tests.sim.model.price_oracle import OraclePricer

REPO = Path(__file__).resolve().parents[3]
SPEED = SpeedTimeline((0.0, 50.0), (1.1, 0.8), (0.0, 50.0), (0.9, 1.3))
CASES = {
    "cpu-paged": ("smollm2-135m-cpu.json", "ngram", {"kv_layout": "paged"}),
    "cpu-padded": ("smollm2-135m-cpu.json", "ngram", {"kv_layout": "padded", "scale": 1.07,
                                                      "prefill_scale": 0.93}),
    "cpu-speed": ("smollm2-135m-cpu.json", "ngram", {"kv_layout": "padded", "scale": 1.07, "speed": SPEED}),
    "gpu-fused-draft": ("llama-3.1-8b-h200-vllm.json", "llama-3.2-1b", {}),
    "gpu-fused-eagle3": ("llama-3.1-8b-h200-vllm.json", "eagle3", {"kv_layout": "padded"}),
    "gpu-fused-speed": ("llama-3.1-8b-h200-vllm.json", "eagle3", {"speed": SPEED}),
}


@cache
def _profile(name: str):
    return load_profile(REPO / "profiles" / name)


def _pair(case: str) -> tuple[ProfileStepTimer, OraclePricer, str]:
    """A timer (compiled pricing) and the oracle on a timer of its own, both attached."""
    name, proposer, kw = CASES[case]
    timer, mirror = ProfileStepTimer(_profile(name), **kw), ProfileStepTimer(_profile(name), **kw)
    for t in (timer, mirror):
        t.attach_proposer(proposer)
    return timer, OraclePricer(mirror), proposer


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


def _same_counts(timer: ProfileStepTimer, oracle: OraclePricer) -> None:
    mirror = oracle.t
    assert timer.steps == mirror.steps
    assert timer.unpriced_changes == mirror.unpriced_changes
    assert timer.extrapolations() == mirror.extrapolations()
    assert [g.calls for g in timer.grids()] == [g.calls for g in mirror.grids()]
    assert timer.describe_extrapolations() == mirror.describe_extrapolations()


@pytest.mark.parametrize("case", list(CASES))
def test_the_timer_prices_as_its_oracle_bit_for_bit(case: str) -> None:
    timer, oracle, proposer = _pair(case)
    own = ProfileStepTimer(_profile(CASES[case][0]), **CASES[case][2])
    own.attach_proposer(proposer)
    packed = pack(own, proposer)
    rng = np.random.default_rng(7)
    for i, (b, c_mean, k, n, c0, c_max, joined, left, drafting) in enumerate(_shapes(rng, 3000, 4)):
        args = (b, c_mean, k, proposer if k else None, n, c0, c_max, 0.02 * i, joined, left,
                None if drafting < 0 else drafting)
        want = oracle.price(*args)
        assert timer.price(*args) == want, (case, args)
        if packed is not None:  # what the compiled loops price: the same kernel, the same seconds
            assert pk.price(packed.arrays, (b, c_mean, k, n, c0, c_max, joined, left, drafting)) == want
    assert timer.steps == 3000
    _same_counts(timer, oracle)
    assert timer.extrapolations(), "the shapes should reach outside the grids"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)), b=st.integers(0, 3000), k=st.integers(0, 6),
       n=st.integers(0, 40000), c_mean=st.floats(0, 200_000), extra=st.floats(0, 50_000),
       c0=st.floats(0, 200_000), joined=st.integers(0, 4), left=st.integers(0, 8),
       drafting=st.integers(-1, 3000), start_s=st.floats(0, 100), named=st.booleans(), mean_only=st.booleans())
def test_one_pricing_rule_the_timer_is_the_compiled_kernel(case, b, k, n, c_mean, extra, c0, joined, left,
                                                            drafting, start_s, named, mean_only) -> None:
    """Any valid step shape: the timer's price is the oracle's, bit for bit, with its counts."""
    if b == 0 and n == 0:
        n = 1
    k = k if b else 0
    drafting = None if drafting < 0 or drafting > b else drafting
    timer, oracle, proposer = _pair(case)
    args = (b, c_mean, k, proposer if k or (named and b == 0) else None, n, c0,
            None if mean_only else c_mean + extra, start_s, joined, left, drafting)
    assert timer.price(*args) == oracle.price(*args), args
    _same_counts(timer, oracle)


def test_a_step_with_k_0_pays_the_attached_drafters_prefill_only() -> None:
    """The one rule where the old Python pricer and the kernel disagreed (no caller asked it):
    a step that drafts nothing pays the attached proposer's prefill pass, whichever is named."""
    timer, oracle, _ = _pair("gpu-fused-eagle3")
    plain = timer.price(0, 0.0, 0, None, 512, 0.0, None, 0.0, 0, 0, None)
    assert timer.price(0, 0.0, 0, "llama-3.2-1b", 512, 0.0, None, 0.0, 0, 0, None) == plain
    assert oracle.price(0, 0.0, 0, "llama-3.2-1b", 512, 0.0, None, 0.0, 0, 0, None) == plain


def test_counts_of_the_timer_and_of_its_packed_copy_add_up() -> None:
    """Steps priced from Python and steps the compiled loops priced (unpacked) both count."""
    timer, _, proposer = _pair("cpu-padded")
    packed = pack(timer, proposer)
    assert packed is not None
    timer.price(4, 100.0, 2, proposer, 0, 0.0, None, 0.0, 0, 0, None)
    pk.price(packed.arrays, (4, 100.0, 2, 0, 0.0, 100.0, 0, 0, -1))
    pk.price(packed.arrays, (4, 100.0, 0, 0, 0.0, 100.0, 1, 0, -1))
    packed.unpack()
    assert timer.steps == 3
    timer.price(4, 100.0, 2, proposer, 0, 0.0, None, 0.0, 0, 0, None)
    assert timer.steps == 4


def test_an_unknown_proposer_is_refused_in_one_line() -> None:
    timer, _, _ = _pair("cpu-paged")
    with pytest.raises(Exception, match="no draft/overhead timing for proposer 'nope'"):
        timer.price(0, 0.0, 1, "nope", 64, 0.0, None, 0.0, 0, 0, None)


def test_timers_the_compiled_loops_cannot_run_are_not_packed() -> None:
    profile = _profile("smollm2-135m-cpu.json")
    assert pack(ProfileStepTimer(profile, speed=SPEED), None) is None
    assert pack(lambda shape: 0.01, None) is None
    assert pack(ProfileStepTimer(profile), "no-such-proposer") is None
    fixed = pack(FixedStepTimer(0.25), None)
    assert fixed is not None
    assert pk.price(fixed.arrays, (3, 0.0, 0, 0, 0.0, 0.0, 0, 0, -1)) == 0.25


GRID_ATTRS = {"_forward", "_prefill", "_draft", "_overhead", "_join", "_leave", "_dense", "_logits",
              "_dattn", "_pattn", "_draft_prefill"}


def test_no_second_pricing_rule_in_the_python_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ProfileStepTimer.price`` is the compiled kernel's answer, whatever it is, and
    ``step_time.py`` composes no step itself (no grid looked up, no verified tokens counted)."""
    import ast

    from sim.model import step_time
    from sim.model.kernels import kernel_entry as ke

    timer, _, proposer = _pair("cpu-speed")
    monkeypatch.setattr(ke, "price", lambda ta, shape: 123.25)
    assert timer.price(3, 100.0, 2, proposer, 64, 0.0, None, 1.0, 0, 0, None) == 123.25
    tree = ast.parse(Path(step_time.__file__).read_text(encoding="utf-8"))
    called = [ast.unparse(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)]
    looked_up = [f for f in called if f.split(".")[-1] in GRID_ATTRS or "]" in f and f.split("[")[0].split(".")[-1] in GRID_ATTRS]
    assert not looked_up, f"step_time.py looks grids up itself: {looked_up}"
    assert not [f for f in called if f.endswith(("verify_tokens_per_row", "graph_tokens"))]
