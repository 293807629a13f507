"""Physics every timing grid must obey, checked at import (repaired) and at load (flagged).

Why: a step-time grid is read by interpolation, so a dip is believed everywhere near it. An
imported DeepSeek-V3 on 8xB200 priced batch 4 at 25.9 ms against 37.3 ms at batch 1, and a
4-token verification below a 1-token decode: the simulator then prefers larger batches and
speculation for no physical reason. Three rules (docs/profile-format.md, "Step-time sanity"):

1. a pass's time is non-decreasing in the tokens it computes at a fixed context (batch, tokens
   per row, prompt tokens, draft length) — :data:`MONOTONE_AXES` says which axes of which grid;
2. verification V(k) costs no less than a decode T at the same batch (``tokens_per_seq`` is one
   of rule 1's axes, so V(k) >= V(k-1) >= T);
3. no target pass is faster than reading the bytes it must read (weights, its rows' KV) at the
   device's memory bandwidth, when the profile records that bandwidth.

:func:`check` finds violations beyond a tolerance; :func:`repair` is the import's documented
rule: each cell lifted to the bandwidth floor, then to the running maximum along every monotone
axis (the least grid above the original that obeys the rules; idempotent, never lowers a cell).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # profile.py imports this module; only the type names are needed here
    from sim.contracts.profile import Profile
    from sim.contracts.profile_timing import Timing, TimingGrid

MONOTONE_AXES: dict[str, tuple[str, ...]] = {
    "target_forward": ("batch", "tokens_per_seq"),
    "target_prefill": ("tokens",),
    "draft": ("batch", "k"),
    "prefill": ("tokens",),
    "dense": ("tokens",),
    "logits": ("tokens",),
    "decode_attention": ("batch", "tokens_per_seq"),
    "prefill_attention": ("tokens",),
}
"""Grid key (last part of its JSON path) -> axes along which its time may not fall. Not listed:
``overhead`` H(k) (a cycle's elapsed time minus its parts: a residual, not a pass) and the padded
batch's join/leave copies (host memory moves measured in microseconds)."""

LOAD_REL_TOL = 0.05
"""At load a cell is flagged only when it lies more than 5 % below what the rule asks (an earlier
cell along a monotone axis, or the floor) and more than :data:`LOAD_ABS_TOL_S` below: repeated
CPU timings of equal work differ by a few percent, and a sub-0.1 ms lookup by more."""
LOAD_ABS_TOL_S = 1e-4
REPAIR_MARK = "grids repaired by the documented rule"
"""Written by the import into the timing provenance's notes before the repaired grids' lines
(profiler/import_sanity.py); :func:`repaired_note` finds them there at load."""
EMBED_MIN_BYTES_PER_PARAM = 2.0
"""The embedding table stays 16-bit in fp8/NVFP4 checkpoints; a pass reads only its rows."""


@dataclass(frozen=True)
class Floor:
    """Bytes a target pass must read at least, and how fast the replica can read them."""

    weight_bytes: float
    """Weights every pass reads whatever its size: all but the embedding table (a pass reads
    its rows only) and, for a MoE, all but ``experts_per_token`` routed experts per layer."""
    kv_bytes_per_token: float
    """KV bytes of one cached token, all GPUs of the replica together."""
    bandwidth: float
    """Bytes per second, all GPUs of the replica together (datasheet peak: a true lower bound)."""
    max_kv_tokens: float
    """The most KV tokens the replica's whole memory could hold beside the weights: a cell asking
    for more is one no engine reaches, and its KV term stops there."""
    source: str

    def seconds(self, rows: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Lower bound of a pass over ``rows`` sequences each reading ``context`` cached tokens."""
        kv = np.minimum(rows * context, self.max_kv_tokens) * self.kv_bytes_per_token
        return (self.weight_bytes + kv) / self.bandwidth


@dataclass(frozen=True)
class Finding:
    """The rules one grid breaks: its worst cell, and how many cells break each rule."""

    grid: str
    """JSON path of the grid, e.g. ``timing.target_forward``."""
    text: str
    """The worst cell, e.g. ``25.9 ms at batch 4 < 37.3 ms at batch 1 (tokens_per_seq 1, context 128)``."""
    cells: tuple[tuple[str, int], ...]
    """(rule, cells breaking it): a monotone axis, or ``floor``."""
    total: int
    """Measured cells of the grid."""

    def line(self, tail: str) -> str:
        """One line for notes; ``tail`` says what was done with it (used as is, repaired)."""
        parts = []
        for rule, n in self.cells:
            what = ("below the bandwidth floor" if rule == "floor" else f"non-monotone in {rule}"
                    + (" (verify cheaper than decode or a shorter verify)" if rule == "tokens_per_seq" else ""))
            parts.append(f"{n} of {self.total} cells {what}")
        return f"{self.grid}: {self.text}; {', '.join(parts)}; {tail}"


@dataclass(frozen=True)
class Sanity:
    """What :func:`check` found in a profile's timing, and what it could not check."""

    findings: tuple[Finding, ...]
    floor: Floor | None
    floor_skipped: str | None
    """Why the bandwidth floor was not checked (None: it was)."""

    def notes(self, tail: str = "used as is") -> list[str]:
        return [f.line(tail) for f in self.findings]


def repaired_note(provenance_notes: str | None) -> str | None:
    """One run-notes line for a profile whose grids the import repaired, else None: the
    provenance holds the details, but a run's sources show it cut short."""
    if not provenance_notes or REPAIR_MARK not in provenance_notes:
        return None
    names = list(dict.fromkeys(re.findall(r"(timing\.[^\s:;|]+): ", provenance_notes.split(REPAIR_MARK, 1)[1])))
    return (f"timing: {len(names)} grid(s) repaired at import to obey the step-time rules "
            f"({', '.join(names)}): cells lifted to the running maximum along batch/tokens/k and to "
            "the bandwidth floor, never lowered; which cells: the timing provenance notes (--verbose)")


def grids(timing: Timing) -> Iterator[tuple[tuple[str, ...], TimingGrid]]:
    """Every grid of a ``Timing`` the rules apply to, with its key path under ``timing``."""
    yield ("target_forward",), timing.target_forward
    yield ("target_prefill",), timing.target_prefill
    if timing.fused is not None:
        for key in ("dense", "logits", "decode_attention", "prefill_attention"):
            yield ("fused", key), getattr(timing.fused, key)
    for name, pt in timing.proposers.items():
        yield ("proposers", name, "draft"), pt.draft
        if pt.prefill is not None:
            yield ("proposers", name, "prefill"), pt.prefill


def profile_floor(profile: Profile) -> tuple[Floor | None, str | None]:
    """The target's bandwidth floor, or why the profile does not allow one."""
    dev = profile.timing.provenance.device
    if dev is None or dev.memory_bandwidth is None:
        return None, "bandwidth floor not checked: timing.provenance.device records no memory bandwidth"
    arch, mem = profile.target.architecture, profile.memory
    weights = float(mem.target_weight_bytes)
    if arch.num_parameters <= 0:
        return None, "bandwidth floor not checked: target.architecture.num_parameters is 0"
    per_param = weights / arch.num_parameters
    unread = min(weights, arch.vocab_size * arch.hidden_size * max(EMBED_MIN_BYTES_PER_PARAM, per_param))
    moe = arch.moe
    if moe is not None:  # at least experts_per_token experts per MoE layer are read; the rest may not be
        routed = (arch.num_layers - moe.dense_layers) * moe.num_experts * 3 * arch.hidden_size * moe.expert_intermediate_size
        unread += routed * per_param * (1 - moe.experts_per_token / moe.num_experts)
    bw = dev.memory_bandwidth * dev.count
    kv_tok = float(mem.target_kv_bytes_per_token)
    room = max(float(mem.device_memory_bytes) - weights - float(mem.activation_peak_bytes), 0.0)
    source = (f"{dev.count}x {dev.memory_bandwidth / 1e9:,.0f} GB/s ({dev.name}), "
              f"{max(weights - unread, 0) / 1e9:.2f} GB of weights + KV per pass")
    return Floor(max(weights - unread, 0.0), kv_tok, bw, room / kv_tok if kv_tok > 0 else 0.0, source), None


def floor_grid(key: str, grid: TimingGrid, floor: Floor) -> np.ndarray | None:
    """The floor at every cell of a whole target pass's grid (``target_forward``,
    ``target_prefill``: the profile knows their bytes); None for the other grids."""
    if key == "target_forward":
        b, s, c = np.meshgrid(*map(np.asarray, grid.axes), indexing="ij")
        return floor.seconds(b, c)
    if key == "target_prefill":
        _n, c0 = np.meshgrid(*map(np.asarray, grid.axes), indexing="ij")
        return floor.seconds(np.ones_like(c0), c0)  # one chunk re-reads its prefix's KV once
    return None


def envelope(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Running maximum along each axis in turn; null (NaN) cells stay null and lift nothing.

    A running maximum along one axis keeps an earlier axis's order, so the result is the least
    grid above ``values`` that is non-decreasing along all of ``axes``."""
    out = np.array(values, dtype=float)
    nan = np.isnan(out)
    for ax in axes:
        out = np.fmax.accumulate(out, axis=ax)
    out[nan] = np.nan
    return out


def repair(grid: TimingGrid, key: str, floor: Floor | None) -> np.ndarray:
    """The import's rule for one grid: lift to the floor, then the monotone envelope."""
    vals = np.array(grid.median, dtype=float)
    fl = floor_grid(key, grid, floor) if floor is not None else None
    if fl is not None:
        vals = np.where(np.isnan(vals), vals, np.fmax(vals, fl))
    names = MONOTONE_AXES.get(key, ())
    return envelope(vals, tuple(grid.axis_names.index(n) for n in names))


def _where(grid: TimingGrid, idx: tuple[int, ...], skip: str | None = None) -> str:
    return ", ".join(f"{n} {grid.axes[i][j]:g}" for i, (n, j) in enumerate(zip(grid.axis_names, idx, strict=True))
                     if n != skip)


def _dips(grid: TimingGrid, axis: str, rel: float, abs_: float) -> tuple[float, str, int, str] | None:
    """Cells lower than an earlier cell along ``axis`` by more than the tolerance; the worst one."""
    ax = grid.axis_names.index(axis)
    vals = np.moveaxis(np.array(grid.median, dtype=float), ax, -1)
    top = np.fmax.accumulate(vals, axis=-1)  # the highest earlier-or-equal cell, nulls skipped
    prev = np.concatenate([np.full(vals.shape[:-1] + (1,), np.nan), top[..., :-1]], axis=-1)
    with np.errstate(invalid="ignore"):
        bad = (prev > 0) & (vals < prev * (1 - rel)) & (prev - vals > abs_)
    if not bad.any():
        return None
    gap = np.where(bad, prev - vals, -np.inf)
    *rest, j = (int(i) for i in np.unravel_index(int(np.argmax(gap)), vals.shape))
    line = vals[tuple(rest)]
    top_j = int(np.nanargmax(line[:j]))
    idx = list(rest)
    idx.insert(ax, j)
    other = _where(grid, tuple(idx), skip=axis)
    text = (f"{line[j] * 1e3:.3g} ms at {axis} {grid.axes[ax][j]:g} < {line[top_j] * 1e3:.3g} ms at {axis} "
            f"{grid.axes[ax][top_j]:g}" + (f" ({other})" if other else ""))
    return float(gap.max()), axis, int(bad.sum()), text


def _below_floor(grid: TimingGrid, fl: np.ndarray, floor: Floor, rel: float,
                 abs_: float) -> tuple[float, str, int, str] | None:
    vals = np.array(grid.median, dtype=float)
    with np.errstate(invalid="ignore"):
        bad = (vals < fl * (1 - rel)) & (fl - vals > abs_)
    if not bad.any():
        return None
    gap = np.where(bad, fl - vals, -np.inf)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(gap)), vals.shape))
    text = (f"{vals[idx] * 1e3:.3g} ms at {_where(grid, idx)} < floor {fl[idx] * 1e3:.3g} ms "
            f"({floor.source})")
    return float(gap[idx]), "floor", int(bad.sum()), text


def check(profile: Profile, rel_tol: float = LOAD_REL_TOL, abs_tol_s: float = LOAD_ABS_TOL_S) -> Sanity:
    """Every rule on every grid of ``profile``; a cell counts when it breaks a rule by more than
    both tolerances (0 and 0: any shortfall at all)."""
    floor, skipped = profile_floor(profile)
    found: list[Finding] = []
    for path, grid in grids(profile.timing):
        key = path[-1]
        fl = floor_grid(key, grid, floor) if floor is not None else None
        hits = [] if fl is None or floor is None else [_below_floor(grid, fl, floor, rel_tol, abs_tol_s)]
        hits += [_dips(grid, axis, rel_tol, abs_tol_s) for axis in MONOTONE_AXES.get(key, ())]
        broken = [h for h in hits if h is not None]
        if broken:
            worst = max(broken, key=lambda h: h[0])
            found.append(Finding(grid.quantity, worst[3], tuple((h[1], h[2]) for h in broken),
                                 int(np.isfinite(grid.median).sum())))
    return Sanity(tuple(found), floor, skipped)
