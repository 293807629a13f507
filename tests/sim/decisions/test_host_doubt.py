"""The verdict checked at the ends of an assumed draft host time (sim/decisions/host_doubt.py):
where the answer turns on the assumption it says so and where; the place it finds is a property
of the real H, not of the number assumed; a measured or calibrated H is not checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.contracts.profile import Profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.acceptance_doubt import changed
from sim.decisions.answer import answer_scenario
from sim.decisions.answer_export import to_json
from sim.decisions.answer_text import lines
from sim.decisions.host_doubt import ENDS, scaled
from sim.model.step_time import ProfileStepTimer
from tests.helpers import spec_against_plain


def answer_at(tmp: Path, host_s: float, method: str | None = None):
    """Speculation against plain decoding at 2 req/s, the draft's host time ``host_s`` a step
    (the synthetic profile's timing is assumed; ``method`` gives H a provenance of its own)."""
    prof = synthetic_profile_dict(name="p", base_step_s=0.004, per_seq_s=0.0005, per_token_s=0.004,
                                  acceptance_rates=(0.9, 0.8, 0.7), overhead_base_s=host_s)
    if method is not None:
        prof["timing"]["proposers"]["ngram"]["overhead_provenance"] = {"method": method, "notes": "own runs",
                                                                       "citation": "a cited measurement"}
    spec_against_plain(tmp, prof, "host")
    return answer_scenario(load_scenario(tmp / "scenarios" / "s.toml"), None)[1]


def test_scaling_moves_the_draft_host_grid_alone():
    p = Profile.from_dict(synthetic_profile_dict(), "p")
    q = scaled(p, "ngram", 2.5)
    np.testing.assert_allclose(q.timing.proposers["ngram"].overhead.median, 2.5 * p.timing.proposers["ngram"].overhead.median)
    assert q.timing.proposers["ngram"].draft is p.timing.proposers["ngram"].draft
    assert q.timing.target_forward is p.timing.target_forward
    a, b = ProfileStepTimer(p), ProfileStepTimer(scaled(p, "ngram", 1.0))
    assert a._overhead["ngram"](8, 3) == b._overhead["ngram"](8, 3)


def test_a_verdict_that_turns_on_the_assumed_host_time_says_where(tmp_path):
    ans = answer_at(tmp_path, 0.0015)
    assert ans.whole.winner == "spec"  # the decision itself is left as taken
    (doubt,) = ans.host_doubts
    assert doubt.flips == (ENDS[1],)  # with no host time it still pays; at 4× plain decoding wins
    ((end, lo, hi),) = doubt.changes
    assert end == ENDS[1] and 1.0 <= lo < hi <= ENDS[1]
    text = "\n".join(lines(ans, wrap=False))
    assert "draft host time check: spec: with 4× the assumed H the verdict would be: baseline" in text
    assert f"(it changes between {lo:.2g}× and {hi:.2g}×); measure it" in text
    (said,) = to_json(ans)["draft_host_check"]
    assert said["flips_at"] == [4.0] and said["change_between"] == [[lo, hi]] and said["runs"] == 4 * 4
    # the bracket is where the answer changes: a profile that assumes H at either end says so itself
    assert not changed(ans.whole, answer_at(tmp_path / "lo", 0.0015 * lo).whole)
    assert changed(ans.whole, answer_at(tmp_path / "hi", 0.0015 * hi).whole)


def test_where_the_answer_changes_is_the_real_host_time_whatever_was_assumed(tmp_path):
    """Assumed at 1.5 ms and at 8 ms a step, the check brackets the same real host time at which
    speculation stops paying (the brackets, in ms, overlap): it finds a property of the run."""
    brackets = []
    for i, host in enumerate((0.0015, 0.008)):
        (doubt,) = answer_at(tmp_path / str(i), host).host_doubts
        ((_, same, other),) = doubt.changes
        brackets.append(sorted((host * same, host * other)))
    (a0, a1), (b0, b1) = brackets
    assert max(a0, b0) <= min(a1, b1), brackets


@pytest.mark.parametrize("method", ["calibrated", "published"])
def test_a_host_time_that_is_not_assumed_is_not_checked(tmp_path, method):
    ans = answer_at(tmp_path, 0.0015, method)
    assert ans.host_doubts == ()
    assert not any(t.startswith("draft host time") for t in lines(ans, wrap=False))


def test_the_published_moe_run_the_tool_gets_wrong_is_flagged_as_resting_on_the_assumed_host_time():
    """AngelSlim #163 (Qwen3-30B-A3B, TP 4, SGLang, batch 1: speculation lost, 0.78x) is priced a
    tie at the import's assumed 0.5 ms a draft pass (docs/fidelity-gpu.md §6). The check says the
    answer turns on that term, and at its upper end gives the published sign."""
    repo = Path(__file__).resolve().parents[3]
    sc = load_scenario(repo / "scenarios" / "fidelity-angelslim-qwen3-moe-tp4.toml").with_overrides(
        {"run.duration_s": 120.0})
    ans = answer_scenario(sc, None)[1]
    assert ans.whole.winner != "eagle3-k3"  # no better than the baseline at the assumed H
    (doubt,) = ans.host_doubts
    assert ENDS[1] in doubt.flips
    assert dict(doubt.at)[ENDS[1]].startswith("baseline: ")  # the published sign, at 4× (1.4–3.9× implied)
