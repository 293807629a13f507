"""[fleets.NAME]: a candidate's own hardware (profile, replica shape, prices), read and checked
at load; everything else of [fleet] stays the same for every candidate."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.results.runner import candidate_profiles
from tests.helpers import scenario_toml, segment


def fleets_toml(fleets: str, candidates: list[dict], price: float | None = 2.0) -> str:
    fleet = {"profile": "a.json", "replicas": 2}
    if price is not None:
        fleet["price_per_gpu_hour"] = price
    return scenario_toml("named", run={"duration_s": 20, "warmup_s": 2, "seeds": [1, 2]},
                         workload={"arrival": "poisson", "rate": 2.0}, segments=[segment()],
                         slo={"ttft_ms": 1000}, fleet=fleet, candidates=candidates) + fleets


def write_profiles(folder: Path, tp_b: int = 2) -> None:
    (folder / "a.json").write_text(json.dumps(synthetic_profile_dict(name="prof-a")), encoding="utf-8")
    b = synthetic_profile_dict(name="prof-b", proposer="eagle3-ish")
    b["replica"] = {"tensor_parallel_size": tp_b}
    (folder / "b.json").write_text(json.dumps(b), encoding="utf-8")


BIG = '\n[fleets.big]\nprofile = "b.json"\ntensor_parallel_size = 2\nprice_per_gpu_hour = 5.0\n'
CANDS = [{"name": "baseline", "speculation": "off"}, {"name": "ng-k2", "proposer": "ngram", "k": 2},
         {"name": "big-base", "speculation": "off", "fleet": "big"}]


def load(tmp_path: Path, text: str) -> Scenario:
    write_profiles(tmp_path)
    (tmp_path / "s.toml").write_text(text, encoding="utf-8")
    return load_scenario(tmp_path / "s.toml")


def test_a_candidate_runs_on_its_named_fleet_and_keeps_the_rest_of_fleet(tmp_path):
    sc = load(tmp_path, fleets_toml(BIG, CANDS))
    big = sc.fleet_for("big-base")
    assert (big.profile, big.tensor_parallel_size, big.gpus_per_replica, big.price_per_gpu_hour) == ("b.json", 2, 2, 5.0)
    assert big.replicas == sc.fleet.replicas == 2 and big.engine == sc.fleet.engine  # only hardware differs
    assert sc.fleet_for("ng-k2") is sc.fleet and sc.for_candidate("ng-k2") is sc
    assert sc.for_candidate("big-base").fleet == big
    assert sc.baseline.name == "baseline"  # the one on [fleet] is the reference
    assert sc.require_profile_path(sc.candidate("big-base")) == tmp_path / "b.json"
    again = Scenario.from_dict(tomllib.loads(sc.to_toml()), sc.origin, sc.base_dir)
    assert again == sc and again.fleet_for("big-base") == big


def test_each_candidate_loads_its_own_fleets_profile_once(tmp_path):
    sc = load(tmp_path, fleets_toml(BIG, [*CANDS, {"name": "big-ish", "proposer": "eagle3-ish", "k": 2,
                                                   "fleet": "big"}]))
    profs = candidate_profiles(sc, None, sc.candidates)
    assert {n: p.name for n, p in profs.items()} == {"baseline": "prof-a", "ng-k2": "prof-a",
                                                   "big-base": "prof-b", "big-ish": "prof-b"}
    assert profs["big-base"] is profs["big-ish"]


@pytest.mark.parametrize(("fleets", "cands", "price", "expected"), [
    (BIG, [{"name": "x", "speculation": "off", "fleet": "small"}], 2.0,
     "candidates[0].fleet: no [fleets.small] table; valid: big"),
    ("", [{"name": "x", "proposer": "ngram", "k": 2, "fleet": "big"}], 2.0,
     "candidates[1].fleet: no [fleets.big] table; valid: none defined (add a [fleets.NAME] table)"),
    (BIG, [{"name": "b1", "speculation": "off", "fleet": "big"}, {"name": "b2", "speculation": "off", "fleet": "big"}],
     2.0, "candidates[1].speculation: at most one baseline (speculation = \"off\") per fleet (fleet 'big')"),
    (BIG, CANDS, None, "fleet.price_per_gpu_hour: required: other fleets the candidates run on are priced"),
    (BIG.replace("price_per_gpu_hour = 5.0\n", ""), CANDS, 2.0,
     "fleets.big.price_per_gpu_hour: required: other fleets the candidates run on are priced"),
    (BIG.replace("tensor_parallel_size = 2", "tensor_parallel_size = 0"), CANDS, 2.0,
     "fleets.big.tensor_parallel_size: must be ≥ 1 GPUs per replica"),
    (BIG.replace('profile = "b.json"\n', ""), CANDS, 2.0, "fleets.big.profile"),
    (BIG + "replicas = 3\n", CANDS, 2.0, "fleets.big.replicas: unknown key; valid: profile, tensor_parallel_size"),
])
def test_bad_fleets_are_one_line_naming_the_field_and_what_is_valid(tmp_path, capsys, fleets, cands, price, expected):
    write_profiles(tmp_path)
    path = tmp_path / "s.toml"
    path.write_text(fleets_toml(fleets, cands, price), encoding="utf-8")
    with pytest.raises(SpecplanError, match=None) as err:
        load_scenario(path)
    assert expected in str(err.value)
    assert main(["simulate", str(path), "--quiet"]) == 2
    out = capsys.readouterr()
    assert expected in out.err and "Traceback" not in out.err and len(out.err.strip().splitlines()) == 1


@pytest.mark.parametrize(("cand", "tp_b", "expected"), [
    ({"name": "big-ng", "proposer": "ngram", "k": 2, "fleet": "big"}, 2,
     "candidates[big-ng].proposer: 'ngram' is not in fleet 'big''s profile (prof-b); valid: eagle3-ish"),
    ({"name": "big-base", "speculation": "off", "fleet": "big"}, 4,
     "fleets.big.tensor_parallel_size = 2 but its profile prof-b was built for 4 GPUs per replica; valid: 4"),
])
def test_what_the_fleets_profile_cannot_run_is_refused_in_one_line(tmp_path, capsys, cand, tp_b, expected):
    write_profiles(tmp_path, tp_b=tp_b)
    path = tmp_path / "s.toml"
    path.write_text(fleets_toml(BIG, [CANDS[0], cand]), encoding="utf-8")
    sc = load_scenario(path)
    with pytest.raises(SpecplanError) as err:
        candidate_profiles(sc, None, sc.candidates)
    assert expected in str(err.value)
    for cmd in (["simulate", str(path), "--quiet"], ["capacity", str(path), "--target-rate", "2"]):
        assert main(cmd) == 2
        out = capsys.readouterr()
        assert expected in out.err and "Traceback" not in out.err
