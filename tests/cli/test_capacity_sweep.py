"""`specplan capacity` and `specplan sweep` end to end on a tiny synthetic scenario."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from cli.main import main
from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment, write_scenario

SCENARIO = scenario_toml(
    'tiny',
    run={'duration_s': 120, 'warmup_s': 10, 'seeds': [1, 2]},
    workload={'arrival': 'poisson', 'rate': 2.0},
    segments=[segment('chat-en', share=0.7, output=24), segment('code-sv', share=0.3, prompt=128, output=40, task='code', language='sv')],
    slo={'ttft_ms': 1500, 'tpot_ms': 60},
    fleet={'profile': 'synthetic.json', 'price_per_gpu_hour': 2.0},
    engine={'max_num_seqs': 8},
    candidates=[BASELINE, NGRAM_K3],
)


@pytest.fixture()
def scenario_path(tmp_path: Path) -> Path:
    return write_scenario(tmp_path, SCENARIO,
                          profile_file="synthetic.json", scenario_file="tiny.toml",
                          segments=(("chat", "en", 0.0), ("code", "sv", 0.0)))


def test_capacity_json_and_out(scenario_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap"
    rc = main(["capacity", str(scenario_path), "--json", "--max-evals", "5", "--rel-tol", "0.2",
               "--seeds", "1", "--max-seeds", "1", "--duration", "60", "--out", str(out)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    names = [c["candidate"] for c in doc["candidates"]]
    assert names == ["baseline", "ngram-k3"]
    for c in doc["candidates"]:
        (seed,) = c["per_seed"]
        assert seed["evaluations"] <= 5 and c["capacity_rps_mean"] == seed["capacity_rps"]
        assert c["replicas"] is not None and c["replicas"] >= 1
        # every probe says whether it sustained and why (the worst SLO ratio)
        assert all(isinstance(p[1], bool) and p[3] for p in seed["probes"])
    assert doc["sustains"]["percentile"] == 95 and doc["sustains"]["limits_ms"] == {"ttft": 1500.0, "tpot": 60.0}
    assert doc["search"]["duration_s"] == 60
    assert doc["policy_advice"][0]["vllm_speculative_config"]["method"] == "ngram"
    # the config to deploy is the verdict's candidate, with its k, for the scenario's engine
    winner = doc["decision"]["winner"]
    deploy = doc["deploy_config"]
    if winner == "ngram-k3":
        assert (deploy["candidate"], deploy["k"], deploy["config"]["num_speculative_tokens"]) == ("ngram-k3", 3, 3)
        assert deploy["engine"] == "vLLM (V1 runner)"  # a CPU profile: vLLM's CPU backend
    else:
        assert deploy is None
    assert any("assumed" in s for s in doc["sources"])
    assert (out / "capacity.json").exists()
    dec = pl.read_parquet(out / "decisions.parquet")
    assert dec.columns[:3] == ["rule", "candidate", "segment"]
    levels = pl.read_parquet(out / "load_levels.parquet")
    assert set(levels["candidate"]) == {"baseline", "ngram-k3"} and levels["rate"].n_unique() == 4


def test_capacity_table(scenario_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["capacity", str(scenario_path), "--max-evals", "4", "--rel-tol", "0.3",
               "--seeds", "1", "--max-seeds", "1", "--duration", "40", "--percentile", "99"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "ttft_ms_p99 ≤ 1500 ms" in text and "req/s per replica" in text
    assert "decisions" in text and "sources:" in text and "speculative_config" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--percentile", "90"], "--percentile: must be 50, 95 or 99"),
        (["--candidates", "eagle"], "unknown candidate 'eagle'"),
        (["--target-rate", "fast"], "--target-rate: expected a number"),
        (["--duration", "-5"], "--duration: must be > 0"),
        (["--per-window", "300"], "--per-window: sizes the windows of a recorded trace"),
        (["--per-window", "soon"], "--per-window: expected a number"),
    ],
)
def test_capacity_bad_input_is_one_line_exit_2(scenario_path: Path, capsys: pytest.CaptureFixture[str],
                                               extra: list[str], message: str) -> None:
    assert main(["capacity", str(scenario_path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_sweep_cli_serial_and_resume(scenario_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.parquet"
    args = ["sweep", str(scenario_path), "--vary", "workload.rate=1,3", "--vary", "candidates[ngram-k3].k=1,3",
            "--vary", "seed=1", "--vary", "run.duration_s=30", "--engine", "serial", "--out", str(out)]
    assert main(args) == 0
    said = capsys.readouterr().out
    df = pl.read_parquet(out)
    assert df.height == 2 * 2 * 2  # cells × candidates
    # each cell carries its decision (one seed: undetermined), and the verdict renders it
    assert set(df["decision_outcome"]) == {"undetermined"} and df["decision_winner"].is_null().all()
    assert "one seed decides nothing" in said
    for h in df["decision_headline"].unique().to_list():
        assert h in said
    assert df.columns[:5] == ["workload.rate", "candidates[ngram-k3].k", "seed", "run.duration_s", "cell"]
    assert set(df["candidate"]) == {"baseline", "ngram-k3"} and set(df["segment"]) == {"all"}
    k1 = df.filter((pl.col("candidate") == "ngram-k3") & (pl.col("candidates[ngram-k3].k") == 1))
    k3 = df.filter((pl.col("candidate") == "ngram-k3") & (pl.col("candidates[ngram-k3].k") == 3))
    assert (k3["mean_acceptance_length"] > k1["mean_acceptance_length"]).all()
    assert main(args) == 2  # finished cells there: refuses without --resume
    assert "--resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert "0 computed, 4 already done" in capsys.readouterr().out
    assert pl.read_parquet(out).equals(df)


def test_sweep_cli_bad_vary(scenario_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(scenario_path), "--vary", "workload.ratee=1,2", "--engine", "serial",
                 "--out", str(tmp_path / "x.parquet")]) == 2
    assert "workload.ratee" in capsys.readouterr().err
    assert main(["sweep", str(scenario_path), "--engine", "serial", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "--vary" in capsys.readouterr().err


def test_sweep_simulates_on_dask(scenario_path: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from sim.contracts.scenario import load_scenario
    from sim.decisions.sweep import sweep
    from sim.decisions.sweep_grid import parse_vary

    sc = load_scenario(scenario_path)
    varies = [parse_vary("fleet.replicas=1,2"), parse_vary("seed=3"), parse_vary("run.duration_s=20")]
    res = sweep(sc, varies, tmp_path / "d.parquet", engine="dask", workers=2, processes=False,
                progress=False, all_segments=True)
    assert (res.computed, res.skipped) == (2, 0)
    df = res.frame
    assert set(df["segment"]) == {"all", "chat-en", "code-sv"} and df.height == 2 * 2 * 3
    # the same cell run in-process gives the same numbers (seeded, deterministic)
    one = sweep(sc, varies, tmp_path / "s.parquet", engine="serial", progress=False, all_segments=True)
    assert one.frame.drop("cell").equals(df.drop("cell"))


def test_capacity_per_window_on_a_trace_in_the_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from sim.contracts.synthetic_trace import bursty_rows
    from tests.helpers import trace_scenario_path

    rows = bursty_rows(np.random.default_rng(5), 30, per_tick=8, grid_ms=3000, prompt_median=1500, output_median=40)
    path = trace_scenario_path(tmp_path, rows, duration_s=90, slo={"ttft_ms": 1000, "percentile": 95})
    args = ["capacity", str(path), "--max-evals", "3", "--max-seeds", "1", "--no-profile-band", "--per-window", "45"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pw = doc["per_window"]
    assert [w["t0_s"] for w in pw["windows"]] == [0.0, 45.0] and pw["source"].startswith("simulated")
    assert sum(w["requests"] for w in pw["windows"]) == len(rows)
    base = pw["candidates"]["baseline"]
    assert base["peak_replicas"] == max(w["replicas"]["baseline"] for w in pw["windows"])
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "replicas needed per 45 s window" in text and "peak GPUs" in text and "mean GPUs" in text
    # a window longer than the replay is refused before any search, naming the longest valid one
    assert main(["capacity", str(path), "--target-rate", "9", "--per-window", "91"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--per-window: 91 s is longer than the replayed trace" in err and len(err.splitlines()) == 1
