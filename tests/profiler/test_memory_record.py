"""The profile's memory record: the process peak measured beside the weights, and a reserve for
other applications that every KV capacity leaves out (the profiler's rows and the simulator's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.grids.profile_request import ProfileRequest, ProposerRequest
from profiler.grids.timing_grids import TimingGrids
from profiler.passes.memory import kv_capacity_rows, reserve_of, with_reserve
from profiler.run import run_profile
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.model.kv_capacity import kv_capacity

GIB = 2**30


def tiny(out: Path, **kw) -> ProfileRequest:
    grids = TimingGrids(batch=(1, 2), tokens_per_seq=(1, 2), context=(8,), prefill_tokens=(4,),
                        prefill_context=(0,), draft_batch=(1,), k_max=1, draft_context=(8,),
                        overhead_batch=(1,), overhead_k=(1,), overhead_context=8, warmup=0, repeats=1,
                        prefill_repeats=1)
    return ProfileRequest(target="config:tiny-llama", out=out, device="cpu", k_max=1, grids=grids,
                          proposers=(ProposerRequest.parse("ngram"),), progress=False, command="test", **kw)


def test_a_profile_records_its_process_peak_and_reserve(tmp_path: Path):
    raw = run_profile(tiny(tmp_path / "p.json", reserve_gb=0.5))
    mem = raw["memory"]
    peak = mem["process_peak"]
    # the whole process: Python, torch and the model, far above the tiny model's weights
    assert peak["rss_bytes"] > mem["target_weight_bytes"] and peak["rss_bytes"] > 50 * 2**20
    assert peak["cuda_max_allocated_bytes"] is None and "ru_maxrss" in peak["how"] and "no GPU" in peak["how"]
    assert mem["reserve"] == {"bytes": GIB // 2, "rule": "--reserve-gb 0.5 (GiB kept for other applications)"}
    prof = load_profile(tmp_path / "p.json")
    assert prof.memory.reserve_bytes == GIB // 2 and prof.memory.process_peak.rss_bytes == peak["rss_bytes"]
    # the profile's capacity rows and the simulator agree, reserve included (block size 1: no rounding)
    for row in prof.memory.kv_capacity:
        assert row.kv_tokens == kv_capacity(prof, row.memory_utilization, 1, row.proposer).kv_tokens
    assert "cold_start" not in raw  # random weights: nothing was loaded from disk


def test_the_reserve_takes_its_bytes_out_of_every_row():
    section = {"device_memory_bytes": 16 * GIB, "target_weight_bytes": GIB, "activation_peak_bytes": 0,
               "target_kv_bytes_per_token": 1000, "proposers": {"d": {"weight_bytes": GIB, "kv_bytes_per_token": 500,
                                                                        "activation_peak_bytes": 0}}}
    section["kv_capacity"] = kv_capacity_rows(16 * GIB, GIB, 0, 1000, section["proposers"])
    kept = with_reserve(section, (3 * GIB, "--reserve-gb 3"))
    for before, after in zip(section["kv_capacity"], kept["kv_capacity"], strict=True):
        per = 1000 + (500 if before["proposer"] else 0)
        assert abs((before["kv_tokens"] - after["kv_tokens"]) - 3 * GIB / per) <= 1
    assert with_reserve(section, None) is section


def test_reserve_flags_are_checked_in_one_line():
    assert reserve_of(None, None, 16 * GIB) is None
    assert reserve_of(None, 0.25, 16 * GIB) == (4 * GIB, "--reserve-fraction 0.25 of 16.00 GiB (kept for other applications)")
    for gb, frac, words in ((1.0, 0.1, "give one, not both"), (-1.0, None, "must be a number of GiB >= 0"),
                            (None, 1.0, "must be in [0, 1)")):
        with pytest.raises(SpecplanError, match=words.replace("[", r"\[").replace(")", r"\)")):
            reserve_of(gb, frac, 16 * GIB)
    with pytest.raises(SpecplanError, match="valid: less than the device's memory"):
        with_reserve({"device_memory_bytes": GIB}, (2 * GIB, "--reserve-gb 2"))
