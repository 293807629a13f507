"""The profile's acceptance interval carried into the verdict (sim/decisions/acceptance_doubt.py):
a profile measured on few prompts cannot give a verdict that flips inside its interval; one
measured on many keeps its verdict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.acceptance_interval import segment_uncertainty
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.acceptance_doubt import SegmentSample, moved
from sim.decisions.answer import answer_scenario
from sim.decisions.answer_export import to_json
from sim.decisions.answer_text import lines
from tests.helpers import spec_against_plain

RATES = (0.9, 0.8, 0.7)


def write_root(tmp: Path, prompts: int | None, *, rates=RATES) -> Path:
    """A profile whose one segment was measured on ``prompts`` prompts (None: written before
    issue 41, no uncertainty recorded) and a scenario where speculation wins at the estimate."""
    prof = synthetic_profile_dict(name="p", base_step_s=0.004, per_seq_s=0.0005, per_token_s=0.004,
                                  acceptance_rates=rates, per_request_rows=prompts or 21, drafts_per_request=40)
    if prompts is not None:
        rng = np.random.default_rng(0)
        for seg in prof["acceptance"]["ngram"]["segments"]:
            seg["uncertainty"] = segment_uncertainty(seg, rng)
    return spec_against_plain(tmp, prof)


def answer_for(tmp: Path, prompts: int | None, **kw):
    sc = load_scenario(write_root(tmp, prompts, **kw))
    return answer_scenario(sc, None)[1]


def test_one_prompt_per_segment_gives_undetermined_with_the_sample_size_reason(tmp_path):
    ans = answer_for(tmp_path, 1)
    d = ans.whole
    assert d.outcome == "undetermined" and d.winner is None
    text = "\n".join(lines(ans, wrap=False))
    assert "the profile measured 1 prompt for segment chat" in text
    assert "measure at least 9 more" in text
    assert text.startswith("verdict: undetermined: spec: the answer changes inside its acceptance interval")
    (doubt,) = ans.doubts
    assert doubt.flips_low and doubt.low == pytest.approx(1.0)  # one prompt: no interval, the whole range
    assert to_json(ans)["acceptance_interval"][0]["flips"] is True


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=st.integers(30, 80))
def test_many_prompts_keep_a_verdict_that_holds_across_the_interval(tmp_path, prompts):
    ans = answer_for(tmp_path, prompts)
    assert ans.whole.outcome == "winner" and ans.whole.winner == "spec"
    (doubt,) = ans.doubts
    assert not doubt.flips and doubt.low < doubt.assumed < doubt.high
    assert doubt.segments[0].prompts == prompts
    assert "the answer is the same at both ends" in "\n".join(lines(ans, wrap=False))


def test_a_profile_without_a_recorded_sample_size_keeps_its_verdict_and_says_so_once(tmp_path):
    ans = answer_for(tmp_path, None)
    assert ans.whole.outcome == "winner"
    said = [x for x in lines(ans, wrap=False) if "records no sample size" in x]
    assert len(said) == 1 and said[0].startswith("acceptance interval: spec:")


def test_a_segment_with_no_draft_says_so_in_one_line_and_is_not_moved():
    segs = (SegmentSample("a", "a:en:0", 0.5, 3, 0, float("nan"), None, None),
            SegmentSample("b", "b:en:0", 0.5, 1, 10, 2.0, None, None))
    assert segs[0].words() == "a: no draft in 3 prompt(s)"
    assert "nan" not in segs[0].words() and "inf" not in segs[0].words()
    assert moved(segs, 1.0, True, 3) == {"b": 1.0}
    assert moved(segs, 1.0, False, 3) == {"b": 4.0}


def test_a_shift_to_the_estimate_itself_reproduces_the_decisions_own_run(tmp_path):
    """The ends are simulated on the same requests as the decision's runs: moved by nothing,
    the run is the same, request by request (so a change at an end is the acceptance's doing)."""
    from polars.testing import assert_frame_equal

    from sim.results.runner import run_scenario
    from sim.results.simulation import simulate_once

    sc = load_scenario(write_root(tmp_path, 5))
    res = run_scenario(sc, None, ["baseline", "spec"], [1])
    prof = res.profiles["spec"]
    from sim.model.assembly import acceptance_model

    model = acceptance_model(sc, prof, sc.candidate("spec"))
    point = 1.0 + float(model.segment("chat").aggregate[:3].sum())
    same = simulate_once(sc, prof, "spec", 1, acceptance_shift={"chat": point}, keep_itl=False).requests
    lower = simulate_once(sc, prof, "spec", 1, acceptance_shift={"chat": point - 0.5}, keep_itl=False).requests
    kept = res.requests.filter(res.requests["candidate"] == "spec")
    assert_frame_equal(same, kept)
    assert lower["output_tokens"].to_list() == kept["output_tokens"].to_list()  # same requests
    assert not lower.equals(kept)  # served differently


def test_m_is_the_prompts_that_shrink_the_interval_to_the_change_by_root_n():
    """Half-width 1.0 below the estimate, the answer changes 0.5 below it: the width must halve,
    so four times the prompts: 4 measured, about 12 more. The segment named is the one that
    contributes most to that side."""
    from sim.decisions.acceptance_doubt import AcceptanceDoubt

    segs = (SegmentSample("big", "big:en:0", 0.8, 4, 50, 3.0, 2.0, 3.5),
            SegmentSample("small", "small:en:0", 0.2, 40, 500, 3.0, 2.9, 3.1))
    d = AcceptanceDoubt("spec", 3, segs, assumed=3.0, low=2.0, high=3.5, at_low="baseline: …",
                        at_high="spec: …", flips_low=True, change=(2.6, 2.4))
    assert d.reason() == "the profile measured 4 prompts for segment big; measure about 12 more"
    assert AcceptanceDoubt("spec", 3, segs, 3.0, 2.0, 3.5).reason() == ""  # no flip, no reason
