"""The break-even table as terminal lines (``specplan breakeven``): the model lives in
``sim.decisions.breakeven``; this only renders its result."""

from __future__ import annotations

from sim.decisions.breakeven import BreakevenResult


def format_table(result: BreakevenResult) -> list[str]:
    """Terminal lines: one row per k plus sources and notes."""
    inputs = dict(result.inputs)
    if inputs.get("mode") == "profile":
        head = (
            f"break-even: profile {inputs['profile']}, proposer {inputs['proposer']}, batch {inputs['batch']}, "
            f"context {inputs['context']:g}"
            + (f", segment {inputs['segment']}" if inputs.get("segment") else "")
            + (f", alpha {inputs['alpha']:g} (assumed)" if inputs.get("alpha") is not None else "")
        )
    else:
        head = f"break-even: alpha {inputs.get('alpha'):g} (assumed numbers from the command line)"
    lines = [head, f"plain decode T = {result.baseline_s * 1e3:.3f} ms per token"]
    lines.append(
        f"{'k':>3} {'D ms':>9} {'V ms':>9} {'H ms':>9} {'M(k)':>6} {'ms/token':>9} {'speedup':>8} {'pays off':>8} "
        f"{'alpha needed':>12} {'H max ms':>9}"
    )
    for r in result.rows:
        need = "never" if r.alpha_needed is None else f"{r.alpha_needed:.3f}"
        hmax = "never" if r.overhead_breakeven_s < 0 else f"{r.overhead_breakeven_s * 1e3:.3f}"
        lines.append(
            f"{r.k:>3} {r.draft_s * 1e3:>9.3f} {r.verify_s * 1e3:>9.3f} {r.overhead_s * 1e3:>9.3f} "
            f"{r.acceptance_length:>6.3f} {r.time_per_token_s * 1e3:>9.3f} {r.speedup:>7.3f}x "
            f"{'yes' if r.pays_off else 'no':>8} {need:>12} {hmax:>9}"
        )
    best = result.best()
    lines.append(
        f"best: k={best.k} ({best.speedup:.3f}x)" if best else "best: no k pays off; serve without speculation"
    )
    lines.append("H max: the largest H at which that k still breaks even (M·T − D − V)")
    lines.append("sources:")
    lines.extend(f"  {s}" for s in result.sources)
    for n in result.notes:
        lines.append(f"note: {n}")
    return lines
