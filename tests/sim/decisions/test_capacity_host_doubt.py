"""`specplan capacity` checks an assumed draft host time as `simulate` does
(sim/decisions/host_doubt.py `capacity_host_doubts`): where the capacity answer turns on it, it
says so and between which multiples; that bracket is where a profile assuming those values
changes its own answer; the ends' probes resume from the plan's folder under keys of their own."""

from __future__ import annotations

import json
from pathlib import Path

from cli.main import main
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.decisions.answer import capacity_answer, with_capacity_host_doubt
from sim.decisions.answer_export import to_json
from sim.decisions.answer_text import lines
from sim.decisions.capacity import plan_capacity
from sim.decisions.capacity_doubt import differs
from sim.decisions.host_doubt import ENDS, capacity_host_doubts
from tests.helpers import spec_against_plain
from tests.sim.decisions.test_capacity_doubt import _counting

SEARCH = {"profile_band": False, "load_fractions": (), "min_requests": 60, "max_evals": 8, "rel_tol": 0.1}
HOST_S = 0.01
"""The assumed host time a step: speculation more than doubles capacity at it, and stops paying at
about 2.7× it (a step 10 + 2.5·b + H ms for 3.1 tokens a row, a plain one 10 + b ms, 20 ms TPOT)."""


def capacity_root(tmp: Path, host_s: float, method: str | None = None) -> Path:
    """Speculation against plain decoding under a 20 ms TPOT p50 on a profile whose draft host time
    is ``host_s`` a step (assumed; ``method`` gives it a provenance of its own)."""
    prof = synthetic_profile_dict(name="p", base_step_s=0.01, per_seq_s=0.0005, per_token_s=0.0005,
                                  acceptance_rates=(0.9, 0.8, 0.7), overhead_base_s=host_s)
    if method is not None:
        prof["timing"]["proposers"]["ngram"]["overhead_provenance"] = {"method": method, "notes": "own runs",
                                                                       "citation": "a cited measurement"}
    return spec_against_plain(tmp, prof, "cap-host", max_num_seqs=64, slo={"tpot_ms": 20.0, "percentile": 50},
                              run={"duration_s": 30.0, "warmup_s": 5, "seeds": [1, 2, 3], "max_seeds": 3})


def planned(tmp: Path, host_s: float, method: str | None = None, cache_dir: Path | None = None):
    sc = load_scenario(capacity_root(tmp, host_s, method))
    report = plan_capacity(sc, None, cache_dir=cache_dir, **SEARCH)
    return sc, report, capacity_answer(report)


def test_a_capacity_answer_that_turns_on_the_assumed_host_time_says_where(tmp_path):
    sc, report, estimate = planned(tmp_path, HOST_S)
    assert estimate.whole.winner == "spec"
    ans = with_capacity_host_doubt(estimate, report, sc, None, min_requests=SEARCH["min_requests"])
    assert ans.whole == estimate.whole  # the decision itself is left as taken
    (doubt,) = ans.host_doubts
    assert doubt.flips == (ENDS[1],) and doubt.runs > 0  # with no host time it still pays
    ((end, lo, hi),) = doubt.changes
    assert 1.0 <= lo < hi <= end
    assert dict(doubt.at)[end].startswith("baseline: ")
    text = "\n".join(lines(ans, wrap=False))
    assert "draft host time check: spec: with 4× the assumed H the verdict would be: baseline" in text
    (said,) = to_json(ans)["draft_host_check"]
    assert said["flips_at"] == [4.0] and said["change_between"] == [[lo, hi]]
    # the bracket is where the answer changes: a plan on a profile that assumes either end says so
    assert not differs(estimate.whole, planned(tmp_path / "lo", HOST_S * lo)[2].whole, "spec")
    assert differs(estimate.whole, planned(tmp_path / "hi", HOST_S * hi)[2].whole, "spec")


def test_a_calibrated_host_time_is_not_checked(tmp_path):
    sc, report, estimate = planned(tmp_path, HOST_S, "calibrated")
    assert capacity_host_doubts(report, sc, None, estimate.whole, min_requests=SEARCH["min_requests"]) == ()


def test_the_ends_probes_are_kept_with_the_plans_and_a_rerun_simulates_none(tmp_path, monkeypatch):
    probes = tmp_path / "out" / "probes"
    sc, report, estimate = planned(tmp_path, HOST_S, cache_dir=probes)
    kept = len(list(probes.glob("*.json")))
    kw = {"min_requests": SEARCH["min_requests"], "cache_dir": probes}
    first = capacity_host_doubts(report, sc, None, estimate.whole, **kw)
    assert len(list(probes.glob("*.json"))) > kept  # the ends' probes beside the plan's, not read as them
    calls = _counting(monkeypatch)
    again = capacity_host_doubts(report, sc, None, estimate.whole, **kw)
    assert calls == [] and again == first and first[0].flips == (ENDS[1],)


def test_a_probes_key_names_the_multiple_of_the_host_time(tmp_path):
    from sim.decisions.simulated_load import _probe_key

    sc = load_scenario(capacity_root(tmp_path, HOST_S))
    key = lambda x: _probe_key(sc, None, "spec", [1], 1.0, None, x)  # noqa: E731
    assert key(None) == _probe_key(sc, None, "spec", [1])  # the plan's own, as written before
    assert len({key(None), key(0.0), key(1.0), key(4.0)}) == 4


def test_capacity_on_the_command_line_says_it(tmp_path, capsys):
    path = str(capacity_root(tmp_path, HOST_S))
    fast = ["--max-evals", "8", "--rel-tol", "0.1", "--no-profile-band"]
    assert main(["capacity", path, "--json", *fast]) == 0
    (said,) = json.loads(capsys.readouterr().out)["decision"]["draft_host_check"]
    assert said["candidate"] == "spec" and said["flips_at"] == [4.0]
