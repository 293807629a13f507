"""Replicas of several GPUs: KV capacity shards weights and KV, cost counts GPUs, and a scenario
whose replica shape is not the profile's (or asks for pipeline stages) is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict
from sim.model.kv_capacity import kv_capacity
from sim.results.cost import fleet_cost_usd

REPO = Path(__file__).resolve().parents[3]
GIB = 1024**3
# Llama-3.1-70B-shaped numbers on H100s: 80 GiB per GPU, 141.1 GB of bf16 weights (the whole
# model), 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 327,680 KV bytes per token, 3 GiB
# of activations on each GPU. A profile's memory numbers are the replica's totals.
W70 = 141_106_819_072
KV70 = 2 * 80 * 8 * 128 * 2
ACT = 3 * GIB


def profile_70b(tp: int | None) -> dict:
    n = tp or 1
    d = synthetic_profile_dict(device_memory_bytes=n * 80 * GIB, target_weight_bytes=W70,
                               target_kv_bytes_per_token=KV70, activation_peak_bytes=n * ACT)
    if tp is not None:
        d["replica"] = {"tensor_parallel_size": tp}
    return d


def test_tp4_kv_capacity_shards_weights_and_kv() -> None:
    prof = Profile.from_dict(profile_70b(4), "p70")
    kv = kv_capacity(prof, 0.9, 16)
    # by hand: 0.9 x 4 x 80 GiB = 309,237,645,312 usable bytes, minus 4 x 3 GiB of activations and
    # the 141.1 GB of weights (32.9 GiB on each GPU), leaves 155.2 GB for KV at 327,680 bytes a token
    budget = int(0.9 * 4 * 80 * GIB) - 4 * ACT - W70
    assert int(0.9 * 4 * 80 * GIB) == 309_237_645_312
    assert kv.budget_bytes == budget == 155_245_924_352
    assert kv.kv_tokens == (budget // KV70) // 16 * 16 == 473_760
    assert kv.tensor_parallel_size == 4
    # each GPU holds a quarter of the cache: 36.1 GiB of KV next to 32.9 GiB of weights and 3 GiB
    # of activations, within 0.9 x 80 GiB = 72 GiB
    assert kv.kv_bytes_per_gpu == pytest.approx(473_760 * KV70 / 4)
    assert kv.kv_bytes_per_gpu / GIB == pytest.approx(36.145, abs=1e-3)
    assert kv.kv_bytes_per_gpu + W70 / 4 + ACT <= 0.9 * 80 * GIB


def test_one_gpu_cannot_hold_70b_and_says_how_much_is_missing() -> None:
    prof = Profile.from_dict(profile_70b(None), "p70")
    with pytest.raises(SpecplanError, match="no KV block fits at memory_utilization 0.9") as info:
        kv_capacity(prof, 0.9, 16)
    assert "\n" not in str(info.value)


def test_old_profiles_are_one_gpu_replicas() -> None:
    prof = Profile.from_dict(synthetic_profile_dict(), "p")
    assert prof.replica.tensor_parallel_size == 1
    kv = kv_capacity(prof, 0.9, 16)
    assert kv.budget_bytes == int(0.9 * 16 * GIB) - 2 * GIB - 512 * 1024**2


def test_bad_replica_shape_in_profile() -> None:
    d = synthetic_profile_dict()
    d["replica"] = {"tensor_parallel_size": 0}
    with pytest.raises(SpecplanError, match=r"replica\.tensor_parallel_size: must be >= 1, got 0"):
        Profile.from_dict(d, "p")


def test_cost_counts_gpus_per_replica() -> None:
    # 3 replicas of 4 GPUs at $2.50 per GPU-hour for one hour: 12 GPU-hours = $30
    assert fleet_cost_usd(3600.0, 3, 2.5, gpus_per_replica=4) == pytest.approx(30.0)
    # separate draft hardware is priced per replica: + 3 x $1
    assert fleet_cost_usd(3600.0, 3, 2.5, 1.0, speculative=True, gpus_per_replica=4) == pytest.approx(33.0)
    # one-GPU replicas: unchanged
    assert fleet_cost_usd(1800.0, 2, 2.0) == pytest.approx(2.0)


SCENARIO = """
name = "tp"
[run]
duration_s = 30
warmup_s = 5
seeds = [1]
[workload]
arrival = "poisson"
rate = 2.0
[[workload.segments]]
name = "chat"
share = 1.0
prompt_tokens = {dist = "fixed", value = 100}
output_tokens = {dist = "fixed", value = 20}
[slo]
ttft_ms = 1000
[fleet]
profile = "profile.json"
replicas = 2
tensor_parallel_size = TP
price_per_gpu_hour = 2.0
"""


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "simulate", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def _write(tmp_path: Path, scen_tp: str, prof_tp: int | None) -> Path:
    (tmp_path / "profile.json").write_text(json.dumps(profile_70b(prof_tp)))
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("TP", scen_tp))
    return path


def test_tp4_simulation_charges_gpu_hours(tmp_path: Path) -> None:
    import polars as pl

    path = _write(tmp_path, "4", 4)
    out = tmp_path / "out"
    r = run_cli(str(path), "--quiet", "--out", str(out))
    assert r.returncode == 0, r.stderr
    s = pl.read_parquet(out / "summary.parquet").filter(pl.col("segment") == "all").row(0, named=True)
    req = pl.read_parquet(out / "requests.parquet")
    assert req.height > 0
    cost = s["cost_total_usd"]
    window_h = cost / (2 * 4 * 2.0)  # replicas x GPUs per replica x $/GPU-hour
    assert 0 < window_h * 3600 <= 30.0 + 1e-9  # the measured window, at most the run


def test_mismatched_tp_is_one_line_naming_both(tmp_path: Path) -> None:
    path = _write(tmp_path, "2", 4)
    r = run_cli(str(path), "--quiet")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "fleet.tensor_parallel_size = 2" in lines[0]
    assert "was built for 4" in lines[0] and "profile.json" in lines[0]


def test_pipeline_parallel_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "4\npipeline_parallel_size = 2", 4)
    r = run_cli(str(path), "--quiet")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "fleet.pipeline_parallel_size: 2 is not supported" in lines[0] and "valid: 1" in lines[0]


def test_tp_below_one_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "0", 4)
    r = run_cli(str(path), "--quiet")
    assert r.returncode == 2
    assert "fleet.tensor_parallel_size: must be ≥ 1" in r.stderr
