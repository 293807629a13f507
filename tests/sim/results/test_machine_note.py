"""Every run on a measured profile says in one line when this machine is not the profile's."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cli.main import main
from sim.contracts.machine_identity import this_machine
from sim.contracts.synthetic import synthetic_profile_dict
from tests.helpers import BASELINE, NGRAM_K2, scenario_toml, segment


def write(tmp_path: Path, cpu: str) -> Path:
    d = synthetic_profile_dict()
    prov = d["timing"]["provenance"] = copy.deepcopy(d["timing"]["provenance"])
    prov.update(method="measured", date="2026-12-01T10:00:00Z",
                device={"kind": "cpu", "name": cpu, "count": 1}, libraries=dict(this_machine().libraries))
    (tmp_path / "profile.json").write_text(json.dumps(d), encoding="utf-8")
    path = tmp_path / "s.toml"
    path.write_text(scenario_toml(
        "m", run={"duration_s": 30, "warmup_s": 0, "seeds": [1]}, workload={"arrival": "poisson", "rate": 1.0},
        segments=[segment(prompt=32, output=8)], fleet={"profile": "profile.json"},
        candidates=[BASELINE, NGRAM_K2]), encoding="utf-8")
    return path


@pytest.mark.parametrize("same", [True, False])
def test_simulate_says_when_the_profile_was_measured_on_another_machine(tmp_path: Path, capsys, same: bool):
    from sim.contracts.scenario import load_scenario
    from sim.results.runner import run_scenario

    cpu = this_machine().cpu if same else "Some Other CPU 9000"
    path = write(tmp_path, cpu)
    notes = run_scenario(load_scenario(path)).notes
    lines = [n for n in notes if n.startswith("machine: ")]
    if same:
        assert lines == []
    else:
        assert len(lines) == 1 and notes[0] == lines[0]
        assert f"CPU: here '{this_machine().cpu}', profile 'Some Other CPU 9000'" in lines[0]
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr()
    assert ("profile synthetic was measured on another machine" in out.out + out.err) is not same
