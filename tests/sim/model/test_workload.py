"""Open-loop workload generation against theory: Poisson and gamma gaps, piecewise intensity
integrals, exact trace replay, stream independence and reproducibility."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.lengths import LengthDist
from sim.contracts.scenario import RunConfig, Scenario, load_scenario
from sim.contracts.trace import read_trace
from sim.contracts.workload_config import PiecewiseConfig
from sim.workload.workload import (
    RequestSpec,
    generate_arrays,
    generate_requests,
    piecewise_arrivals,
    renewal_arrivals,
)

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO.parent / "shared" / "traces"


def _scenario(workload: dict, duration_s: float = 100.0, base_dir: Path | None = None) -> Scenario:
    segs = workload.pop("segments", None) or [
        {
            "name": "a",
            "share": 3,
            "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.5, "min": 16, "max": 600},
            "output_tokens": {"dist": "uniform", "min": 5, "max": 9},
        },
        {
            "name": "b",
            "share": 1,
            "prompt_tokens": {"dist": "fixed", "value": 42},
            "output_tokens": {"dist": "empirical", "values": [3, 30, 300]},
        },
    ]
    d = {"name": "w", "run": {"duration_s": duration_s}, "workload": {**workload, "segments": segs}}
    return Scenario.from_dict(d, "test", base_dir)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------- arrival processes


def test_poisson_gaps_exponential_and_uncapped() -> None:
    rate, dur = 5.0, 4000.0
    t = renewal_arrivals(_rng(1), dur, rate)
    gaps = np.diff(np.concatenate([[0.0], t]))
    n = len(t)
    assert abs(n - rate * dur) < 4 * np.sqrt(rate * dur)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    # uncapped: the largest of ~20k exponential gaps is ≈ ln(20k) ≈ 9.9 mean gaps (a 3× cap fails)
    assert gaps.max() > 6 / rate
    # counts per second: index of dispersion 1
    counts = np.histogram(t, bins=np.arange(0, dur + 1))[0]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.08)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 4.0])
def test_gamma_cv2_is_inverse_burstiness(burstiness: float) -> None:
    rate, dur = 4.0, 6000.0
    t = renewal_arrivals(_rng(2), dur, rate, burstiness)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)
    cv2 = gaps.var() / gaps.mean() ** 2
    assert cv2 == pytest.approx(1 / burstiness, rel=0.12)


def test_arrivals_within_window_sorted() -> None:
    t = renewal_arrivals(_rng(3), 50.0, 100.0, 0.3)
    assert (np.diff(t) >= 0).all() and t.min() >= 0 and t.max() < 50.0


def _count_check(times: np.ndarray, edges: list[float], expected: list[float]) -> None:
    counts = np.histogram(times, bins=edges)[0]
    for c, e in zip(counts, expected, strict=True):
        assert abs(c - e) <= 4 * np.sqrt(max(e, 1.0)), (counts, expected)


def test_piecewise_step_counts_match_integral() -> None:
    pw = PiecewiseConfig("step", ((0, 10.0), (100, 50.0), (200, 0.0), (300, 20.0)))
    t = piecewise_arrivals(_rng(4), 400.0, pw)
    _count_check(t, [0, 100, 200, 300, 400], [1000, 5000, 0, 2000])
    assert not ((t >= 200) & (t < 300)).any()  # zero rate: exactly none


def test_piecewise_linear_counts_match_integral() -> None:
    pw = PiecewiseConfig("linear", ((0, 0.0), (1000, 20.0)))
    t = piecewise_arrivals(_rng(5), 1000.0, pw)
    # ∫ 0.02 t dt over [0,500) = 2500, over [500,1000) = 7500
    _count_check(t, [0, 500, 1000], [2500, 7500])
    assert pw.mean_rate(1000.0) == pytest.approx(10.0, rel=1e-6)


def test_piecewise_daily_wraps_and_starts_at_start_h() -> None:
    pw = PiecewiseConfig("daily", ((0, 1.0), (12, 3.0)))
    assert pw.rate_at(6 * 3600.0) == pytest.approx(2.0)
    assert pw.rate_at(18 * 3600.0) == pytest.approx(2.0)  # 3 at 12 h back down to 1 at 24 h
    assert pw.rate_at(30 * 3600.0) == pytest.approx(2.0)  # next day
    shifted = PiecewiseConfig("daily", ((0, 1.0), (12, 3.0)), start_h=12.0)
    assert shifted.rate_at(0.0) == pytest.approx(3.0)
    # two hours from noon: rate falls 3 → 3−2/6; counts match the integral
    t = piecewise_arrivals(_rng(6), 7200.0, shifted)
    _count_check(t, [0, 3600, 7200], [3600 * (3 - 1 / 12), 3600 * (3 - 3 / 12)])


def test_piecewise_step_mean_rate_exact() -> None:
    pw = PiecewiseConfig("step", ((0, 1.0), (240, 3.0), (420, 1.0)))
    assert pw.mean_rate(720.0) == pytest.approx((240 + 3 * 180 + 300) / 720)


# ---------------------------------------------------------------------------- generate_requests


def test_requests_shape_ids_and_types() -> None:
    s = _scenario({"arrival": "poisson", "rate": 20.0, "client_timeout_s": 30}, duration_s=50)
    reqs = generate_requests(s.workload, s.run, np.random.SeedSequence(7))
    assert [r.id for r in reqs] == list(range(len(reqs)))
    arr = [r.arrival_s for r in reqs]
    assert arr == sorted(arr) and 0 <= arr[0] and arr[-1] < 50
    assert all(type(r.arrival_s) is float and type(r.prompt_tokens) is int for r in reqs)
    assert all(r.timeout_s == 30.0 for r in reqs)
    assert {r.segment for r in reqs} == {"a", "b"}
    a = [r for r in reqs if r.segment == "a"]
    b = [r for r in reqs if r.segment == "b"]
    assert all(16 <= r.prompt_tokens <= 600 and 5 <= r.output_tokens <= 9 for r in a)
    assert all(r.prompt_tokens == 42 and r.output_tokens in (3, 30, 300) for r in b)
    assert isinstance(reqs[0], RequestSpec)
    with pytest.raises(AttributeError):
        reqs[0].arrival_s = 1.0  # type: ignore[misc]


def test_segment_shares_and_length_distributions() -> None:
    s = _scenario({"arrival": "poisson", "rate": 100.0}, duration_s=200)
    arr = generate_arrays(s.workload, s.run, np.random.SeedSequence(8))
    n = len(arr["segment"])
    share_a = float((arr["segment"] == 0).mean())
    assert share_a == pytest.approx(0.75, abs=4 * np.sqrt(0.75 * 0.25 / n))
    pa = arr["prompt_tokens"][arr["segment"] == 0]
    assert float(np.median(pa)) == pytest.approx(200, rel=0.03)
    oa = arr["output_tokens"][arr["segment"] == 0]
    assert set(np.unique(oa).tolist()) == {5, 6, 7, 8, 9}  # uniform bounds inclusive


def test_same_seed_identical_different_seed_differs() -> None:
    s = _scenario({"arrival": "gamma", "rate": 10.0, "burstiness": 0.5})
    a = generate_requests(s, rng=np.random.SeedSequence(11))
    b = generate_requests(s, rng=np.random.SeedSequence(11))
    c = generate_requests(s, rng=np.random.SeedSequence(12))
    assert a == b
    assert [r.arrival_s for r in a] != [r.arrival_s for r in c]
    assert generate_requests(s, rng=11) == a  # int seed means SeedSequence(int)


def test_seedsequence_not_mutated() -> None:
    seq = np.random.SeedSequence(5)
    s = _scenario({"arrival": "poisson", "rate": 5.0})
    generate_requests(s, rng=seq)
    assert seq.n_children_spawned == 0


def test_changing_lengths_does_not_move_arrivals_or_segments() -> None:
    s = _scenario({"arrival": "poisson", "rate": 10.0})
    other = s.with_overrides(
        {"workload.segments[a].output_tokens": {"dist": "fixed", "value": 77},
         "workload.segments[b].prompt_tokens": {"dist": "uniform", "min": 1, "max": 5}}
    )
    seq = np.random.SeedSequence(21)
    x = generate_arrays(s.workload, s.run, seq)
    y = generate_arrays(other.workload, other.run, seq)
    np.testing.assert_array_equal(x["arrival_s"], y["arrival_s"])
    np.testing.assert_array_equal(x["segment"], y["segment"])
    a = x["segment"] == 0
    # segment a's prompts unchanged (its output dist changed, b's prompt dist changed)
    np.testing.assert_array_equal(x["prompt_tokens"][a], y["prompt_tokens"][a])
    np.testing.assert_array_equal(x["output_tokens"][~a], y["output_tokens"][~a])
    assert (y["output_tokens"][a] == 77).all()


def test_changing_rate_does_not_change_lengths_stream() -> None:
    s = _scenario({"arrival": "poisson", "rate": 10.0})
    seq = np.random.SeedSequence(3)
    x = generate_arrays(s.workload, s.run, seq)
    y = generate_arrays(s.with_overrides({"workload.rate": 12.0}).workload, s.run, seq)
    assert len(y["arrival_s"]) != len(x["arrival_s"])
    # the b segment's output draws are a prefix-stable stream: first draws agree
    bx = x["output_tokens"][x["segment"] == 1]
    by = y["output_tokens"][y["segment"] == 1]
    m = min(len(bx), len(by))
    np.testing.assert_array_equal(bx[:m], by[:m])


def test_whole_scenario_accepted_and_run_required() -> None:
    s = _scenario({"arrival": "poisson", "rate": 3.0})
    assert generate_requests(s, rng=1) == generate_requests(s.workload, s.run, 1)
    with pytest.raises(TypeError):
        generate_requests(s.workload, None, 1)


# ---------------------------------------------------------------------------- trace replay


def _tiny_trace(tmp_path: Path) -> Path:
    rows = [f"2023-11-16 10:00:{sec:02d}.5000000,{10 * sec},{sec % 3}" for sec in range(10)]
    p = tmp_path / "tiny.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return p


def test_trace_replay_window_and_rate_scale_exact(tmp_path: Path) -> None:
    _tiny_trace(tmp_path)
    segs = [
        {"name": "x", "share": 1},
        {"name": "y", "share": 1},
    ]
    s = _scenario(
        {"arrival": "trace", "segments": segs,
         "trace": {"path": "tiny.csv", "start_s": 2, "window_s": 4, "rate_scale": 2.0}},
        duration_s=100, base_dir=tmp_path,
    )
    reqs = generate_requests(s, rng=0)
    # rows at offsets 2,3,4,5 (window [2,6)), re-based to 0 and gaps halved
    assert [r.arrival_s for r in reqs] == [0.0, 0.5, 1.0, 1.5]
    assert [r.prompt_tokens for r in reqs] == [20, 30, 40, 50]
    assert [r.output_tokens for r in reqs] == [2, 1, 1, 2]  # 0 generated tokens clipped to 1
    assert {r.segment for r in reqs} <= {"x", "y"}
    # the run's duration cuts the replay
    short = s.with_overrides({"run.duration_s": 1.2})
    assert [r.arrival_s for r in generate_requests(short, rng=0)] == [0.0, 0.5, 1.0]


def test_trace_default_window_fills_run(tmp_path: Path) -> None:
    _tiny_trace(tmp_path)
    s = _scenario(
        {"arrival": "trace", "segments": [{"name": "x", "share": 1}],
         "trace": {"path": "tiny.csv", "rate_scale": 0.5}},
        duration_s=8, base_dir=tmp_path,
    )
    # window = 8·0.5 = 4 trace seconds: offsets 0..3 at times 0, 2, 4, 6
    assert [r.arrival_s for r in generate_requests(s, rng=0)] == [0.0, 2.0, 4.0, 6.0]
    # a pre-read trace gives the same result
    tr = read_trace(tmp_path / "tiny.csv")
    assert generate_requests(s, rng=0, trace=tr) == generate_requests(s, rng=0)


def test_trace_window_past_end_is_an_error(tmp_path: Path) -> None:
    _tiny_trace(tmp_path)
    s = _scenario(
        {"arrival": "trace", "segments": [{"name": "x", "share": 1}],
         "trace": {"path": "tiny.csv", "start_s": 50}},
        base_dir=tmp_path,
    )
    with pytest.raises(SpecplanError, match=r"tiny\.csv: no trace rows in the window \[50\.0, 150\.0\).*start_s"):
        generate_requests(s, rng=0)


@pytest.mark.parametrize(("trace", "field"), [
    ({"start_s": 0.2, "rate_scale": 1e-300}, "window_s (default run.duration_s × rate_scale 1e-300)"),
    ({"start_s": 0.5, "window_s": 0.1}, "widen workload.trace.window_s"),
])
def test_an_empty_trace_window_names_the_field_that_emptied_it(tmp_path: Path, trace: dict, field: str) -> None:
    """A window inside the trace that holds no row is too narrow: the hint is the window (or the
    scale that sets it), not the start, which is already inside the trace."""
    _tiny_trace(tmp_path)
    s = _scenario({"arrival": "trace", "segments": [{"name": "x", "share": 1}],
                   "trace": {"path": "tiny.csv", **trace}}, base_dir=tmp_path)
    with pytest.raises(SpecplanError, match="no trace rows") as info:
        generate_requests(s, rng=0)
    assert field in str(info.value) and "start_s" not in str(info.value).split(";")[-1]


@pytest.mark.skipif(not (TRACES / "azure_llm_2023_conv.csv").is_file(),
                    reason=f"public Azure traces not found at {TRACES}")
def test_shipped_azure_replay_matches_trace_rows() -> None:
    s = load_scenario(REPO / "scenarios" / "azure-conv-replay.toml")
    tc = s.workload.trace
    assert tc is not None
    tr = read_trace(tc.resolved_path)
    reqs = generate_requests(s, rng=np.random.SeedSequence(1))
    window = tc.effective_window_s(s.run.duration_s)
    sel = (tr.offsets_s >= tc.start_s) & (tr.offsets_s < tc.start_s + window)
    assert len(reqs) == int(sel.sum()) > 100
    np.testing.assert_allclose([r.arrival_s for r in reqs], (tr.offsets_s[sel] - tc.start_s) / tc.rate_scale)
    assert [r.prompt_tokens for r in reqs] == np.maximum(tr.prompt_tokens[sel], 1).tolist()
    assert [r.output_tokens for r in reqs] == np.maximum(tr.output_tokens[sel], 1).tolist()


# ---------------------------------------------------------------------------- lengths


def test_lognormal_clip_and_median() -> None:
    d = LengthDist("lognormal", median=100, sigma=1.0, min=20, max=300)
    x = d.sample(_rng(9), 50_000)
    assert x.min() == 20 and x.max() == 300 and x.dtype == np.int64
    assert float(np.median(x)) == pytest.approx(100, rel=0.03)
    assert d.upper_bound == 300 and d.lower_bound == 20


def test_unbounded_lognormal_upper_bound_none() -> None:
    d = LengthDist("lognormal", median=10, sigma=0.1)
    assert d.upper_bound is None and d.sample(_rng(1), 10).min() >= 1


def test_shipped_default_rates() -> None:
    s = load_scenario(REPO / "scenarios" / "default.toml")
    n = [len(generate_requests(s, rng=np.random.SeedSequence(seed))) for seed in s.run.seeds]
    expected = s.workload.rate * s.run.duration_s  # type: ignore[operator]
    assert all(abs(k - expected) < 4 * np.sqrt(expected) for k in n)
    assert RunConfig(10.0).seeds == (0,)


def test_trace_mean_rate_and_load_scale(tmp_path: Path) -> None:
    _tiny_trace(tmp_path)
    s = _scenario(
        {"arrival": "trace", "segments": [{"name": "x", "share": 1}],
         "trace": {"path": "tiny.csv", "window_s": 4.0}},
        duration_s=8, base_dir=tmp_path,
    )
    # rows at offsets 0..3 in 8 s of run
    assert s.workload.mean_rate(8) == pytest.approx(4 / 8)
    double = s.with_load_scale(2.0)
    assert double.workload.trace is not None and double.workload.trace.window_s == 4.0
    times = [r.arrival_s for r in generate_requests(double, rng=0)]
    assert times == [0.0, 0.5, 1.0, 1.5]  # the same rows in half the time (a 4 s run)
    assert double.run.duration_s == 4.0
    assert double.workload.mean_rate(4) == pytest.approx(2 * s.workload.mean_rate(8))


def test_piecewise_load_scale_scales_counts() -> None:
    s = _scenario({"arrival": "piecewise",
                   "piecewise": {"shape": "linear", "points": [[0, 5.0], [100, 15.0]]}}, 100)
    assert s.workload.mean_rate(100) == pytest.approx(10.0)
    assert s.with_load_scale(3.0).workload.mean_rate(100) == pytest.approx(30.0)
    n = len(generate_requests(s.with_load_scale(3.0), rng=4))
    assert abs(n - 3000) < 4 * np.sqrt(3000)
