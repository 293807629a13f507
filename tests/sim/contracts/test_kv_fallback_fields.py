"""The ``kv_fallback`` policy's fields at the boundary: the documented example loads and round-trips,
and bad thresholds are one line naming the field, exit 2, no traceback."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from cli.main import main
from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.toml_writer import dumps_toml
from sim.model.speculation import policy_from_candidate
from tests.helpers import scenario_toml, segment, write_scenario

REPO = Path(__file__).resolve().parents[3]


def _text(kv_fallback: dict) -> str:
    cand = {"name": "kvf", "proposer": "ngram", "k": 2, "policy": "kv_fallback", "kv_fallback": kv_fallback}
    return scenario_toml("kvf", run={"duration_s": 20, "warmup_s": 2, "seeds": [1]},
                         workload={"arrival": "poisson", "rate": 2.0}, segments=[segment()],
                         slo={"ttft_ms": 1000, "tpot_ms": 100}, fleet={"profile": "profile.json"},
                         candidates=[cand])


def test_the_documented_candidate_loads_and_round_trips(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    start = doc.index("```toml\n") + len("```toml\n")
    sc = load_scenario(write_scenario(tmp_path, doc[start: doc.index("```", start)]))
    c = sc.candidate("ngram-kv-fallback")
    p = policy_from_candidate(c)
    assert (p.name, p.k, p.kv_off_above, p.kv_on_below, p.window_s) == ("kv_fallback", 4, 0.9, 0.7, 5.0)
    again = Scenario.from_dict(tomllib.loads(dumps_toml(sc.to_dict())), sc.origin, sc.base_dir)
    assert again.candidate("ngram-kv-fallback") == c


@pytest.mark.parametrize(("table", "says"), [
    ({"off_above": 0.5, "on_below": 0.8}, "candidates[0].kv_fallback.on_below: must be < off_above (0.5), got 0.8"),
    ({"off_above": 1.5, "on_below": 0.8}, "candidates[0].kv_fallback.off_above: must be a share of KV blocks in (0, 1]"),
    ({"off_above": 0.9, "on_below": 0.5, "window_s": -1.0}, "kv_fallback.window_s: must be > 0 seconds"),
    ({"off_above": 0.9}, "kv_fallback"),
])
def test_bad_thresholds_exit_2_with_one_line(tmp_path: Path, capsys, table, says) -> None:
    path = write_scenario(tmp_path, _text(table))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and "Traceback" not in err
