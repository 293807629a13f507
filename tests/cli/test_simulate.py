"""``specplan simulate``: bad input → exit 2 and one line, results → table, JSON, files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl

from cli.main import main
from tests.helpers import NGRAM_K3, scenario_toml, segment, write_scenario

REPO = Path(__file__).resolve().parents[2]

SCENARIO = scenario_toml(
    'cli',
    run={'duration_s': 40, 'warmup_s': 5, 'seeds': [1, 2]},
    workload={'arrival': 'poisson', 'rate': 2.0},
    segments=[segment(prompt=100, output=30)],
    slo={'ttft_ms': 1000, 'tpot_ms': 100},
    fleet={'profile': 'profile.json', 'price_per_gpu_hour': 2.0},
    candidates=[NGRAM_K3],
)


def files(tmp_path: Path) -> Path:
    return write_scenario(tmp_path, SCENARIO)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", "simulate", *args],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )


def test_bad_scenario_exits_2_with_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(SCENARIO.replace("rate = 2.0", "rate = -2.0"))
    (tmp_path / "profile.json").write_text("{}")
    r = run_cli(str(bad), "--quiet")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "workload.rate" in lines[0] and "bad.toml" in lines[0]
    assert r.stdout == ""


def test_missing_file_and_bad_seeds_exit_2(tmp_path, capsys) -> None:
    assert main(["simulate", str(tmp_path / "nope.toml"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0]
    assert main(["simulate", str(files(tmp_path)), "--seeds", "1,x", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seeds" in err[0]
    assert main(["simulate", str(files(tmp_path)), "--candidates", "nope", "--quiet"]) == 2
    assert "nope" in capsys.readouterr().err


def test_a_bad_profile_file_names_the_scenario_field_and_the_file(tmp_path, capsys) -> None:
    """A scenario pointing at a file that is not a profile: the scenario, its field and the file
    with its line, in one line (the file may be sound and the field wrong)."""
    path = files(tmp_path)
    (tmp_path / "profile.json").write_text("not json\n")
    assert main(["simulate", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: fleet.profile: " in err[0] and "profile.json:1: invalid JSON" in err[0], err


def test_table_json_and_out_dir(tmp_path, capsys) -> None:
    scen = files(tmp_path)
    out = tmp_path / "out"
    assert main(["simulate", str(scen), "--seeds", "1", "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("metric"))
    assert header.split()[1:] == ["baseline", "ngram-k3"]  # baseline first
    assert "TTFT p99 (ms)" in text and "$ per 1,000 good answers" in text
    assert "sources:" in text and "assumed" in text
    for name in ("requests.parquet", "steps.parquet", "summary.parquet", "summary.json"):
        assert (out / name).is_file()
    summary = pl.read_parquet(out / "summary.parquet")
    assert summary["candidate"].unique(maintain_order=True).to_list() == ["baseline", "ngram-k3"]
    assert main(["simulate", str(scen), "--seeds", "1", "--by-segment", "--quiet"]) == 0
    assert "segment chat:" in capsys.readouterr().out
    assert main(["simulate", str(scen), "--seeds", "1", "--max-seeds", "1", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["seeds"] == [1] and data["candidates"] == ["baseline", "ngram-k3"]
    assert data["decision"]["outcome"] == "undetermined"  # one seed decides nothing
    assert main(["simulate", str(scen), "--seeds", "1", "--max-seeds", "3", "--json", "--quiet"]) == 0
    more = json.loads(capsys.readouterr().out)
    assert more["seeds"][0] == 1 and len(more["seeds"]) in (2, 3)  # seeds added while undetermined
    assert more["decision"]["max_seeds"] == 3
    assert {r["segment"] for r in data["summary"]} == {"all", "chat"}


def test_a_run_too_large_for_memory_is_refused_up_front_in_one_line(tmp_path) -> None:
    """SPECPLAN_MAX_MEMORY_MB stands in for a small machine: refused before any request is made."""
    r = subprocess.run([sys.executable, "-m", "cli", "simulate", str(files(tmp_path)), "--quiet"],
                       capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={**__import__("os").environ, "SPECPLAN_MAX_MEMORY_MB": "100"})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "requests per run" in lines[0] and "100 MiB available" in lines[0]


def test_memory_exhaustion_late_is_one_line_exit_2(tmp_path, capsys, monkeypatch) -> None:
    """MemoryError, and pyo3's PanicException (a BaseException polars raises when a Rust thread
    panics, seen under memory pressure), end in one line and exit 2, never a traceback."""
    from polars.exceptions import PanicException

    import cli.simulate

    for exc in (MemoryError(), PanicException("PyObject pointer is null")):
        def boom(args, exc=exc):
            raise exc

        monkeypatch.setattr(cli.simulate, "run", boom)
        assert main(["simulate", str(files(tmp_path)), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "memory" in err[0] and "Traceback" not in err[0], err
