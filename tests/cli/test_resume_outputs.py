"""Nothing computed is lost: outputs are written whole (temp file + rename), and an interrupted
`specplan capacity --out DIR` reruns without redoing the probes it finished."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.results.atomic_io import write_parquet_atomic, write_text_atomic
from tests.helpers import scenario_toml, write_scenario

SCENARIO = scenario_toml(
    'tiny',
    run={'duration_s': 60, 'warmup_s': 5, 'seeds': [1]},
    workload={'arrival': 'poisson', 'rate': 2.0},
    segments=[
        {'name': 'chat', 'share': 1.0, 'prompt_tokens': {'dist': 'fixed', 'value': 64}, 'output_tokens': {'dist': 'fixed', 'value': 16}, 'acceptance': {'task': 'chat', 'language': 'en'}},
    ],
    slo={'ttft_ms': 1500, 'tpot_ms': 60},
    fleet={'profile': 'profile.json', 'price_per_gpu_hour': 2.0},
    engine={'max_num_seqs': 8},
    candidates=[{'name': 'baseline', 'speculation': 'off'}],
)


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_text_atomic(target, "old")

    class Boom(Exception):
        pass

    class Frame:
        def write_parquet(self, path: str, **_: object) -> None:
            Path(path).write_text("half")
            raise Boom

    with pytest.raises(Boom):
        write_parquet_atomic(Frame(), target)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecplanError, match="cannot"):
        write_text_atomic(tmp_path / "file" / "summary.json", "{}")


def _capacity(tmp_path: Path, out: Path) -> None:
    path = write_scenario(tmp_path, SCENARIO)
    rc = main(["capacity", str(path), "--max-evals", "3", "--out", str(out)])
    assert rc == 0


def test_capacity_rerun_reuses_finished_probes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _capacity(tmp_path, out)
    first = json.loads((out / "capacity.json").read_text())
    probes = sorted((out / "probes").glob("*.json"))
    assert probes, "capacity --out keeps its probes"
    stamps = {p: p.stat().st_mtime_ns for p in (out / "probes").iterdir()}
    # an interrupted run: the last probe never finished (its marker is missing)
    probes[-1].unlink()
    (out / "capacity.json").unlink()
    _capacity(tmp_path, out)
    assert json.loads((out / "capacity.json").read_text()) == first
    for p, t in stamps.items():
        if p.suffix == ".json" and p != probes[-1]:
            assert p.stat().st_mtime_ns == t, f"{p.name} was recomputed"
    assert probes[-1].is_file()  # the unfinished one was redone
    assert pl.read_parquet(out / "load_levels.parquet").height > 0
