"""Traces of every format replayed through a whole scenario: lengths and arrival times from the
file, and what a reader left out stated in the run's notes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from sim.contracts.scenario import load_scenario
from sim.contracts.trace import read_trace
from sim.results.runner import run_scenario
from tests.helpers import BASELINE, scenario_toml, write_scenario

FIXTURES = Path(__file__).resolve().parents[1] / "contracts" / "traces"


def _scenario(tmp_path: Path, file: str, trace: dict, duration_s: float = 200.0) -> Path:
    shutil.copy(FIXTURES / file, tmp_path / file)
    seg = {"name": "chat", "share": 1.0, "acceptance": {"task": "chat", "language": "en"}}
    text = scenario_toml("replay", run={"duration_s": duration_s, "warmup_s": 0, "seeds": [1]},
                         workload={"arrival": "trace", "trace": {"path": file, **trace}},
                         segments=[seg], fleet={"profile": "profile.json"}, candidates=[BASELINE])
    return write_scenario(tmp_path, text)


@pytest.mark.parametrize(("file", "trace"), [
    ("mooncake.jsonl", {"format": "mooncake", "rate_scale": 10.0}),
    ("burstgpt.csv", {}),
    ("azure_2024.csv", {"format": "azure"}),
    ("vllm_bench.json", {"format": "vllm-bench", "schedule_seed": 3}),
    ("generic.csv", {"format": "csv", "columns": {"timestamp": "arrived_ms", "prompt_tokens": "in",
                                                  "output_tokens": "out", "timestamp_unit": "ms"}}),
])
def test_each_format_replays_its_rows(tmp_path: Path, file: str, trace: dict) -> None:
    sc = load_scenario(_scenario(tmp_path, file, trace))
    assert sc.workload.trace is not None
    tr = read_trace(sc.workload.trace)
    res = run_scenario(sc)
    req = res.requests.sort("id")
    assert req["prompt_tokens"].to_list() == np.maximum(tr.prompt_tokens, 1).tolist()
    assert req["output_tokens"].to_list() == np.maximum(tr.output_tokens, 1).tolist()
    scale = trace.get("rate_scale", 1.0)
    np.testing.assert_allclose(req["arrival_s"].to_numpy(), tr.offsets_s / scale, atol=1e-9)
    for note in tr.notes:  # what the reader left out or drew reaches the run's notes
        assert note in res.notes


def test_burstgpt_failures_are_in_the_notes(tmp_path: Path) -> None:
    res = run_scenario(load_scenario(_scenario(tmp_path, "burstgpt.csv", {"format": "burstgpt"})))
    assert any("2 of 5 rows" in n and "Response tokens 0" in n for n in res.notes)
    assert res.requests.height == 3
