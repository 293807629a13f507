"""The planner's vocabulary: its limits (EngineLimits, inside SchedulerConfig), a request's state as an object (Request:
what the workload creates and the records read; the planner keeps it as a row of
``kernel_state.Requests`` and writes it back), and the frozen plan of one step (StepPlan, vLLM's
SchedulerOutput)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.model.kernels.kernel_state import DONE, RUNNING, WAITING

__all__ = ["DONE", "EMPTY_PLAN", "RUNNING", "WAITING", "EngineLimits", "Outcome", "Request",
           "SchedulerConfig", "StepPlan"]

Outcome = Literal["completed", "rejected", "timed_out", "unfinished"]


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The engine's limits for one replica, resolved (vLLM's names), as one object.

    Why one object: these travel together from the scenario's ``[fleet.engine]`` (unset ones
    defaulted for the profile's device, ``sim.model.engine_defaults.engine_limits``, built once
    per run) through ``SchedulerConfig`` to the kernel row (``kernel_state.new_replica`` packs
    them, the one place); a limit copied field by field at each hop is a limit one hop forgets.
    """

    max_num_seqs: int
    """Most requests running (holding KV) at once."""
    max_num_batched_tokens: int
    """Token budget of one step: prompt chunks + (1 + k) per decoding request."""
    block_size: int = 16
    """Tokens per paged-KV block."""
    chunked_prefill: bool = True
    """Off: a prompt is computed in one step and must fit the token budget whole."""
    max_model_len: int | None = None
    """The model's context length (vLLM ``max_model_len``): a request whose prompt + output
    exceeds it is rejected on arrival (``kv_blocks.too_long``); None: no limit known."""
    source: str | None = None
    """One line naming the engine defaults applied (the run's sources); None when the scenario
    set every limit."""

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineLimits.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"EngineLimits.max_model_len must be >= 1, got {self.max_model_len}")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """One replica's planner settings: the engine's limits (one object) and what the run adds
    (its KV capacity, admission, prefix caching, the engine's draft-width rule)."""

    limits: EngineLimits
    kv_blocks: int
    """Usable KV blocks of this replica (from sim.model.kv_capacity)."""
    queue_limit: int | None = None
    """Waiting requests beyond this are rejected on arrival."""
    max_queue_time_s: float | None = None
    """A request not yet scheduled this long after arrival is rejected."""
    prefix_caching: bool = False
    """Cache full prompt blocks by prefix and reuse them (vLLM ``enable_prefix_caching``;
    ``sim.model.kernels.prefix_cache``)."""
    full_width_drafts: bool = False
    """A decoding row without a proposal (no n-gram match) still feeds ``k`` filled draft slots
    and verifies them (vLLM's Model Runner V2, SGLang, TensorRT-LLM; ``sim.model.serving_engine``);
    False: it feeds one token, a plain decode (vLLM's V1 runner, specplan's own loop)."""

    def __post_init__(self) -> None:
        if self.kv_blocks < 1:
            raise ValueError(f"SchedulerConfig.kv_blocks must be >= 1, got {self.kv_blocks}")
        if self.queue_limit is not None and self.queue_limit < 0:
            raise ValueError(f"SchedulerConfig.queue_limit must be >= 0, got {self.queue_limit}")
        if self.max_queue_time_s is not None and not self.max_queue_time_s > 0:
            raise ValueError(
                f"SchedulerConfig.max_queue_time_s must be > 0, got {self.max_queue_time_s}"
            )

    @classmethod
    def of(cls, *, max_num_seqs: int, max_num_batched_tokens: int, block_size: int, kv_blocks: int,
           chunked_prefill: bool = True, max_model_len: int | None = None, **rest) -> SchedulerConfig:
        """A config built by hand (tests, the profiler's own serving loop: no scenario), its
        limits named as vLLM names them; ``rest``: the other fields."""
        return cls(EngineLimits(max_num_seqs, max_num_batched_tokens, block_size, chunked_prefill,
                                max_model_len), kv_blocks, **rest)

    # the limits, read through (one copy: ``limits``)
    @property
    def max_num_seqs(self) -> int:
        return self.limits.max_num_seqs

    @property
    def max_num_batched_tokens(self) -> int:
        return self.limits.max_num_batched_tokens

    @property
    def block_size(self) -> int:
        return self.limits.block_size

    @property
    def chunked_prefill(self) -> bool:
        return self.limits.chunked_prefill

    @property
    def max_model_len(self) -> int | None:
        return self.limits.max_model_len

    @property
    def kv_tokens(self) -> int:
        """KV capacity in tokens (whole blocks)."""
        return self.kv_blocks * self.block_size


class Request:
    """One request's serving state and its record fields (filled as it runs)."""

    __slots__ = (
        "idx", "id", "arrival_s", "prompt_tokens", "output_tokens", "segment", "timeout_s",
        "negrates", "replica", "status", "computed", "generated", "blocks",
        "scheduled_s", "first_token_s", "last_burst_s", "finish_s", "num_bursts",
        "max_pause_s", "preemptions", "outcome", "num_drafts", "accepted_tokens",
        "ever_scheduled", "proposal", "proposes", "num_spec_steps", "replay", "replay_pos",
        "prefix", "prefix_hit_tokens", "too_long",
    )

    def __init__(
        self,
        idx: int,
        id: int,
        arrival_s: float,
        prompt_tokens: int,
        output_tokens: int,
        segment: str = "default",
        timeout_s: float | None = None,
        negrates: list[float] | None = None,
    ) -> None:
        if prompt_tokens < 1 or output_tokens < 1:
            raise ValueError(
                f"request {id}: prompt_tokens and output_tokens must be >= 1, "
                f"got {prompt_tokens}, {output_tokens}"
            )
        self.idx = idx
        self.id = id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.segment = segment
        self.timeout_s = timeout_s
        # acceptance survival rates negated (ascending) so bisect counts accepted positions
        self.negrates = negrates
        self.replica = -1
        self.status = WAITING
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_burst_s = 0.0
        self.finish_s: float | None = None
        self.num_bursts = 0
        self.max_pause_s = 0.0
        self.preemptions = 0
        self.outcome: Outcome | None = None
        self.too_long = False
        """Rejected because prompt + output cannot fit the model's ``max_model_len``."""
        self.num_drafts = 0
        self.accepted_tokens = 0
        self.ever_scheduled = False
        self.proposal = 1.0
        """Probability that a speculative step of this request has a proposal (n-gram: a match)."""
        self.proposes = True
        """Whether the proposer has a draft for this request's next step (vLLM proposes after
        each step; no draft -> the request is scheduled with one token)."""
        self.num_spec_steps = 0
        """Verification steps while speculation was on, with or without a proposal."""
        self.replay = None
        """Optional traced request (``sim.contracts.acceptance_trace.TraceRequest``) whose sequence of
        accepted lengths this request replays instead of drawing each step."""
        self.replay_pos = 0
        """Where in that trace the next step starts (position or step index)."""
        self.prefix = None
        """Optional ids of the prompt's full KV blocks, in order (``sim.workload.prefix_blocks``:
        equal ids, equal tokens up to that block's end), read when prefix caching is on."""
        self.prefix_hit_tokens = 0
        """Prompt tokens found in the prefix cache at its first admission (prefill skipped)."""

    @property
    def num_tokens(self) -> int:
        """Tokens the request has: prompt plus everything generated (committed) so far."""
        return self.prompt_tokens + self.generated

    def __repr__(self) -> str:
        return (
            f"Request(id={self.id}, status={self.status}, computed={self.computed}, "
            f"generated={self.generated}/{self.output_tokens}, blocks={self.blocks})"
        )


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one engine iteration computes (vLLM's ``SchedulerOutput``)."""

    decode: tuple[Request, ...]
    """Requests decoding: each feeds its last token plus ``k`` drafts."""
    k: int
    """Draft tokens per decoding request (0 = no speculation this step)."""
    prefill: tuple[tuple[Request, int], ...]
    """Prompt (or recompute) chunks: (request, tokens computed this step)."""
    preempted: tuple[Request, ...]
    """Running requests preempted (KV freed, recompute later) to make room this step."""
    decode_context: float
    """Mean cached context of the decoding requests, rounded to whole KV blocks."""
    prefill_tokens: int
    """Prompt tokens computed this step, all chunks summed."""
    prefill_context: float
    """Token-weighted mean start position of the prefill chunks."""
    decode_context_max: float = 0.0
    """Longest cached context among the decoding requests, rounded to whole KV blocks: what
    an engine without paged attention pads every decoding row to."""
    drafting: tuple[bool, ...] = ()
    """Per decoding request, whether it feeds ``k`` drafts (False: no proposal, one token);
    empty when every decoding request drafts (the common case)."""

    @property
    def num_drafting(self) -> int:
        """Decoding requests that feed drafts this step (all of them unless ``drafting`` says)."""
        if not self.k:
            return 0
        return sum(self.drafting) if self.drafting else len(self.decode)

    @property
    def empty(self) -> bool:
        """True when the step would compute nothing (the engine then waits for an arrival)."""
        return not self.decode and not self.prefill

    @property
    def num_scheduled_tokens(self) -> int:
        """Budget used: prefill tokens plus ``1 + k`` per drafting request, 1 per other."""
        return self.prefill_tokens + len(self.decode) + self.num_drafting * self.k


EMPTY_PLAN = StepPlan((), 0, (), (), 0.0, 0, 0.0)
