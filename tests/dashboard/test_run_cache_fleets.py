"""The dashboard's run cache keys a candidate on its own fleet's profile content, so editing a
[fleets.NAME] profile re-simulates the candidates on it and only them."""

from __future__ import annotations

from dashboard.run_cache import run_keys
from sim.contracts.scenario import load_scenario
from tests.sim.contracts.test_named_fleets import BIG, CANDS, fleets_toml, write_profiles


def test_a_named_fleets_profile_content_keys_only_its_candidates(tmp_path):
    write_profiles(tmp_path)
    (tmp_path / "s.toml").write_text(fleets_toml(BIG, CANDS), encoding="utf-8")
    sc = load_scenario(tmp_path / "s.toml")
    before = run_keys(sc, "fleet-profile")
    assert run_keys(sc, "fleet-profile") == before
    b = tmp_path / "b.json"
    b.write_text(b.read_text(encoding="utf-8").replace("prof-b", "prof-b2"), encoding="utf-8")
    after = run_keys(sc, "fleet-profile")
    assert after["big-base"] != before["big-base"]
    assert {n: k for n, k in after.items() if n != "big-base"} == {n: k for n, k in before.items() if n != "big-base"}
