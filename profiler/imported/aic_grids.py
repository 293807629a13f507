"""Profile grids composed from the kernel database's per-op times of one pass.

Why per op: a fused engine step reads the weights once for all its tokens, so its cost is not
a decode pass plus a prefill pass. Splitting one pass into ``dense`` (every op but attention and
the LM head: a function of the step's token count), ``logits``, decode attention and prefill
attention gives the fused grids, and the classic grids are the same sums at a pure decode or a
pure prefill shape, so both compositions rest on the same numbers (docs/profile-format.md).
"""

from __future__ import annotations

import math
from typing import Any

from profiler.imported.aic_database import Engine
from profiler.imported.aic_step_terms import FA3_BLOCK_M
from sim.contracts.errors import SpecplanError

MS = 1e-3
ATTENTION_OPS = ("attention", "mla_block")
"""The context-dependent op of a pass: standard attention, or DeepSeek's MLA block (latent
projections and attention in one module, as the database times it)."""
REF_CONTEXT = 128


def target_forward_notes(pack_gqa_group: int | None = None) -> str:
    fa3 = (f"FlashAttention-3 on Hopper packs the {pack_gqa_group} query heads of a KV head into a tile's "
           f"{FA3_BLOCK_M} rows for varlen calls (hopper/heuristics.h should_pack_gqa), so a row's s queries cost "
           f"its one-query decode attention times ceil(s*{pack_gqa_group}/{FA3_BLOCK_M}) tiles (the KV is read once "
           "per tile)" if pack_gqa_group else
           "a row's s queries cost its one-query decode attention at context c plus the database's extra "
           "prefill-attention time for s-1 more query tokens over the same prefix (the KV is read once)")
    return (
        "modelled on top of the database: target_forward(b, s, c) = dense(b*s) + logits(b*s) + "
        f"decode attention, where {fa3}; with MLA the block's latent projections are priced for all b*s "
        "tokens (mla_block(b*s rows) - mla_block(b rows) at a 128-token context added); target_prefill(n, c0) = the database's context phase of one "
        "n-token chunk after c0 cached tokens; fused steps per timing.fused"
    )


class GridBuilder:
    """Cached per-op look-ups of one compiled engine, turned into profile grids (seconds)."""

    def __init__(self, engine: Engine, pack_gqa_group: int | None = None) -> None:
        self.engine = engine
        self.pack_gqa_group = pack_gqa_group
        """Query heads per KV head when verification attention is FlashAttention-3 with packed GQA
        (``aic_step_terms.fa3_pack_gqa_group``); None: priced from the database's prefill attention."""
        self._dec: dict[tuple[int, int], dict[str, float]] = {}
        self._ctx: dict[tuple[int, int, int], dict[str, float]] = {}
        ops = self.decode(1, 1024)
        self.att = next((k for k in ATTENTION_OPS if k in ops), "")
        if not self.att or "logits_gemm" not in ops:
            raise SpecplanError(
                f"{engine.model_path}: the database prices it with ops ({', '.join(ops)}) that have no attention "
                f"op ({' or '.join(ATTENTION_OPS)}) and LM head; the importer covers decoders with standard or "
                "latent (MLA) attention, dense or mixture-of-experts"
            )

    def decode(self, rows: int, context: int) -> dict[str, float]:
        key = (rows, context)
        if key not in self._dec:
            self._dec[key] = self.engine.decode_ops(rows, context)
        return self._dec[key]

    def context(self, batch: int, tokens: int, prefix: int) -> dict[str, float]:
        key = (batch, tokens, prefix)
        if key not in self._ctx:
            self._ctx[key] = self.engine.context_ops(batch, tokens, prefix)
        return self._ctx[key]

    # -- the four parts of one pass (ms)
    def dense(self, tokens: int) -> float:
        ops = self.decode(tokens, 1024)  # non-attention ops do not depend on the context
        return sum(v for k, v in ops.items() if k not in (self.att, "logits_gemm"))

    def logits(self, rows: int) -> float:
        return self.decode(rows, 1024)["logits_gemm"]

    def decode_attention(self, batch: int, s: int, context: int) -> float:
        att = self.att
        base = self.decode(batch, context)[att]
        if s == 1:
            return base
        if att == "attention" and self.pack_gqa_group:  # FA3 tiles: s queries x g heads per KV head
            g = self.pack_gqa_group
            return base * math.ceil(s * g / FA3_BLOCK_M) / math.ceil(g / FA3_BLOCK_M)
        if att == "mla_block":  # its projections run for every one of the batch*s query tokens
            base += self.decode(batch * s, REF_CONTEXT)[att] - self.decode(batch, REF_CONTEXT)[att]
        extra = self.context(batch, s, context)[att] - self.context(batch, 1, context)[att]
        return base + max(extra, 0.0)

    def prefill_attention(self, tokens: int, context: int) -> float:
        return self.context(1, tokens, context)[self.att]

    def forward(self, batch: int, s: int, context: int) -> float:
        rows = batch * s
        return self.dense(rows) + self.logits(rows) + self.decode_attention(batch, s, context)

    def prefill(self, tokens: int, context: int) -> float:
        return sum(self.context(1, tokens, context).values())

    # -- grids (seconds)
    def forward_grid(self, batch: list[int], s_max: int, context: list[int]) -> dict[str, Any]:
        ss = list(range(1, s_max + 1))
        med = [[[self.forward(b, s, c) * MS for c in context] for s in ss] for b in batch]
        return {"axes": {"batch": batch, "tokens_per_seq": ss, "context": context}, "median": med, "repeats": 1}

    def prefill_grid(self, tokens: list[int], context: list[int]) -> dict[str, Any]:
        med = [[self.prefill(n, c) * MS for c in context] for n in tokens]
        return {"axes": {"tokens": tokens, "context": context}, "median": med, "repeats": 1}

    def draft(self, batch: int, k: int, context: int) -> float:
        """D(b, k, c): the first pass over each row's k+1 scheduled tokens, then k-1 one-token passes.

        Why the first pass's LM head runs over ``b`` rows, not ``b(k+1)``: vLLM's proposer (EAGLE,
        EAGLE-3 and draft models alike, ``v1/spec_decode/eagle.py`` ``propose``) computes logits
        only at each row's last position (``compute_logits(last_hidden_states[last_token_indices])``);
        the layers run over every scheduled token."""
        first = self.dense(batch * (k + 1)) + self.logits(batch) + self.decode_attention(batch, k + 1, context)
        return first + (k - 1) * self.forward(batch, 1, context)

    def draft_grid(self, batch: list[int], k_max: int, context: list[int]) -> dict[str, Any]:
        """D(b, k, c) over the grid (``draft``)."""
        ks = list(range(1, k_max + 1))
        med = [[[self.draft(b, k, c) * MS for c in context] for k in ks] for b in batch]
        return {"axes": {"batch": batch, "k": ks, "context": context}, "median": med, "repeats": 1}

    def fused_grids(self, dense_tokens: list[int], batch: list[int], s_max: int, context: list[int],
                    prefill_tokens: list[int], prefill_context: list[int]) -> dict[str, Any]:
        ss = list(range(1, s_max + 1))
        return {
            "dense": {"axes": {"tokens": dense_tokens}, "median": [self.dense(t) * MS for t in dense_tokens]},
            "logits": {"axes": {"tokens": dense_tokens}, "median": [self.logits(t) * MS for t in dense_tokens]},
            "decode_attention": {
                "axes": {"batch": batch, "tokens_per_seq": ss, "context": context},
                "median": [[[self.decode_attention(b, s, c) * MS for c in context] for s in ss] for b in batch],
            },
            "prefill_attention": {
                "axes": {"tokens": prefill_tokens, "context": prefill_context},
                "median": [[self.prefill_attention(n, c) * MS for c in prefill_context] for n in prefill_tokens],
            },
        }
