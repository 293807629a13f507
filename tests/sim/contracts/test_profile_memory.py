"""The memory section's measured process peak and reserve: recorded, read, old profiles still load."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile, load_profile
from sim.contracts.synthetic import GIB, synthetic_profile_dict

REPO = Path(__file__).resolve().parents[3]


def test_process_peak_and_reserve_are_read():
    d = synthetic_profile_dict()
    d["memory"]["process_peak"] = {"rss_bytes": 1_400_000_000, "cuda_max_allocated_bytes": None,
                                   "nvml_process_bytes": None, "how": "getrusage ru_maxrss"}
    d["memory"]["reserve"] = {"bytes": 2 * GIB, "rule": "--reserve-gb 2"}
    mem = Profile.from_dict(d, "p.json").memory
    assert mem.process_peak is not None and mem.process_peak.rss_bytes == 1_400_000_000
    assert mem.process_peak.cuda_max_allocated_bytes is None and mem.process_peak.how == "getrusage ru_maxrss"
    assert mem.reserve_bytes == 2 * GIB and mem.reserve is not None and mem.reserve.rule == "--reserve-gb 2"


@pytest.mark.parametrize("name", ["smollm2-135m-cpu.json", "smollm2-135m-cpu-xeon.json"])
def test_profiles_written_before_the_fields_still_load(name: str):
    mem = load_profile(REPO / "profiles" / name).memory
    assert mem.process_peak is None and mem.reserve is None and mem.reserve_bytes == 0


@pytest.mark.parametrize("patch, where", [
    ({"reserve": {"bytes": -1, "rule": "x"}}, "memory.reserve.bytes"),
    ({"reserve": {"bytes": 10**15, "rule": "x"}}, "memory.reserve.bytes"),
    ({"reserve": {"bytes": 1}}, "memory.reserve"),
    ({"process_peak": {"rss_bytes": "big"}}, "memory.process_peak.rss_bytes"),
    ({"process_peak": {"rss": 1}}, "memory.process_peak"),
])
def test_a_bad_memory_record_is_one_line_naming_its_field(patch, where):
    d = synthetic_profile_dict()
    d["memory"].update(patch)
    with pytest.raises(SpecplanError) as info:
        Profile.from_dict(d, "p.json")
    assert f"p.json: {where}" in str(info.value) and "\n" not in str(info.value)
