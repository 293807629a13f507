"""The verdict's split of a caching candidate's gain between prefix caching and speculation."""

from __future__ import annotations

import pytest

from sim.decisions.attribution import causes
from sim.decisions.facts import CandidateFacts, Facts


def _c(name: str, ttft: float, tpot: float, *, caching: bool = False, twin: str | None = None,
       baseline: bool = False) -> CandidateFacts:
    return CandidateFacts(name, baseline, shown={"ttft_ms_p95": ttft, "tpot_ms_p95": tpot},
                          prefix_caching=caching, twin=twin)


def _facts(*cands: CandidateFacts) -> Facts:
    return Facts("fleet", cands, (1, 2), "baseline", True, 1.0, 1)


def test_each_cause_gets_its_own_part_and_the_parts_add_up() -> None:
    """off/off 60/6.6, cache only 15/6.2, spec only 61/3.5, both 19/3.3 (ms): both's TTFT
    change -41 is caching's -42 plus speculation's +1; its TPOT change -3.3 is -0.2 and -3.1."""
    f = _facts(_c("baseline", 60, 6.6, baseline=True), _c("cache", 15, 6.2, caching=True, twin="baseline"),
               _c("spec", 61, 3.5), _c("both", 19, 3.3, caching=True, twin="spec"))
    got = {(c.candidate, c.metric): (c.total, c.caching, c.speculation) for c in causes(f)}
    assert got[("cache", "ttft_ms_p95")] == pytest.approx((-45, -45, 0))
    assert got[("both", "ttft_ms_p95")] == pytest.approx((-41, -42, 1))
    assert got[("both", "tpot_ms_p95")] == pytest.approx((-3.3, -0.2, -3.1))
    assert ("spec", "ttft_ms_p95") not in got  # no caching: nothing to split
    for total, caching, spec in got.values():
        assert total == pytest.approx(caching + spec)


def test_no_split_without_the_twin() -> None:
    """A caching candidate whose caching-off twin did not run is not split (the parts would be
    guesses)."""
    f = _facts(_c("baseline", 60, 6.6, baseline=True), _c("both", 19, 3.3, caching=True, twin=None))
    assert causes(f) == ()
