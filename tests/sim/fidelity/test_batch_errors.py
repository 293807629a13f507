"""validate reports its step-time error per batch size, not only one summary line."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.fidelity.batch_errors import BATCH_TOLERANCE, batch_error_lines, batch_errors


def residuals(rows: list[tuple[str, str, int, float, float]]) -> pl.DataFrame:
    cand, kind, b, meas, pred = zip(*rows, strict=True)
    return pl.DataFrame({"candidate": cand, "kind": kind, "decode_seqs": b, "measured_s": meas, "predicted_s": pred})


def test_each_batch_size_gets_its_own_error_and_a_mispriced_one_is_marked():
    rows = [("baseline", "decode", 1, 0.040, 0.041)] * 5 + [("baseline", "decode", 2, 0.090, 0.060)] * 3 \
        + [("baseline", "prefill", 2, 0.5, 0.1)] * 4 + [("ngram-k3", "decode", 1, 0.050, 0.050)] * 2
    t = batch_errors(residuals(rows))
    assert t.select("candidate", "decode_seqs", "steps").rows() == [("baseline", 1, 5), ("baseline", 2, 3),
                                                                   ("ngram-k3", 1, 2)]
    err = dict(zip(t["decode_seqs"].to_list()[:2], t["rel_error_median"].to_list()[:2], strict=True))
    assert abs(err[1] - 0.025) < 1e-9 and abs(err[2] - (0.060 / 0.090 - 1)) < 1e-9
    assert t["within"].to_list() == [True, False, True]  # prefill steps are not decode passes: left out
    lines = batch_error_lines(residuals(rows), "raw profile")
    assert any("batch   2:  -33.3%" in x and "outside" in x for x in lines)
    assert any("baseline: 1 of 2 batch sizes within ±10%" in x for x in lines)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 16), st.floats(0.01, 1.0), st.floats(0.5, 1.5)), min_size=1, max_size=60))
def test_the_error_of_a_batch_size_is_the_median_of_its_steps(steps: list[tuple[int, float, float]]):
    rows = [("c", "decode", b, m, m * r) for b, m, r in steps]
    t = batch_errors(residuals(rows))
    assert set(t["decode_seqs"].to_list()) == {b for b, _, _ in steps}
    for r in t.iter_rows(named=True):
        mine = sorted(ratio - 1 for b, _, ratio in steps if b == r["decode_seqs"])
        lo, hi = mine[(len(mine) - 1) // 2], mine[len(mine) // 2]
        assert lo - 1e-9 <= r["rel_error_median"] <= hi + 1e-9
        assert r["within"] == (abs(r["rel_error_median"]) <= BATCH_TOLERANCE)
        assert r["steps"] == len(mine)


def test_no_decode_steps_no_lines():
    assert batch_error_lines(residuals([("c", "prefill", 1, 0.1, 0.1)]), "raw profile") == []


def test_each_batch_row_says_whether_the_profile_measured_refined_or_interpolated_it():
    """A quick profile's batch 2 and 3 must read "measured"; a batch between grid values reads
    "interpolated" (the row a reader should distrust first), beyond the grid "extrapolated"."""
    import dataclasses

    from sim.contracts.profile import load_profile
    from sim.contracts.profile_timing import BatchOrigin

    timing = load_profile("profiles/smollm2-135m-cpu.json").timing
    axis = [int(b) for b in timing.target_forward.axes[0]]
    assert 9 not in axis and 2 in axis and 3 in axis and max(axis) < 20
    refined = dataclasses.replace(timing, batch_origin=BatchOrigin(tuple(b for b in axis if b != 3), (3,)))
    rows = [("c", "decode", b, 0.05, 0.05) for b in (2, 3, 9, 20)]
    t = batch_errors(residuals(rows), refined)
    assert dict(zip(t["decode_seqs"].to_list(), t["origin"].to_list(), strict=True)) == {
        2: "measured", 3: "refined", 9: "interpolated", 20: "extrapolated"}
    assert batch_errors(residuals(rows))["origin"].to_list() == [None] * 4
    lines = batch_error_lines(residuals(rows), "raw profile", refined)
    assert any("batch   3:" in x and "refined in the profile" in x for x in lines)
    assert any("batch   9:" in x and "interpolated in the profile" in x for x in lines)
