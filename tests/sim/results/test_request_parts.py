"""A scenario result's per-request records kept as parts (``sim.results.request_parts``): exact
round trips, and a result that holds one compact part per candidate × seed and no ITL samples."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from sim.contracts.scenario import load_scenario
from sim.decisions.answer import answer_of
from sim.results import request_parts
from sim.results.records import REQUEST_SCHEMA
from sim.results.request_parts import RequestParts
from sim.results.runner import run_scenario
from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment, write_scenario


def _frame(n: int, seed: int) -> pl.DataFrame:
    """``n`` request rows with nulls, NaN-free floats, strings and booleans (REQUEST_SCHEMA)."""
    rng = np.random.default_rng(seed)
    data: dict[str, object] = {}
    for name, dtype in REQUEST_SCHEMA.items():
        if dtype == pl.String:
            data[name] = rng.choice(["completed", "rejected", "selfdraft-l6-k3", ""], n).tolist()
        elif dtype == pl.Boolean:
            data[name] = rng.random(n) < 0.5
        elif dtype == pl.Float64:
            v = rng.random(n) * 100
            data[name] = [None if x < 10 else float(x) for x in v]
        else:
            data[name] = rng.integers(-5, 1 << 40, n)
    return pl.DataFrame(data, schema=REQUEST_SCHEMA)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5), threshold=st.integers(1, 50),
       seed=st.integers(0, 2**16))
def test_parts_round_trip_exactly_whatever_is_compressed(sizes, threshold, seed) -> None:
    frames = [_frame(n, seed + i) for i, n in enumerate(sizes)]
    old = request_parts.COMPRESS_ROWS
    request_parts.COMPRESS_ROWS = threshold
    try:
        parts = RequestParts.of_frames(frames)
    finally:
        request_parts.COMPRESS_ROWS = old
    assert [isinstance(p, bytes) for p in parts.parts] == [f.height >= threshold for f in frames]
    for got, want in zip(parts.frames(), frames, strict=True):
        assert_frame_equal(got, want)
    whole = parts.frame()
    assert_frame_equal(whole, pl.concat(frames, how="vertical", rechunk=True))
    assert whole.n_chunks() == 1
    assert_frame_equal(parts.merged(parts).frame(), pl.concat([whole, whole]))


def test_no_parts_is_an_empty_frame_of_the_schema() -> None:
    assert RequestParts((), REQUEST_SCHEMA).frame().schema == REQUEST_SCHEMA


SCENARIO = scenario_toml(
    "parts", run={"duration_s": 30, "warmup_s": 5, "seeds": [1, 2]},
    workload={"arrival": "poisson", "rate": 4.0}, segments=[segment(prompt=64, output=24)],
    slo={"ttft_ms": 1500, "tpot_ms": 80}, fleet={"profile": "profile.json", "price_per_gpu_hour": 2.0},
    candidates=[BASELINE, NGRAM_K3])


def test_a_result_keeps_one_compact_part_per_run_and_decides_as_from_one_frame(tmp_path, monkeypatch) -> None:
    """Records kept compressed change no record and no decision; the result keeps one part per
    candidate × seed (in candidate, then seed order), so it never holds all runs at full width."""
    sc = load_scenario(write_scenario(tmp_path, SCENARIO))
    plain = run_scenario(sc)
    monkeypatch.setattr(request_parts, "COMPRESS_ROWS", 1)
    packed = run_scenario(sc)
    assert len(packed.request_parts.parts) == 4
    assert all(isinstance(p, bytes) for p in packed.request_parts.parts)
    keys = [(f["candidate"][0], f["seed"][0]) for f in packed.request_parts.frames()]
    assert keys == [("baseline", 1), ("baseline", 2), ("ngram-k3", 1), ("ngram-k3", 2)]
    assert_frame_equal(packed.requests, plain.requests)
    assert packed.request_parts.nbytes < plain.request_parts.nbytes
    assert answer_of(packed) == answer_of(plain)
