"""A sweep's summary points file (`specplan calibrate --points`): what it accepts, the speed-up it
reads, and one clear line naming file, line and field for everything it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.contracts.sweep_points import SIDE_FIELDS, SweepPoint, load_sweep_points

GOOD = """\
name = "t"
load = "concurrency"
source = "a table in a paper"

[[points]]
load = 1
baseline = { tpot_p50_ms = 10.0, output_tok_s = 100 }
speculative = { tpot_p50_ms = 5.0, output_tok_s = 190 }

[[points]]
load = 32
speedup = 1.2
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pts.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_a_good_file_loads_lightest_first_with_each_points_source_and_line(tmp_path):
    text = GOOD.replace("load = 1\n", "load = 64\n").replace("load = 32\n", "load = 2\n")
    pts = load_sweep_points(_write(tmp_path, text))
    assert [p.load for p in pts.points] == [2.0, 64.0]
    assert [p.line for p in pts.points] == [10, 5]
    assert all(p.source == "a table in a paper" for p in pts.points)
    assert pts.points[1].measured_speedup() == pytest.approx(1.9)  # output tok/s: spec ÷ base


@given(b=st.floats(0.1, 1e4), s=st.floats(0.1, 1e4), q=st.sampled_from(SIDE_FIELDS))
def test_a_measured_speedup_is_higher_when_the_speculative_side_is_better(b, s, q):
    p = SweepPoint(1.0, "x", 1, {q: b}, {q: s}, speedup_of=q)
    got = p.measured_speedup()
    better = s > b if q == "output_tok_s" else s < b  # throughput up, latency down
    assert got is not None and (got > 1.0) == better and got == pytest.approx(s / b if q == "output_tok_s" else b / s)


BAD = [
    ("load = \"qps\"", "load = \"concurrency\"", "pts.toml: load: expected \"concurrency\""),
    ("", "source = \"a table in a paper\"\n", "pts.toml:4: points[0].source: missing"),
    ("load = 32\nspeedup = -1.2", "load = 32\nspeedup = 1.2", "pts.toml:10: points[1].speedup: expected a speed-up"),
    ("tpot_p50_ms = 0.0", "tpot_p50_ms = 5.0", "pts.toml:5: points[0].speculative.tpot_p50_ms: expected milliseconds"),
    ("tpot_p5_ms = 5.0", "tpot_p50_ms = 5.0", "points[0].speculative.tpot_p5_ms: unknown measurement; valid: "),
    ("load = 1\n", "load = 32\n", "pts.toml:10: points: load 1 appears twice (also line 5)"),
    ("accept = 2.0\nload = 32", "load = 32", "pts.toml:10: points[1].accept: unknown field; valid: load"),
    ("acceptance_length = 0.5, tpot_p50_ms = 5.0", "tpot_p50_ms = 5.0",
     "points[0].speculative.acceptance_length: a mean acceptance length is >= 1"),
    ("fit_to = \"tpot_p50_ms\"\n[[points]]\nload = 32\nspeedup = 1.1\n[[points]]\nload = 64\nspeedup = 1.0",
     "[[points]]\nload = 1\nbaseline", "fit_to = 'tpot_p50_ms', but the lightest point (load 32) gives only speedup"),
]


@pytest.mark.parametrize(("new", "old", "message"), BAD)
def test_a_bad_points_file_is_refused_in_one_line_naming_file_line_and_field(tmp_path, new, old, message):
    text = GOOD.replace(old, new, 1)
    if "fit_to" in new:  # a file whose points are all speed-ups
        text = GOOD.split("[[points]]")[0] + new + "\n"
    with pytest.raises(SpecplanError) as exc:
        load_sweep_points(_write(tmp_path, text))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_one_point_is_refused_since_the_lightest_is_fitted_and_the_others_held_out(tmp_path):
    with pytest.raises(SpecplanError, match="at least two"):
        load_sweep_points(_write(tmp_path, GOOD.split("[[points]]\nload = 32")[0]))


def test_a_lightest_point_with_only_a_baseline_has_nothing_to_fit_acceptance_on(tmp_path):
    text = GOOD.replace("speculative = { tpot_p50_ms = 5.0, output_tok_s = 190 }\n", "")
    with pytest.raises(SpecplanError, match=r"pts.toml:5: points \(load 1, the lightest\): nothing to fit"):
        load_sweep_points(_write(tmp_path, text))


@pytest.mark.parametrize(("extra", "message"), [
    (["--fit", "step_overhead_ms"], "--fit step_overhead_ms: with --points only acceptance_scale"),
    (["--holdout", "last"], "--holdout last: with --points acceptance is fitted on the lightest load only"),
    (["--duration", "-3"], "--duration: expected seconds > 0"),
])
def test_cli_refuses_points_options_it_cannot_honour_in_one_line_exit_2(tmp_path, capsys, extra, message):
    pts = _write(tmp_path, GOOD)
    rc = main(["calibrate", "scenarios/concurrency-eagle3-h100.toml", "--points", str(pts), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and "\n" not in err and "Traceback" not in err


def test_cli_bad_points_file_is_one_line_exit_2(tmp_path, capsys):
    pts = _write(tmp_path, GOOD.replace("speedup = 1.2", "speedup = \"fast\""))
    rc = main(["calibrate", "scenarios/concurrency-eagle3-h100.toml", "--points", str(pts)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "pts.toml:10: points[1].speedup: expected a speed-up ratio" in err and "\n" not in err


def _vllm_run(tmp_path: Path, name: str, **over) -> None:
    run = {"backend": "vllm", "request_rate": "inf", "max_concurrency": 8, "median_tpot_ms": 7.5,
           "median_ttft_ms": 40.0, "median_e2el_ms": 1900.0, "output_throughput": 1000.0, **over}
    (tmp_path / name).write_text(json.dumps(run), encoding="utf-8")


def test_a_side_reads_a_vllm_result_files_medians_and_throughput_and_cites_it(tmp_path):
    _vllm_run(tmp_path, "base-8.json")
    _vllm_run(tmp_path, "spec-8.json", median_tpot_ms=5.0, output_throughput=1400.0)
    text = ('load = "concurrency"\n[[points]]\nload = 8\nbaseline = { vllm_result = "base-8.json" }\n'
            'speculative = { vllm_result = "spec-8.json", acceptance_length = 2.4 }\n'
            '[[points]]\nload = 64\nsource = "x"\nspeedup = 1.1\n')
    p = load_sweep_points(_write(tmp_path, text)).points[0]
    assert p.baseline == {"tpot_p50_ms": 7.5, "ttft_p50_ms": 40.0, "e2el_p50_ms": 1900.0, "output_tok_s": 1000.0}
    assert p.speculative["tpot_p50_ms"] == 5.0 and p.speculative["acceptance_length"] == 2.4
    assert "base-8.json" in p.source and "spec-8.json" in p.source
    assert p.measured_speedup() == pytest.approx(1.4)


@pytest.mark.parametrize(("over", "side", "message"), [
    ({"max_concurrency": 16}, "{ vllm_result = \"r.json\" }", "ran with --max-concurrency 16, but the point's load is 8"),
    ({"median_tpot_ms": -1}, "{ vllm_result = \"r.json\" }", "r.json: median_tpot_ms: expected tpot p50 ms"),
    ({}, "{ vllm_result = \"r.json\", tpot_p50_ms = 3.0 }", "baseline.tpot_p50_ms: also read from vllm_result"),
])
def test_a_vllm_result_for_another_load_or_with_bad_numbers_is_refused_in_one_line(tmp_path, over, side, message):
    _vllm_run(tmp_path, "r.json", **over)
    text = f'load = "concurrency"\nsource = "x"\n[[points]]\nload = 8\nbaseline = {side}\nspeedup = 1.2\n' \
           '[[points]]\nload = 64\nspeedup = 1.1\n'
    with pytest.raises(SpecplanError) as exc:
        load_sweep_points(_write(tmp_path, text))
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give --vllm-results FILE... (per-request runs) or --points FILE"),
    (["--points", "P", "--vllm-results", "tests/sim/contracts/traces/vllm_bench.json"],
     "--points and --vllm-results: give one kind of measured input"),
    (["--vllm-results", "tests/sim/contracts/traces/vllm_bench.json", "--duration", "30"], "--duration: only with --points"),
])
def test_cli_needs_exactly_one_kind_of_measured_input(tmp_path, capsys, argv, message):
    argv = [str(_write(tmp_path, GOOD)) if a == "P" else a for a in argv]
    rc = main(["calibrate", "scenarios/concurrency-eagle3-h100.toml", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and "\n" not in err
