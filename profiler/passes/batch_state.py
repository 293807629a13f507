"""What the real serving loop holds between steps: each request's tokens and KV, and the batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache


@dataclass(frozen=True, slots=True)
class ServingRequest:
    """One request of the real run: when it arrives, its real prompt, how long it must answer."""

    id: int
    arrival_s: float
    """Seconds after the run's start at which the client sends it."""
    prompt_ids: tuple[int, ...]
    """Token ids of the prompt (real text, cut or repeated to the scheduled length)."""
    output_tokens: int
    """Tokens to generate; EOS is ignored so both sides do the same work."""
    segment: str = "default"
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError(f"request {self.id}: empty prompt")
        if self.output_tokens < 1:
            raise ValueError(f"request {self.id}: output_tokens must be >= 1, got {self.output_tokens}")
        if self.arrival_s < 0:
            raise ValueError(f"request {self.id}: arrival_s must be >= 0, got {self.arrival_s}")


class SeqState:
    """Real state of one request: its tokens and its compact (hole-free) KV when not batched."""

    __slots__ = ("spec", "tokens", "cache", "generated", "proposer", "done", "draft", "draft_at")

    def __init__(self, spec: ServingRequest, proposer: Any | None) -> None:
        self.spec = spec
        self.tokens: list[int] = list(spec.prompt_ids)
        self.cache: DynamicCache | None = None
        self.generated: list[int] = []
        self.proposer = proposer
        self.done = False
        self.draft: list[int] = []
        """The n-gram proposal made ahead for the next step (valid while ``draft_at`` is the
        number of tokens): vLLM proposes after sampling, so its scheduler knows which rows
        have no match and budgets them one token."""
        self.draft_at = -1


class DecodeBatch:
    """The left-padded batched KV of the current decode set; rejected drafts are masked holes."""

    def __init__(self, ids: list[int], cache: DynamicCache, mask: torch.Tensor) -> None:
        self.ids = ids
        self.row = {rid: i for i, rid in enumerate(ids)}
        self.cache = cache
        self.mask = mask  # [b, L] long on the host: 1 = a valid cached token
