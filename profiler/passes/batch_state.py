"""What the real serving loop holds between steps: each request's tokens and KV, and the batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

if TYPE_CHECKING:
    from profiler.passes.serving import ServingRequest


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
