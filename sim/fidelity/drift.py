"""Drift: how far this machine's speed is from the profile's, now (idle probes vs profile cells)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.profile import Profile

# ---------------------------------------------------------------------------------------------
# drift: how far this machine's speed is from the profile's, now


@dataclass(frozen=True)
class DriftCell:
    """A profile grid cell to time again: ``quantity`` target_forward or target_prefill."""

    quantity: str
    coords: tuple[tuple[str, int], ...]
    profile_s: float

    @property
    def label(self) -> str:
        return f"{self.quantity}(" + ", ".join(f"{k}={v}" for k, v in self.coords) + ")"

    @property
    def kind(self) -> str:
        """``decode`` (a target_forward cell) or ``prefill``: the step part it speaks for."""
        return "decode" if self.quantity == "target_forward" else "prefill"


def _nearest(axis: Sequence[float], x: float) -> int:
    return int(min(axis, key=lambda a: (abs(a - x), a)))


def _bracket(axis: Sequence[float], x: float) -> list[int]:
    """The grid points just below and just above ``x`` (one when ``x`` is on or outside the grid)."""
    below = [int(a) for a in axis if a <= x] or [int(axis[0])]
    above = [int(a) for a in axis if a >= x] or [int(axis[-1])]
    return sorted({below[-1], above[0]})


def drift_cells(profile: Profile, *, decode_seqs: int, context: float, tokens_per_seq: int,
                prompt_tokens: float) -> list[DriftCell]:
    """Measured profile cells around a run's typical shapes: batches 1, 2, 4, … up to
    ``decode_seqs``, one and ``tokens_per_seq`` tokens, at the grid contexts bracketing
    ``context``; and fresh prefills at the grid sizes bracketing ``prompt_tokens``.

    Why these: cells the run's steps actually lean on, so their ratio now/profile says how much
    of an error is the machine having changed; and a dozen or more of them, because each cell's
    own profile value and re-timing carry ±5–10 % of noise on a shared VM (measured: one cell
    re-timed 1.01–1.39 within 40 minutes) that a median over few cells does not average out.
    """
    out: list[DriftCell] = []
    tf = profile.timing.target_forward
    ax = dict(zip(tf.axis_names, tf.axes, strict=True))
    batches = sorted({_nearest(ax["batch"], 2**i) for i in range(max(1, int(decode_seqs)).bit_length())})
    for b in batches:
        for c in _bracket(ax["context"], context):
            for t in sorted({_nearest(ax["tokens_per_seq"], 1), _nearest(ax["tokens_per_seq"], tokens_per_seq)}):
                coords = {"batch": b, "tokens_per_seq": t, "context": c}
                idx = tuple(ax[n].index(coords[n]) for n in tf.axis_names)
                v = float(tf.median[idx])
                if math.isfinite(v):
                    out.append(DriftCell("target_forward", tuple(coords.items()), v))
    tp = profile.timing.target_prefill
    ax = dict(zip(tp.axis_names, tp.axes, strict=True))
    # prefill drifts apart from decode on a CPU (compute-bound GEMMs against memory-bound
    # ones), so it gets cells, and a scale, of its own
    for tokens in _bracket(ax["tokens"], prompt_tokens):
        coords = {"tokens": tokens, "context": _nearest(ax["context"], 0)}
        v = float(tp.median[tuple(ax[n].index(coords[n]) for n in tp.axis_names)])
        if math.isfinite(v):
            out.append(DriftCell("target_prefill", tuple(coords.items()), v))
    return out


def drift_summary(cells: Sequence[DriftCell], measured_s: Sequence[float | None], when: str) -> dict[str, Any]:
    """Per-cell and median ratio of the time measured now to the profile's (>1: slower now)."""
    per = [{"cell": c.label, "profile_ms": c.profile_s * 1e3, "now_ms": m * 1e3, "ratio": m / c.profile_s}
           for c, m in zip(cells, measured_s, strict=True) if m is not None and c.profile_s > 0]
    ratios = [p["ratio"] for p in per]

    def part(prefix: str) -> float | None:
        r = [p["ratio"] for p in per if p["cell"].startswith(prefix)]
        return float(np.median(r)) if r else None

    return {
        "when": when, "cells": per,
        "median_ratio": float(np.median(ratios)) if ratios else None,
        "min_ratio": min(ratios) if ratios else None, "max_ratio": max(ratios) if ratios else None,
        "decode_ratio": part("target_forward"), "prefill_ratio": part("target_prefill"),
    }


def drift_scales(d: Mapping[str, Any]) -> tuple[float, float]:
    """(decode, prefill) step-time multipliers for ``--drift-correct`` from one drift check."""
    med = d.get("median_ratio") or 1.0
    return float(d.get("decode_ratio") or med), float(d.get("prefill_ratio") or med)


def drift_lines(drifts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Report lines for a run's drift checks: each one when there are few, else a summary and
    the check furthest from the profile."""
    done = [d for d in drifts if d.get("median_ratio") is not None]
    if len(drifts) <= 3 or not done:
        return [format_drift(d) for d in drifts]
    dec = [d["decode_ratio"] for d in done if d.get("decode_ratio") is not None]
    pre = [d["prefill_ratio"] for d in done if d.get("prefill_ratio") is not None]

    def rng(v: list[float]) -> str:
        return f"median {np.median(v):.2f} (range {min(v):.2f}–{max(v):.2f})" if v else "n/a"

    worst = max(done, key=lambda d: abs(d["median_ratio"] - 1.0))
    return [f"drift: {len(drifts)} checks (before every real run and after the last), now/profile "
            f"decode cells {rng(dec)}, prefill cells {rng(pre)}; >1 = slower now",
            f"furthest from the profile: {format_drift(worst)}"]


DRIFT_WARN = 0.15
"""A machine this much slower or faster than at profiling time is, for the step-time model, a
different machine: validating against it measures the drift, not the simulator (this VM ran
1.65x slower two days after its profile was measured)."""


def format_drift(d: Mapping[str, Any]) -> str:
    """One line: how this machine compares with the profile now, and what to do if it moved."""
    if d.get("median_ratio") is None:
        return f"drift {d['when']}: no cell could be timed"
    line = (f"drift {d['when']}: {len(d['cells'])} profile cells re-timed, now/profile median "
            f"{d['median_ratio']:.2f} (range {d['min_ratio']:.2f}–{d['max_ratio']:.2f}; >1 = slower now)")
    if abs(d["median_ratio"] - 1.0) > DRIFT_WARN:
        way = "slower" if d["median_ratio"] > 1 else "faster"
        line += (f"; WARNING: the machine is {abs(d['median_ratio'] - 1):.0%} {way} than when the profile "
                 "was measured, so step-time errors mostly measure that: re-measure the timing "
                 "(specplan profile --no-acceptance --rounds 3) and merge it (specplan profile merge)")
    return line
