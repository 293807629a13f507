"""What `specplan calibrate` prints and writes: the fitted values with their uncertainty, the
side-by-side table, the held-out error, and the calibrated profile and scenario documents.

Kept apart from the fit (``calibrate.py``) so the search stays readable and every surface (the
terminal, the JSON, the profile's ``x-calibration`` block) renders the same ``Calibration``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.fidelity.calibrate import FIT_COLUMNS, Calibration, heldout_error
from sim.fidelity.calibration_terms import TERM_SPECS


def _num(v: float | None, fmt: str = ".4g") -> str:
    return "—" if v is None or not math.isfinite(v) else format(v, fmt)


def _err(v: float | None) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:+.1%}"


def terms_lines(cal: Calibration) -> list[str]:
    """One line per fitted term: before → after ± standard error, and what it changed."""
    out = []
    for name in cal.fitted:
        spec = TERM_SPECS[name]
        sd = cal.sigma.get(name)
        pm = ("± not determined by these points" if sd is None
              else "± n/a (the points do not move it independently of the others)" if not math.isfinite(sd)
              else f"± {sd:.3g}")
        out.append(f"  {name:<22} {cal.before.get(name):>9.4g} → {cal.after.get(name):<9.4g} {spec.unit:<2} {pm}"
                   f"   ({spec.changes})")
    return out


def format_table(table: pl.DataFrame) -> str:
    """Per measured point: measured, uncalibrated and calibrated predictions with their errors."""
    lines = []
    for (source, rate, role), grp in table.group_by(["source", "rate", "role"], maintain_order=True):
        how = f"{rate:.3g} req/s" if rate is not None else "every request sent at once"
        lines.append(f"\n{source} — {how} ({role})")
        lines.append(f"  {'metric':<27}{'measured':>11}{'uncalibrated':>14}{'err':>9}{'calibrated':>12}{'err':>9}")
        for r in grp.iter_rows(named=True):
            lines.append(f"  {r['metric']:<27}{_num(r['measured']):>11}{_num(r['uncalibrated']):>14}"
                         f"{_err(r['rel_error_uncalibrated']):>9}{_num(r['calibrated']):>12}{_err(r['rel_error_calibrated']):>9}")
    return "\n".join(lines)


def confounding_lines(cal: Calibration) -> list[str]:
    """Said whenever acceptance is fitted beside a per-step cost without a measured acceptance:
    both move TPOT (more accepted tokens per step or cheaper steps), and a few loads' latencies
    cannot tell them apart (a round trip on simulated truth found 0.51 × and 0.2 ms where the
    truth was 0.7 × and 1.5 ms, fitted loads within 3 %; docs/fidelity.md)."""
    step_terms = [t for t in ("step_overhead_ms", "spec_host_us_per_row", "draft_host_scale") if t in cal.fitted]
    if cal.acceptance is not None or "acceptance_scale" not in cal.fitted or not step_terms:
        return []
    return [f"warning: acceptance_scale and {' and '.join(step_terms)} both move TPOT; without a measured "
            "acceptance (--acceptance-trace or --spec-metrics) these loads cannot tell them apart, so read "
            "their values as one combination (the held-out error is the check)"]


def heldout_lines(cal: Calibration) -> list[str]:
    """Held-out error of the fitted metrics' p50s (the table's held-out rows), worst over points."""
    out = []
    for col in ("ttft_ms_median", "tpot_ms_median", "itl_ms_median", "e2el_ms_median"):
        u, c = heldout_error(cal.heldout, col)
        if u is None and c is None:
            continue
        label = col.split("_")[0].upper()
        out.append(f"  {label} p50: worst |error| {_num(c, '.1%')} calibrated, {_num(u, '.1%')} uncalibrated")
    return out


def format_calibration(cal: Calibration, header: list[str]) -> str:
    """The whole terminal report."""
    held = list(dict.fromkeys(cal.heldout["source"].to_list()))
    parts = [*header,
             *[f"note: {n}" for n in cal.notes],
             f"fitted on means of {', '.join(c.split('_')[0].upper() for c in FIT_COLUMNS)}"
             + (f" and the measured acceptance length ({cal.acceptance.source})" if cal.acceptance else "")
             + f"; {cal.simulations} simulations (budget {cal.budget})",
             "fitted terms (uncalibrated → calibrated ± standard error from the fit's curvature):",
             *terms_lines(cal),
             *confounding_lines(cal),
             *[f"warning: {a} and {b} trade off (correlation {r:+.2f}): these points cannot tell them apart; "
               + ("give the measured acceptance (--acceptance-trace or --spec-metrics) or " if cal.acceptance is None
                  and "acceptance_scale" in (a, b) else "") + "fit one of them" for a, b, r in cal.correlated],
             f"held out: {', '.join(held)}",
             *heldout_lines(cal),
             format_table(cal.table),
             "",
             f"provenance: {cal.note}"]
    ro = cal.scenario.fleet.request_overhead
    if "request_overhead_ms" in cal.fitted and ro is not None:
        parts.append("scenario: [fleet.request_overhead] fixed_ms = "
                     f"{ro.fixed_ms:.4g} (source \"calibrated\"; written with --scenario-out)")
    return "\n".join(parts)


def summary(cal: Calibration) -> dict[str, Any]:
    """The machine-readable record (JSON, and the profile's ``x-calibration`` block)."""
    return {
        "note": cal.note,
        "fitted": list(cal.fitted),
        "before": cal.before.as_dict(),
        "after": cal.after.as_dict(),
        "standard_error": {k: (None if v is None or not math.isfinite(v) else v) for k, v in cal.sigma.items()},
        "correlated": [{"terms": [a, b], "correlation": r} for a, b, r in cal.correlated],
        "folds": [{"held_out": cal.points[held], "trained_on": [cal.points[i] for i in f.train], "terms": f.terms.as_dict(), "objective": f.objective,
                   "simulations": f.evaluations} for held, f in cal.folds],
        "simulations": cal.simulations,
        "budget": cal.budget,
    }


def calibrated_profile_document(cal: Calibration) -> dict[str, Any]:
    """The profile document to write: the calibrated sections plus an ``x-calibration`` record,
    validated by the simulator's own reader before anything is written."""
    doc = dict(cal.profile_doc)
    doc["description"] = f"{doc.get('description', '')} [calibrated: {', '.join(cal.fitted)}]".strip()
    doc["x-calibration"] = summary(cal)
    Profile.from_dict(doc, "calibrated profile")
    return doc


def write_outputs(cal: Calibration, profile_out: Path | None, scenario_out: Path | None, json_out: Path | None) -> list[str]:
    """Write what was asked for (each file whole or not at all); the lines saying where."""
    return write_calibrated(lambda: calibrated_profile_document(cal), cal.scenario,
                            lambda: {**summary(cal), "rows": cal.table.to_dicts()}, profile_out, scenario_out, json_out)


def write_calibrated(profile_doc: Any, scenario: Any, record: Any, profile_out: Path | None,
                     scenario_out: Path | None, json_out: Path | None) -> list[str]:
    """The one writer of a calibration's files (``--vllm-results`` and ``--points`` alike):
    ``profile_doc()`` and ``record()`` are built only when their file is asked for; the scenario
    points at the calibrated profile when both are written. Each file whole or not at all."""
    from sim.results.atomic_io import write_text_atomic

    said = []
    try:
        if profile_out is not None:
            write_text_atomic(profile_out, json.dumps(profile_doc(), indent=1))
            said.append(f"wrote calibrated profile {profile_out}")
        if scenario_out is not None:
            sc = scenario
            if profile_out is not None:
                sc = sc.with_overrides({"fleet.profile": str(Path(profile_out).resolve())})
            write_text_atomic(scenario_out, sc.to_toml())
            said.append(f"wrote calibrated scenario {scenario_out}")
        if json_out is not None:
            write_text_atomic(json_out, json.dumps(record(), indent=1, default=str))
            said.append(f"wrote table {json_out}")
    except OSError as exc:
        raise SpecplanError(f"{exc.filename or 'output'}: cannot write ({exc.strerror})") from None
    return said
