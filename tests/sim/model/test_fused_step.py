"""Fused steps (timing.step_composition = "fused"), per-step overhead and the draft's prefill pass.

The grids below are linear or bilinear in their axes, so multilinear interpolation reproduces
them exactly and every expected value is a hand sum (milliseconds in the table).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict
from sim.model.step_time import ProfileStepTimer, StepShape

MS = 1e-3
TOK = [1, 64, 512, 4096]
BATCH = [1, 2, 4, 8, 16, 32, 64]
S = [1, 2, 3, 4, 5, 6]
CTX = [0, 512, 2048, 8192]


def dense(t: float) -> float:       # ms: weights read once + per-token work
    return 4.0 + 0.01 * t


def logits(t: float) -> float:
    return 0.2 + 0.001 * t


def dattn(b: float, s: float, c: float) -> float:
    return 0.00001 * b * c + 0.001 * b * s


def pattn(n: float, c: float) -> float:
    return 0.000001 * n * c + 0.0001 * n


def dprefill(n: float, c: float) -> float:  # the draft's pass over n prompt tokens
    return 0.5 + 0.002 * n


def fused_dict(composition: str = "fused", overhead_s: float | None = 1.0 * MS, draft_prefill: bool = True) -> dict:
    d = synthetic_profile_dict()
    t = d["timing"]
    t["step_composition"] = composition
    t["fused"] = {
        "dense": {"axes": {"tokens": TOK}, "median": [dense(x) * MS for x in TOK]},
        "logits": {"axes": {"tokens": TOK}, "median": [logits(x) * MS for x in TOK]},
        "decode_attention": {"axes": {"batch": BATCH, "tokens_per_seq": S, "context": CTX},
                             "median": [[[dattn(b, s, c) * MS for c in CTX] for s in S] for b in BATCH]},
        "prefill_attention": {"axes": {"tokens": TOK, "context": CTX},
                              "median": [[pattn(n, c) * MS for c in CTX] for n in TOK]},
    }
    if overhead_s is not None:
        t["step_overhead"] = {"seconds": overhead_s, "provenance": {"method": "assumed", "notes": "test"}}
    if draft_prefill:
        t["proposers"]["ngram"]["prefill"] = {"axes": {"tokens": TOK, "context": [0, 2048]},
                                             "median": [[dprefill(n, c) * MS for c in (0, 2048)] for n in TOK]}
    return d


# synthetic D(b, k) = 0.2 + 0.05·b·k ms, H(b) = 0.3 + 0.02·b ms (sim/contracts/synthetic.py)
TABLE = [
    # (decode_seqs, context, k, prefill_tokens, prefill_context, attached, expected ms)
    (4, 1000, 0, 0, 0, False, 4.04 + 0.204 + 0.044 + 1.0),                                 # decode
    (0, 0, 0, 512, 0, False, 9.12 + 0.201 + 0.0512 + 1.0),                                 # prefill alone
    (4, 1000, 0, 512, 0, False, 9.16 + 0.205 + 0.044 + 0.0512 + 1.0),                      # mixed: one pass
    (4, 1000, 3, 0, 0, False, 4.16 + 0.216 + 0.056 + 0.8 + 0.38 + 1.0),                    # speculative
    (4, 1000, 3, 512, 0, False, 9.28 + 0.217 + 0.056 + 0.0512 + 0.8 + 0.38 + 1.524 + 1.0),  # + draft prefill
    (0, 0, 0, 512, 0, True, 9.12 + 0.201 + 0.0512 + 1.524 + 1.0),                          # attached drafter
    (2, 2048, 0, 64, 1024, False, 4.66 + 0.203 + 0.04296 + 0.071936 + 1.0),                 # later chunk
]


@pytest.mark.parametrize(("b", "c", "k", "n", "c0", "attached", "expect_ms"), TABLE)
def test_fused_timer_matches_hand_computed_table(b, c, k, n, c0, attached, expect_ms) -> None:
    timer = ProfileStepTimer(Profile.from_dict(fused_dict(), "t"))
    if attached:
        timer.attach_proposer("ngram")
    shape = StepShape(b, float(c), k, "ngram" if k else None, n, float(c0))
    assert timer(shape) / MS == pytest.approx(expect_ms, rel=1e-9)


def test_fused_mixed_step_is_cheaper_than_the_sum_of_its_passes() -> None:
    fused = ProfileStepTimer(Profile.from_dict(fused_dict(overhead_s=None), "t"))
    shape = StepShape(4, 1000.0, 0, None, 512, 0.0)
    one = fused(shape)
    apart = fused(StepShape(4, 1000.0, 0, None)) + fused(StepShape(0, 0.0, 0, None, 512, 0.0))
    # the saving is one read of the weights (dense's constant) and one LM-head constant
    assert (apart - one) / MS == pytest.approx(4.0 + 0.2, rel=1e-9)


def test_sum_profiles_keep_todays_composition_and_still_charge_draft_prefill() -> None:
    plain = ProfileStepTimer(Profile.from_dict(synthetic_profile_dict(), "t"))
    d = fused_dict(composition="sum", overhead_s=None)
    timer = ProfileStepTimer(Profile.from_dict(d, "t"))
    assert not timer.fused
    mixed = StepShape(4, 1000.0, 0, None, 512, 0.0)
    assert timer(mixed) == pytest.approx(plain(mixed))  # fused grids present but not used
    spec = StepShape(4, 1000.0, 3, "ngram", 512, 0.0)
    assert timer(spec) - plain(spec) == pytest.approx(dprefill(512, 0) * MS)
    timer.attach_proposer("ngram")
    pre = StepShape(0, 0.0, 0, None, 512, 0.0)
    assert timer(pre) - plain(pre) == pytest.approx(dprefill(512, 0) * MS)
    timer.attach_proposer(None)
    assert timer(pre) == pytest.approx(plain(pre))


def test_step_overhead_is_added_once_per_step_in_sum_composition() -> None:
    d = synthetic_profile_dict()
    d["timing"]["step_overhead"] = {"seconds": 0.002, "provenance": {"method": "assumed"}}
    plain = ProfileStepTimer(Profile.from_dict(synthetic_profile_dict(), "t"))
    timer = ProfileStepTimer(Profile.from_dict(d, "t"))
    for shape in (StepShape(3, 200.0, 0, None), StepShape(3, 200.0, 2, "ngram", 64, 0.0)):
        assert timer(shape) - plain(shape) == pytest.approx(0.002)


def test_sources_line_names_the_composition_and_the_assumed_overhead() -> None:
    fused = Profile.from_dict(fused_dict(), "t").sources()[0]
    assert "steps: one fused pass per step (timing.fused)" in fused
    assert "per-step overhead 1.00 ms assumed" in fused
    plain = Profile.from_dict(synthetic_profile_dict(), "t").sources()[0]
    assert plain.endswith("[steps: sum of a decode and a prefill pass]")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.pop("fused"), 'timing.fused: required when step_composition is "fused"'),
        (lambda t: t.update(step_composition="fuse"), "timing.step_composition: expected one of sum, fused, got 'fuse'"),
        (lambda t: t["fused"].pop("logits"), "timing.fused.logits: missing (required)"),
        (lambda t: t["fused"]["dense"]["axes"].update(batch=[1]), "timing.fused.dense.axes: expected axes tokens"),
        (lambda t: t["step_overhead"].update(seconds=-1), "timing.step_overhead.seconds: must be >= 0.0"),
        (lambda t: t["proposers"]["ngram"]["prefill"]["axes"].pop("context"),
         "timing.proposers.ngram.prefill.axes: expected axes tokens, context"),
    ],
)
def test_bad_fused_sections_are_one_line_errors(edit, message) -> None:
    d = copy.deepcopy(fused_dict())
    edit(d["timing"])
    with pytest.raises(SpecplanError) as exc:
        Profile.from_dict(json.loads(json.dumps(d)), "p.json")
    assert message in str(exc.value) and "\n" not in str(exc.value)


PREFILL_SCENARIO = """
name = "draft-prefill"
[run]
duration_s = 400
warmup_s = 0
seeds = [1]
[workload]
arrival = "poisson"
rate = 0.2
[[workload.segments]]
name = "chat"
share = 1.0
prompt_tokens = {dist = "fixed", value = 512}
output_tokens = {dist = "fixed", value = 8}
acceptance = {task = "chat", language = "en"}
[fleet]
profile = "profile.json"
[fleet.engine]
max_num_batched_tokens = 2048
[[candidates]]
name = "baseline"
speculation = "off"
[[candidates]]
name = "ngram-k2"
proposer = "ngram"
k = 2
"""


@pytest.mark.parametrize("composition", ["sum", "fused"])
def test_draft_prefill_changes_ttft_by_the_drafts_prefill_pass(tmp_path, composition: str) -> None:
    """A lone 512-token prompt is one prefill step; speculating adds the draft's pass over it."""
    from sim.contracts.scenario import load_scenario
    from sim.results.simulation import simulate_once

    (tmp_path / "profile.json").write_text(json.dumps(fused_dict(composition=composition)), encoding="utf-8")
    (tmp_path / "s.toml").write_text(PREFILL_SCENARIO, encoding="utf-8")
    sc = load_scenario(tmp_path / "s.toml")
    profile = Profile.from_dict(fused_dict(composition=composition), "t")
    def ttft(cand: str) -> np.ndarray:
        req = simulate_once(sc, profile, cand, 1).requests
        return (req["first_token_s"] - req["arrival_s"]).to_numpy()

    base, spec = ttft("baseline"), ttft("ngram-k2")
    assert len(base) == len(spec) > 40
    diff = np.median(spec) - np.median(base)
    assert diff == pytest.approx(dprefill(512, 0) * MS, rel=1e-6)
