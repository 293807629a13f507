"""`specplan calibrate --points`: acceptance fitted on the lightest load alone comes back from a
simulated sweep, the held-out loads are then predicted as simulated, and the crossover is where
the speed-up passes 1 between the two loads around it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cli.main import main
from sim.contracts.profile import Profile
from sim.contracts.scenario import load_scenario
from sim.contracts.sweep_points import load_sweep_points
from sim.contracts.synthetic import synthetic_profile_dict
from sim.fidelity.calibration_search import fit_rough
from sim.fidelity.calibration_terms import Terms, apply_terms
from sim.fidelity.sweep_calibrate import (
    calibrate_sweep,
    crossover,
    median_halfwidth,
    median_ranks,
    scenario_at,
)
from sim.results.simulation import simulate_once
from tests.helpers import scenario_toml

LOADS = (1, 4, 16)
CANDIDATE = "ngram-k3"
SCALE_TOLERANCE = 0.06
"""How close the fitted scale must come back: acceptance counts are whole drafts and a run's
acceptance draws are finite, so the objective has small steps near the truth."""


def _scenario(folder: Path, profile: dict) -> Path:
    (folder / "p.json").write_text(json.dumps(profile), encoding="utf-8")
    text = scenario_toml(
        "sweep", run={"duration_s": 20, "warmup_s": 2, "seeds": [0]},
        workload={"arrival": "concurrency", "concurrency": 1},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "uniform", "min": 12, "max": 40},
                   "output_tokens": {"dist": "uniform", "min": 40, "max": 80},
                   "acceptance": {"task": "chat", "language": "en"}}],
        slo={"ttft_ms": 500, "e2el_ms": 3000}, fleet={"profile": "p.json"},
        engine={"max_num_seqs": 32, "max_num_batched_tokens": 1024, "block_size": 16},
        candidates=[{"name": "baseline", "speculation": "off"},
                    {"name": CANDIDATE, "proposer": "ngram", "k": 3}])
    path = folder / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _truth_points(folder: Path, scenario_path: Path, profile: dict, scale: float, fit_to: str) -> Path:
    """The sweep the simulator serves with acceptance × ``scale``, written as summary points:
    TPOT p50 and output tok/s of both sides at every load (seed 0, as the fit runs)."""
    sc = load_scenario(scenario_path)
    lines = ['name = "truth"', 'load = "concurrency"', 'source = "simulated truth"', f'fit_to = "{fit_to}"']
    for n in LOADS:
        at = sc.with_overrides({"workload.concurrency": n})
        sides = {}
        for cand, s in (("baseline", 1.0), (CANDIDATE, scale)):
            doc, tsc = apply_terms(profile, at, cand, Terms(acceptance_scale=s), "the known truth")
            row = simulate_once(tsc, Profile.from_dict(doc, "truth"), cand, 0, keep_itl=False).summary.filter(
                pl.col("segment") == "all").row(0, named=True)
            sides[cand] = (f"{{ tpot_p50_ms = {row['tpot_ms_median']!r}, "
                           f"output_tok_s = {row['output_throughput']!r} }}")
        lines += ["[[points]]", f"load = {n}", f"baseline = {sides['baseline']}",
                  f"speculative = {sides[CANDIDATE]}"]
    path = folder / "points.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scale=st.floats(0.45, 1.0), base_ms=st.floats(4.0, 12.0), per_seq_ms=st.floats(0.2, 1.5),
       fit_to=st.sampled_from(["speedup", "tpot_p50_ms"]))
# a free draw found it: a golden section over the whole box matched the lightest load's TPOT p50
# at scale 0.59 as well as at the truth, and predicted the heaviest load 7.6 % off
@example(scale=0.543, base_ms=9.0, per_seq_ms=0.75, fit_to="tpot_p50_ms")
# 200 free draws found it: the truth pays at N = 16 by a hair, the fitted scale (inside the band)
# stops paying there; the band's ends disagree, so the lightest load does not pin the crossover
@example(scale=0.45, base_ms=4.0, per_seq_ms=0.7964265095900724, fit_to="tpot_p50_ms")
def test_lightest_load_fit_brackets_the_true_scale_and_its_band_predicts_the_held_out_loads(
        tmp_path_factory, scale, base_ms, per_seq_ms, fit_to):
    folder = tmp_path_factory.mktemp("sweep")
    profile = synthetic_profile_dict(name="sweep-synthetic", base_step_s=base_ms / 1000, per_seq_s=per_seq_ms / 1000)
    sc_path = _scenario(folder, profile)
    pts = load_sweep_points(_truth_points(folder, sc_path, profile, scale, fit_to))
    cal = calibrate_sweep(pts, load_scenario(sc_path), profile, "synthetic", CANDIDATE, (0,))
    lo, hi = cal.scale_band
    assert lo <= scale <= hi and lo <= cal.scale <= hi, (cal.scale_band, cal.scale, scale)
    assert [r.role for r in cal.rows] == ["fit", "held out", "held out"]
    # the held-out loads were not fitted, yet the scales the lightest load cannot tell apart
    # predict them as simulated: the scale is all that differed
    assert cal.tpot_band_worst is not None and cal.tpot_band_worst <= 0.05, cal.tpot_band_worst
    x = cal.crossovers
    if x["band_low"].same_as(x["calibrated"]) and x["band_high"].same_as(x["calibrated"]):
        assert x["calibrated"].same_as(x["measured"])  # a crossover the band pins is the measured one


STEP_RESIDUALS = st.tuples(st.floats(0.4, 1.6), st.floats(-3.0, -0.3), st.floats(0.0, 0.04),
                           st.floats(-1.0, 1.0), st.integers(0, 2**16))


@given(case=STEP_RESIDUALS)
@example(case=(1.0, -0.3, 0.04, 1.0, 0))  # every step to one side: the trend's zero lies 0.13 from the match
@example(case=(1.5, -0.375, 0.0390625, 0.0, 0))  # steps that flatten the trend over ±0.1: found by a free draw
def test_a_step_shaped_residual_is_fitted_within_a_band_that_holds_its_exact_match(case):
    """A residual that is a straight line plus steps of up to ``amp`` (a median jumping from one
    request to the next), all to one side (``bias``) or scattered, but zero on the step holding
    ``at`` (where the measurement was taken): the band, given the steps' size as its tolerance,
    holds ``at`` and the fitted value, however far the steps push the trend's zero off it."""
    at, slope, amp, bias, salt = case

    def residual(v: float) -> float:
        cell = math.floor(v * 80.0)  # flat for 1/80 of the scale, then a jump
        if cell == math.floor(at * 80.0):
            return slope * (v - at)
        return slope * (v - at) + amp * (bias + (1.0 - abs(bias)) * math.sin(cell * 12.9898 + salt))

    band = fit_rough(residual, 0.25, 2.0, 12, tolerance=2.0 * amp)
    assert band.pinned
    assert band.low <= at <= band.high and band.low <= band.value <= band.high, (band, at)
    assert abs(residual(band.value)) <= 3.0 * amp + 0.01 * abs(slope) * (band.high - band.low)  # golden-section steps


@settings(deadline=None)  # scipy's first import
@given(n=st.integers(6, 5000))
def test_the_medians_interval_covers_the_true_median_95_percent_of_the_time(n):
    """Exact, whatever the distribution: the count of values below the true median is
    Binomial(n, 1/2), so ranks j < k cover it with probability F(k) − F(j) (scipy's binomial)."""
    from scipy.stats import binom

    j, k = median_ranks(n)
    assert binom.cdf(k, n, 0.5) - binom.cdf(j, n, 0.5) >= 0.945  # 95 % to the normal approximation's 0.5 %
    assert j < n // 2 <= k  # around the sample's own median


def test_the_medians_halfwidth_is_half_the_log_span_of_its_ranks():
    v = np.exp(np.linspace(0.0, 1.0, 101))  # log-values 0, 0.01, … 1
    j, k = median_ranks(101)
    assert median_halfwidth(v[::-1].copy()) == pytest.approx((k - j) / 100 / 2)  # sorted inside
    assert median_halfwidth(np.array([1.0, 2.0])) is None


def test_the_fit_moves_only_the_candidates_acceptance_and_says_so_in_its_provenance(tmp_path):
    profile = synthetic_profile_dict(name="sweep-synthetic")
    sc_path = _scenario(tmp_path, profile)
    pts = load_sweep_points(_truth_points(tmp_path, sc_path, profile, 0.6, "speedup"))
    cal = calibrate_sweep(pts, load_scenario(sc_path), profile, "synthetic", CANDIDATE, (0,))
    assert cal.profile_doc["timing"] == profile["timing"]  # no step time touched
    entry = cal.profile_doc["acceptance"]["ngram"]
    assert entry["provenance"]["method"] == "calibrated" and "lightest load" in entry["provenance"]["notes"]
    # the baseline is predicted once per load: acceptance cannot move it
    assert all(r.values["baseline.tpot_p50_ms"][1] == r.values["baseline.tpot_p50_ms"][2] for r in cal.rows)


LOAD_LISTS = st.lists(st.floats(0.5, 500.0).map(lambda v: round(v, 3)), min_size=2, max_size=7,
                      unique=True).map(sorted)
"""Loads as a sweep writes them (to 0.001): two a float's last bit apart leave no load between
them for the line to cross 1 at (a free draw found 499.99999999999994 and 500.0)."""


@given(data=st.data(), loads=LOAD_LISTS)
def test_crossover_lies_between_the_two_loads_where_the_speedup_first_passes_one(data, loads):
    speedups = data.draw(st.lists(st.floats(0.3, 3.0), min_size=len(loads), max_size=len(loads)))
    x = crossover(loads, speedups)
    pays = [s > 1.0 for s in speedups]
    if all(pays):
        assert x.kind == "pays_throughout"
    elif not any(pays):
        assert x.kind == "never_pays"
    else:
        i = next(j for j in range(len(pays) - 1) if pays[j] != pays[j + 1])
        assert x.kind == "at" and x.bracket == (loads[i], loads[i + 1])
        assert loads[i] <= x.load <= loads[i + 1]
        assert x.direction == ("stops paying" if pays[i] else "starts paying")
        s0, s1 = speedups[i], speedups[i + 1]
        if s1 != s0:  # the straight line through the two points is at 1 there
            at_load = s0 + (s1 - s0) * (x.load - loads[i]) / (loads[i + 1] - loads[i])
            assert at_load == pytest.approx(1.0, abs=1e-6)


def test_cli_prints_every_load_the_crossover_and_writes_the_json(tmp_path, capsys):
    profile = synthetic_profile_dict(name="sweep-synthetic")
    sc_path = _scenario(tmp_path, profile)
    pts = _truth_points(tmp_path, sc_path, profile, 0.7, "speedup")
    out = tmp_path / "cal.json"
    rc = main(["calibrate", str(sc_path), "--points", str(pts), "--json", str(out), "-o", str(tmp_path / "p2.json")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "held out" in text and "crossover: measured" in text and "TPOT p50 within 15 % at every held-out load" in text
    rec = json.loads(out.read_text())
    assert [r["load"] for r in rec["rows"]] == list(map(float, LOADS))
    assert rec["rows"][0]["role"] == "fit" and rec["acceptance_scale"] == pytest.approx(0.7, abs=SCALE_TOLERANCE)
    Profile.from_dict(json.loads((tmp_path / "p2.json").read_text()), "written")  # the calibrated profile loads


def test_a_rate_sweep_is_simulated_as_poisson_arrivals_at_each_points_rate(tmp_path):
    profile = synthetic_profile_dict(name="sweep-synthetic")
    sc = load_scenario(_scenario(tmp_path, profile)).with_overrides({"run.duration_s": 60})  # ~120 requests at 2/s
    rows = []
    for rate in (2.0, 20.0):
        at = sc.with_overrides({"workload.arrival": "poisson", "workload.rate": rate, "workload.concurrency": None})
        doc, tsc = apply_terms(profile, at, CANDIDATE, Terms(acceptance_scale=0.8), "the known truth")
        s = simulate_once(tsc, Profile.from_dict(doc, "truth"), CANDIDATE, 0, keep_itl=False).summary.filter(
            pl.col("segment") == "all").row(0, named=True)
        rows += ["[[points]]", f"load = {rate}", f"speculative = {{ tpot_p50_ms = {s['tpot_ms_median']!r} }}"]
    (tmp_path / "r.toml").write_text("\n".join(['load = "rate"', 'source = "simulated truth"', *rows]) + "\n")
    cal = calibrate_sweep(load_sweep_points(tmp_path / "r.toml"), sc, profile, "synthetic", CANDIDATE, (0,))
    assert abs(cal.scale - 0.8) <= SCALE_TOLERANCE
    assert cal.tpot_worst[1] is not None and cal.tpot_worst[1] <= 0.05  # 20 req/s held out, predicted as served


@pytest.mark.parametrize(("kind", "load"), [("concurrency", 8), ("rate", 3.5)])
@pytest.mark.parametrize("scenario", ["scenarios/gpu-chat-h200.toml", "scenarios/concurrency-eagle3-h100.toml"])
def test_any_scenario_is_set_to_each_points_load_whatever_its_own_arrival(scenario, kind, load):
    w = scenario_at(load_scenario(scenario), kind, load).workload
    assert (w.arrival, w.concurrency if kind == "concurrency" else w.rate) == (
        "concurrency" if kind == "concurrency" else "poisson", load)


def test_held_out_measurements_never_reach_the_fit(tmp_path):
    """The same lightest point with wildly different heavier ones: the same scale, to the bit."""
    profile = synthetic_profile_dict(name="sweep-synthetic")
    sc = load_scenario(_scenario(tmp_path, profile))
    scales = []
    for heavy in (0.2, 5.0):
        path = tmp_path / f"h{heavy}.toml"
        path.write_text('load = "concurrency"\nsource = "x"\n[[points]]\nload = 1\nspeedup = 1.3\n'
                        f'[[points]]\nload = 16\nspeedup = {heavy}\nspeculative = {{ tpot_p50_ms = {heavy} }}\n')
        scales.append(calibrate_sweep(load_sweep_points(path), sc, profile, "synthetic", CANDIDATE, (0,)).scale)
    assert scales[0] == scales[1]


def test_a_lightest_load_acceptance_cannot_reach_is_said_with_the_miss(tmp_path):
    profile = synthetic_profile_dict(name="sweep-synthetic")
    sc = load_scenario(_scenario(tmp_path, profile))
    path = tmp_path / "far.toml"
    path.write_text('load = "concurrency"\nsource = "x"\n[[points]]\nload = 1\nspeedup = 9.0\n'
                    '[[points]]\nload = 16\nspeedup = 1.1\n')
    cal = calibrate_sweep(load_sweep_points(path), sc, profile, "synthetic", CANDIDATE, (0,))
    assert any("matched only to" in n and "edge of its box" in n for n in cal.notes), cal.notes
