"""`specplan calibrate`: the round trip recovers known terms, the fit only rewrites profile and
scenario values, every point is shown calibrated and uncalibrated, and bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile, load_profile
from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from sim.contracts.vllm_results import parse_result
from sim.fidelity.calibrate import CalibrationRequest, MeasuredAcceptance, calibrate
from sim.fidelity.calibration_terms import Terms, add_host_cost, apply_terms, scale_acceptance_entry
from sim.fidelity.vllm_compare import simulate_vllm
from tests.helpers import scenario_toml

RATES = (2.0, 6.0, 12.0)
PROFILE = {"name": "cal-synthetic", "base_step_s": 0.004, "per_seq_s": 0.0005, "prefill_base_s": 0.003}
CANDIDATE = "ngram-k3"


def _scenario(folder: Path) -> Path:
    (folder / "p.json").write_text(json.dumps(synthetic_profile_dict(**PROFILE)), encoding="utf-8")
    text = scenario_toml(
        "cal", run={"duration_s": 10, "seeds": [0]}, workload={"arrival": "poisson", "rate": 2.0},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "uniform", "min": 12, "max": 40},
                   "output_tokens": {"dist": "uniform", "min": 4, "max": 12},
                   "acceptance": {"task": "chat", "language": "en"}}],
        slo={"ttft_ms": 500, "e2el_ms": 3000}, fleet={"profile": "p.json"},
        engine={"max_num_seqs": 16, "max_num_batched_tokens": 512, "block_size": 16},
        candidates=[{"name": "baseline", "speculation": "off"},
                    {"name": CANDIDATE, "proposer": "ngram", "k": 3}])
    path = folder / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _truth(folder: Path, scenario: Scenario, truth: Terms, candidate: str = CANDIDATE,
           rates: tuple[float, ...] = RATES, profile: dict | None = None) -> tuple[list[Path], float | None]:
    """`--save-detailed` files of what the simulator served with ``truth`` written into the
    profile and scenario (seed 0, every step streamed as one chunk), and the run's mean
    acceptance length as vLLM counts it: the data a calibration must invert."""
    doc = synthetic_profile_dict(**(profile or PROFILE))
    tdoc, tsc = apply_terms(doc, scenario, candidate, truth, "the known truth")
    profile = Profile.from_dict(tdoc, "truth")
    over = truth.request_overhead_ms / 1000.0
    rng = np.random.default_rng(7)
    paths, accepted, drafts = [], 0, 0
    for rate in rates:
        n = 60
        outs = [int(x) for x in rng.integers(20, 90, n)]
        skeleton = {"request_rate": rate, "burstiness": 1.0, "duration": 1.0,
                    "input_lens": [int(x) for x in rng.integers(20, 200, n)], "output_lens": outs,
                    "ttfts": [0.1] * n, "itls": [[0.01] * (o - 1) for o in outs], "errors": [""] * n}
        run = simulate_vllm(parse_result(skeleton, "skeleton"), tsc, profile, candidate, [0]).runs[0]
        req = run.requests.sort("id")
        accepted += int(req["accepted_tokens"].sum())
        drafts += int(req["num_drafts"].sum())
        itls = [run.itl.filter(pl.col("id") == i)["gap_s"].to_list() for i in req["id"]]
        obj = {**skeleton, "ttfts": (req["first_token_s"] - req["arrival_s"] + over).to_list(), "itls": itls,
               "duration": float(req["finish_s"].max()), "output_lens": req["generated_tokens"].to_list(),
               "input_lens": req["prompt_tokens"].to_list()}
        path = folder / f"bench-{rate:g}.json"
        path.write_text(json.dumps(obj), encoding="utf-8")
        paths.append(path)
    return paths, (1.0 + accepted / drafts if drafts else None)


def _request(folder: Path, paths: list[Path], fit: tuple[str, ...], holdout: str = "last",
             acceptance: float | None = None, candidate: str = CANDIDATE,
             profile: dict | None = None) -> CalibrationRequest:
    from sim.contracts.vllm_results import load_vllm_results

    scenario = load_scenario(folder / "s.toml")
    return CalibrationRequest(
        tuple(r for p in paths for r in load_vllm_results(p)), scenario, synthetic_profile_dict(**(profile or PROFILE)),
        "p.json", candidate, fit, holdout, (0,),
        MeasuredAcceptance(acceptance, "the truth's counters") if acceptance else None)


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.floats(0.5, 1.0), step_ms=st.floats(0.5, 3.0), request_ms=st.floats(0.0, 100.0))
def test_calibration_round_trip_recovers_the_known_terms(tmp_path_factory, scale, step_ms, request_ms):
    """Simulate with known acceptance scale and overheads, write the outputs as vLLM bench
    results at three loads, calibrate the uncalibrated profile: the terms come back within
    0.05 (scale), 0.4 ms (per step) and 5 ms (per request)."""
    folder = tmp_path_factory.mktemp("roundtrip")
    scenario = load_scenario(_scenario(folder))
    truth = Terms(acceptance_scale=scale, step_overhead_ms=step_ms, request_overhead_ms=request_ms)
    paths, al = _truth(folder, scenario, truth)
    cal = calibrate(_request(folder, paths, ("acceptance_scale", "step_overhead_ms", "request_overhead_ms"),
                             acceptance=al))
    assert abs(cal.after.acceptance_scale - scale) <= 0.05, cal.after
    assert abs(cal.after.step_overhead_ms - step_ms) <= 0.4, cal.after
    assert abs(cal.after.request_overhead_ms - request_ms) <= 5.0, cal.after
    assert cal.heldout["source"].unique().to_list() == [str(paths[-1])]


DRAFT_HOST_PROFILE = {**PROFILE, "overhead_base_s": 0.002}
"""H(b, k) of 2 ms a step: the size of an import's assumed 0.5 ms a draft pass at k = 3-4."""


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.floats(0.0, 4.0), request_ms=st.floats(0.0, 100.0))
def test_round_trip_recovers_the_drafting_host_time_beside_the_request_overhead(tmp_path_factory, scale, request_ms):
    """The draft's host time H(b, k) × s with a measured acceptance (vLLM's counters): a run
    served at s comes back as s within 0.15, so an import's assumed 0.5 ms a draft pass can be
    replaced by the deployment's own, and the request overhead beside it within 5 ms."""
    folder = tmp_path_factory.mktemp("drafthost")
    scenario = load_scenario(_scenario(folder))
    truth = Terms(draft_host_scale=scale, request_overhead_ms=request_ms)
    paths, al = _truth(folder, scenario, truth, profile=DRAFT_HOST_PROFILE)
    cal = calibrate(_request(folder, paths, ("draft_host_scale", "request_overhead_ms"), acceptance=al,
                             profile=DRAFT_HOST_PROFILE))
    assert abs(cal.after.draft_host_scale - scale) <= 0.15, cal.after
    assert abs(cal.after.request_overhead_ms - request_ms) <= 5.0, cal.after


def test_draft_host_scale_multiplies_the_overhead_grid_and_keeps_where_it_came_from():
    doc = synthetic_profile_dict(**PROFILE)
    scenario_doc = doc["timing"]["proposers"]["ngram"]
    out = add_host_cost(scenario_doc, 10.0, "why", scale=3.0)
    b = scenario_doc["overhead"]["axes"]["batch"]
    for i, batch in enumerate(b):
        for v, got in zip(scenario_doc["overhead"]["median"][i], out["overhead"]["median"][i], strict=True):
            assert got == pytest.approx(3.0 * v + 10e-6 * batch)  # the per-row cost is not scaled
    notes = out["overhead_provenance"]["notes"]
    assert "H(b, k) × 3" in notes and "10 µs × b" in notes


def test_acceptance_fitted_on_the_lightest_load_alone_is_recovered_and_checked_on_the_others(tmp_path):
    scenario = load_scenario(_scenario(tmp_path))
    truth = Terms(acceptance_scale=0.6)
    paths, _ = _truth(tmp_path, scenario, truth)
    cal = calibrate(_request(tmp_path, paths, ("acceptance_scale",), holdout="lightest"))
    assert abs(cal.after.acceptance_scale - 0.6) <= 0.05
    held = cal.heldout.filter(pl.col("column") == "tpot_ms_median")
    assert held.height == 2  # both heavier loads held out
    assert (held["rel_error_calibrated"].abs() < held["rel_error_uncalibrated"].abs()).all()


def test_the_fit_only_rewrites_profile_values_and_the_scenario_overhead(tmp_path):
    scenario = load_scenario(_scenario(tmp_path))
    doc = synthetic_profile_dict(**PROFILE)
    terms = Terms(acceptance_scale=0.5, step_overhead_ms=1.5, request_overhead_ms=30.0, spec_host_us_per_row=10.0)
    new_doc, new_sc = apply_terms(doc, scenario, CANDIDATE, terms, "test")
    profile = Profile.from_dict(new_doc, "calibrated")
    assert profile.timing.step_overhead is not None and profile.timing.step_overhead.seconds == pytest.approx(0.0015)
    assert profile.timing.step_overhead.provenance.method == "calibrated"
    assert new_sc.fleet.request_overhead is not None and new_sc.fleet.request_overhead.fixed_ms == 30.0
    assert new_sc.fleet.request_overhead.source == "calibrated"
    # nothing else moved: the grids of the target and the memory are the same objects' values
    assert new_doc["timing"]["target_forward"] == doc["timing"]["target_forward"]
    assert new_doc["memory"] == doc["memory"]
    b = doc["timing"]["proposers"]["ngram"]["overhead"]["axes"]["batch"]
    for i, batch in enumerate(b):
        for j, v in enumerate(doc["timing"]["proposers"]["ngram"]["overhead"]["median"][i]):
            got = new_doc["timing"]["proposers"]["ngram"]["overhead"]["median"][i][j]
            assert got == pytest.approx(v + 10e-6 * batch)


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(0.1, 3.0))
def test_scaled_acceptance_is_a_valid_profile_entry_with_survival_times_scale_capped_at_one(scale):
    doc = synthetic_profile_dict(**PROFILE)
    entry = doc["acceptance"]["ngram"]
    doc["acceptance"]["ngram"] = scale_acceptance_entry(entry, scale, "test")
    profile = Profile.from_dict(doc, "scaled")  # counts consistent, survival non-increasing
    before = Profile.from_dict(synthetic_profile_dict(**PROFILE), "before").acceptance["ngram"].segments[0]
    after = profile.acceptance["ngram"].segments[0]
    for p0, p1 in zip(before.survival, after.survival, strict=True):
        assert p1 == pytest.approx(min(1.0, scale * p0), abs=1.0 / before.num_drafts + 1e-12)
    assert profile.acceptance["ngram"].provenance.method == "calibrated"


def test_host_cost_is_added_per_row_and_named_in_the_overhead_provenance():
    doc = synthetic_profile_dict(**PROFILE)
    out = add_host_cost(doc["timing"]["proposers"]["ngram"], 25.0, "why")
    assert out["overhead_provenance"]["method"] == "calibrated"
    assert "25 µs × b" in out["overhead_provenance"]["notes"]


def test_cli_prints_both_predictions_and_writes_a_calibrated_profile_that_loads(tmp_path, capsys):
    scenario_path = _scenario(tmp_path)
    paths, al = _truth(tmp_path, load_scenario(scenario_path), Terms(acceptance_scale=0.8, step_overhead_ms=1.0))
    out, sc_out = tmp_path / "calibrated.json", tmp_path / "calibrated.toml"
    rc = main(["calibrate", str(scenario_path), "--vllm-results", *map(str, paths), "--fit",
               "acceptance_scale,step_overhead_ms", "--iterations", "4", "-o", str(out), "--scenario-out", str(sc_out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "uncalibrated" in text and "calibrated" in text and "(held out)" in text
    assert "TPOT p50 (ms)" in text and "mean acceptance length" in text
    profile = load_profile(out)
    assert profile.timing.step_overhead is not None
    assert profile.timing.step_overhead.provenance.method == "calibrated"
    assert "calibrated from" in (profile.timing.step_overhead.provenance.notes or "")
    assert "held-out TPOT p50 error" in (profile.acceptance["ngram"].provenance.notes or "")
    assert load_scenario(sc_out).fleet.profile == str(out.resolve())


@pytest.mark.parametrize(("extra", "message"), [
    (["--fit", "acceptance,step_overhead_ms"], "--fit: unknown term(s) acceptance; valid: acceptance_scale"),
    (["--candidate", "baseline", "--fit", "acceptance_scale"], "--fit: acceptance_scale need a speculative candidate"),
    (["--candidate", "baseline", "--fit", "draft_host_scale"], "--fit: draft_host_scale need a speculative candidate"),
    (["--holdout", "last", "--seeds", "x"], "--seeds: expected an integer"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, message):
    scenario_path = _scenario(tmp_path)
    bench = Path(__file__).parents[1] / "contracts" / "traces" / "vllm_bench.json"
    rc = main(["calibrate", str(scenario_path), "--vllm-results", str(bench), str(bench), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_one_measured_load_is_refused_since_one_must_be_held_out(tmp_path):
    scenario = load_scenario(_scenario(tmp_path))
    paths, _ = _truth(tmp_path, scenario, Terms(), rates=(2.0,))
    with pytest.raises(SpecplanError, match="at least two measured loads"):
        _request(tmp_path, paths, ("step_overhead_ms",))


def test_measured_acceptance_from_vllms_per_request_stats_enters_the_fit(tmp_path, capsys):
    scenario_path = _scenario(tmp_path)
    paths, _ = _truth(tmp_path, load_scenario(scenario_path), Terms())
    trace = Path(__file__).parents[1] / "contracts" / "traces" / "vllm_spec_decode_detailed.jsonl"
    out_json = tmp_path / "cal.json"
    rc = main(["calibrate", str(scenario_path), "--vllm-results", *map(str, paths[:2]), "--fit", "acceptance_scale",
               "--acceptance-trace", str(trace), "--iterations", "3", "--json", str(out_json)])
    text = capsys.readouterr().out
    assert rc == 0
    assert f"measured acceptance length ({trace})" in text
    rows = [r for r in json.loads(out_json.read_text())["rows"] if r["column"] == "mean_acceptance_length"]
    assert rows and all(r["measured"] == pytest.approx(1 + 8 / 6) for r in rows)
    assert all(abs(r["rel_error_calibrated"]) < abs(r["rel_error_uncalibrated"]) for r in rows)


def _metrics_scrape(path: Path, al: float, k: int = 3) -> Path:
    """A /metrics scrape whose spec-decode counters say mean acceptance length ``al``."""
    drafts = 100_000
    accepted = round((al - 1.0) * drafts)
    per = sorted((accepted // k + (1 if i < accepted % k else 0) for i in range(k)), reverse=True)
    lab = 'engine="0",model_name="m"'
    lines = [f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
             f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {k * drafts}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
             *[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {n}'
               for i, n in enumerate(per)]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_prometheus_counters_give_the_measured_acceptance_and_the_default_fit_takes_all_three(tmp_path, capsys):
    scenario_path = _scenario(tmp_path)
    truth = Terms(acceptance_scale=0.7, step_overhead_ms=1.5, request_overhead_ms=30.0)
    paths, al = _truth(tmp_path, load_scenario(scenario_path), truth)
    scrape = _metrics_scrape(tmp_path / "metrics.txt", al)
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(scenario_path), "--vllm-results", *map(str, paths), "--spec-metrics", str(scrape),
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"the measured acceptance length ({scrape})" in text and "warning:" not in text
    after = json.loads(out.read_text())["after"]
    assert abs(after["acceptance_scale"] - 0.7) <= 0.05 and abs(after["step_overhead_ms"] - 1.5) <= 0.4


def test_acceptance_and_step_overhead_without_measured_acceptance_is_warned_about(tmp_path, capsys):
    scenario_path = _scenario(tmp_path)
    paths, _ = _truth(tmp_path, load_scenario(scenario_path), Terms(acceptance_scale=0.8), rates=(2.0, 6.0))
    assert main(["calibrate", str(scenario_path), "--vllm-results", *map(str, paths), "--fit",
                 "acceptance_scale,step_overhead_ms", "--iterations", "2"]) == 0
    assert "warning: acceptance_scale and step_overhead_ms both move TPOT" in capsys.readouterr().out


def test_more_terms_than_measured_numbers_is_refused_in_one_line(tmp_path):
    scenario = load_scenario(_scenario(tmp_path))
    paths, _ = _truth(tmp_path, scenario, Terms(), rates=(2.0, 6.0))
    req = _request(tmp_path, paths, ("acceptance_scale", "step_overhead_ms", "request_overhead_ms",
                                     "spec_host_us_per_row"), holdout="lightest")
    with pytest.raises(SpecplanError, match=r"--fit: 4 term\(s\) but only 3 measured number\(s\)"):
        calibrate(req)


@pytest.mark.parametrize("term", ["step_overhead_ms", "spec_host_us_per_row", "draft_host_scale"])
def test_every_step_cost_fitted_beside_acceptance_without_counters_is_warned_about(term):
    """A cheaper step and a better acceptance both shorten TPOT: the warning names each step cost."""
    from types import SimpleNamespace

    from sim.fidelity.calibration_report import confounding_lines

    said = confounding_lines(SimpleNamespace(fitted=("acceptance_scale", term), acceptance=None))
    assert len(said) == 1 and f"acceptance_scale and {term} both move TPOT" in said[0]
    measured = SimpleNamespace(fitted=("acceptance_scale", term), acceptance=MeasuredAcceptance(2.0, "x"))
    assert confounding_lines(measured) == []
