"""A profile's ``timing`` section: the step-time grids (T, V(k), P(n), D(k), H(k)) and their reader."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.errors import join_path
from sim.contracts.json_reader import index_suffix, json_type
from sim.contracts.profile_identity import IdentityReader, ProposerIdentity, Provenance
from sim.contracts.timing_extras import (
    CudaGraphs,
    FusedTiming,
    HostRows,
    Sampler,
    StepOverhead,
    describe_composition,
    parse_extras,
    parse_host_rows,
    parse_proposer_extras,
    parse_step_terms,
)

# quantity -> axis names in canonical order (the array is transposed to this order on load)
TARGET_FORWARD_AXES = ("batch", "tokens_per_seq", "context")
TARGET_PREFILL_AXES = ("tokens", "context")
DRAFT_AXES = ("batch", "k", "context")
OVERHEAD_AXES = ("batch", "k")
PADDED_BATCH_AXES = ("batch", "context")
# smallest valid value per axis name
_AXIS_MIN = {"batch": 1, "tokens_per_seq": 1, "context": 0, "tokens": 1, "k": 1}


@dataclass(frozen=True, eq=False)
class TimingGrid:
    """One timing quantity: axes (strictly increasing) and read-only arrays in axis order.

    ``null`` cells of the file are NaN here; ``sim.contracts.grid`` fills them before interpolating.
    """

    quantity: str
    """JSON path of the quantity, e.g. ``timing.proposers.ngram.draft``."""
    axis_names: tuple[str, ...]
    axes: tuple[tuple[float, ...], ...]
    median: np.ndarray
    p10: np.ndarray | None = None
    p90: np.ndarray | None = None
    repeats: int | None = None

    @property
    def null_cells(self) -> int:
        """Cells the profiler could not measure."""
        return int(np.isnan(self.median).sum())


@dataclass(frozen=True)
class ProposerTiming:
    """D(k) and H(k) grids of one proposer."""

    draft: TimingGrid
    overhead: TimingGrid
    prefill: TimingGrid | None = None
    """Optional: the proposer's pass over ``tokens`` prompt tokens of a step (axes tokens,
    context); engines run a draft model or an EAGLE head over every scheduled token."""
    overhead_provenance: Provenance | None = None
    """Where ``overhead`` comes from when not from the timing section's own run."""


@dataclass(frozen=True)
class Limit:
    """Why a grid cell is null (out of memory, beyond the context window, ...)."""

    quantity: str
    point: Mapping[str, float]
    reason: str


@dataclass(frozen=True)
class PaddedBatchTiming:
    """What a padded engine pays when rows join or leave its batched KV (J(b, w), L(b, w))."""

    join: TimingGrid
    leave: TimingGrid
    provenance: Provenance | None = None
    """Where these two grids come from when not from the timing section's own run."""


@dataclass(frozen=True)
class BatchOrigin:
    """Which decode batch sizes of ``target_forward`` a run planned and measured, and which the
    grid checks added where step time was not smooth; every other batch size is interpolated
    between (or extrapolated beyond) the axis. Why on record: validate's per-batch errors say
    which rows rest on a measurement."""

    measured: tuple[int, ...]
    refined: tuple[int, ...] = ()


def origin_of(batch: int, axis: tuple[float, ...], origin: BatchOrigin | None = None) -> str:
    """``measured``, ``refined``, ``interpolated`` or ``extrapolated``: how the profile prices a
    decode pass of ``batch`` sequences (without a record, a value on the axis counts as measured)."""
    if origin is not None and batch in origin.refined:
        return "refined"
    if batch in axis:
        return "measured"
    return "interpolated" if axis[0] < batch < axis[-1] else "extrapolated"


@dataclass(frozen=True)
class Timing:
    """Step-time grids: target forward (T, V(k)), prefill P(n) and per-proposer D(k), H(k)."""

    provenance: Provenance
    target_forward: TimingGrid
    target_prefill: TimingGrid
    proposers: Mapping[str, ProposerTiming]
    limits: tuple[Limit, ...] = ()
    padded_batch: PaddedBatchTiming | None = None
    """Optional: only a ``kv_layout = "padded"`` engine uses it."""
    step_composition: str = "sum"
    """``sum``: a mixed step costs a decode pass plus a prefill pass; ``fused``: one pass
    priced from ``fused`` (sim/contracts/timing_extras.py)."""
    fused: FusedTiming | None = None
    step_overhead: StepOverhead | None = None
    """Optional host time per step; None: the grids' own wall times already hold it."""
    sampler: Sampler | None = None
    """Optional sampling time per scored position; None: in the grids (measured) or not priced."""
    cuda_graphs: CudaGraphs | None = None
    """Optional captured CUDA-graph sizes a fused step's dense ops are padded to."""
    batch_origin: BatchOrigin | None = None
    """Optional: which batch sizes were planned and which the grid checks added (a profiler run
    writes it; imported and older profiles have none)."""
    host_rows: HostRows | None = None
    """Optional host time per scheduled request (published; sim/contracts/timing_extras.py)."""

    def describe(self) -> str:
        """The timing sources line: provenance and how a step is composed."""
        extra = describe_composition(self.step_composition, self.fused, self.step_overhead,
                                     self.sampler, self.cuda_graphs, self.host_rows)
        return f"{self.provenance.describe()} [{extra}]"


class TimingReader(IdentityReader):
    """Reads the timing section: grids with strictly increasing axes, arrays of their shape."""

    def timing(self, v: Any, path: str, proposers: Mapping[str, ProposerIdentity]) -> Timing:
        v = self.obj(v, path, ("provenance", "target_forward", "target_prefill"),
                     ("proposers", "limits", "padded_batch", "step_composition", "fused", "step_overhead",
                      "sampler", "cuda_graphs", "batch_origin", "host_rows"))
        prov = self.provenance(v["provenance"], join_path(path, "provenance"))
        tf = self.grid(v["target_forward"], join_path(path, "target_forward"), TARGET_FORWARD_AXES)
        tp = self.grid(v["target_prefill"], join_path(path, "target_prefill"), TARGET_PREFILL_AXES)
        ptimes: dict[str, ProposerTiming] = {}
        for name, p, spec in self.proposer_entries(v, path, proposers):
            spec = self.obj(spec, p, ("draft", "overhead"), ("prefill", "overhead_provenance"))
            prefill, oprov = parse_proposer_extras(self, spec, p)
            ptimes[name] = ProposerTiming(
                draft=self.grid(spec["draft"], join_path(p, "draft"), DRAFT_AXES),
                overhead=self.grid(spec["overhead"], join_path(p, "overhead"), OVERHEAD_AXES),
                prefill=prefill,
                overhead_provenance=oprov,
            )
        limits = []
        lraw = v.get("limits", [])
        if not isinstance(lraw, list):
            raise self.fail(join_path(path, "limits"), f"expected a list, got {json_type(lraw)}")
        for i, lim in enumerate(lraw):
            lp = f"{join_path(path, 'limits')}[{i}]"
            lim = self.obj(lim, lp, ("quantity", "point", "reason"))
            point = lim["point"]
            if not isinstance(point, dict):
                raise self.fail(join_path(lp, "point"), f"expected an object of axis values, got {json_type(point)}")
            for key, val in point.items():
                self.num(val, join_path(join_path(lp, "point"), key))
            limits.append(
                Limit(
                    quantity=self.str_(lim["quantity"], join_path(lp, "quantity")),
                    point={k: float(x) for k, x in point.items()},
                    reason=self.str_(lim["reason"], join_path(lp, "reason")),
                )
            )
        padded = None
        if "padded_batch" in v:
            pb = join_path(path, "padded_batch")
            spec = self.obj(v["padded_batch"], pb, ("join", "leave"), ("provenance",))
            padded = PaddedBatchTiming(
                join=self.grid(spec["join"], join_path(pb, "join"), PADDED_BATCH_AXES),
                leave=self.grid(spec["leave"], join_path(pb, "leave"), PADDED_BATCH_AXES),
                provenance=(self.provenance(spec["provenance"], join_path(pb, "provenance"))
                            if "provenance" in spec else None),
            )
        comp, fused, step_overhead = parse_extras(self, v, path)
        sampler, graphs = parse_step_terms(self, v, path)
        return Timing(prov, tf, tp, ptimes, tuple(limits), padded, comp, fused, step_overhead, sampler, graphs,
                      self.batch_origin(v["batch_origin"], join_path(path, "batch_origin"), tf)
                      if "batch_origin" in v else None, parse_host_rows(self, v, path))

    def batch_origin(self, v: Any, path: str, tf: TimingGrid) -> BatchOrigin:
        v = self.obj(v, path, ("measured",), ("refined",))
        axis = set(tf.axes[tf.axis_names.index("batch")])
        lists: dict[str, tuple[int, ...]] = {}
        for key in ("measured", "refined"):
            raw = v.get(key, [])
            if not isinstance(raw, list):
                raise self.fail(join_path(path, key), f"expected a list of batch sizes, got {json_type(raw)}")
            lists[key] = tuple(self.int_(x, f"{join_path(path, key)}[{i}]", minimum=1) for i, x in enumerate(raw))
            off = [b for b in lists[key] if b not in axis]
            if off:
                raise self.fail(join_path(path, key), f"batch {off[0]} is not on target_forward's batch axis "
                                f"({', '.join(f'{b:g}' for b in sorted(axis))})")
        return BatchOrigin(lists["measured"], lists["refined"])

    def grid(self, v: Any, path: str, expected: tuple[str, ...]) -> TimingGrid:
        v = self.obj(v, path, ("axes", "median"), ("p10", "p90", "repeats"))
        ap = join_path(path, "axes")
        axes_raw = v["axes"]
        if not isinstance(axes_raw, dict):
            raise self.fail(ap, f"expected an object of axis name -> values, got {json_type(axes_raw)}")
        if set(axes_raw) != set(expected) or len(axes_raw) != len(expected):
            raise self.fail(ap, f"expected axes {', '.join(expected)}, got {', '.join(map(str, axes_raw)) or 'none'}")
        names = tuple(axes_raw)
        axes: list[tuple[float, ...]] = []
        for name in names:
            vals = axes_raw[name]
            np_ = join_path(ap, name)
            if not isinstance(vals, list) or not vals:
                raise self.fail(np_, "expected a non-empty list of increasing numbers")
            out = tuple(self.num(x, f"{np_}[{i}]") for i, x in enumerate(vals))
            for i in range(1, len(out)):
                if not out[i] > out[i - 1]:
                    raise self.fail(f"{np_}[{i}]", f"axis values must be strictly increasing, got {out[i - 1]:g} then {out[i]:g}")
            if out[0] < _AXIS_MIN[name]:
                raise self.fail(f"{np_}[0]", f"must be >= {_AXIS_MIN[name]}, got {out[0]:g}")
            axes.append(out)
        shape = tuple(len(a) for a in axes)
        median = self.array(v["median"], join_path(path, "median"), shape, names)
        if np.isnan(median).all():
            raise self.fail(join_path(path, "median"), "every cell is null: nothing was measured")
        arrays: dict[str, np.ndarray | None] = {"p10": None, "p90": None}
        for key in arrays:
            if v.get(key) is not None:
                arrays[key] = self.array(v[key], join_path(path, key), shape, names)
        p10, p90 = arrays["p10"], arrays["p90"]
        tol = 1e-12
        with np.errstate(invalid="ignore"):
            if p10 is not None and bool(np.any(p10 > median + tol)):
                idx = tuple(int(i) for i in np.argwhere(p10 > median + tol)[0])
                raise self.fail(join_path(path, "p10") + index_suffix(idx), "p10 must be <= median")
            if p90 is not None and bool(np.any(p90 < median - tol)):
                idx = tuple(int(i) for i in np.argwhere(p90 < median - tol)[0])
                raise self.fail(join_path(path, "p90") + index_suffix(idx), "p90 must be >= median")
        repeats = self.int_(v.get("repeats"), join_path(path, "repeats"), minimum=1, nullable=True)
        # transpose into canonical axis order
        order = [names.index(n) for n in expected]
        if order != list(range(len(expected))):
            median = np.transpose(median, order).copy()
            p10 = None if p10 is None else np.transpose(p10, order).copy()
            p90 = None if p90 is None else np.transpose(p90, order).copy()
            axes = [axes[i] for i in order]
        for arr in (median, p10, p90):
            if arr is not None:
                arr.setflags(write=False)
        return TimingGrid(path, expected, tuple(axes), median, p10, p90, repeats)

    def array(self, v: Any, path: str, shape: tuple[int, ...], names: tuple[str, ...] = ()) -> np.ndarray:
        """Nested lists of exactly ``shape``, numbers >= 0 or null (NaN); a wrong length names the
        axis (``names``), since the axis values or the array may be the one in error."""
        flat: list[float] = []
        dims = "x".join(map(str, shape))

        def walk(node: Any, depth: int, p: str) -> None:
            if depth == len(shape):
                if node is None:
                    flat.append(math.nan)
                    return
                if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
                    raise self.fail(p, f"expected a number (seconds) or null, got {json_type(node)}")
                if node < 0:
                    raise self.fail(p, f"times must be >= 0, got {node}")
                flat.append(float(node))
                return
            if not isinstance(node, list) or len(node) != shape[depth]:
                got = f"length {len(node)}" if isinstance(node, list) else json_type(node)
                axis = f"axis {depth + 1}" + (f", axes.{names[depth]}," if depth < len(names) else "")
                raise self.fail(p, f"expected {len(shape)}-d array {dims} ({axis} of length {shape[depth]}), got {got}")
            for i, child in enumerate(node):
                walk(child, depth + 1, f"{p}[{i}]")

        walk(v, 0, path)
        return np.array(flat, dtype=float).reshape(shape)
