"""What-ifs: a candidate named for its k follows a new k, and the page knows when its results are
stale (``page_run.view_key``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from dashboard import state as st
from dashboard.files import Roots, load_named_scenario, opening_scenario
from dashboard.page_run import UPLOADED, view_key

REPO = Path(__file__).resolve().parents[2]
ROOTS = Roots.under(REPO)
H200 = "gpu-chat-h200.toml"


def names_after(overrides: dict) -> list[str]:
    base = load_named_scenario(ROOTS, H200)
    return list(st.apply(base, st.ViewState(H200, None, overrides)).candidate_names)


def test_a_candidate_named_for_its_k_is_renamed_with_the_new_k() -> None:
    assert names_after({"candidates[eagle3-k3].k": 5}) == ["baseline", "draft-1b-k3", "draft-1b-k2", "eagle3-k5"]
    # a name another candidate has is not taken over
    assert names_after({"candidates[draft-1b-k3].k": 2})[1] == "draft-1b-k2-whatif"
    # other what-ifs leave names alone
    assert names_after({"workload.rate": 10}) == ["baseline", "draft-1b-k3", "draft-1b-k2", "eagle3-k3"]


@settings(max_examples=30, deadline=None)
@given(k=hs.integers(1, 12))
def test_the_renamed_candidate_runs_with_the_k_its_name_says(k: int) -> None:
    base = load_named_scenario(ROOTS, H200)
    s = st.apply(base, st.ViewState(H200, None, {"candidates[eagle3-k3].k": k}))
    (eagle,) = [c for c in s.candidates if c.proposer == "eagle3"]
    assert eagle.name == f"eagle3-k{k}" and eagle.k == k
    assert st.follow_k(base, base) is base


def test_the_page_opens_on_the_gpu_scenario_when_it_is_there() -> None:
    assert opening_scenario(["azure-conv-replay.toml", "default.toml", H200]) == H200
    assert opening_scenario(["a.toml", "default.toml"]) == "default.toml"
    assert opening_scenario(["a.toml"]) == "a.toml" and opening_scenario([]) is None


def key(**kw) -> str:
    args = {"scenario_value": H200, "uploaded_scenario": None, "profile_value": None, "uploaded_profile": None,
            "whatif": {"workload.rate": 20}, "load_text": "0.5, 1, 1.5, 2", "seeds": 1} | kw
    return view_key(ROOTS, **args)


def test_results_are_stale_when_any_input_of_the_run_changes() -> None:
    same = key()
    assert key(whatif={"workload.rate": 20.0}) == same  # the same scenario, written otherwise
    assert key(load_text="0.5,1,1.5,2") == same
    for changed in (key(scenario_value="default.toml"), key(profile_value="llama-3.1-8b-h100-vllm.json"),
                    key(whatif={"workload.rate": 21}), key(load_text="0.5, 1, 2"), key(seeds=2),
                    key(whatif={"workload.rate": "not a number"})):
        assert changed != same
    up = {"name": "u.toml", "text": (REPO / "scenarios" / H200).read_text()}
    a = key(scenario_value=UPLOADED, uploaded_scenario=up)
    b = key(scenario_value=UPLOADED, uploaded_scenario={**up, "text": up["text"].replace("rate = 20", "rate = 19")})
    assert a != b  # an upload counts by its content


@pytest.mark.parametrize("policy", ["fixed", "off_above_batch", "adaptive", "k_by_batch"])
def test_policy_options_have_words(policy: str) -> None:
    from dashboard.layout import OPTION_LABELS

    assert "_" not in OPTION_LABELS[policy]


def test_a_computed_schedule_keeps_its_k_through_what_ifs_and_can_become_a_fixed_k() -> None:
    import dataclasses

    from sim.contracts.candidate import Candidate

    base = load_named_scenario(ROOTS, H200)
    auto = Candidate("eagle3-auto", proposer="eagle3", policy="k_by_batch", schedule="auto", k=3)
    s = dataclasses.replace(base, candidates=(*base.candidates, auto))
    pre = "candidates[eagle3-auto]"
    current = {f.key: f.value for f in st.whatif_fields(s) if f.key.startswith(pre)}
    assert current[f"{pre}.k"] == 3 and st.overrides_from_controls(s, current) == {}
    more = st.overrides_from_controls(s, {**current, f"{pre}.k": 2})
    assert s.with_overrides(more).candidate("eagle3-auto").k == 2
    fixed = s.with_overrides(st.overrides_from_controls(s, {**current, f"{pre}.policy": "fixed"}))
    c = fixed.candidate("eagle3-auto")
    assert (c.policy, c.k, c.schedule) == ("fixed", 3, None)
