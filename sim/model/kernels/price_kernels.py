"""A step's price, compiled: the one home of the pricing rule and its grid lookups, in numba.

Why: once the planner is compiled, pricing a step in Python (~3 µs: four to six grid lookups)
and handing it to SimPy are most of what a small-batch step costs. With the timer compiled too,
a replica can run every step that ends before the next event of the simulation without coming
back to Python (``sim.model.kernels.fleet_kernels.run_fleet``). ``ProfileStepTimer.price`` calls
``price`` too (through ``kernel_entry.price``), so a step has one price wherever it is asked for;
the readable form is the test oracle (``tests/sim/model/price_oracle.py``, compared bit for bit).
The lookups are ``GridInterpolator._compute`` operation for operation, and extrapolations are
counted per grid and axis as the Python lookups count them (``unpack`` adds them back to the
timer's grids at the end of a run).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model.kernels.kernel_cache import njit

# grid slots of a timer (-1: the timer has no such grid)
FWD, PREFILL, DRAFT, OVERHEAD, JOIN, LEAVE, DENSE, LOGITS, DATTN, PATTN, DPF_STEP, DPF_ATTACHED = range(12)
N_SLOTS = 12
# tm (float64): timer constants, then the captured CUDA-graph sizes (T_NCAP of them from T_CAP0)
T_KIND, T_PADDED, T_SCALE, T_PSCALE, T_OVERHEAD_S, T_FIXED_S, T_SAMPLE_S = range(7)
T_ROW_S, T_SPEC_S, T_SPEC_ROW_S, T_NCAP = range(7, 11)
T_CAP0 = 11
KIND_SUMMED, KIND_FUSED, KIND_FIXED = 0.0, 1.0, 2.0
# gm (int64): per grid ndim, len0..2, axis offset 0..2, value offset, stride 0..2
G_NDIM, G_LEN, G_AXOFF, G_VALOFF, G_STRIDE = 0, 1, 4, 7, 8
N_GM = 11
# tc (int64): timer counters
TC_STEPS, TC_UNPRICED = 0, 1


@njit
def _axis(g, j, gm, ax, cnt, v):
    """One axis of a lookup: ``(segment index, t, outside)``, counting an extrapolation."""
    n = gm[g, G_LEN + j]
    a0 = gm[g, G_AXOFF + j]
    if v < ax[a0]:
        cnt[g, 1 + 2 * j] += 1
    elif v > ax[a0 + n - 1]:
        cnt[g, 2 + 2 * j] += 1
    if n == 1:
        return 0, 0.0, v != ax[a0]
    i = 0  # bisect_right - 1, clamped to a segment (axes are short: a scan)
    while i < n - 2 and ax[a0 + i + 1] <= v:
        i += 1
    t = (v - ax[a0 + i]) / (ax[a0 + i + 1] - ax[a0 + i])
    return i, t, t < 0.0 or t > 1.0


@njit
def _lerp(va, vb, t, out):
    """One interpolation step; outside the grid never below the smaller end value."""
    v = va + t * (vb - va)
    if out:
        floor = va if va < vb else vb
        if v < floor:
            v = floor
    return v


@njit
def interp(g, gm, ax, val, cnt, x0, x1, x2):
    """``GridInterpolator(x0[, x1[, x2]])`` for packed grid ``g`` (1 to 3 axes): multilinear
    inside, linear outside (held at the smaller end value when that segment decreases),
    reduced from the last axis to the first as the Python lookup does, counted per axis."""
    ndim = gm[g, G_NDIM]
    cnt[g, 0] += 1
    base = gm[g, G_VALOFF]
    i0, t0, o0 = _axis(g, 0, gm, ax, cnt, float(x0))  # ints compare and subtract as floats
    if ndim == 1:
        s0 = gm[g, G_STRIDE]
        return _lerp(val[base + i0 * s0], val[base + (i0 + 1) * s0 if gm[g, G_LEN] > 1 else base], t0, o0)
    i1, t1, o1 = _axis(g, 1, gm, ax, cnt, float(x1))
    h0 = i0 + 1 if gm[g, G_LEN] > 1 else i0
    h1 = i1 + 1 if gm[g, G_LEN + 1] > 1 else i1
    s0 = gm[g, G_STRIDE]
    s1 = gm[g, G_STRIDE + 1]
    if ndim == 2:
        lo = _lerp(val[base + i0 * s0 + i1 * s1], val[base + i0 * s0 + h1 * s1], t1, o1)
        hi = _lerp(val[base + h0 * s0 + i1 * s1], val[base + h0 * s0 + h1 * s1], t1, o1)
        return _lerp(lo, hi, t0, o0)
    i2, t2, o2 = _axis(g, 2, gm, ax, cnt, float(x2))
    h2 = i2 + 1 if gm[g, G_LEN + 2] > 1 else i2
    s2 = gm[g, G_STRIDE + 2]
    a = base + i0 * s0 + i1 * s1  # the four corners over axes 0 and 1, axis 1 fastest
    v00 = _lerp(val[a + i2 * s2], val[a + h2 * s2], t2, o2)
    a = base + i0 * s0 + h1 * s1
    v01 = _lerp(val[a + i2 * s2], val[a + h2 * s2], t2, o2)
    a = base + h0 * s0 + i1 * s1
    v10 = _lerp(val[a + i2 * s2], val[a + h2 * s2], t2, o2)
    a = base + h0 * s0 + h1 * s1
    v11 = _lerp(val[a + i2 * s2], val[a + h2 * s2], t2, o2)
    return _lerp(_lerp(v00, v01, t1, o1), _lerp(v10, v11, t1, o1), t0, o0)


@njit
def verify_tokens_per_row(rows, drafting, k, padded):
    """Tokens per row that a verification pass over ``rows`` rows is priced at, when only
    ``drafting`` of them feed ``k`` drafts and the rest feed one token (no proposal); the
    Python timer (``step_time``) calls this too.

    A paged engine flattens the batch's tokens, so it costs about what ``rows`` rows at the mean
    ``1 + k·drafting/rows`` tokens cost (``target_forward`` interpolated along
    ``tokens_per_seq``; exact at 0 or all rows drafting). A padded engine runs a rectangle: any
    drafting row makes every row ``k + 1`` wide; with none it is a plain decode.
    """
    if k == 0 or drafting == rows:
        return float(k + 1)
    if drafting == 0:
        return 1.0
    return float(k + 1) if padded else 1.0 + k * drafting / rows


@njit
def graph_tokens(tm, tokens, q=1):
    """Token count the graphed ops (every op but attention) of a fused step over ``tokens``
    scheduled tokens run at: the next captured CUDA-graph size, as vLLM's
    ``pad_for_cudagraph(num_scheduled_tokens)`` pads them; unchanged above the largest size or
    without captured sizes. A speculative step (``q = k + 1`` tokens per decode row) runs on
    sizes rounded up to multiples of ``q``, those past the largest captured size dropped, as
    vLLM's ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` captures them for its
    FULL decode graphs (the default mode). The Python timer calls this too."""
    n = int(tm[T_NCAP])
    if n == 0:
        return tokens
    top = tm[T_CAP0 + n - 1]
    kept = 0
    for i in range(n):
        size = tm[T_CAP0 + i]
        if q > 1:
            size = np.ceil(size / q) * q
            if size > top:
                break
        kept += 1
        if size >= tokens:
            return size
    if q > 1 and kept == 0 and q <= top and tokens <= q:
        return float(q)  # vLLM keeps [q] when every rounded size passed the largest
    return tokens


def timer_constants(kind: float, padded: bool, scale: float, pscale: float, overhead_s: float,
                    fixed_s: float = 0.0, sample_s: float = 0.0, capture_sizes: tuple = (),
                    host_rows: tuple = (0.0, 0.0, 0.0)) -> np.ndarray:
    """The ``tm`` array ``price`` and ``graph_tokens`` read (the Python timer builds one too);
    ``host_rows``: ``timing.host_rows`` as (per request, verifying step, per request when verifying)."""
    tm = np.zeros(T_CAP0 + len(capture_sizes), np.float64)
    tm[T_KIND], tm[T_PADDED], tm[T_SCALE], tm[T_PSCALE] = kind, 1.0 if padded else 0.0, scale, pscale
    tm[T_OVERHEAD_S], tm[T_FIXED_S], tm[T_SAMPLE_S] = overhead_s, fixed_s, sample_s
    tm[T_ROW_S], tm[T_SPEC_S], tm[T_SPEC_ROW_S] = host_rows
    tm[T_NCAP] = len(capture_sizes)
    tm[T_CAP0:] = capture_sizes
    return tm


class TimerArrays(NamedTuple):
    """What ``price`` reads: constants, grid slots, grids (metadata, axes, values), counters."""

    tm: np.ndarray
    slot: np.ndarray
    gm: np.ndarray
    ax: np.ndarray
    val: np.ndarray
    cnt: np.ndarray
    tc: np.ndarray


@njit
def host_seconds(tm, b, n, verifies):
    """Host time per scheduled request (``timing.host_rows``): every request of the step (decode
    rows, one per prompt chunk), and more per request on a step that verifies drafts. The
    Python timer calls this too."""
    rows = b + (1 if n > 0 else 0)
    host = tm[T_ROW_S] * rows
    if verifies:
        host += tm[T_SPEC_S] + tm[T_SPEC_ROW_S] * rows
    return host


@njit
def price_plan(ta, p):
    """Seconds of the step ``plan_kernels.plan_step`` returned as ``p``."""
    return price(ta, (p[0], p[3], p[2], p[5], p[6], p[4], p[7], p[8], p[9]))


@njit
def price(ta, shape):
    """Seconds of one step of ``shape`` = ``(b, c_mean, k, n, c0, c_max, joined, left,
    drafting)`` (``drafting`` -1: every row drafts), composed as ``ProfileStepTimer``'s docstring
    and docs/profile-format.md say."""
    tm, slot, gm, ax, val, cnt, tc = ta
    b, c_mean, k, n, c0, c_max, joined, left, drafting = shape
    tc[TC_STEPS] += 1
    kind = tm[T_KIND]
    if kind == KIND_FIXED:
        return tm[T_FIXED_S]
    padded = tm[T_PADDED] != 0.0
    sd = tm[T_SCALE]
    sp = tm[T_PSCALE]
    c = c_max if padded else c_mean
    nd = b if drafting < 0 or k == 0 else drafting
    verifies = b > 0 and k > 0 and nd > 0  # drafts priced, and the host's verifying-step work
    pairs = slot[JOIN] >= 0 and slot[LEAVE] >= 0
    dpf = slot[DPF_STEP] if k > 0 else slot[DPF_ATTACHED]
    if kind == KIND_FUSED:
        rows = b * verify_tokens_per_row(b, nd, k, padded) if b > 0 else 0.0
        scored = rows + (1 if n else 0)
        total = (interp(slot[DENSE], gm, ax, val, cnt, graph_tokens(tm, rows + n, k + 1), 0.0, 0.0)
                 + interp(slot[LOGITS], gm, ax, val, cnt, scored, 0.0, 0.0) + tm[T_SAMPLE_S] * scored)
        if b > 0:
            total += interp(slot[DATTN], gm, ax, val, cnt, b, rows / b, c)
        if n > 0:
            total += interp(slot[PATTN], gm, ax, val, cnt, n, c0, 0.0)
        total *= sd if b > 0 else sp
        if verifies:
            total += (interp(slot[DRAFT], gm, ax, val, cnt, nd, k, c)
                      + interp(slot[OVERHEAD], gm, ax, val, cnt, nd, k, 0.0)) * sd
        if padded and b > 0 and (joined or left):
            if not pairs:
                tc[TC_UNPRICED] += 1
            else:
                jv = interp(slot[JOIN], gm, ax, val, cnt, b, c, 0.0) if joined else 0.0
                total += (jv + left * interp(slot[LEAVE], gm, ax, val, cnt, b, c, 0.0)) * sd
        if n > 0:
            total += (interp(dpf, gm, ax, val, cnt, n, c0, 0.0) if dpf >= 0 else 0.0) * sp
        return total + tm[T_OVERHEAD_S] + host_seconds(tm, b, n, verifies)
    total = 0.0
    if b > 0:
        s = verify_tokens_per_row(b, nd, k, padded)
        total = interp(slot[FWD], gm, ax, val, cnt, b, s, c) + tm[T_SAMPLE_S] * b * s
        if verifies:
            total += (interp(slot[DRAFT], gm, ax, val, cnt, nd, k, c)
                      + interp(slot[OVERHEAD], gm, ax, val, cnt, nd, k, 0.0))
        if padded and (joined or left):
            if not pairs:
                tc[TC_UNPRICED] += 1
            else:
                if joined:
                    total += interp(slot[JOIN], gm, ax, val, cnt, b, c, 0.0)
                total += left * interp(slot[LEAVE], gm, ax, val, cnt, b, c, 0.0)
        total *= sd
    if n > 0:
        total += (interp(slot[PREFILL], gm, ax, val, cnt, n, c0, 0.0) + tm[T_SAMPLE_S]) * sp
        total += (interp(dpf, gm, ax, val, cnt, n, c0, 0.0) if dpf >= 0 else 0.0) * sp
    return total + tm[T_OVERHEAD_S] + host_seconds(tm, b, n, verifies)


class PackedTimer:
    """A step timer's grids and constants as the arrays ``price`` reads, and its counters."""

    def __init__(self, tm: np.ndarray, slot: np.ndarray, grids: list, timer) -> None:
        self.tm, self.slot, self.grids, self.timer = tm, slot, grids, timer
        ax: list[float] = []
        val: list[float] = []
        self.gm = np.zeros((max(len(grids), 1), N_GM), np.int64)
        for g, grid in enumerate(grids):
            self.gm[g, G_NDIM] = grid._n
            for j, xs in enumerate(grid._xs):
                self.gm[g, G_LEN + j] = len(xs)
                self.gm[g, G_AXOFF + j] = len(ax)
                self.gm[g, G_STRIDE + j] = grid._strides[j]
                ax.extend(xs)
            self.gm[g, G_VALOFF] = len(val)
            val.extend(grid._flat)
        self.ax = np.array(ax or [0.0], np.float64)
        self.val = np.array(val or [0.0], np.float64)
        self.cnt = np.zeros((max(len(grids), 1), 7), np.int64)
        self.tc = np.zeros(2, np.int64)
        self.arrays = TimerArrays(self.tm, self.slot, self.gm, self.ax, self.val, self.cnt, self.tc)

    def unpack(self) -> None:
        """Add what the compiled lookups counted to the timer and its grids (its notes and
        extrapolation shares then read as if it had priced every step itself)."""
        steps, unpriced = self.take_counts()
        t = self.timer
        t.steps += steps
        if hasattr(t, "unpriced_changes"):
            t.unpriced_changes += unpriced

    def take_counts(self) -> tuple[int, int]:
        """Add the lookups counted to the grids; return (and zero) the steps and unpriced
        padded changes counted."""
        for g, grid in enumerate(self.grids):
            c = self.cnt[g].tolist()
            grid.calls += c[0]
            for j in range(grid._n):
                grid._below[j] += c[1 + 2 * j]
                grid._above[j] += c[2 + 2 * j]
        self.cnt[:] = 0
        out = int(self.tc[TC_STEPS]), int(self.tc[TC_UNPRICED])
        self.tc[:] = 0
        return out
