"""The error table, and `specplan validate` end to end (live on a tiny model, and vLLM results)."""

from __future__ import annotations

import json
import math
import re

import polars as pl
import pytest

from cli.main import main
from sim.fidelity import comparison, drift, live_load
from sim.model.machine_speed import SpeedTimeline
from sim.results import metric_names as mn
from tests.helpers import scenario_toml, write_scenario

EXPECTED_COLUMNS = ["source", "load", "rate", "candidate", "metric", "column", "predicted",
                    "measured", "measured_min", "measured_max", "real_runs", "abs_error", "rel_error",
                    "measured_requests"]


def test_error_rows_compute_relative_error_against_the_measurement():
    pred = {"ttft_ms_median": 110.0, "ttft_ms_p95": 90.0, "request_goodput": 0.5, "itl_ms_median": None}
    meas = {"ttft_ms_median": 100.0, "ttft_ms_p95": 100.0, "request_goodput": 0.0, "itl_ms_median": 20.0}
    table = comparison.error_table(comparison.error_rows("live", 0.3, 1.5, "baseline", pred, meas))
    assert table.columns == EXPECTED_COLUMNS
    by = {r["column"]: r for r in table.to_dicts()}
    assert by["ttft_ms_median"]["rel_error"] == pytest.approx(0.10)
    assert by["ttft_ms_p95"]["rel_error"] == pytest.approx(-0.10)
    assert by["request_goodput"]["rel_error"] is None  # measured 0: no relative error
    assert by["itl_ms_median"]["predicted"] is None and by["itl_ms_median"]["rel_error"] is None
    assert "tpot_ms_p99" not in by  # neither side had it
    bar = comparison.bar_check(table)
    assert set(bar["column"]) == {"ttft_ms_median", "ttft_ms_p95"}
    assert bar["within_bar"].all()
    text = comparison.format_table(table)
    assert "+10.0%" in text and "-10.0%" in text


def test_bar_ignores_loads_at_or_above_85_percent():
    rows = comparison.error_rows("live", 0.85, 3.0, "b", {"e2el_ms_p95": 200.0}, {"e2el_ms_p95": 100.0})
    rows += comparison.error_rows("live", 0.6, 2.0, "b", {"e2el_ms_p95": 100.0}, {"e2el_ms_p95": 100.0})
    bar = comparison.bar_check(comparison.error_table(rows))
    assert bar["load"].to_list() == [0.6]
    assert "1/1 within" in comparison.format_bar(comparison.error_table(rows))


def test_repeated_runs_give_the_median_and_its_range():
    runs = [{"ttft_ms_median": 100.0, "e2el_ms_p95": None}, {"ttft_ms_median": 130.0},
            {"ttft_ms_median": 90.0, "e2el_ms_p95": 50.0}]
    med, spread = comparison.median_values(runs), comparison.spread_values(runs)
    assert med["ttft_ms_median"] == 100.0 and med["e2el_ms_p95"] == 50.0 and med["tpot_ms_p95"] is None
    assert spread["ttft_ms_median"] == (90.0, 130.0) and "tpot_ms_p95" not in spread
    rows = comparison.error_rows("live", 0.3, 1.0, "b", {"ttft_ms_median": 110.0}, med, spread, len(runs))
    r = comparison.error_table(rows).row(0, named=True)
    assert (r["measured"], r["measured_min"], r["measured_max"], r["real_runs"]) == (100.0, 90.0, 130.0, 3)
    assert "90–130" in comparison.format_table(comparison.error_table(rows))


def test_drift_cells_are_measured_profile_cells_near_the_runs_shapes(tmp_path):
    from sim.contracts.profile import load_profile

    _, path = _write_inputs(tmp_path)
    prof = load_profile(path)
    cells = drift.drift_cells(prof, decode_seqs=4, context=100, tokens_per_seq=3, prompt_tokens=30)
    tf = prof.timing.target_forward
    ax = dict(zip(tf.axis_names, tf.axes, strict=True))
    fwd = [dict(c.coords) for c in cells if c.quantity == "target_forward"]
    assert {c["batch"] for c in fwd} <= set(ax["batch"])
    # batches 1, 2, 4 × tokens 1 and 3 × the grid contexts bracketing 100
    below, above = max(c for c in ax["context"] if c <= 100), min(c for c in ax["context"] if c >= 100)
    assert sorted({(c["batch"], c["tokens_per_seq"], c["context"]) for c in fwd}) == sorted(
        {(b, t, int(c)) for b in (1, 2, 4) for t in (1, 3) for c in (below, above)})
    assert all(c.profile_s > 0 for c in cells) and cells[-1].quantity == "target_prefill"
    d = drift.drift_summary(cells, [c.profile_s * 1.1 for c in cells], "before")
    assert d["median_ratio"] == pytest.approx(1.1) and len(d["cells"]) == len(cells)
    # decode and prefill drift apart on a CPU: each gets its own ratio and its own scale
    two = drift.drift_summary(
        cells, [c.profile_s * (1.2 if c.quantity == "target_prefill" else 0.8) for c in cells], "x")
    assert drift.drift_scales(two) == pytest.approx((0.8, 1.2))
    lines = drift.drift_lines([d, two, d, two])
    assert lines[0].startswith("drift: 4 checks") and "decode cells median 0.95 (range 0.80–1.10)" in lines[0]
    assert "prefill cells median 1.15 (range 1.10–1.20)" in lines[0]
    assert lines[1].startswith("furthest from the profile: drift x:")
    assert "median 1.10" in drift.format_drift(d) and "WARNING" not in drift.format_drift(d)
    slow = drift.format_drift(drift.drift_summary(cells, [c.profile_s * 1.65 for c in cells], "now"))
    assert "median 1.65" in slow and "WARNING: the machine is 65% slower" in slow
    fast = drift.format_drift(drift.drift_summary(cells, [c.profile_s * 0.8 for c in cells], "now"))
    assert "20% faster" in fast and "specplan profile --no-acceptance --rounds 3" in fast


def _write_inputs(tmp_path, rates=(0.7, 0.5, 0.35)):
    scenario = write_scenario(
        tmp_path,
        scenario_toml(
            'tiny-validate',
            run={'duration_s': 20, 'seeds': [0]},
            workload={'arrival': 'poisson', 'rate': 2.0},
            segments=[
                {'name': 'chat', 'share': 1.0, 'prompt_tokens': {'dist': 'uniform', 'min': 12, 'max': 40}, 'output_tokens': {'dist': 'uniform', 'min': 4, 'max': 12}, 'acceptance': {'task': 'chat', 'language': 'en'}},
            ],
            slo={'ttft_ms': 500, 'e2el_ms': 3000},
            fleet={'profile': 'p.json'},
            engine={'max_num_seqs': 4, 'max_num_batched_tokens': 64, 'block_size': 16},
            candidates=[
                {'name': 'baseline', 'speculation': 'off'},
                {'name': 'ngram-k2', 'proposer': 'ngram', 'k': 2, 'policy': 'fixed'},
            ],
        ),
        profile_file="p.json",
        name="tiny-synthetic", acceptance_rates=rates,
        base_step_s=0.004, per_seq_s=0.0005, prefill_base_s=0.003,
    )
    return scenario, tmp_path / "p.json"


@pytest.mark.slow
def test_short_live_validate_run_writes_the_error_table(tmp_path, capsys):
    pytest.importorskip("torch")
    scenario, _ = _write_inputs(tmp_path)
    out = tmp_path / "out"
    rc = main(["validate", str(scenario), "--model", "config:tiny-llama", "--capacity", "20",
               "--loads", "0.25,0.5", "--requests", "5", "--sim-reps", "2", "--reps", "2",
               "--drift-correct", "--out", str(out)])
    assert rc == 0
    table = pl.read_csv(out / "fidelity.csv")
    assert table.columns == EXPECTED_COLUMNS
    assert sorted(set(table["candidate"])) == ["baseline", "ngram-k2"]
    assert sorted(set(table["load"])) == [0.25, 0.5]
    assert set(table["rate"]) == {5.0, 10.0}
    expected_metrics = {col for _, col in comparison.COMPARED} - {mn.MEAN_ACCEPTANCE_LENGTH, mn.TOKENS_PER_STEP}
    for (cand, load), grp in table.group_by(["candidate", "load"]):
        missing = expected_metrics - set(grp["column"])
        assert not missing, (cand, load, missing)
        both = grp.filter(pl.col("predicted").is_not_null() & pl.col("measured").is_not_null())
        assert both.height >= 12
        r = both.to_dicts()[0]
        assert r["rel_error"] == pytest.approx((r["predicted"] - r["measured"]) / r["measured"])
    spec = table.filter((pl.col("candidate") == "ngram-k2") & (pl.col("column") == "mean_acceptance_length"))
    assert spec.height == 2 and spec["predicted"].min() > 1.0  # profile's (assumed) acceptance
    # tokens per verification step: counted the same way on both sides (the real proposer's)
    per_step = table.filter((pl.col("candidate") == "ngram-k2") & (pl.col("column") == mn.TOKENS_PER_STEP))
    assert per_step.height == 2 and per_step["measured"].min() >= 1.0 and per_step["predicted"].min() >= 1.0
    meta = json.loads((out / "fidelity.json").read_text(encoding="utf-8"))
    assert meta["threads"] >= 1 and meta["load_basis"] == "given"
    assert meta["capacity"] == {c: {"req_s": 20.0, "method": "given with --capacity"} for c in ("baseline", "ngram-k2")}
    assert meta["complete"] is True and meta["real_runs"] == 2
    # two real runs per point: the measured number is their median, inside their range
    assert set(table["real_runs"]) == {2}
    ok = table.filter(pl.col("measured").is_not_null())
    assert ((ok["measured_min"] <= ok["measured"] + 1e-9) & (ok["measured"] <= ok["measured_max"] + 1e-9)).all()
    # the machine's speed was re-timed against the profile before each real run and after the last
    # (before every real run of every point: 2 runs × 2 loads × 2 candidates, and after the last)
    whens = [d["when"] for d in meta["drift"]]
    assert len(whens) == 9 and whens[0] == "before real run 1 of baseline at 25%"
    assert whens[-1] == "after the last real run"
    assert all(d["median_ratio"] > 0 and d["decode_ratio"] > 0 and d["prefill_ratio"] > 0 for d in meta["drift"])
    assert sum(line.startswith("drift: 9 checks") for line in meta["header"]) == 1
    # --drift-correct: each run's prediction at that run's drift, the uncorrected bar beside it
    assert meta["drift_correct"] is True
    assert any(line.startswith("drift-corrected: ") for line in meta["header"])
    assert sum(line.startswith("without drift correction: bar (") for line in meta["header"]) == 2
    assert any("warmed up to their peak shapes" in line for line in meta["header"])
    assert any("random token ids" in line for line in meta["header"])
    steps = pl.read_parquet(out / "measured_steps.parquet")
    assert (steps["profile_duration_s"] > 0).all() and steps["real_run"].n_unique() == 2
    used = set(steps.select("drift_decode_before", "drift_prefill_before").unique().iter_rows())
    assert used == {(d["decode_ratio"], d["prefill_ratio"]) for d in meta["drift"][:-1]}
    # each run was predicted with a speed timeline from the checks around it (its first and last
    # knots) and the reference passes timed in its idle gaps (knots between, when there were enough)
    corr = meta["drift_corrections"]
    assert len(corr) == 8 and corr[0]["run"] == "baseline at 25%, real run 1"
    assert meta["idle_probes"] is True
    for i, c in enumerate(corr):
        before, after = meta["drift"][i], meta["drift"][i + 1]
        for part in ("decode", "prefill"):
            knots = c[f"{part}_knots"]
            assert knots[0] == [0.0, pytest.approx(before[f"{part}_ratio"])]
            assert knots[-1] == [pytest.approx(c["wall_s"]), pytest.approx(after[f"{part}_ratio"])]
            lo, hi = sorted((before[f"{part}_ratio"], after[f"{part}_ratio"]))
            if len(knots) == 2:  # no in-run knot: the average is the bracket mean
                assert c[part] == pytest.approx((lo + hi) / 2)
    steps_rows = pl.read_parquet(out / "measured_steps.parquet")
    assert {"rows_joined", "rows_left"} <= set(steps_rows.columns) and steps_rows["rows_joined"].sum() > 0
    # every real step against the raw profile and against its run's drift-corrected prediction
    res = pl.read_parquet(out / "step_residuals.parquet")
    assert res.filter(~pl.col("drift_corrected")).height == steps_rows.height
    assert res.filter(pl.col("drift_corrected")).height == steps_rows.height
    raw = res.filter(~pl.col("drift_corrected")).sort("candidate", "load", "real_run", "t_start_s")
    assert raw["predicted_s"].to_list() == pytest.approx(
        steps_rows.sort("candidate", "load", "real_run", "t_start_s")["profile_duration_s"].to_list())
    assert sum(line.startswith("step time measured/predicted (drift-corrected)") for line in meta["header"]) == 1
    # the step-time error per decode batch size, per candidate, one line each
    assert sum(line.startswith("step time error per decode batch size (drift-corrected") for line in meta["header"]) == 1
    batches = sorted(set(raw.filter(pl.col("kind") == "decode")["decode_seqs"]))
    per_batch = [line for line in meta["header"] if line.lstrip().startswith("batch ")]
    assert len(per_batch) == len(set(raw.filter(pl.col("kind") == "decode").select("candidate", "decode_seqs").rows()))
    # each row names how the profile prices that batch size (timing.batch_origin and the axis)
    assert batches and all("% " in line and re.search(r" steps, (measured|refined|interpolated|extrapolated) "
                                                      r"in the profile\)", line) for line in per_batch)
    probes_file = out / "probes.parquet"
    if probes_file.exists():  # idle gaps long enough for a pass: how many is up to the machine
        probes = pl.read_parquet(probes_file)
        assert set(probes["kind"]) <= {"decode", "prefill"} and (probes["ratio"] > 0).all()
        assert sum(c["probes"] for c in corr) == probes.height
        assert any(line.startswith("in-run probes") for line in meta["header"])
    measured = pl.read_parquet(out / "measured_requests.parquet")
    assert sorted(set(measured["real_run"])) == [0, 1]
    measured = measured.filter(pl.col("real_run") == 0)
    predicted = pl.read_parquet(out / "predicted_requests.parquet")
    # both sides served the identical requests
    key = ["candidate", "load", "id", "arrival_s", "prompt_tokens", "output_tokens"]
    assert measured.select(key).sort(key).equals(predicted.select(key).sort(key))
    html = (out / "fidelity.html").read_text(encoding="utf-8")
    assert "predicted vs measured" in html
    printed = capsys.readouterr().out
    assert "rel. error" in printed and "bar (" in printed


@pytest.mark.slow
def test_own_load_basis_runs_each_candidate_at_fractions_of_its_own_capacity(tmp_path):
    pytest.importorskip("torch")
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario

    scenario, prof = _write_inputs(tmp_path)
    sc = live_load.live_scenario(load_scenario(scenario))[0]
    own = {c: live_load.capacity_of(sc, load_profile(prof), 0, c).rate for c in ("baseline", "ngram-k2")}
    assert own["baseline"] != own["ngram-k2"]
    out = tmp_path / "out"
    rc = main(["validate", str(scenario), "--model", "config:tiny-llama", "--loads", "0.5",
               "--requests", "4", "--sim-reps", "1", "--out", str(out)])
    assert rc == 0
    table = pl.read_csv(out / "fidelity.csv")
    rates = dict(table.select("candidate", "rate").unique().iter_rows())
    assert rates == pytest.approx({c: 0.5 * r for c, r in own.items()})
    meta = json.loads((out / "fidelity.json").read_text(encoding="utf-8"))
    assert meta["load_basis"] == "own"
    assert "loads: fractions of each candidate's own capacity (--load-basis own)" in meta["header"]
    assert any(line.startswith("capacity of ngram-k2: ") for line in meta["header"])
    # the scenario said nothing about the KV layout: validate ran (and simulated) a padded engine
    assert any("kv_layout" in line and "'padded'" in line for line in meta["header"])
    steps = pl.read_parquet(out / "measured_steps.parquet")
    dec = steps.filter(pl.col("decode_seqs") > 0)
    assert (dec["kv_width"] >= dec["decode_context_max"] + dec["k"] + 1 - 8).all()


def test_step_residuals_put_each_step_beside_its_prediction_by_pass_size():
    from sim.model.step_time import StepShape

    shapes = [StepShape(1, 100.0, 0, None, start_s=0.0), StepShape(6, 100.0, 3, "ngram", start_s=0.1),
              StepShape(6, 100.0, 3, "ngram", start_s=0.3), StepShape(2, 100.0, 0, None, 64, start_s=0.5),
              StepShape(8, 100.0, 7, "ngram", start_s=0.6)]
    res = live_load.step_residuals([0.10, 0.30, 0.40, 0.50, 0.90], [0.10, 0.20, 0.20, 0.40, 0.90], shapes)
    assert res.columns == list(live_load.RESIDUAL_SCHEMA)
    assert res["kind"].to_list() == ["decode", "decode", "decode", "prefill", "decode"]
    assert res["token_rows"].to_list() == [1, 24, 24, 2, 64]
    assert res["tokens_per_seq"].to_list() == [1, 4, 4, 1, 8]
    assert res["ratio"].to_list() == pytest.approx([1.0, 1.5, 2.0, 1.25, 1.0])
    (line,) = live_load.residual_lines(res, "raw profile")
    assert line == ("step time measured/predicted (raw profile), median (steps) — decode passes by token rows: "
                    "1–4 rows 1.00 (1), 17–32 rows 1.75 (2), 33–64 rows 1.00 (1); steps with prefill 1.25 (1)")
    assert live_load.residual_lines(res.clear(), "raw profile") == []
    with pytest.raises(ValueError, match="2 real, 1 predicted"):
        live_load.step_residuals([0.1, 0.2], [0.1], shapes[:2])


def test_drift_scaled_prediction_multiplies_every_step_time(tmp_path):
    """--drift-correct's prediction: the same simulation with every step time × the drift."""
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario

    scenario, prof = _write_inputs(tmp_path)
    sc, p = live_load.scenario_at(load_scenario(scenario), 1.0, 5, 0), load_profile(prof)
    one = live_load.workload_requests(sc, 0)[:1]  # one request: no queueing
    assert len(one) == 1
    for cand in ("baseline", "ngram-k2"):
        plain = live_load.predict(sc, p, cand, one, 0, 1)
        slow = live_load.predict(sc, p, cand, one, 0, 1, scales=(1.3, 1.3))
        a, b = plain.runs[0].steps["duration_s"].to_numpy(), slow.runs[0].steps["duration_s"].to_numpy()
        assert len(a) == len(b) and b == pytest.approx(1.3 * a, rel=1e-12)
        assert slow.values["e2el_ms_median"] == pytest.approx(1.3 * plain.values["e2el_ms_median"], rel=1e-9)
        # a constant speed timeline is the same as the scales; a step after a slowdown costs more
        const = live_load.predict(sc, p, cand, one, 0, 1, speed=SpeedTimeline.constant(1.3, 1.3))
        assert const.runs[0].steps["duration_s"].to_numpy() == pytest.approx(b, rel=1e-12)
        t = plain.runs[0].steps["t_start_s"].to_numpy()
        cut = float(t[len(t) // 2])
        step = SpeedTimeline((cut - 1e-9, cut), (1.0, 2.0), (0.0,), (1.0,))
        varied = live_load.predict(sc, p, cand, one, 0, 1, speed=step).runs[0].steps
        d, ts = varied["duration_s"].to_numpy(), varied["t_start_s"].to_numpy()
        assert d[ts < cut - 1e-9] == pytest.approx(a[: int((ts < cut - 1e-9).sum())], rel=1e-12)
        assert (d[ts >= cut] > a[: len(d)][ts >= cut] * 1.5).any()


def _vllm_file(tmp_path):
    n = 30
    ttfts = [0.05 + 0.002 * i for i in range(n)]
    itls = [[0.02] * (5 + i % 4) for i in range(n)]
    obj = {
        "date": "20261129-120000", "backend": "vllm", "model_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "num_prompts": n, "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": 15.3, "completed": n, "failed": 0,
        "input_lens": [20 + i for i in range(n)], "output_lens": [len(x) + 1 for x in itls],
        "ttfts": ttfts, "itls": itls, "generated_texts": ["x"] * n, "errors": [""] * n,
        "mean_ttft_ms": 1000 * sum(ttfts) / n,
    }
    path = tmp_path / "vllm-2.0qps.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path, ttfts


def test_vllm_results_are_compared_with_a_simulation_of_the_same_load(tmp_path, capsys):
    scenario, _ = _write_inputs(tmp_path)
    path, ttfts = _vllm_file(tmp_path)
    out = tmp_path / "vout"
    rc = main(["validate", "--vllm-results", str(path), "--scenario", str(scenario),
               "--seeds", "0,1", "--out", str(out)])
    assert rc == 0
    table = pl.read_csv(out / "fidelity.csv")
    assert table.columns == EXPECTED_COLUMNS
    assert set(table["candidate"]) == {"baseline"} and table["load"].is_null().all()
    by = {r["column"]: r for r in table.to_dicts()}
    ordered = sorted(ttfts)
    assert by["ttft_ms_median"]["measured"] == pytest.approx(1000 * (ordered[14] + ordered[15]) / 2)
    assert by["itl_ms_median"]["measured"] == pytest.approx(20.0)
    assert by["request_throughput"]["measured"] == pytest.approx(30 / 15.3)
    for col in ("ttft_ms_median", "e2el_ms_p95", "request_throughput"):
        assert by[col]["predicted"] is not None and math.isfinite(by[col]["predicted"])


def test_bad_arguments_exit_2(tmp_path, capsys):
    scenario, _ = _write_inputs(tmp_path)
    assert main(["validate", str(scenario), "--loads", "0.3,abc"]) == 2
    assert "--loads" in capsys.readouterr().err
    assert main(["validate", str(scenario), "--candidates", "nope", "--capacity", "1"]) == 2
    assert "unknown candidate" in capsys.readouterr().err
    assert main(["validate"]) == 2
    assert "SCENARIO" in capsys.readouterr().err


def test_repeated_extrapolation_notes_fold_into_one_line_per_quantity():
    notes = [
        "extrapolated: target_forward.batch above 4 in 4.8% of steps (16 of 331)",
        "prompts: built-in prompt sets",
        "extrapolated: target_forward.batch above 4 in 11.3% of steps (28 of 248)",
        "extrapolated: target_forward.batch above 4 in 3.8% of steps (13 of 342)",
        "prompts: built-in prompt sets",
    ]
    assert comparison.compact_notes(notes) == [
        "extrapolated: target_forward.batch above 4 in up to 11.3% of steps of a simulated run",
        "prompts: built-in prompt sets",
    ]


def test_capacity_comes_from_the_simulators_capacity_search(tmp_path):
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario

    scenario, prof = _write_inputs(tmp_path)
    sc, p = load_scenario(scenario), load_profile(prof)
    cap = live_load.capacity_of(sc, p, 0)
    assert cap.rate > 0 and "simulated capacity of baseline" in cap.method
    # a candidate's own capacity is its own search (a different number here: k=2 drafting
    # with acceptance 0.7/0.5 changes the service time)
    own = live_load.capacity_of(sc, p, 0, "ngram-k2")
    assert own.rate > 0 and "simulated capacity of ngram-k2" in own.method and own.rate != cap.rate
    # without SLOs: 1 / mean batch-1 service time, said to be an estimate
    est = live_load._service_time_capacity(sc, p)
    assert est.rate > 0 and est.method.startswith("estimated")
    assert est.rate < cap.rate  # batching makes the simulated capacity higher
