"""The report lines of ``specplan validate``'s live path (what the error table is beside).

Why a module of its own: ``profiler/live/live_validation.py`` runs the real serving loop and the
simulations; these pure functions turn what it gathered into the header a reader checks the
bar against (capacities, drift checks, in-run probes, step-time residuals, corrections).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from sim.fidelity import comparison, live_load
from sim.fidelity import drift as drift_check
from sim.fidelity.batch_errors import batch_error_lines


def capacity_lines(caps: dict[str, live_load.CapacityEstimate], basis: str) -> list[str]:
    """Report lines saying what each candidate's loads are fractions of."""
    rates = {c: cap.rate for c, cap in caps.items()}
    if basis == "own":
        return ["loads: fractions of each candidate's own capacity (--load-basis own)",
                *[f"capacity of {c}: {cap.rate:.3g} req/s ({cap.method})" for c, cap in caps.items()]]
    first = next(iter(caps.values()))
    assert len(set(rates.values())) == 1, rates
    what = "the baseline's capacity for every candidate (--load-basis baseline)" if basis == "baseline" else \
        "the capacity given with --capacity, for every candidate"
    return [f"loads: fractions of {what}: {first.rate:.3g} req/s ({first.method})"]


def residual_lines(parts: list[pl.DataFrame], corrected: bool, timing: Any = None) -> list[str]:
    """The report line on measured/predicted step time by pass size, over every real run so far
    (against the drift-corrected prediction with ``--drift-correct``, else the raw profile);
    ``timing``: the profile's, so each batch row says whether it was measured or interpolated."""
    frame = pl.concat(parts, how="diagonal_relaxed") if parts else None
    if frame is None or frame.is_empty():
        return []
    frame = frame.filter(pl.col("drift_corrected") == corrected)
    what = "drift-corrected" if corrected else "raw profile"
    return [*live_load.residual_lines(frame, what), *batch_error_lines(frame, what, timing)]


def probe_lines(parts: list[pl.DataFrame]) -> list[str]:
    """One report line on the reference passes timed in the real runs' idle gaps."""
    probes = pl.concat(parts) if parts else None
    if probes is None:
        return []
    if probes.is_empty():  # a busy machine: no idle gap was long enough for a reference pass
        return ["in-run probes (one reference pass in an idle gap, never delaying a request): none "
                "fitted an idle gap in these runs"]

    def med(kind: str) -> str:
        r = probes.filter(pl.col("kind") == kind)["ratio"]
        return f"{r.median():.2f} ({r.min():.2f}–{r.max():.2f}, {r.len()} passes)" if r.len() else "none"

    return [f"in-run probes (one reference pass in an idle gap, never delaying a request): now/profile "
            f"decode {med('decode')}, prefill {med('prefill')}"]


def correction_lines(uncorrected: pl.DataFrame, idle_probes: bool) -> list[str]:
    """``--drift-correct``: what the corrected prediction is, and the bar without it."""
    return [
        "drift-corrected: each real run's prediction uses the profile's step times × the machine's "
        "speed at each step (decode parts × the decode cells', prefill parts × the prefill cells' "
        "now/profile ratio; a timeline from the checks just before and just after the run"
        + (" and the reference passes timed in its idle gaps" if idle_probes else "")
        + "); predicted = median over the runs",
        *[f"without drift correction: {line}" for line in comparison.format_bar(uncorrected).splitlines()],
    ]


def header_lines(facts: dict[str, Any], caps: dict[str, live_load.CapacityEstimate], basis: str,
                 drifts: Sequence[dict[str, Any]], frames: dict[str, list[pl.DataFrame]],
                 correction: list[str], sources: set[str], notes: Sequence[str]) -> list[str]:
    """The header above the error table; ``facts``: scenario, requests, seed, real_runs, model,
    device, threads, wall_s, profile, layout, drift_correct, and optionally timing (the
    profile's, for each batch row's origin)."""
    f = facts
    return [
        f"specplan validate {f['scenario']}: real serving vs simulator, {f['requests']} requests per load, "
        f"seed {f['seed']}, {f['real_runs']} real run(s) per load (measured = median)",
        f"real: {f['model']} on {f['device']}, torch threads={f['threads']}, {f['wall_s']:.0f}s wall",
        f"simulated: profile {f['profile']}, kv_layout {f['layout']}",
        *capacity_lines(caps, basis),
        "both sides: the same requests, the same planner (sim/model/kernels/plan_kernels.py); real step times and real "
        "acceptance vs the profile's step-time and acceptance models",
        *drift_check.drift_lines(drifts),
        *probe_lines(frames["probes"]),
        *residual_lines(frames["step_residuals"], f["drift_correct"], f.get("timing")),
        *correction,
        *[f"source: {s}" for s in sorted(sources)],
        *[f"note: {n}" for n in comparison.compact_notes(notes)],
    ]


__all__ = ["capacity_lines", "correction_lines", "header_lines", "probe_lines", "residual_lines"]
