"""Break-even model M(k) and the `specplan breakeven` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.contracts.synthetic import synthetic_profile, synthetic_profile_dict
from sim.decisions.breakeven import (
    BreakevenRow,
    acceptance_length_alpha,
    acceptance_length_rates,
    alpha_needed,
    breakeven_from_numbers,
    breakeven_from_profile,
    overhead_doubt,
)


def test_acceptance_length_closed_forms() -> None:
    assert acceptance_length_alpha(0.7, 0) == 1.0
    assert acceptance_length_alpha(0.7, 3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert acceptance_length_alpha(0.5, 4) == pytest.approx((1 - 0.5**5) / (1 - 0.5))
    assert acceptance_length_alpha(1.0, 4) == 5.0
    assert acceptance_length_rates([0.8, 0.5, 0.2], 2) == pytest.approx(2.3)
    with pytest.raises(ValueError):
        acceptance_length_alpha(1.2, 2)


def test_known_numeric_example() -> None:
    # alpha 0.7, T 20 ms, D 3 ms/token, V 22 ms, H 1 ms: k=1 costs 26 ms for 1.7 tokens
    r = breakeven_from_numbers(alpha=0.7, baseline_s=0.020, draft_per_token_s=0.003, verify_s=0.022, overhead_s=0.001, ks=range(1, 7))
    k1, k4 = r.rows[0], r.rows[3]
    assert k1.cycle_s == pytest.approx(0.026)
    assert k1.time_per_token_s == pytest.approx(0.026 / 1.7)
    assert k1.speedup == pytest.approx(1.7 * 20 / 26)
    assert k4.draft_s == pytest.approx(0.012)
    assert k4.acceptance_length == pytest.approx(2.7731)
    assert r.best() is not None and r.best().k == 4
    assert r.sources[0].startswith("assumed numbers from the command line")


def test_does_not_pay_off_when_verification_is_slow() -> None:
    r = breakeven_from_numbers(alpha=0.2, baseline_s=0.010, draft_per_token_s=0.002, verify_s=0.012, ks=[1, 2, 3])
    assert not any(row.pays_off for row in r.rows)
    assert r.best() is None
    # break-even condition D + V + H < M T, checked directly
    for row in r.rows:
        assert row.pays_off == (row.cycle_s < row.acceptance_length * row.baseline_s)


def test_alpha_needed_is_the_break_even_point() -> None:
    row = BreakevenRow(k=3, draft_s=0.006, verify_s=0.022, overhead_s=0.001, acceptance_length=1.0, baseline_s=0.020)
    a = row.alpha_needed
    assert a is not None
    assert acceptance_length_alpha(a, 3) * 0.020 == pytest.approx(row.cycle_s, rel=1e-9)
    assert alpha_needed(0.5, 0.1, 3) is None  # 5 T > (k + 1) T: unreachable
    assert alpha_needed(0.05, 0.1, 3) == 0.0


def test_from_profile_uses_the_grids_and_measured_survival() -> None:
    p = synthetic_profile()
    r = breakeven_from_profile(p, "ngram", batch=8, context=1024)
    rates = p.acceptance["ngram"].segments[0].survival
    assert [row.k for row in r.rows] == [1, 2, 3, 4, 5]
    t = 0.010 + 0.0005 * 8 + 0.0002 * 8 * 1 + 1e-7 * 8 * 1024
    assert r.baseline_s == pytest.approx(t)
    row = r.rows[2]
    assert row.verify_s == pytest.approx(0.010 + 0.0005 * 8 + 0.0002 * 8 * 4 + 1e-7 * 8 * 1024)
    assert row.draft_s == pytest.approx(0.0002 + 0.00005 * 8 * 3)
    assert row.overhead_s == pytest.approx(0.0003 + 0.00002 * 8)
    assert row.acceptance_length == pytest.approx(1 + sum(rates[:3]))
    assert r.sources[0].startswith("timing: assumed") and r.sources[1].startswith("acceptance[ngram]: assumed")
    assert len(r.notes) == 1 and r.notes[0].startswith("H is assumed (timing.proposers.ngram.overhead)")  # synthetic


def test_an_assumed_draft_host_time_is_named_with_the_h_the_answer_needs() -> None:
    """The import's H is assumed: the note gives the H at which the best k stops paying, from
    the row itself; a calibrated H gets no such note, and its provenance is a source line."""
    doc = synthetic_profile_dict()
    r = breakeven_from_profile(Profile.from_dict(doc, "assumed"), "ngram", batch=8, context=1024)
    best = r.best()
    assert best is not None
    note = next(n for n in r.notes if n.startswith("H is assumed"))
    assert f"the best k={best.k} pays while H <= {best.overhead_breakeven_s * 1e3:.3f} ms" in note
    assert "`specplan calibrate` fits it to your own runs" in note
    doc["timing"]["proposers"]["ngram"]["overhead_provenance"] = {"method": "calibrated", "notes": "own runs"}
    r = breakeven_from_profile(Profile.from_dict(doc, "calibrated"), "ngram", batch=8, context=1024)
    assert not any(n.startswith("H is assumed") for n in r.notes)  # what `calibrate --fit draft_host_scale` writes
    assert any(s.startswith("draft host H[ngram]: calibrated") for s in r.sources)


def test_when_no_k_pays_the_note_says_which_h_would_make_one_pay() -> None:
    rows = [BreakevenRow(k=k, draft_s=0.001 * k, verify_s=0.011, overhead_s=0.002 * k, acceptance_length=1 + 0.5 * k,
                         baseline_s=0.008) for k in (1, 2)]
    assert not any(r.pays_off for r in rows)
    note = overhead_doubt(rows, "timing.proposers.x.overhead")
    assert "no k pays with it, but k=2 would with H <= 3.000 ms a step (assumed 4.000 ms)" in note
    assert "k=1 does not pay even with H = 0" in overhead_doubt(rows, "f", k=1)  # 1.5 × 8 = 1 + 11 ms
    assert "k=2 does not pay with it, but would with H <= 3.000 ms" in overhead_doubt(rows, "f", k=2)
    assert overhead_doubt(rows, "f", k=3) is None
    never = [BreakevenRow(k=1, draft_s=0.002, verify_s=0.02, overhead_s=0.001, acceptance_length=1.5, baseline_s=0.01)]
    assert "no k pays even with H = 0" in overhead_doubt(never, "f")
    pays = BreakevenRow(k=3, draft_s=0.001, verify_s=0.01, overhead_s=0.002, acceptance_length=2.5, baseline_s=0.008)
    assert "k=3 pays while H <= 9.000 ms a step, 4.50x the assumed 2.000 ms" in overhead_doubt([pays], "f", k=3)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 8), d=st.floats(0, 0.01), v=st.floats(1e-4, 0.05), h=st.floats(0, 0.01),
       m=st.floats(1.0, 9.0), t=st.floats(1e-4, 0.05))
def test_h_max_is_where_the_row_breaks_even(k, d, v, h, m, t) -> None:
    """For every row: it pays exactly while H is below its H max, and at H max its speed-up is 1."""
    row = BreakevenRow(k=k, draft_s=d, verify_s=v, overhead_s=h, acceptance_length=m, baseline_s=t)
    hmax = row.overhead_breakeven_s
    if abs(h - hmax) > 1e-12:
        assert row.pays_off == (h < hmax)
    if hmax > 0:
        at = BreakevenRow(k=k, draft_s=d, verify_s=v, overhead_s=hmax, acceptance_length=m, baseline_s=t)
        assert at.speedup == pytest.approx(1.0, rel=1e-9)


def test_from_profile_reports_extrapolation_and_alpha_override() -> None:
    r = breakeven_from_profile(synthetic_profile(), "ngram", batch=128, context=512, alpha=0.5, k_max=3)
    assert len(r.rows) == 3
    assert r.rows[1].acceptance_length == pytest.approx(1.75)
    assert "acceptance: assumed alpha=0.5 from the command line" in r.sources
    assert any(n.startswith("extrapolated: target_forward.batch above 64") for n in r.notes)


def test_from_profile_segment_choice() -> None:
    p = synthetic_profile(segments=[("chat", "en", 0.0), ("code", "en", 0.0)])
    with pytest.raises(SpecplanError, match="--segment: 2 acceptance segments, choose one of chat:en:0, code:en:0"):
        breakeven_from_profile(p, "ngram")
    r = breakeven_from_profile(p, "ngram", segment=AcceptanceKey("code", "en", 0.4))
    assert dict(r.inputs)["segment"] == "code:en:0"
    with pytest.raises(SpecplanError, match="--k-max: acceptance is only known up to k_max=5"):
        breakeven_from_profile(p, "ngram", segment=AcceptanceKey("code", "en", 0.0), k_max=6)


# ----------------------------------------------------------------------------- CLI


@pytest.fixture
def profile_path(tmp_path: Path) -> Path:
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(synthetic_profile_dict()), encoding="utf-8")
    return path


def test_cli_numbers_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["breakeven", "--alpha", "0.7", "--T-ms", "20", "--D-ms", "3", "--V-ms", "22", "--H-ms", "1", "--k", "1..6"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "best: k=4 (1.585x)" in out
    assert "assumed numbers from the command line" in out
    assert len([line for line in out.splitlines() if line.strip().split(" ")[0].isdigit()]) == 6


def test_cli_profile_json(profile_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["breakeven", "--profile", str(profile_path), "--proposer", "ngram", "--batch", "4", "--context", "256", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert [r["k"] for r in d["rows"]] == [1, 2, 3, 4, 5]
    assert d["inputs"]["batch"] == 4 and d["inputs"]["segment"] == "chat:en:0"
    assert d["sources"][0].startswith("timing: assumed")
    assert all(r["speedup"] == pytest.approx(r["acceptance_length"] * d["baseline_s"] / r["cycle_s"]) for r in d["rows"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--alpha", "x", "--T-ms", "20", "--D-ms", "3", "--V-ms", "22"], "--alpha: expected a number, got 'x'"),
        (["--alpha", "1.5", "--T-ms", "20", "--D-ms", "3", "--V-ms", "22"], "--alpha: per-token acceptance must be in [0, 1]"),
        (["--alpha", "0.7", "--T-ms", "20"], "--D-ms, --V-ms: required without --profile"),
        (["--alpha", "0.7", "--T-ms", "0", "--D-ms", "3", "--V-ms", "22"], "--T-ms: plain decode step time must be > 0"),
        (["--alpha", "0.7", "--T-ms", "20", "--D-ms", "3", "--V-ms", "22", "--k", "3..1"], "--k: draft lengths must be >= 1 and the range non-empty"),
        (["--alpha", "0.7", "--T-ms", "20", "--D-ms", "3", "--V-ms", "22", "--k", "a"], "--k: expected a range like 1..6"),
        (["--alpha", "0.7", "--T-ms", "20", "--D-ms", "3", "--V-ms", "22", "--batch", "2"], "--batch: only with --profile"),
        (["--profile", "PROFILE"], "--proposer: required with --profile"),
        (["--profile", "PROFILE", "--proposer", "ngram", "--T-ms", "3"], "--T-ms: only for break-even from numbers"),
        (["--profile", "PROFILE", "--proposer", "eagle"], "unknown proposer 'eagle'"),
        (["--profile", "PROFILE", "--proposer", "ngram", "--segment", "chat"], "--segment: expected TASK:LANG:TEMP"),
        (["--profile", "PROFILE", "--proposer", "ngram", "--segment", "code:en:0"], "--segment: no acceptance segment matches code:en:0"),
        (["--profile", "PROFILE", "--proposer", "ngram", "--batch", "0"], "--batch: must be >= 1"),
        (["--profile", "missing.json", "--proposer", "ngram"], "missing.json: profile file not found"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, profile_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(profile_path) if a == "PROFILE" else a for a in argv]
    rc = main(["breakeven", *argv])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("specplan breakeven: error: ")
    assert message in lines[0]


@pytest.mark.parametrize("p", [0.2, 0.5, 1.0])
def test_alpha_needed_at_a_proposal_rate_breaks_even_on_the_steps_that_propose(p) -> None:
    """With a proposal on a share p of steps a step commits 1 + p·(M_α(k) − 1) tokens; the α
    needed is where that times T equals the (average) cycle."""
    row = BreakevenRow(k=4, draft_s=0.001, verify_s=0.013, overhead_s=0.0, acceptance_length=1.0,
                       baseline_s=0.010, proposal_rate=p)
    a = row.alpha_needed
    assert a is not None
    assert (1 + p * (acceptance_length_alpha(a, 4) - 1)) * 0.010 == pytest.approx(row.cycle_s, rel=1e-9)
    assert alpha_needed(0.014, 0.010, 4, 0.05) is None  # 1 + 0.05·4 < 1.4: unreachable
