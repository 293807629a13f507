"""docs/fidelity-gpu.md §7: the crossover tables come from the shipped points files, run through
`specplan calibrate --points` as documented (acceptance fitted on the lightest load only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.contracts.profile import load_profile_document
from sim.contracts.scenario import load_scenario
from sim.contracts.sweep_points import load_sweep_points
from sim.fidelity.sweep_calibrate import calibrate_sweep

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "fidelity-gpu.md"
SWEEPS = sorted((REPO / "docs" / "sweeps").glob("*.toml"))
COMMAND = re.compile(r"^specplan calibrate (\S+) --points (\S+)$", re.M)


def _documented() -> list[tuple[str, str, list[list[str]], str]]:
    """(scenario, points file, table rows, the text between command and table) per §7 command."""
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in COMMAND.finditer(text):
        rest = text[m.end():]
        table = re.search(r"\n(\| N \|.*?\n)(?:\n|$)", rest, re.S)
        assert table, f"no table after `{m.group(0)}`"
        rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in table.group(1).splitlines()[2:]]
        out.append((m.group(1), m.group(2), rows, rest[:table.start()]))
    return out


DOCUMENTED = _documented()


def test_every_shipped_sweep_is_documented_with_its_command_and_every_point_cites_its_source():
    assert sorted(REPO / p for _, p, _, _ in DOCUMENTED) == SWEEPS
    for path in SWEEPS:
        assert all(len(p.source) > 20 and not p.read_from_figure for p in load_sweep_points(path).points)


@pytest.mark.parametrize(("scenario", "points", "rows", "prose"), DOCUMENTED, ids=[p for _, p, _, _ in DOCUMENTED])
def test_the_measured_column_is_what_the_points_file_says(scenario, points, rows, prose):
    pts = load_sweep_points(REPO / points)
    assert [float(r[0]) for r in rows] == [p.load for p in pts.points]
    for r, p in zip(rows, pts.points, strict=True):
        s = p.measured_speedup()
        if s is not None:
            assert r[2].startswith(f"{s:.2f}×"), (r, s)


def _x(cell: str) -> float:
    return float(re.match(r"([\d.]+)×", cell).group(1))


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "points", "rows", "prose"), DOCUMENTED, ids=[p for _, p, _, _ in DOCUMENTED])
def test_the_default_and_calibrated_columns_are_what_the_documented_command_computes(scenario, points, rows, prose):
    sc = load_scenario(REPO / scenario)
    doc, profile = load_profile_document(sc.require_profile_path())
    pts = load_sweep_points(REPO / points)
    cand = pts.candidate or next(c.name for c in sc.candidates if c.speculates)
    cal = calibrate_sweep(pts, sc, doc, profile.origin, cand, sc.run.seeds)
    assert re.search(rf"[Ss]cale {cal.scale:.3f}\b", prose), f"documented scale is not {cal.scale:.3f}"
    for r, got in zip(rows, cal.rows, strict=True):
        assert r[1] == got.role
        assert _x(r[3]) == pytest.approx(round(got.speedup[1], 2)), ("default", r, got.speedup)
        assert _x(r[4]) == pytest.approx(round(got.speedup[2], 2)), ("calibrated", r, got.speedup)
