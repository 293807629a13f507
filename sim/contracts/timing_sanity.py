"""Physics every timing grid must obey, checked at import (repaired) and at load (flagged).

Why: a step-time grid is read by interpolation, so a dip is believed everywhere near it. An
imported DeepSeek-V3 on 8xB200 priced batch 4 at 25.9 ms against 37.3 ms at batch 1, and a
4-token verification below a 1-token decode: the simulator then prefers larger batches and
speculation for no physical reason. Three rules (docs/profile-format.md, "Step-time sanity"):

1. a pass's time is non-decreasing in the tokens it computes at a fixed context (batch, tokens
   per row, prompt tokens, draft length) — :data:`MONOTONE_AXES` says which axes of which grid;
   for a MoE target the time less its routed-expert reads (:func:`expert_reads`) is, so a pass
   over more tokens costs at least a pass over fewer plus the extra experts it touches;
2. verification V(k) costs no less than a decode T at the same batch (``tokens_per_seq`` is one
   of rule 1's axes, so V(k) >= V(k-1) >= T);
3. no target pass is faster than reading the bytes it must read (weights, its rows' KV) at the
   device's memory bandwidth, when the profile records that bandwidth; for a MoE the routed
   experts read are the expected distinct experts the pass's tokens touch
   (``sim.contracts.expert_traffic``), so a verify or prefill chunk's floor lies above a decode's.

:func:`check` finds violations beyond a tolerance; :func:`repair` is the import's documented
rule: each cell lifted to the bandwidth floor, then to the running maximum along every monotone
axis (the least grid above the original that obeys the rules; idempotent, never lowers a cell).
For a MoE the running maximum is taken of time less routed-expert reads and the reads added
back: where aiconfigurator-core's MoE kernel is latency-bound at small token counts (DeepSeek-V3
on 8x H200, vLLM 0.24.0: 7.33 ms for 1 token, 7.24 ms for 4), a verify is lifted to the decode
plus the extra distinct experts its tokens touch (``sim.contracts.expert_traffic``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from sim.contracts.expert_traffic import ExpertTraffic

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
(profiler/imported/import_sanity.py); :func:`repaired_note` finds them there at load."""
ROUNDING_S = 1e-12
"""Subtracting a MoE grid's expert reads and adding them back (the repair) moves a cell by a
rounding error; the check ignores shortfalls below a picosecond there."""
NET_LABEL = " [times less routed-expert reads]"
"""Said after a MoE grid's worst dip: its times are shown less the reads rule 1 subtracts."""
EMBED_MIN_BYTES_PER_PARAM = 2.0
"""The embedding table stays 16-bit in fp8/NVFP4 checkpoints; a pass reads only its rows."""


@dataclass(frozen=True)
class Floor:
    """Bytes a target pass must read at least, and how fast the replica can read them."""

    weight_bytes: float
    """Weights every pass reads once whatever its size: all but the embedding table (a pass reads
    its rows only) and a MoE's routed experts (``experts``); shared experts and dense parts count here."""
    kv_bytes_per_token: float
    """KV bytes of one cached token, all GPUs of the replica together."""
    bandwidth: float
    """Bytes per second, all GPUs of the replica together (datasheet peak: a true lower bound)."""
    max_kv_tokens: float
    """The most KV tokens the replica's whole memory could hold beside the weights: a cell asking
    for more is one no engine reaches, and its KV term stops there."""
    source: str
    experts: ExpertTraffic | None = None
    """A MoE's routed experts: a pass reads the distinct experts its tokens touch (None: dense)."""

    def expert_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Routed-expert bytes a pass over ``tokens`` tokens reads (0 for a dense model)."""
        t = np.asarray(tokens, dtype=float)
        return np.zeros_like(t) if self.experts is None else np.asarray(self.experts.bytes(t))

    def seconds(self, rows: np.ndarray, context: np.ndarray, tokens: np.ndarray | None = None) -> np.ndarray:
        """Lower bound of a pass computing ``tokens`` tokens (default: one per row) over ``rows``
        sequences each reading ``context`` cached tokens."""
        kv = np.minimum(rows * context, self.max_kv_tokens) * self.kv_bytes_per_token
        routed = self.expert_bytes(rows if tokens is None else tokens)
        return (self.weight_bytes + routed + kv) / self.bandwidth


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
    experts = profile_experts(profile)
    if experts is not None:  # routed experts: read as the pass's tokens touch them, not once
        unread += experts.all_bytes
    bw = dev.memory_bandwidth * dev.count
    kv_tok = float(mem.target_kv_bytes_per_token)
    room = max(float(mem.device_memory_bytes) - weights - float(mem.activation_peak_bytes), 0.0)
    once = max(weights - unread, 0.0)
    source = (f"{dev.count}x {dev.memory_bandwidth / 1e9:,.0f} GB/s ({dev.name}), "
              f"{(once + (0.0 if experts is None else float(experts.bytes(1)))) / 1e9:.2f} GB of weights + KV per "
              "1-token pass" + ("" if experts is None else
                                f", + routed experts by distinct experts touched ({experts.expert_bytes / 1e6:.1f} "
                                f"MB each x {experts.moe_layers} layers; uniform routing assumed)"))
    return Floor(once, kv_tok, bw, room / kv_tok if kv_tok > 0 else 0.0, source, experts), None


def profile_experts(profile: Profile) -> ExpertTraffic | None:
    """A MoE profile's routed experts, priced at the profile's mean bytes per parameter (the
    experts dominate a MoE's parameters, so the mean is theirs to within the dense parts' share)."""
    arch, moe = profile.target.architecture, profile.target.architecture.moe
    if moe is None or arch.num_parameters <= 0:
        return None
    per_param = float(profile.memory.target_weight_bytes) / arch.num_parameters
    return ExpertTraffic.of(moe.num_experts, moe.experts_per_token, max(arch.num_layers - moe.dense_layers, 0),
                            arch.hidden_size, moe.expert_intermediate_size, per_param)


def floor_grid(key: str, grid: TimingGrid, floor: Floor) -> np.ndarray | None:
    """The floor at every cell of a whole target pass's grid (``target_forward``,
    ``target_prefill``: the profile knows their bytes); None for the other grids."""
    if key == "target_forward":
        named = dict(zip(grid.axis_names, np.meshgrid(*map(np.asarray, grid.axes), indexing="ij"), strict=True))
        b, s, c = named["batch"], named["tokens_per_seq"], named["context"]
        return floor.seconds(b, c, b * s)  # b rows of s tokens each: b*s tokens routed
    if key == "target_prefill":
        named = dict(zip(grid.axis_names, np.meshgrid(*map(np.asarray, grid.axes), indexing="ij"), strict=True))
        n, c0 = named["tokens"], named["context"]
        return floor.seconds(np.ones_like(c0), c0, n)  # one chunk re-reads its prefix's KV once
    if key == "dense" and floor.experts is not None:  # the fused step's MoE op is in its dense part
        return floor.expert_bytes(np.asarray(grid.axes[0], dtype=float)) / floor.bandwidth
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
    off = expert_reads(key, grid, floor)
    return envelope(vals - off, tuple(grid.axis_names.index(n) for n in names)) + off


def expert_reads(key: str, grid: TimingGrid, floor: Floor | None) -> np.ndarray | float:
    """Seconds a MoE pass spends at least reading its routed experts, per cell of a grid whose
    tokens the profile knows (0 elsewhere). Rule 1 for a MoE: time *less* these reads is
    non-decreasing in tokens, so more tokens cost at least fewer plus their extra experts."""
    if floor is None or floor.experts is None or key not in ("target_forward", "target_prefill", "dense"):
        return 0.0
    named = dict(zip(grid.axis_names, np.meshgrid(*map(np.asarray, grid.axes), indexing="ij"), strict=True))
    tokens = named["tokens"] if "tokens" in named else named["batch"] * named["tokens_per_seq"]
    return floor.expert_bytes(tokens) / floor.bandwidth


def _where(grid: TimingGrid, idx: tuple[int, ...], skip: str | None = None) -> str:
    return ", ".join(f"{n} {grid.axes[i][j]:g}" for i, (n, j) in enumerate(zip(grid.axis_names, idx, strict=True))
                     if n != skip)


def _dips(grid: TimingGrid, axis: str, rel: float, abs_: float, label: str = "") -> tuple[float, str, int, str] | None:
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
            f"{grid.axes[ax][top_j]:g}" + (f" ({other})" if other else "") + label)
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
        off = expert_reads(key, grid, floor)
        net = grid if np.isscalar(off) else replace(grid, median=grid.median - off)  # less routed-expert reads
        tol, label = (abs_tol_s, "") if np.isscalar(off) else (max(abs_tol_s, ROUNDING_S), NET_LABEL)
        hits += [_dips(net, axis, rel_tol, tol, label) for axis in MONOTONE_AXES.get(key, ())]
        broken = [h for h in hits if h is not None]
        if broken:
            worst = max(broken, key=lambda h: h[0])
            found.append(Finding(grid.quantity, worst[3], tuple((h[1], h[2]) for h in broken),
                                 int(np.isfinite(grid.median).sum())))
    return Sanity(tuple(found), floor, skipped)
