"""No silent acceptance matches (issue 21): an error naming both, or a named fallback noted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile
from sim.results.simulation import simulate_once
from tests.helpers import write_scenario

REPO = Path(__file__).resolve().parents[3]
SCENARIO = """
name = "t0"
[run]
duration_s = 30
warmup_s = 0
seeds = [1]
[workload]
arrival = "poisson"
rate = 1.0
[[workload.segments]]
name = "chat"
share = 1.0
prompt_tokens = {dist = "fixed", value = 50}
output_tokens = {dist = "fixed", value = 10}
acceptance = {task = "chat", language = "en"FALLBACK}
temperature = 0.0
[fleet]
profile = "profile.json"
[[candidates]]
name = "ngram-k3"
proposer = "ngram"
k = 3
"""


def test_temperature_0_against_a_profile_with_only_0_7_fails_in_one_line(tmp_path) -> None:
    path = write_scenario(tmp_path, SCENARIO.replace("FALLBACK", ""), segments=[("chat", "en", 0.7)])
    r = subprocess.run([sys.executable, "-m", "cli", "simulate", str(path), "--quiet"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "temperature 0 has no entry for chat:en; profile has 0.7" in lines[0]
    assert "Traceback" not in r.stderr


def test_a_named_fallback_runs_and_the_notes_name_the_entry(tmp_path) -> None:
    text = SCENARIO.replace("FALLBACK", ', fallback = "chat:en:0.7"')
    sc = load_scenario(write_scenario(tmp_path, text, segments=[("chat", "en", 0.7)]))
    r = simulate_once(sc, synthetic_profile(segments=[("chat", "en", 0.7)]), "ngram-k3", 1)
    assert any("using the named fallback entry chat:en:0.7" in n for n in r.notes)
