"""An interrupted `specplan validate` keeps every finished real run: each is checkpointed as it
finishes, `--resume` serves only the rest, and checkpoints of other arguments are refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from cli.main import main
from profiler.live.live_checkpoints import RunRecord, RunStore
from sim.contracts.errors import SpecplanError
from sim.model.step_time import StepShape
from tests.fuzz_cases import REPO
from tests.helpers import BASELINE, NGRAM_K2, scenario_toml, segment, write_scenario

ARGS = {"scenario_path": "s.toml", "scenario": "abc", "requests": 5, "seed": 0, "loads": [0.25, 0.5]}


def _record(rep: int = 0) -> RunRecord:
    steps = pl.DataFrame({"duration_s": [0.01, 0.02], "profile_duration_s": [0.011, 0.018]})
    probes = pl.DataFrame({"t_s": [0.5], "kind": ["decode"], "ratio": [1.25]})
    return RunRecord(0.25, "baseline", 5.0, rep, {"ttft_ms_median": 12.5, "tpot_ms_p95": None},
                     (StepShape(1, 20.0, 0, None, 16, start_s=0.0), StepShape(2, 30.5, 2, "ngram", start_s=0.01)),
                     0.05, False, {"when": "before", "median_ratio": 1.1}, pl.DataFrame({"id": [0, 1]}), steps, probes)


def test_a_saved_run_reads_back_whole_and_only_with_its_marker(tmp_path: Path) -> None:
    store = RunStore(tmp_path, ARGS, resume=True)
    assert store.open() == {}
    rec, other = _record(0), _record(1)
    store.save(rec)
    store.save(other)
    rec.after = {"when": "after", "median_ratio": 1.2}
    store.save_after(rec)
    # a run killed before its marker was written: its frames are there, it is not finished
    (marker,) = [m for m in tmp_path.glob("*.run.json") if json.loads(m.read_text())["rep"] == 1]
    marker.unlink()
    (got,) = RunStore(tmp_path, ARGS, resume=True).open().values()
    assert (got.load, got.candidate, got.rate, got.rep, got.wall_s) == (0.25, "baseline", 5.0, 0, 0.05)
    assert got.measured == rec.measured and got.shapes == rec.shapes and got.before == rec.before
    assert got.after == rec.after and got.durations == [0.01, 0.02]
    assert got.steps.equals(rec.steps) and got.requests.equals(rec.requests)
    assert [(s.t_s, s.kind, s.ratio) for s in got.samples] == [(0.5, "decode", 1.25)]
    # an unreadable marker: that run is served again, never half-used
    next(tmp_path.glob("*.run.json")).write_text("{not json")
    assert RunStore(tmp_path, ARGS, resume=True).open() == {}


def test_checkpoints_of_other_arguments_or_without_resume_are_refused(tmp_path: Path) -> None:
    store = RunStore(tmp_path, ARGS, resume=False)
    store.open()
    store.save(_record())
    with pytest.raises(SpecplanError, match=r"1 finished real runs of this validation .* pass --resume"):
        RunStore(tmp_path, ARGS, resume=False).open()
    for resume in (False, True):
        with pytest.raises(SpecplanError, match=r"a different validation \(requests 5 → 3, loads .*\)"):
            RunStore(tmp_path, {**ARGS, "requests": 3, "loads": [0.5]}, resume=resume).open()
    # the same content under another path still matches
    assert len(RunStore(tmp_path, {**ARGS, "scenario_path": "moved/s.toml"}, resume=True).open()) == 1
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(SpecplanError, match="without a readable manifest.json"):
        RunStore(tmp_path, ARGS, resume=True).open()


# ---------------------------------------------------------------------------------------------
# the real serving loop on a tiny random model


def _scenario(tmp_path: Path) -> Path:
    text = scenario_toml(
        "tiny-validate", run={"duration_s": 20, "seeds": [0]}, workload={"arrival": "poisson", "rate": 2.0},
        segments=[segment(prompt={"dist": "uniform", "min": 12, "max": 40},
                          output={"dist": "uniform", "min": 4, "max": 12})],
        slo={"ttft_ms": 500, "e2el_ms": 3000}, fleet={"profile": "p.json"},
        engine={"max_num_seqs": 4, "max_num_batched_tokens": 64, "block_size": 16},
        candidates=[BASELINE, NGRAM_K2])
    return write_scenario(tmp_path, text, profile_file="p.json", name="tiny-synthetic",
                          acceptance_rates=(0.7, 0.5, 0.35), base_step_s=0.004, per_seq_s=0.0005,
                          prefill_base_s=0.003)


def _argv(scenario: Path, out: Path, *extra: str, loads: str = "0.25,0.5") -> list[str]:
    return ["validate", str(scenario), "--model", "config:tiny-llama", "--capacity", "20", "--loads", loads,
            "--candidates", "baseline", "--requests", "3", "--sim-reps", "1", "--out", str(out), *extra]


def _count_serves(monkeypatch: pytest.MonkeyPatch, stop_at: int | None = None) -> list[int]:
    """Count the real runs' calls of the serving loop; raise Ctrl-C at call ``stop_at``."""
    import profiler.live.live_validation  # noqa: F401  (its warm-up keeps the unpatched loop)
    from profiler.passes import serving

    calls: list[int] = []
    real = serving.serve

    def serve(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(serving, "serve", serve)
    return calls


@pytest.mark.slow
def test_ctrl_c_then_resume_serves_only_the_unfinished_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    scenario, out = _scenario(tmp_path), tmp_path / "out"
    argv = _argv(scenario, out, "--drift-correct")
    calls = _count_serves(monkeypatch, stop_at=2)
    assert main(argv) == 130  # Ctrl-C during the second real run
    assert "the same command with --resume serves only the rest" in capsys.readouterr().err
    first = pl.read_parquet(out / "measured_requests.parquet")
    assert set(first["load"]) == {0.25} and len(list((out / "checkpoints").glob("*.run.json"))) == 1
    assert json.loads((out / "fidelity.json").read_text())["complete"] is False

    assert main(argv) == 2  # finished runs are there: keep them (--resume) or remove them, never mix
    assert "1 finished real runs of this validation are there; pass --resume" in capsys.readouterr().err
    assert main(_argv(scenario, out, "--resume", "--drift-correct", "--seed", "1")) == 2
    assert "a different validation (seed 0 → 1)" in capsys.readouterr().err

    calls = _count_serves(monkeypatch)
    assert main([*argv, "--resume"]) == 0
    assert len(calls) == 1  # only the load point that had not finished was served
    assert "resuming: 1 of 2 real runs reused" in capsys.readouterr().err
    meta = json.loads((out / "fidelity.json").read_text())
    assert meta["complete"] is True and meta["reused_runs"] == 1
    final = pl.read_parquet(out / "measured_requests.parquet")
    assert final.filter(pl.col("load") == 0.25).equals(first)  # the checkpointed run, as it was measured
    assert sorted(set(final["load"])) == [0.25, 0.5]
    # both runs were drift-corrected: the first with the check after it from the interrupted process
    assert [c["run"] for c in meta["drift_corrections"]] == ["baseline at 25%, real run 1",
                                                             "baseline at 50%, real run 1"]
    assert [d["when"] for d in meta["drift"]] == [
        "before real run 1 of baseline at 25%", "before real run 1 of baseline at 50%",
        "before real run 1 of baseline at 50%", "after the last real run"]
    table = pl.read_csv(out / "fidelity.csv")
    assert sorted(set(table["load"])) == [0.25, 0.5]


@pytest.mark.slow
def test_kill_9_mid_validation_loses_no_finished_run(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    scenario, out = _scenario(tmp_path), tmp_path / "out"
    argv = _argv(scenario, out, loads="0.25,0.5,0.75")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if list((out / "checkpoints").glob("*.run.json")):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the validation finished before it could be killed"
    done = len(list((out / "checkpoints").glob("*.run.json")))
    assert 1 <= done < 3
    calls = _count_serves(monkeypatch)
    assert main([*argv, "--resume"]) == 0
    assert len(calls) == 3 - done
    meta = json.loads((out / "fidelity.json").read_text())
    assert meta["complete"] is True and meta["reused_runs"] == done
    assert sorted(set(pl.read_parquet(out / "measured_requests.parquet")["load"])) == [0.25, 0.5, 0.75]
