"""How long one engine iteration takes: ``StepShape`` (what it computes) -> seconds.

The engine is written against the plain callable ``step_timer(shape) -> float``, so the same
engine runs on a measured profile (:class:`ProfileStepTimer`) or on the textbook service times
of queueing-theory tests (:class:`FixedStepTimer` for M/D/1, :class:`RandomServiceTimer` for
M/M/1 and other M/G/1 checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.contracts.grid import GridInterpolator
from sim.contracts.profile import Profile
from sim.contracts.profile_timing import TimingGrid
from sim.model.kernels import kernel_entry as ke
from sim.model.kernels import price_kernels as pk
from sim.model.kernels.price_kernels import verify_tokens_per_row
from sim.model.machine_speed import SpeedTimeline


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one engine iteration computes; the step timer turns it into seconds."""

    decode_seqs: int
    """Requests decoding in this step (each feeds ``k + 1`` tokens: last token + drafts)."""
    decode_context: float
    """Mean context (cached tokens) of those requests."""
    k: int
    """Draft tokens per decode request (0 = no speculation)."""
    proposer: str | None
    """Proposer drafting the ``k`` tokens; required when ``k > 0`` and requests decode."""
    prefill_tokens: int = 0
    """Prompt tokens computed in this step (all chunks summed)."""
    prefill_context: float = 0.0
    """Token-weighted mean start position of those chunks (0 = fresh prompts)."""
    decode_context_max: float | None = None
    """Longest context among the decoding requests (None: not known, taken as the mean)."""
    start_s: float = 0.0
    """When the step starts, seconds from the run's start (read only by a timer with a
    ``SpeedTimeline``: the machine's speed at that moment)."""
    rows_joined: int = 0
    """Decoding requests that were not in the previous decode batch (``DecodeBatchRows``)."""
    rows_left: int = 0
    """Requests of the previous decode batch that are not in this one."""
    drafting_seqs: int | None = None
    """Decoding requests that feed ``k`` drafts; the others had no proposal (an n-gram lookup
    without a match) and feed 1 token, as vLLM schedules them. None: all ``decode_seqs``."""

    def __post_init__(self) -> None:
        if self.drafting_seqs is not None and not 0 <= self.drafting_seqs <= self.decode_seqs:
            raise ValueError(f"StepShape drafting_seqs must be in 0..decode_seqs: {self}")
        if self.decode_seqs < 0 or self.prefill_tokens < 0 or self.k < 0 or self.rows_joined < 0 or self.rows_left < 0:
            raise ValueError(f"StepShape counts must be >= 0: {self}")
        if self.decode_context_max is not None and self.decode_context_max < self.decode_context - 1e-9:
            raise ValueError(f"StepShape decode_context_max below the mean context: {self}")
        if self.decode_context < 0 or self.prefill_context < 0:
            raise ValueError(f"StepShape contexts must be >= 0: {self}")
        if self.decode_seqs == 0 and self.prefill_tokens == 0:
            raise ValueError("StepShape with no decode and no prefill: an engine step must compute something")
        if self.k > 0 and self.decode_seqs > 0 and self.proposer is None:
            raise ValueError(f"StepShape with k={self.k} needs a proposer")


StepTimer = Callable[[StepShape], float]
"""What the engine calls once per step."""


KV_LAYOUTS = ("paged", "padded")
"""How an engine lays out the KV cache of a decode batch (scenario ``fleet.engine.kv_layout``).

``paged`` (vLLM, SGLang, TensorRT-LLM): each row attends over its own context, so a decode
step costs what a batch at the *mean* context costs. ``padded`` (a batch of left-padded rows,
as Hugging Face ``generate`` and servers built on it run): every row attends over the
*longest* row's context, so the step costs what a batch at the maximum context costs.
"""


class ProfileStepTimer:
    """Step time from a profile's grids, composed as docs/profile-format.md says.

    decode part  ``target_forward(b, k+1, c)`` plus, when ``k > 0``, ``D(b, k, c) + H(b, k)``
    (with ``d < b`` drafting rows: ``target_forward(b, verify_tokens_per_row(...), c)`` plus
    ``D(d, k, c) + H(d, k)``, nothing when ``d = 0``),
    where ``c`` is the mean context ``c̄`` for a ``paged`` KV layout and the longest context
    for a ``padded`` one (see ``KV_LAYOUTS``); prefill part ``target_prefill(n, c₀)`` when
    ``n > 0``. A mixed step costs the sum, unless the profile says ``timing.step_composition =
    "fused"``: then the target's part of every step is one pass priced from ``timing.fused``
    (``dense(n + b(k+1)) + logits(b(k+1) + [n>0]) + decode_attention(b, k+1, c) +
    prefill_attention(n, c₀)``), as GPU engines that fuse run it. A proposer with a
    ``prefill`` grid also pays its pass over the step's prompt tokens (engines run the draft's
    first pass over every scheduled token) — for steps drafting with it, and for every step of a
    timer told ``attach_proposer`` (a speculating candidate's prefill-only steps too). A
    ``timing.step_overhead`` is added to every step.
    A ``padded`` engine also pays, when the decode set changed, ``J(b, w)`` once if rows joined
    (one concatenation per layer however many) and ``L(b, w)`` per row that left, from the
    profile's ``timing.padded_batch`` (``w`` the longest context); without those grids it pays
    nothing and ``describe_extrapolations`` says so. Lookups outside the grid are counted per step
    so results can say how much of the run relied on extrapolation.
    """

    def __init__(self, profile: Profile, *, kv_layout: str = "paged", scale: float = 1.0,
                 prefill_scale: float | None = None, speed: SpeedTimeline | None = None,
                 cache_size: int = 4096) -> None:
        if kv_layout not in KV_LAYOUTS:
            raise ValueError(f"kv_layout must be one of {', '.join(KV_LAYOUTS)}, got {kv_layout!r}")
        prefill_scale = scale if prefill_scale is None else prefill_scale
        for name, v in (("scale", scale), ("prefill_scale", prefill_scale)):
            if not (v > 0 and np.isfinite(v)):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        self.profile = profile
        self.padded = kv_layout == "padded"
        self.scale = float(scale)
        """The decode part of every step is multiplied by this (and the prefill part by
        ``prefill_scale``): 1 normally; ``specplan validate --drift-correct`` passes the
        machine's measured now/profile speed ratios."""
        self.prefill_scale = float(prefill_scale)
        self.speed = speed
        """Optional: the machine's speed over time (``--drift-correct``); each step's decode and
        prefill parts are multiplied by its ratios at the step's ``start_s`` (on top of ``scale``)."""
        t = profile.timing
        self._forward = _interp(t.target_forward, cache_size)
        self._prefill = _interp(t.target_prefill, cache_size)
        self._draft = {name: _interp(p.draft, cache_size) for name, p in t.proposers.items()}
        self._overhead = {name: _interp(p.overhead, cache_size) for name, p in t.proposers.items()}
        pb = t.padded_batch if self.padded else None
        self._join = _interp(pb.join, cache_size) if pb is not None else None
        self._leave = _interp(pb.leave, cache_size) if pb is not None else None
        self.fused = t.step_composition == "fused" and t.fused is not None
        fz = t.fused
        self._dense = _interp(fz.dense, cache_size) if self.fused and fz else None
        self._logits = _interp(fz.logits, cache_size) if self.fused and fz else None
        self._dattn = _interp(fz.decode_attention, cache_size) if self.fused and fz else None
        self._pattn = _interp(fz.prefill_attention, cache_size) if self.fused and fz else None
        self._draft_prefill = {name: _interp(p.prefill, cache_size) for name, p in t.proposers.items()
                               if p.prefill is not None}
        self.step_overhead_s = t.step_overhead.seconds if t.step_overhead is not None else 0.0
        self.sample_s = t.sampler.seconds_per_position if t.sampler is not None else 0.0
        """Sampling per scored position (``timing.sampler``): decode rows × (k+1), one per prompt chunk."""
        hr = t.host_rows
        self.host_rows = (hr.seconds_per_row, hr.spec_seconds, hr.spec_seconds_per_row) if hr else (0.0, 0.0, 0.0)
        """``timing.host_rows`` (per request, per verifying step, per request when verifying)."""
        self.capture_sizes = t.cuda_graphs.capture_sizes if self.fused and t.cuda_graphs is not None else ()
        """Captured CUDA-graph token counts a fused step's dense ops are padded to."""
        self._graphs = pk.timer_constants(pk.KIND_FUSED, False, 1.0, 1.0, 0.0, capture_sizes=self.capture_sizes)
        self.attached: str | None = None
        """Proposer of a speculating candidate: its prefill pass is charged on every step with
        prompt tokens, even steps that draft nothing (``attach_proposer``)."""
        self._unpriced = 0
        self._steps = 0
        self._own: dict[str | None, tuple[pk.PackedTimer, tuple]] = {}
        """Per proposer: the packed arrays ``price`` prices with, and their plain tuple."""

    @property
    def tm(self) -> np.ndarray:
        """The constants the compiled ``price_kernels.price`` reads, from this timer's now."""
        return pk.timer_constants(pk.KIND_FUSED if self.fused else pk.KIND_SUMMED, self.padded, self.scale,
                               self.prefill_scale, self.step_overhead_s, 0.0, self.sample_s, self.capture_sizes,
                               self.host_rows)

    def check_proposer(self, proposer: str, k: int | None = None) -> None:
        """Raise a one-line error if the profile cannot time ``proposer`` (at ``k``)."""
        if proposer not in self._draft:
            have = ", ".join(self._draft) or "none"
            raise self.profile.error(
                f"timing.proposers.{proposer}",
                f"no draft/overhead timing for proposer {proposer!r} (timed proposers: {have})",
            )
        if k is not None and k < 0:
            raise ValueError(f"k must be >= 0, got {k}")

    def attach_proposer(self, proposer: str | None) -> None:
        """The candidate speculates with ``proposer``: charge its pass over prompt tokens always.

        Why: the engine names the proposer only on steps that draft, but a speculating engine
        runs its drafter over the prompt tokens of every step (vLLM's proposers keep the draft's
        KV and hidden states in step with the target's)."""
        if proposer is not None:
            self.check_proposer(proposer)
        self._settle()
        self._own.clear()  # their prefill slots name the proposer attached before
        self.attached = proposer

    def __call__(self, shape: StepShape) -> float:
        """Seconds one engine step of ``shape`` takes."""
        return self.price(shape.decode_seqs, shape.decode_context, shape.k, shape.proposer,
                          shape.prefill_tokens, shape.prefill_context, shape.decode_context_max,
                          shape.start_s, shape.rows_joined, shape.rows_left, shape.drafting_seqs)

    def price(self, b: int, c_mean: float, k: int, proposer: str | None, n: int, c0: float,
              c_max: float | None, start_s: float, joined: int, left: int,
              drafting: int | None) -> float:
        """``self(StepShape(...))`` from the shape's fields in their order, without building
        (and validating) a shape: the compiled engine's planner gives valid ones every step.

        Priced by the compiled kernel (``price_kernels.price``), the one home of the rule, on
        this timer's own packed arrays for ``proposer``; a ``SpeedTimeline``'s ratios at
        ``start_s`` are written into them first. Its lookup counts join the grids' when they are
        read (``grids``, ``steps``)."""
        if proposer is not None and proposer not in self._draft:
            self.check_proposer(proposer)
        elif proposer is None and k > 0 and b > 0 and drafting != 0:
            self.check_proposer(proposer)  # type: ignore[arg-type]
        own = self._own.get(proposer)
        if own is None:
            own = self._own[proposer] = (p := self.packed(proposer), ke.fields(p.arrays))
        if self.speed is not None:
            sd, sp = self.speed.at(start_s)
            tm = own[0].tm
            tm[pk.T_SCALE], tm[pk.T_PSCALE] = sd * self.scale, sp * self.prefill_scale
        return ke.price(own[1], (int(b), float(c_mean), int(k), int(n), float(c0),
                                 float(c_mean if c_max is None else c_max), int(joined), int(left),
                                 -1 if drafting is None else int(drafting)))

    def packed(self, proposer: str | None) -> pk.PackedTimer:
        """This timer as the arrays the compiled ``price`` reads, for steps drafting with
        ``proposer`` (None: none draft; a step with ``k > 0`` then pays the attached proposer's
        prefill pass, as a step with ``k = 0`` always does), with counts of its own."""
        slot = np.full(pk.N_SLOTS, -1, np.int64)
        grids: list[GridInterpolator] = []

        def put(s: int, grid: GridInterpolator | None) -> None:
            if grid is None:
                return
            for g, known in enumerate(grids):
                if known is grid:
                    slot[s] = g
                    return
            slot[s] = len(grids)
            grids.append(grid)

        if self.fused:
            for s, grid in ((pk.DENSE, self._dense), (pk.LOGITS, self._logits), (pk.DATTN, self._dattn),
                            (pk.PATTN, self._pattn)):
                put(s, grid)
        else:
            put(pk.FWD, self._forward)
            put(pk.PREFILL, self._prefill)
        if proposer is not None:
            put(pk.DRAFT, self._draft[proposer])
            put(pk.OVERHEAD, self._overhead[proposer])
        put(pk.DPF_STEP, self._draft_prefill.get(proposer if proposer is not None else self.attached))  # type: ignore[arg-type]
        if self.attached is not None:
            put(pk.DPF_ATTACHED, self._draft_prefill.get(self.attached))
        put(pk.JOIN, self._join)
        put(pk.LEAVE, self._leave)
        return pk.PackedTimer(self.tm, slot, grids, self)

    def _settle(self) -> None:
        """Add what this timer's own packed arrays counted to its grids and step counts."""
        for own, _ in self._own.values():
            steps, unpriced = own.take_counts()
            self._steps += steps
            self._unpriced += unpriced

    @property
    def steps(self) -> int:
        """Steps priced (by this timer, and by the packed copies the compiled loops unpacked)."""
        self._settle()
        return self._steps

    @steps.setter
    def steps(self, value: int) -> None:
        self._settle()
        self._steps = value

    @property
    def unpriced_changes(self) -> int:
        """Padded-engine steps whose batch changed with no ``padded_batch`` grids to price it."""
        self._settle()
        return self._unpriced

    @unpriced_changes.setter
    def unpriced_changes(self, value: int) -> None:
        self._settle()
        self._unpriced = value

    def grids(self) -> list[GridInterpolator]:
        """Every grid this timer looks up (its own packed lookups' counts added first)."""
        self._settle()
        extra = [g for g in (self._join, self._leave) if g is not None]
        extra += list(self._draft_prefill.values())
        if self.fused:
            fused = [g for g in (self._dense, self._logits, self._dattn, self._pattn) if g is not None]
            return [*fused, *self._draft.values(), *self._overhead.values(), *extra]
        return [self._forward, self._prefill, *self._draft.values(), *self._overhead.values(), *extra]

    def extrapolations(self) -> dict[str, int]:
        """Steps that extrapolated, keyed ``"<quantity>.<axis>"`` (e.g. ``target_forward.context``).

        Each grid is looked up at most once per step, so the counts are step counts.
        """
        out: dict[str, int] = {}
        for g in self.grids():
            for axis, n in g.extrapolations_by_axis().items():
                out[f"{_short(g.name)}.{axis}"] = n
        return out

    def describe_extrapolations(self) -> list[str]:
        """Lines for results, e.g. ``extrapolated: target_forward.context above 2048 in 12.0% of steps``."""
        lines = []
        steps = max(self.steps, 1)
        for g in self.grids():
            for what, n in g.extrapolations().items():
                lines.append(
                    f"extrapolated: {_short(g.name)}.{what} in {100.0 * n / steps:.1f}% of steps ({n} of {self.steps})"
                )
        if self.unpriced_changes:
            lines.append(
                f"padded KV layout: {self.unpriced_changes} steps whose decode batch changed were charged "
                "nothing for it (the profile has no timing.padded_batch grids; `specplan profile "
                "padded-batch` measures them)"
            )
        for g in self.grids():
            if g.filled:
                lines.append(
                    f"filled: {_short(g.name)} has {g.filled} unmeasured (null) cells filled from the "
                    "nearest measured neighbour"
                )
        return lines


class FixedStepTimer:
    """Every step takes ``seconds_per_step``: with batch 1 and 1-token outputs this is M/D/1."""

    def __init__(self, seconds_per_step: float) -> None:
        if not seconds_per_step > 0:
            raise ValueError(f"seconds_per_step must be > 0, got {seconds_per_step}")
        self.seconds_per_step = float(seconds_per_step)
        self.steps = 0

    def __call__(self, shape: StepShape) -> float:
        self.steps += 1
        return self.seconds_per_step

    def extrapolations(self) -> dict[str, int]:
        return {}

    def describe_extrapolations(self) -> list[str]:
        return []


class RandomServiceTimer:
    """Each step takes ``sampler()`` seconds, ignoring the shape (for M/M/1, M/G/1 tests).

    With ``max_num_seqs = 1``, one-token outputs and no prefill cost of its own, one request is
    one step, so a step's duration is that request's service time. The sampler owns its random
    generator (passed in, never global): ``RandomServiceTimer.exponential(mean_s, rng)``.
    """

    def __init__(self, sampler: Callable[[], float]) -> None:
        self.sampler = sampler
        self.steps = 0

    @classmethod
    def exponential(cls, mean_s: float, rng: np.random.Generator) -> RandomServiceTimer:
        """Exponential service with mean ``mean_s`` (rate ``1/mean_s``) drawn from ``rng``."""
        if not mean_s > 0:
            raise ValueError(f"mean_s must be > 0, got {mean_s}")
        return cls(lambda: float(rng.exponential(mean_s)))

    def __call__(self, shape: StepShape) -> float:
        self.steps += 1
        value = float(self.sampler())
        if not value >= 0:
            raise ValueError(f"service time sampler returned {value}; must be >= 0")
        return value

    def extrapolations(self) -> dict[str, int]:
        return {}

    def describe_extrapolations(self) -> list[str]:
        return []


def _interp(grid: TimingGrid, cache_size: int) -> GridInterpolator:
    return GridInterpolator(
        grid.axes, grid.median, name=grid.quantity, axis_names=grid.axis_names, cache_size=cache_size
    )


def _short(quantity: str) -> str:
    return quantity.removeprefix("timing.")


__all__ = [
    "KV_LAYOUTS",
    "FixedStepTimer",
    "ProfileStepTimer",
    "RandomServiceTimer",
    "StepShape",
    "StepTimer",
    "verify_tokens_per_row",
]
