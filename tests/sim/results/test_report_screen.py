"""`make run` fits one screen and leads with its answer; notes are condensed, never repeated."""

from __future__ import annotations

from pathlib import Path

from cli.main import main
from sim.results.summary_table import condense_notes, short_source

REPO = Path(__file__).resolve().parents[3]


def test_the_main_job_fits_one_screen_and_opens_with_the_verdict(capsys):
    assert main(["simulate", str(REPO / "scenarios" / "default.toml"), "--quiet", "--seeds", "1"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    assert len(lines) <= 60
    assert max(len(line) for line in lines) <= 100
    assert lines[3].startswith("verdict: ")
    assert any(line.startswith("  1. load: ") for line in lines[3:10])  # the reasons, in order
    assert sum(line.startswith("  extrapolated") for line in lines) <= 3  # one per grid axis


def test_verbose_keeps_every_note_and_the_intervals(capsys):
    assert main(["simulate", str(REPO / "scenarios" / "default.toml"), "--quiet", "--seeds", "1,2",
                 "--candidates", "baseline,ngram-k3", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert " ± " in out and "extrapolated (ngram-k3, 2 seed(s)): " in out
    assert "  per step, ngram-k3: " in out  # the per-step view under the verdict
    assert "[threads=1" in out  # the provenance notes


def test_condense_notes_groups_extrapolation_by_axis_and_repeated_notes_by_text():
    notes = [
        "approximation: mixed steps are summed",
        "a: acceptance rests on few requests",
        "b: acceptance rests on few requests",
        "extrapolated (a, 3 seed(s)): target_forward.batch above 16 in 0.1% of steps (54 of 41088)",
        "extrapolated (b, 3 seed(s)): proposers.ngram.draft.batch above 16 in 2.9% of steps (633 of 22100)",
        "extrapolated (b, 3 seed(s)): target_forward.batch above 16 in 2.9% of steps (633 of 22100)",
        "extrapolated (a, 3 seed(s)): target_prefill.tokens below 16 in 0.4% of steps (151 of 41088)",
    ]
    assert condense_notes(notes, ["a", "b"]) == [
        "approximation: mixed steps are summed",
        "a, b: acceptance rests on few requests",
        "extrapolated batch above 16: up to 2.9% of steps (b) in ngram.draft, target_forward",
        "extrapolated tokens below 16: up to 0.4% of steps (a) in target_prefill",
    ]


def test_short_source_drops_the_bracketed_notes_and_clips():
    line = "timing: measured on cpu 'X' float32, 2026-12-01 (torch 2.13.0) [threads=1; " + "x" * 200 + "]"
    assert short_source(line) == "timing: measured on cpu 'X' float32, 2026-12-01 (torch 2.13.0)"
    assert len(short_source("y" * 300)) == 98 and short_source("y" * 300).endswith("…")


def test_an_interval_wider_than_the_metrics_range_is_shown_clipped():
    from sim.results import metric_names as mn
    from sim.results.summary_table import ROWS, _cell

    slo = next(r for r in ROWS if r.column == mn.SLO_ATTAINMENT)
    row = {mn.SLO_ATTAINMENT: 0.148, mn.ci_col(mn.SLO_ATTAINMENT): 0.441}
    assert _cell(row, slo, None) == "14.8 [0.0–58.9]"
    row = {mn.SLO_ATTAINMENT: 0.9, mn.ci_col(mn.SLO_ATTAINMENT): 0.05}
    assert _cell(row, slo, None) == "90.0 ± 5.0"


def test_fold_extrapolation_keeps_every_other_note_and_folds_the_axes_into_one_line():
    from sim.results.summary_table import fold_extrapolation

    lines = [
        "timing.target_forward: a dip",
        "extrapolated batch above 16: up to 66% of steps (b) in ngram.draft, target_forward",
        "a: acceptance rests on few requests",
        "extrapolated tokens below 16: up to 0.4% of steps (a) in target_prefill",
    ]
    out = fold_extrapolation(lines)
    assert out == ["timing.target_forward: a dip",
                   "extrapolated (% of steps): batch>16 66% (b), tokens<16 0.4% (a)",
                   "a: acceptance rests on few requests"]
    assert fold_extrapolation(lines[:2]) == lines[:2]  # one axis: nothing to fold
