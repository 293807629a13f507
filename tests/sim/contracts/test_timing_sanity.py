"""The step-time rules (sim/contracts/timing_sanity.py): the repair's algebra, the shipped
profiles, the floor, and a violating grid said in every run's notes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sim.contracts.profile import Profile, load_profile
from sim.contracts.profile_timing import TimingGrid
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.contracts.timing_sanity import Floor, check, envelope, repair
from sim.results.simulation import simulate_once
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

PROFILES = sorted((Path(__file__).resolve().parents[3] / "profiles").glob("*.json"))

_times = arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3)),
                elements=st.one_of(st.floats(0, 1.0), st.just(np.nan)))


def _grid(vals: np.ndarray) -> TimingGrid:
    axes = tuple(tuple(float(2**i) for i in range(n)) for n in vals.shape)
    return TimingGrid("timing.target_forward", ("batch", "tokens_per_seq", "context"), axes, vals)


@settings(max_examples=200, deadline=None)
@given(_times, st.floats(0, 0.5), st.floats(0, 1e-3))
def test_repair_is_idempotent_monotone_never_lowers_and_keeps_nulls(vals, weights_s, kv_s) -> None:
    floor = Floor(weights_s, kv_s, 1.0, 1e9, "test")
    fixed = repair(_grid(vals), "target_forward", floor)
    null = np.isnan(vals)
    assert (np.isnan(fixed) == null).all()
    assert (fixed[~null] >= vals[~null]).all()  # never lowers a step time
    again = repair(_grid(fixed), "target_forward", floor)
    np.testing.assert_array_equal(again, fixed)  # idempotent
    assert check_clean(fixed, floor)
    # least such grid: a cell the rules did not force up keeps its value
    b, _s, c = np.meshgrid(*[np.asarray(a) for a in _grid(vals).axes], indexing="ij")
    top = np.where(null, np.nan, np.fmax(vals, floor.seconds(b, c)))
    env = envelope(top, (0, 1))
    np.testing.assert_array_equal(fixed, env)


def check_clean(vals: np.ndarray, floor: Floor) -> bool:
    """Non-decreasing along batch and tokens_per_seq over the measured cells, and >= the floor."""
    for ax in (0, 1):
        run = np.fmax.accumulate(vals, axis=ax)
        if (vals[~np.isnan(vals)] < run[~np.isnan(vals)]).any():
            return False
    b, _s, c = np.meshgrid(*[np.asarray(a) for a in _grid(vals).axes], indexing="ij")
    return bool((vals[~np.isnan(vals)] >= floor.seconds(b, c)[~np.isnan(vals)]).all())


def _dip(d: dict) -> dict:
    """Batch 4 (index 2) faster than batch 1 at every tokens_per_seq and context, as the
    DeepSeek-V3 8xB200 import was (37.3 ms at batch 1, 25.9 ms at batch 4)."""
    med = np.array(d["timing"]["target_forward"]["median"], dtype=float)
    med[2] = med[0] * 0.7
    d["timing"]["target_forward"]["median"] = med.tolist()
    d["timing"]["target_forward"].pop("p10", None)
    d["timing"]["target_forward"].pop("p90", None)
    return d


def test_a_batch_dip_is_flagged_naming_grid_cell_and_rule() -> None:
    p = Profile.from_dict(_dip(synthetic_profile_dict()), "t")
    (line,) = p.timing_flags
    assert re.match(r"timing\.target_forward: [\d.]+ ms at batch 4 < [\d.]+ ms at batch [12] \(tokens_per_seq", line)
    assert "non-monotone in batch" in line and "used as is" in line
    assert Profile.from_dict(synthetic_profile_dict(), "t").timing_flags == ()


def test_verify_cheaper_than_decode_is_flagged() -> None:
    d = synthetic_profile_dict()
    med = np.array(d["timing"]["target_forward"]["median"], dtype=float)
    med[:, 3] = med[:, 0] * 0.8  # V(3) below T
    d["timing"]["target_forward"]["median"] = med.tolist()
    for k in ("p10", "p90"):
        d["timing"]["target_forward"].pop(k, None)
    (line,) = Profile.from_dict(d, "t").timing_flags
    assert "non-monotone in tokens_per_seq (verify cheaper than decode" in line


def test_noise_within_the_stated_tolerance_is_not_flagged() -> None:
    d = synthetic_profile_dict()
    med = np.array(d["timing"]["target_forward"]["median"], dtype=float)
    med[2] = np.minimum(med[2], med[1] * 0.97)  # 3 % below the smaller batch: timer noise
    d["timing"]["target_forward"]["median"] = med.tolist()
    for k in ("p10", "p90"):
        d["timing"]["target_forward"].pop(k, None)
    p = Profile.from_dict(d, "t")
    assert p.timing_flags == ()
    assert check(p, 0.0, 0.0).findings  # but it is there, below the tolerance


def test_the_bandwidth_floor_is_checked_only_when_the_device_records_its_bandwidth() -> None:
    d = synthetic_profile_dict(base_step_s=1e-4, per_seq_s=1e-6, per_token_s=1e-6, per_context_token_s=1e-12)
    p = Profile.from_dict(d, "t")
    assert p.timing_sanity.floor is None and "no memory bandwidth" in p.timing_sanity.floor_skipped
    d["timing"]["provenance"]["device"] = {"kind": "cuda", "name": "H200", "count": 1,
                                           "memory_bandwidth_bytes_per_s": 4.8e12}
    flagged = Profile.from_dict(d, "t")
    # 2 GiB of weights (less the embedding table) at 4.8 TB/s take ~0.4 ms; the grid says 0.1 ms
    assert flagged.timing_sanity.floor is not None
    assert any("below the bandwidth floor" in line and line.startswith("timing.target_forward")
               for line in flagged.timing_flags)


def test_a_bad_bandwidth_is_one_line_naming_the_field() -> None:
    from sim.contracts.errors import SpecplanError

    d = synthetic_profile_dict()
    d["timing"]["provenance"]["device"] = {"kind": "cuda", "name": "x", "memory_bandwidth_bytes_per_s": -1}
    with pytest.raises(SpecplanError, match=r"timing\.provenance\.device\.memory_bandwidth_bytes_per_s"):
        Profile.from_dict(d, "t")


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_shipped_profiles_are_sane_or_flagged(path: Path) -> None:
    """Imported and estimated grids obey every rule exactly (the import repaired them); a
    measured CPU grid may break one beyond the tolerance only if every run says so."""
    p = load_profile(path)
    if p.timing.provenance.method == "measured":
        strict = check(p, 0.0, 0.0)
        flagged = {line.split(":")[0] for line in p.timing_flags}
        assert {f.grid for f in check(p).findings} == flagged
        assert all(line.endswith("measured timing, used as is") for line in p.timing_flags)
        assert flagged <= {f.grid for f in strict.findings}
    else:
        assert check(p, 0.0, 0.0).findings == (), check(p, 0.0, 0.0).notes()
        if p.timing.provenance.method == "imported":
            assert "timing sanity" in (p.timing.provenance.notes or "")
            assert p.timing_sanity.floor is not None  # the datasheet bandwidth was recorded
            (line,) = p.timing_flags  # the import's repair, said in every run's notes
            assert line.startswith("timing: ") and "repaired at import" in line and "(timing." in line


def test_a_violating_grid_is_said_in_every_runs_notes(tmp_path) -> None:
    text = scenario_toml("dip", run={"duration_s": 20.0, "warmup_s": 0, "seeds": [1]},
                         workload={"arrival": "poisson", "rate": 0.5},
                         segments=[segment(prompt=32, output=8)],
                         fleet={"profile": "profile.json", "replicas": 1}, candidates=[BASELINE],
                         slo={"ttft_ms": 2000, "tpot_ms": 500})
    sc = load_scenario(write_scenario(tmp_path, text))
    (tmp_path / "profile.json").write_text(json.dumps(_dip(synthetic_profile_dict())), encoding="utf-8")
    notes = simulate_once(sc, load_profile(tmp_path / "profile.json"), "baseline", 1).notes
    assert notes[0].startswith("timing.target_forward: ") and "non-monotone in batch" in notes[0]
    clean = simulate_once(sc, load_profile(write_scenario(tmp_path, text).parent / "profile.json"), "baseline", 1)
    assert not any(n.startswith("timing.") for n in clean.notes)
