"""What `specplan calibrate --points` prints and writes: per load, measured against predicted
with the default terms and with acceptance fitted on the lightest load; where the speed-up
crosses 1; and whether issue 37's bar holds (TPOT p50 within 15 %, the crossover where measured).

Kept apart from the fit (``sweep_calibrate``) so every surface renders the same result.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sim.contracts.profile import Profile
from sim.fidelity.sweep_calibrate import TPOT_BAR, SweepCalibration, load_text

LABELS = {"tpot_p50_ms": "TPOT p50 ms", "ttft_p50_ms": "TTFT p50 ms", "e2el_p50_ms": "E2EL p50 ms",
          "output_tok_s": "out tok/s", "acceptance_length": "acc. length"}


def _n(v: float | None, fmt: str = ".4g") -> str:
    return "—" if v is None or not math.isfinite(v) else format(v, fmt)


def _e(p: float | None, m: float | None) -> str:
    return "—" if p is None or m is None or not m else f"{(p - m) / m:+.1%}"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}×"


def bar_lines(cal: SweepCalibration) -> list[str]:
    """Issue 37's bar, as this run answers it: TPOT p50 at every held-out load, the crossover."""
    kind = cal.points.load_kind
    d, c = cal.tpot_worst
    if c is None:
        tpot = "TPOT p50 within 15 % at every held-out load: not checkable (the source writes no TPOT p50 there)"
    else:
        tpot = (f"TPOT p50 within 15 % at every held-out load: {'yes' if c <= TPOT_BAR else 'no'} (worst "
                f"{c:.1%} calibrated, {d:.1%} default)" if d is not None else f"worst {c:.1%}")
    m, dd, cc = (cal.crossovers[k] for k in ("measured", "default", "calibrated"))
    lands = ("not checkable (the source writes a speed-up at fewer than two loads)" if m.kind == "unknown"
             else "yes" if cc.same_as(m) else "no")
    lo_x, hi_x = cal.crossovers.get("band_low"), cal.crossovers.get("band_high")
    if lo_x is not None and hi_x is not None and not (lo_x.same_as(cc) and hi_x.same_as(cc)):
        lands += (f" (not pinned: at the scale band's ends {lo_x.text(kind)} / {hi_x.text(kind)})")
    if cal.tpot_band_worst is not None:
        lo, hi = cal.scale_band
        tpot += (f"; over the scales the lightest load cannot tell apart ({lo:.3g}–{hi:.3g}) the held-out "
                 f"predictions come within {cal.tpot_band_worst:.1%} of the measured")
    return [tpot,
            f"crossover: measured {m.text(kind)}; default {dd.text(kind)}; calibrated {cc.text(kind)} — "
            f"calibrated lands where measured: {lands}"]


def format_sweep(cal: SweepCalibration, header: list[str]) -> str:
    kind = cal.points.load_kind
    out = [*header,
           f"acceptance scale {cal.scale:.4g} × (fitted on {cal.matched}, {load_text(kind, cal.points.points[0].load)}; "
           f"{cal.simulations} simulations, seeds {','.join(map(str, cal.seeds))}); every heavier load held out",
           f"the lightest load's {cal.matched.split(' at ')[0]} cannot tell scales {cal.scale_band[0]:.3g}–"
           f"{cal.scale_band[1]:.3g} apart (within its own steps or sampling error)",
           "", f"{'load':>7}  {'role':<9}{'speed-up: measured':>19}{'default':>10}{'calibrated':>11}"]
    for r in cal.rows:
        fig = "*" if r.read_from_figure else ""
        m, d, c = r.speedup
        out.append(f"{r.load:>7g}  {r.role:<9}{_x(m) + fig:>19}{_x(d):>10}{_x(c):>11}   ({r.speedup_of or '—'})")
    out += ["", f"{'load':>7}  {'quantity':<28}{'measured':>10}{'default':>10}{'error':>9}{'calibrated':>11}{'error':>9}"]
    for r in cal.rows:
        for key, (m, d, c) in r.values.items():
            side, q = key.split(".")
            out.append(f"{r.load:>7g}  {side + ' ' + LABELS[q]:<28}{_n(m):>10}{_n(d):>10}{_e(d, m):>9}"
                       f"{_n(c):>11}{_e(c, m):>9}")
    out += ["", *bar_lines(cal), "", "sources:"]
    out += [f"  {load_text(kind, p.load)}: {p.source}" + (f" [{p.note}]" if p.note else "")
            + (" [read from a figure]" if p.read_from_figure else "") for p in cal.points.points]
    out += [f"note: {n}" for n in cal.notes]
    return "\n".join(out)


def sweep_summary(cal: SweepCalibration) -> dict[str, Any]:
    """The JSON record: fitted scale, per-load rows, crossovers, the bar."""
    kind = cal.points.load_kind
    return {
        "points": cal.points.origin, "load": cal.points.load_kind, "candidate": cal.candidate,
        "baseline": cal.baseline, "acceptance_scale": cal.scale, "fitted_on": cal.matched,
        "acceptance_scale_band": list(cal.scale_band),
        "seeds": list(cal.seeds), "simulations": cal.simulations,
        "rows": [{"load": r.load, "role": r.role, "source": r.source, "read_from_figure": r.read_from_figure,
                  "speedup_of": r.speedup_of, "speedup_measured": r.speedup[0], "speedup_default": r.speedup[1],
                  "speedup_calibrated": r.speedup[2],
                  "values": {k: {"measured": v[0], "default": v[1], "calibrated": v[2],
                                 **({"band_low": r.band[k][0], "band_high": r.band[k][1]} if k in r.band else {})}
                             for k, v in r.values.items()}}
                 for r in cal.rows],
        "crossover": {k: {"kind": x.kind, "load": x.load, "bracket": x.bracket, "direction": x.direction,
                          "text": x.text(kind)} for k, x in cal.crossovers.items()},
        "tpot_p50_worst_heldout": {"default": cal.tpot_worst[0], "calibrated": cal.tpot_worst[1],
                                   "over_scale_band": cal.tpot_band_worst},
        "bar": bar_lines(cal),
        "notes": list(cal.notes),
    }


def write_sweep_outputs(cal: SweepCalibration, profile_out: Path | None, scenario_out: Path | None,
                        json_out: Path | None) -> list[str]:
    """Write the calibrated profile (validated first), the scenario (a candidate's assumed
    acceptance lives there) and the JSON record; the lines saying where."""
    from sim.fidelity.calibration_report import write_calibrated

    def profile_doc() -> dict[str, Any]:
        doc = dict(cal.profile_doc)
        doc["x-calibration"] = sweep_summary(cal)
        Profile.from_dict(doc, "calibrated profile")
        return doc

    return write_calibrated(profile_doc, cal.scenario, lambda: sweep_summary(cal), profile_out, scenario_out, json_out)
