"""The error table's small-sample warning (``sim.fidelity.comparison.tail_warnings``): a
percentile with fewer than a couple of measured requests above it is one request's value."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from cli.main import main
from sim.fidelity.comparison import (
    MEASURED_REQUESTS,
    MIN_TAIL_REQUESTS,
    error_rows,
    error_table,
    tail_warnings,
)

REPO = Path(__file__).resolve().parents[3]


def _table(n: int | None, load: float | None = 0.3):
    values = {"ttft_ms_median": 100.0, "ttft_ms_p95": 200.0, "ttft_ms_p99": 250.0, "e2el_ms_p95": 900.0}
    measured = {**values, MEASURED_REQUESTS: None if n is None else float(n)}
    return error_table(error_rows("live", load, 1.0, "baseline", values, measured))


@given(st.integers(1, 1000))
@example(4)  # the boundaries: p50 has exactly 2 above at 4 requests, p95 at 40, p99 at 200
@example(40)
@example(39)
@example(200)
@example(199)
def test_a_percentile_warns_exactly_when_fewer_than_a_couple_of_requests_lie_above_it(n) -> None:
    lines = tail_warnings(_table(n))
    thin = [q for q in (50, 95, 99) if n * (1 - q / 100) < MIN_TAIL_REQUESTS]
    assert bool(lines) == bool(thin)
    if thin:
        (line,) = lines
        assert f"rest on {n} measured requests" in line
        assert "(" + ", ".join(f"p{q} {n * (1 - q / 100):.1f}" for q in thin) + ")" in line  # these, no others
        need = int(line.rsplit("at least ", 1)[1].split()[0])
        top = max(thin)
        assert need * (1 - top / 100) >= MIN_TAIL_REQUESTS - 1e-9 > (need - 1) * (1 - top / 100)


def test_p95_over_12_requests_is_named_as_one_requests_value() -> None:
    (line,) = tail_warnings(_table(12))
    assert line.startswith("warning: baseline at load 30% (live): its percentiles rest on 12 measured requests")
    assert "(p95 0.6, p99 0.1)" in line and "measure at least 200 requests for p99" in line
    assert tail_warnings(_table(400)) == [] and tail_warnings(_table(None)) == []
    assert math.isclose(_table(12)[MEASURED_REQUESTS][0], 12)


def test_validate_against_a_vllm_result_prints_the_warning_beside_the_bar(tmp_path, monkeypatch, capsys) -> None:
    """The shipped 5-request fixture (4 succeeded): p95 and p99 each rest on a fraction of one."""
    scenario = (REPO / "scenarios" / "gpu-chat-h200.toml").read_text(encoding="utf-8")
    (tmp_path / "s.toml").write_text(scenario.replace('"../profiles/', f'"{REPO}/profiles/'), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", "--vllm-results", str(REPO / "tests/sim/contracts/traces/vllm_bench.json"),
               "--scenario", "s.toml", "--seeds", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    bar_at = out.index("bar (|error|")
    warning = next(ln for ln in out.splitlines() if ln.startswith("warning: "))
    assert out.index(warning) > bar_at and "rest on 4 measured requests" in warning and "p95 0.2" in warning
