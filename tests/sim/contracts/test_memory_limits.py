"""The memory floor checked up front (sim/contracts/memory_limits.py): a run that cannot fit is
refused in one line naming its size and the limit; one that fits is never refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.contracts import memory_limits as ml
from sim.contracts.errors import SpecplanError


@given(n=st.floats(0, 1e9), m=st.floats(0, 1e9), runs=st.integers(1, 1000), more=st.integers(1, 1000))
def test_floor_grows_with_the_largest_run_and_the_runs_kept(n, m, runs, more) -> None:
    lo, hi = sorted((n, m))
    assert ml.memory_floor(lo, runs) <= ml.memory_floor(hi, runs)
    assert ml.memory_floor(n, runs) <= ml.memory_floor(n, runs + more)
    # the kept records of a run are a small share of what its run held at its peak
    assert ml.memory_floor(n, runs + 1) - ml.memory_floor(n, runs) <= n * ml.REQUEST_BYTES / 10 + 1e-6


def _at_limit(runs: int) -> float:
    """Requests per run whose floor is exactly 1000 MiB."""
    return (1000 * ml.MIB - ml.BASE_BYTES) / (ml.REQUEST_BYTES + ml.KEPT_BYTES * runs)


@pytest.mark.parametrize("runs", [1, 12])
def test_a_run_just_over_the_limit_is_refused_in_one_line_with_its_size_and_the_limit(monkeypatch, runs) -> None:
    monkeypatch.setenv(ml.ENV, "1000")
    with pytest.raises(SpecplanError) as err:
        ml.check_memory(_at_limit(runs) + 1, runs, "s.toml")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("s.toml: ")
    assert f"requests per run × {runs} run(s)" in msg and "1,000 MiB available" in msg and ml.ENV in msg


@pytest.mark.parametrize("runs", [1, 12])
def test_a_run_just_under_the_limit_passes(monkeypatch, runs) -> None:
    monkeypatch.setenv(ml.ENV, "1000")
    ml.check_memory(_at_limit(runs) - 1, runs, "s.toml")


@pytest.mark.parametrize("raw", ["x", "0", "-5"])
def test_a_bad_limit_is_one_line(monkeypatch, raw) -> None:
    monkeypatch.setenv(ml.ENV, raw)
    with pytest.raises(SpecplanError, match=ml.ENV):
        ml.check_memory(1, 1, "s.toml")


def test_without_a_setting_the_machine_says_what_is_available(monkeypatch) -> None:
    monkeypatch.delenv(ml.ENV, raising=False)
    free = ml.available_bytes()
    assert free is None or free > 0
