"""Optional parts of a profile's ``timing`` section: fused steps, per-step overhead, draft prefill.

Why a module of its own: these keys describe how a GPU engine composes one step (one fused
pass over prefill and decode tokens, a fixed host cost per step, the draft's pass over prompt
tokens) — a contract the CPU profiler's profiles do not carry. Old profiles load unchanged:
``step_composition`` defaults to ``"sum"`` (today's sum of a decode and a prefill pass).
docs/profile-format.md, "Fused steps", is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sim.contracts.errors import join_path

if TYPE_CHECKING:  # profile_timing.py imports this module; only the type names are needed here
    from sim.contracts.profile_identity import Provenance
    from sim.contracts.profile_timing import TimingGrid

StepComposition = Literal["sum", "fused"]
STEP_COMPOSITIONS: tuple[str, ...] = ("sum", "fused")

FUSED_GRIDS: dict[str, tuple[str, ...]] = {
    "dense": ("tokens",),
    "logits": ("tokens",),
    "decode_attention": ("batch", "tokens_per_seq", "context"),
    "prefill_attention": ("tokens", "context"),
}
"""Per-op decomposition of one fused pass: grid name -> axes (canonical order)."""

DRAFT_PREFILL_AXES = ("tokens", "context")


@dataclass(frozen=True)
class FusedTiming:
    """One forward pass priced by its contents (docs/profile-format.md, "Fused steps").

    A pass over ``T`` scheduled tokens costs ``dense(T) + logits(rows) + decode_attention(b, s,
    c̄) + prefill_attention(n, c₀)``: every op that is not attention or the LM head reads the
    weights once for all tokens of the step, prefill and decode alike.
    """

    dense: TimingGrid
    """Every op except attention and the LM head (GEMMs, norms, activation, all-reduces) over
    ``tokens`` rows."""
    logits: TimingGrid
    """The LM head over ``tokens`` rows (decode rows × (k+1), plus one row per prompt chunk)."""
    decode_attention: TimingGrid
    """Attention of ``batch`` decode rows, each ``tokens_per_seq`` queries over ``context``
    cached tokens."""
    prefill_attention: TimingGrid
    """Attention of ``tokens`` prompt tokens whose chunk starts after ``context`` cached ones."""


@dataclass(frozen=True)
class StepOverhead:
    """Host time every engine step pays on top of its passes (scheduling, sampling, launch)."""

    seconds: float
    provenance: Provenance


@dataclass(frozen=True)
class Sampler:
    """Sampling's GPU time per position the LM head scores (the rejection sampler's argmax or
    softmax over a verified draft, the plain sampler's over a bonus or decode token), priced
    per position because vLLM samples over all ``b(k+1)`` logits rows of a speculative step."""

    seconds_per_position: float
    provenance: Provenance


@dataclass(frozen=True)
class HostRows:
    """Host (CPU) time a step pays per request it schedules, from published measurements.

    Why per request, not per step: the engine's Python loops over the scheduled requests run
    on the critical path of a synchronous engine, so they grow with the batch and with
    speculation (docs/profile-format.md, "A speculative step by its parts")."""

    seconds_per_row: float
    """Every step, per scheduled request (decode rows, plus one per prompt chunk): the
    scheduler's ``update_from_output`` loop."""
    spec_seconds: float
    """A step that verifies drafts, once: turning the rejection sampler's output into
    per-request token lists (``RejectionSampler.parse_output``, its device-to-host copy
    included)."""
    spec_seconds_per_row: float
    """The same, per scheduled request (its per-row NumPy filter and ``tolist``)."""
    provenance: Provenance
    """The rule that prices these is ``sim.model.kernels.price_kernels.host_seconds``."""


@dataclass(frozen=True)
class CudaGraphs:
    """The token counts an engine captured CUDA graphs for: a step of ``t`` scheduled tokens,
    ``t`` at most the largest, runs its graphed ops (every op but attention) at the next
    captured size (vLLM ``pad_for_cudagraph(num_scheduled_tokens)``)."""

    capture_sizes: tuple[int, ...]
    provenance: Provenance
    """The rule that pads a step to them is ``sim.model.kernels.price_kernels.graph_tokens``."""


def parse_step_terms(parser: Any, v: dict, path: str) -> tuple[Sampler | None, CudaGraphs | None]:
    """``(sampler, cuda_graphs)`` of a timing object already key-checked."""
    sampler = graphs = None
    if v.get("sampler") is not None:
        sp = join_path(path, "sampler")
        spec = parser.obj(v["sampler"], sp, ("seconds_per_position", "provenance"))
        sampler = Sampler(parser.num(spec["seconds_per_position"], join_path(sp, "seconds_per_position"), minimum=0.0),
                          parser.provenance(spec["provenance"], join_path(sp, "provenance")))
    if v.get("cuda_graphs") is not None:
        gp = join_path(path, "cuda_graphs")
        spec = parser.obj(v["cuda_graphs"], gp, ("capture_sizes", "provenance"))
        sizes = spec["capture_sizes"]
        cp = join_path(gp, "capture_sizes")
        if not isinstance(sizes, list) or not sizes or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in sizes):
            raise parser.fail(cp, "expected a non-empty list of integers >= 1 (token counts with a captured graph)")
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise parser.fail(cp, "expected strictly increasing sizes")
        graphs = CudaGraphs(tuple(sizes), parser.provenance(spec["provenance"], join_path(gp, "provenance")))
    return sampler, graphs


def parse_host_rows(parser: Any, v: dict, path: str) -> HostRows | None:
    """``timing.host_rows`` of a timing object already key-checked (None when absent)."""
    if v.get("host_rows") is None:
        return None
    hp = join_path(path, "host_rows")
    names = ("seconds_per_row", "spec_seconds", "spec_seconds_per_row")
    spec = parser.obj(v["host_rows"], hp, (*names, "provenance"))
    nums = [parser.num(spec[k], join_path(hp, k), minimum=0.0) for k in names]
    return HostRows(*nums, parser.provenance(spec["provenance"], join_path(hp, "provenance")))


def parse_extras(parser: Any, v: dict, path: str) -> tuple[str, FusedTiming | None, StepOverhead | None]:
    """``(step_composition, fused, step_overhead)`` of a timing object already key-checked."""
    comp = parser.choice(v.get("step_composition", "sum"), join_path(path, "step_composition"), STEP_COMPOSITIONS)
    fused = None
    if v.get("fused") is not None:
        fp = join_path(path, "fused")
        spec = parser.obj(v["fused"], fp, tuple(FUSED_GRIDS))
        fused = FusedTiming(**{k: parser.grid(spec[k], join_path(fp, k), axes) for k, axes in FUSED_GRIDS.items()})
    if comp == "fused" and fused is None:
        raise parser.fail(join_path(path, "fused"), 'required when step_composition is "fused" (the per-op grids of one pass)')
    overhead = None
    if v.get("step_overhead") is not None:
        op = join_path(path, "step_overhead")
        spec = parser.obj(v["step_overhead"], op, ("seconds", "provenance"))
        overhead = StepOverhead(
            seconds=parser.num(spec["seconds"], join_path(op, "seconds"), minimum=0.0),
            provenance=parser.provenance(spec["provenance"], join_path(op, "provenance")),
        )
    return comp, fused, overhead


def parse_proposer_extras(parser: Any, spec: dict, path: str) -> tuple[TimingGrid | None, Provenance | None]:
    """``(prefill grid, overhead provenance)`` of one ``timing.proposers.<p>`` entry."""
    prefill = None
    if spec.get("prefill") is not None:
        prefill = parser.grid(spec["prefill"], join_path(path, "prefill"), DRAFT_PREFILL_AXES)
    prov = None
    if spec.get("overhead_provenance") is not None:
        prov = parser.provenance(spec["overhead_provenance"], join_path(path, "overhead_provenance"))
    return prefill, prov


def describe_composition(comp: str, fused: FusedTiming | None, overhead: StepOverhead | None,
                         sampler: Sampler | None = None, graphs: CudaGraphs | None = None,
                         host: HostRows | None = None) -> str:
    """The part of the timing sources line that says how steps are composed."""
    text = ("steps: one fused pass per step (timing.fused)" if comp == "fused"
            else "steps: sum of a decode and a prefill pass")
    if overhead is not None:
        text += f"; per-step overhead {overhead.seconds * 1e3:.2f} ms {overhead.provenance.describe()}"
    if sampler is not None:
        text += (f"; sampling {sampler.seconds_per_position * 1e6:.2f} µs per scored position "
                 f"{sampler.provenance.describe()}")
    if host is not None:
        text += (f"; host work {host.seconds_per_row * 1e6:.2f} µs per scheduled request, a verifying step "
                 f"{host.spec_seconds * 1e6:.1f} µs + {host.spec_seconds_per_row * 1e6:.2f} µs per request "
                 f"{host.provenance.describe()}")
    if graphs is not None and comp == "fused":
        text += (f"; graphed ops padded to {len(graphs.capture_sizes)} CUDA-graph sizes up to "
                 f"{graphs.capture_sizes[-1]} tokens {graphs.provenance.describe()}")
    return text
