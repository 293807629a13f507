"""Per-request overhead outside the engine (fleet.request_overhead): it moves TTFT and E2E by
exactly fixed + per-prompt-token time and leaves TPOT, ITL and the engine's work alone."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from sim.contracts.errors import SpecplanError
from sim.contracts.fleet_config import RequestOverhead
from sim.contracts.scenario import load_scenario
from sim.results import metric_names as mn
from sim.results.metrics import OVERHEAD, latency_arrays, with_latencies, with_request_overhead
from sim.results.runner import run_scenario
from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment, write_scenario
from tests.sim.results.test_metrics import req_frame

_row = st.tuples(st.floats(0, 1e4), st.floats(0, 10), st.floats(0, 100), st.integers(1, 5000),
                 st.integers(0, 200_000), st.sampled_from(["completed", "rejected", "timed_out"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_row, min_size=1, max_size=20), st.floats(0, 1000), st.floats(0, 1))
def test_overhead_shifts_ttft_and_e2e_exactly_and_not_tpot(rows: list, fixed_ms: float, per_token_ms: float) -> None:
    frame = req_frame([dict(arrival_s=a, first_token_s=a + t, finish_s=a + t + d, output_tokens=g,
                            prompt_tokens=p, outcome=o) for a, t, d, g, p, o in rows])
    o = RequestOverhead(fixed_ms=fixed_ms, per_prompt_token_ms=per_token_ms)
    ttft, tpot, e2el = latency_arrays(frame)
    ttft2, tpot2, e2el2 = latency_arrays(with_request_overhead(frame, o))
    want = (fixed_ms + per_token_ms * frame["prompt_tokens"].to_numpy()) / 1000.0
    done = frame["outcome"].to_numpy() == mn.COMPLETED
    np.testing.assert_allclose(ttft2[done] - ttft[done], want[done], rtol=0, atol=1e-9)
    np.testing.assert_allclose(e2el2[done] - e2el[done], want[done], rtol=0, atol=1e-9)
    np.testing.assert_allclose(tpot2, tpot, rtol=1e-9, atol=1e-12)  # NaN where undefined, on both
    assert np.isnan(ttft2[~done]).all()


def test_no_overhead_leaves_the_frame_as_it_was() -> None:
    frame = req_frame([dict(arrival_s=1.0, first_token_s=1.5, finish_s=2.0, output_tokens=3, outcome="completed")])
    assert with_request_overhead(frame, None) is frame
    assert OVERHEAD not in with_latencies(frame).columns


def _scenario(tmp_path, overhead: dict | None):
    fleet = {"profile": "profile.json", "replicas": 1}
    if overhead is not None:
        fleet["request_overhead"] = overhead
    text = scenario_toml("light", run={"duration_s": 60.0, "warmup_s": 0, "seeds": [1, 2]},
                         workload={"arrival": "poisson", "rate": 0.2},
                         segments=[segment(prompt={"dist": "uniform", "min": 16, "max": 400}, output=24)],
                         fleet=fleet, candidates=[BASELINE, NGRAM_K3], slo={"ttft_ms": 2000, "tpot_ms": 500})
    return load_scenario(write_scenario(tmp_path, text))


def test_at_light_load_ttft_and_e2e_move_by_the_overhead_and_tpot_does_not(tmp_path) -> None:
    plain = run_scenario(_scenario(tmp_path, None))
    over = run_scenario(_scenario(tmp_path, {"fixed_ms": 11.0, "per_prompt_token_ms": 0.005}))
    a, b = with_latencies(plain.requests), with_latencies(over.requests)
    # the engine served the same requests at the same times: only the client-side view moved
    assert_frame_equal(a.drop("ttft_s", "e2el_s"), b.drop("ttft_s", "e2el_s", OVERHEAD))
    want = (11.0 + 0.005 * b["prompt_tokens"].cast(pl.Float64)) / 1000.0
    done = (b["outcome"] == mn.COMPLETED).to_numpy()
    assert done.sum() > 10
    np.testing.assert_allclose((b["ttft_s"] - a["ttft_s"]).to_numpy()[done], want.to_numpy()[done], atol=1e-12)
    np.testing.assert_allclose((b["e2el_s"] - a["e2el_s"]).to_numpy()[done], want.to_numpy()[done], atol=1e-12)
    s0, s1 = plain.summary, over.summary
    np.testing.assert_allclose(s1[mn.latency_col(mn.TPOT, "mean")], s0[mn.latency_col(mn.TPOT, "mean")], rtol=1e-12)
    np.testing.assert_allclose(s1[mn.latency_col(mn.ITL, "p99")], s0[mn.latency_col(mn.ITL, "p99")], rtol=1e-12)
    assert (s1[mn.latency_col(mn.TTFT, "mean")] > s0[mn.latency_col(mn.TTFT, "mean")] + 0.011).all()
    assert any("request overhead outside the engine: 11 ms + 0.005 ms per prompt token" in x and "assumed" in x
               for x in over.sources)


@pytest.mark.parametrize(("overhead", "expected"), [
    ({"fixed_ms": -1.0}, "fleet.request_overhead.fixed_ms: must be in [0, 600000] ms"),
    ({"per_prompt_token_ms": 1e9}, "fleet.request_overhead.per_prompt_token_ms: must be in [0, 1000] ms"),
    ({"fixed_ms": 10.0, "source": "measured"}, "fleet.request_overhead.citation: required when source is 'measured'"),
    ({"fixed_ms": 10.0, "source": "guessed"}, "fleet.request_overhead.source: must be one of"),
])
def test_bad_overhead_names_the_field(tmp_path, overhead: dict, expected: str) -> None:
    with pytest.raises(SpecplanError) as info:
        _scenario(tmp_path, overhead)
    assert expected in str(info.value)
