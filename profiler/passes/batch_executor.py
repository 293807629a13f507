"""Executing a StepPlan with real forward passes: per-request prefill caches, one left-padded
batched decode cache edited in place, greedy verification of the drafts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

import torch
from transformers import DynamicCache

from profiler.passes.batch_state import DecodeBatch, SeqState, ServingRequest
from profiler.passes.kv_cache import cache_from, cache_len, crop_to, kv_of
from sim.model.step_plan import Request, StepPlan

HOLE_LIMIT = 16
"""Rejected-draft columns (beyond the longest row) the batched KV may carry before it is
compacted. Why: a padded engine's step costs the longest row's width, which is what the
simulator charges for ``kv_layout = "padded"``; holes widen it further (measured on a 2-core
CPU, batch 6 × 4 tokens: 171 ms at width 180, 306 ms at 370). Compacting is one gather per
layer, so it pays off once the holes reach about a KV block."""


class BatchExecutor:
    """Executes ``StepPlan``s with real forward passes; returns accepted draft counts."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        proposer_factory: Callable[[], Any] | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.model = model
        self.config = model.config
        self.device = device or next(model.parameters()).device
        self.proposer_factory = proposer_factory
        self.seqs: dict[int, SeqState] = {}
        self.batch: DecodeBatch | None = None
        self.draft_tokens = 0
        self.proposed_tokens = 0
        self.last_width = 0
        """KV width (cached columns + new tokens) of the last decode pass."""
        self.last_drafting = 0
        """Rows of the last decode step whose proposer had a proposal."""

    def admit(self, spec: ServingRequest) -> None:
        proposer = self.proposer_factory() if self.proposer_factory is not None else None
        if proposer is not None:
            proposer.reset()
        self.seqs[spec.id] = SeqState(spec, proposer)

    def release(self, rid: int) -> None:
        """Forget a request's KV (finished, timed out, rejected); keep its tokens."""
        seq = self.seqs.get(rid)
        if seq is not None:
            seq.done = True
            seq.cache = None
            if seq.proposer is not None:
                seq.proposer.reset()

    # ---------------------------------------------------------------- batch membership
    def _unpack(self) -> None:
        """Move every batched row back into its own compact cache (drops holes and padding)."""
        b = self.batch
        if b is None:
            return
        kvs = kv_of(b.cache)
        for rid, i in b.row.items():
            seq = self.seqs.get(rid)
            if seq is None or seq.done:
                continue  # finished or expired while batched: its KV is simply dropped
            seq.cache = self._row_cache(b, kvs, i)
        self.batch = None

    def _row_cache(self, b: DecodeBatch, kvs: list[tuple[torch.Tensor, torch.Tensor]], i: int) -> DynamicCache:
        """Row ``i``'s valid columns as its own compact cache (no holes, no padding)."""
        valid = torch.nonzero(b.mask[i], as_tuple=False).flatten().to(self.device)
        return cache_from(
            self.config,
            [(k[i : i + 1].index_select(2, valid), v[i : i + 1].index_select(2, valid)) for k, v in kvs],
        )

    def _left_padded(self, ids: list[int], width: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        """``ids``' compact caches as rows right-aligned in ``width`` columns (per-layer KV, mask);
        the batch owns their KV afterwards."""
        seqs = [self.seqs[rid] for rid in ids]
        lens = [cache_len(s.cache) for s in seqs]
        b = len(ids)
        first = kv_of(seqs[0].cache)  # type: ignore[arg-type]
        kvs = []
        for layer, (k0, v0) in enumerate(first):
            shape_k = (b, k0.shape[1], width, k0.shape[3])
            shape_v = (b, v0.shape[1], width, v0.shape[3])
            kb = torch.zeros(shape_k, dtype=k0.dtype, device=k0.device)
            vb = torch.zeros(shape_v, dtype=v0.dtype, device=v0.device)
            for i, s in enumerate(seqs):
                k, v = s.cache.layers[layer].keys, s.cache.layers[layer].values  # type: ignore[union-attr]
                kb[i, :, width - lens[i] :, :] = k[0]
                vb[i, :, width - lens[i] :, :] = v[0]
            kvs.append((kb, vb))
        mask = torch.zeros((b, width), dtype=torch.long)  # host copy; moved per forward
        for i, n in enumerate(lens):
            mask[i, width - n :] = 1
        for s in seqs:
            s.cache = None  # the batch owns their KV now
        return kvs, mask

    def _pack(self, ids: list[int]) -> None:
        width = max(cache_len(self.seqs[rid].cache) for rid in ids)
        kvs, mask = self._left_padded(ids, width)
        self.batch = DecodeBatch(list(ids), cache_from(self.config, kvs), mask)

    def _compact(self) -> None:
        """Drop the holes and excess padding: right-align every row's valid columns in place."""
        b = self.batch
        assert b is not None
        valid = b.mask.bool()
        counts = valid.sum(dim=1)
        width = int(counts.max())
        rows = len(b.ids)
        idx = torch.zeros((rows, width), dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for i in range(rows):
            cols = torch.nonzero(valid[i], as_tuple=False).flatten()
            idx[i, width - len(cols) :] = cols
            mask[i, width - len(cols) :] = 1
        idx = idx.to(self.device)
        for layer in b.cache.layers:
            k, v = layer.keys, layer.values
            layer.keys = k.gather(2, idx[:, None, :, None].expand(rows, k.shape[1], width, k.shape[3]))
            layer.values = v.gather(2, idx[:, None, :, None].expand(rows, v.shape[1], width, v.shape[3]))
        b.mask = mask

    def _ensure_batch(self, ids: list[int]) -> DecodeBatch:
        """The batch of exactly ``ids``, changed in place when the decode set changed.

        Why in place: rebuilding the whole batch (every row out to its own cache and back)
        cost 20–50 ms per change on a 2-core CPU at batch 4–8 (a third of a step), a cost no
        engine pays. Dropping rows moves one row per leaver and cuts the tail off (a view);
        adding rows is one ``cat`` per layer, as a padded engine (TGI's concatenate) does it.
        """
        b = self.batch
        if b is None:
            self._pack(ids)
        elif set(b.ids) != set(ids):
            wanted = set(ids)
            keep = [rid for rid in b.ids if rid in wanted]
            if not keep:
                self._unpack()
                self._pack(ids)
            else:
                self._drop_rows(keep)
                self._add_rows([rid for rid in ids if rid not in self.batch.row])  # type: ignore[union-attr]
                if self._holes() >= HOLE_LIMIT:  # the rows that left may have been the longest
                    self._compact()
        assert self.batch is not None
        return self.batch

    def _holes(self) -> int:
        """Columns the batch is wider than its longest row (rejected-draft holes, padding)."""
        b = self.batch
        assert b is not None
        return b.mask.shape[1] - int(b.mask.sum(dim=1).max())

    def _drop_rows(self, keep: list[int]) -> None:
        """Keep only ``keep``'s rows (live leavers go back to their own cache); trim shared padding."""
        b = self.batch
        assert b is not None
        kept = set(keep)
        kvs = kv_of(b.cache)
        for rid, i in b.row.items():
            seq = self.seqs.get(rid)
            if rid in kept or seq is None or seq.done:
                continue  # kept, or finished: its KV is simply dropped
            seq.cache = self._row_cache(b, kvs, i)
        # swap-remove: each leaver's slot takes a kept row from the tail, then the tail is cut
        # off (a view): one row copied per leaver instead of the whole batch
        order = list(b.ids)
        mask = b.mask.clone()
        moves: list[tuple[int, int]] = []
        n = len(keep)
        for slot in range(n):
            if order[slot] in kept:
                continue
            src = next(j for j in range(len(order) - 1, slot, -1) if order[j] in kept)
            moves.append((src, slot))
            order[slot], order[src] = order[src], order[slot]
            mask[slot] = mask[src]
        mask = mask[:n]
        lead = int(torch.nonzero(mask.any(dim=0), as_tuple=False)[0])  # padding no kept row needs
        for layer in b.cache.layers:
            for src, dst in moves:
                layer.keys[dst].copy_(layer.keys[src])
                layer.values[dst].copy_(layer.values[src])
            layer.keys = layer.keys[:n, :, lead:]
            layer.values = layer.values[:n, :, lead:]
        self.batch = DecodeBatch(order[:n], b.cache, mask[:, lead:].contiguous())

    def _add_rows(self, ids: list[int]) -> None:
        """Append ``ids``' compact caches as new left-padded rows (widening the batch if needed)."""
        if not ids:
            return
        b = self.batch
        assert b is not None
        old = b.mask.shape[1]
        width = max(old, *(cache_len(self.seqs[rid].cache) for rid in ids))
        grow = width - old
        new_kvs, new_mask = self._left_padded(ids, width)
        for layer, (nk, nv) in zip(b.cache.layers, new_kvs, strict=True):
            k, v = layer.keys, layer.values
            if grow:
                k = torch.cat([k.new_zeros((k.shape[0], k.shape[1], grow, k.shape[3])), k], dim=2)
                v = torch.cat([v.new_zeros((v.shape[0], v.shape[1], grow, v.shape[3])), v], dim=2)
            layer.keys = torch.cat([k, nk], dim=0)
            layer.values = torch.cat([v, nv], dim=0)
        mask = torch.cat([torch.nn.functional.pad(b.mask, (grow, 0)), new_mask], dim=0)
        self.batch = DecodeBatch([*b.ids, *ids], b.cache, mask)

    # ---------------------------------------------------------------- execution
    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> list[int]:
        """Run one plan's forward passes; ``accepted[i]`` for ``plan.decode[i]`` (0..k)."""
        for r in plan.preempted:
            self._drop_kv(r.id)
        accepted = self._decode(plan) if plan.decode else []
        if plan.prefill:
            self.prefill_passes(plan.prefill)
        return accepted

    def proposes_next(self, rid: int, k: int) -> bool:
        """Whether request ``rid`` will have a proposal at its next step, as vLLM knows it
        when it schedules: an n-gram lookup runs now (after this step's tokens) and is kept
        for that step; model proposers always propose, so they are not run ahead."""
        seq = self.seqs[rid]
        if seq.proposer is None or getattr(seq.proposer, "kind", None) != "ngram":
            return True
        if seq.draft_at != len(seq.tokens):
            d, _ = seq.proposer.propose(seq.tokens, k, 0.0, None)
            seq.draft = [int(t) for t in d[:k]]
            seq.draft_at = len(seq.tokens)
        return bool(seq.draft)

    def _drop_kv(self, rid: int) -> None:
        seq = self.seqs[rid]
        seq.cache = None
        if self.batch is not None and rid in self.batch.row:
            self._unpack()
            self.seqs[rid].cache = None

    def prefill_passes(self, chunks: Sequence[tuple[Request, int]]) -> None:
        """All of a step's prefill chunks as **one** forward pass, as vLLM packs them.

        Why one pass: the profile times ``target_prefill(n, c₀)`` as a single pass over all the
        step's prompt tokens; a pass per chunk would pay the per-pass cost once per request and
        make the real loop slower than the engine it stands for. The chunks are concatenated
        into one batch-1 sequence over the concatenation of their caches; a block-diagonal
        mask lets each chunk see only its own cached tokens and, causally, its own new ones, so
        the result is what separate passes compute. The new KV is split back per request.
        """
        seqs, starts = [], []
        for r, n in chunks:
            seq = self.seqs[r.id]
            if self.batch is not None and r.id in self.batch.row:
                self._unpack()
            start = r.computed
            if start == 0:
                seq.cache = None
            have = cache_len(seq.cache)
            if have != start:
                raise RuntimeError(f"request {r.id}: KV holds {have} tokens, scheduler says {start} computed")
            if len(seq.tokens[start : start + n]) != n:
                raise RuntimeError(f"request {r.id}: asked to prefill {n} tokens from {start}, has {len(seq.tokens)}")
            seqs.append(seq)
            starts.append(start)
        sizes = [n for _, n in chunks]
        total_new, total_old = sum(sizes), sum(starts)
        ids = torch.tensor([[t for s, st, n in zip(seqs, starts, sizes, strict=True) for t in s.tokens[st : st + n]]],
                           dtype=torch.long, device=self.device)
        pos = torch.cat([torch.arange(st, st + n) for st, n in zip(starts, sizes, strict=True)]).unsqueeze(0).to(self.device)
        old = [s for s, st in zip(seqs, starts, strict=True) if st > 0]
        if old:
            layers = len(old[0].cache.layers)  # type: ignore[union-attr]
            cache = cache_from(self.config, [
                (torch.cat([s.cache.layers[i].keys for s in old], dim=2),  # type: ignore[union-attr]
                 torch.cat([s.cache.layers[i].values for s in old], dim=2))  # type: ignore[union-attr]
                for i in range(layers)
            ])
        else:
            cache = DynamicCache(config=self.config)
        mask = None
        if len(chunks) > 1:
            dtype = next(self.model.parameters()).dtype
            allow = torch.zeros((total_new, total_old + total_new), dtype=torch.bool)
            q = c = 0
            for st, n in zip(starts, sizes, strict=True):
                allow[q : q + n, c : c + st] = True
                allow[q : q + n, total_old + q : total_old + q + n] = torch.ones((n, n), dtype=torch.bool).tril()
                q, c = q + n, c + st
            mask = torch.zeros(allow.shape, dtype=dtype).masked_fill_(~allow, torch.finfo(dtype).min)
            mask = mask[None, None].to(self.device)
        ends = torch.tensor(list(accumulate(sizes)), device=self.device) - 1
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache,
                         use_cache=True, logits_to_keep=ends)
        kvs = kv_of(cache)
        q = c = 0
        for j, (seq, st, n) in enumerate(zip(seqs, starts, sizes, strict=True)):
            seq.cache = cache_from(self.config, [
                (torch.cat([k[:, :, c : c + st], k[:, :, total_old + q : total_old + q + n]], dim=2),
                 torch.cat([v[:, :, c : c + st], v[:, :, total_old + q : total_old + q + n]], dim=2))
                for k, v in kvs
            ])
            q, c = q + n, c + st
            if st + n >= len(seq.tokens):  # prompt (or recompute) complete: sample one token
                tok = int(out.logits[0, j].argmax())
                seq.tokens.append(tok)
                seq.generated.append(tok)

    def _decode(self, plan: StepPlan) -> list[int]:
        ids = [r.id for r in plan.decode]
        for r in plan.decode:
            seq = self.seqs[r.id]
            if len(seq.tokens) != r.prompt_tokens + r.generated:
                raise RuntimeError(
                    f"request {r.id}: has {len(seq.tokens)} tokens, scheduler says "
                    f"{r.prompt_tokens + r.generated}"
                )
        batch = self._ensure_batch(ids)
        b = len(ids)
        drafts: list[list[int]] = [[] for _ in range(b)]
        for r in plan.decode:
            i = batch.row[r.id]
            seq = self.seqs[r.id]
            valid = int(batch.mask[i].sum())
            if valid != r.computed:
                raise RuntimeError(f"request {r.id}: KV holds {valid} tokens, scheduler says {r.computed} computed")
            if plan.k:
                if seq.draft_at == len(seq.tokens):  # proposed ahead (n-gram), a prefix of it
                    d = seq.draft
                else:
                    d, _ = seq.proposer.propose(seq.tokens, plan.k, 0.0, None)
                drafts[i] = [int(t) for t in d[: plan.k]]
                self.proposed_tokens += len(drafts[i])
        # with no proposal in any row (n-gram without a match) the step is a plain 1-token
        # decode, as vLLM schedules it; with one, every row of this padded batch is k+1 wide
        self.last_drafting = sum(1 for d in drafts if d)
        k = plan.k if self.last_drafting else 0
        self.draft_tokens += plan.k * self.last_drafting
        inp = torch.empty((b, k + 1), dtype=torch.long)
        pos = torch.empty((b, k + 1), dtype=torch.long)
        for r in plan.decode:
            i = batch.row[r.id]
            last = self.seqs[r.id].tokens[-1]
            d = drafts[i]
            # positions the proposer left empty are filled and can never be accepted
            inp[i] = torch.tensor([last, *d, *([last] * (k - len(d)))], dtype=torch.long)
            pos[i] = torch.arange(r.computed, r.computed + k + 1)
        mask = torch.cat([batch.mask, torch.ones((b, k + 1), dtype=torch.long)], dim=1)
        width = batch.mask.shape[1]
        self.last_width = width + k + 1
        out = self.model(
            input_ids=inp.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            cache=batch.cache,
            use_cache=True,
        )
        greedy = out.logits.argmax(dim=-1).cpu()  # [b, k + 1]
        new_mask = torch.zeros((b, k + 1), dtype=torch.long)
        accepted: list[int] = []
        for r in plan.decode:
            i = batch.row[r.id]
            seq = self.seqs[r.id]
            d = drafts[i]
            row = greedy[i].tolist()
            a = 0
            while a < len(d) and d[a] == row[a]:
                a += 1
            new_mask[i, : 1 + a] = 1
            room = r.output_tokens - r.generated
            commit = [*d[:a], int(row[a])][:room]
            seq.tokens.extend(commit)
            seq.generated.extend(commit)
            accepted.append(a)
        keep = 1 + max(accepted)
        if keep < k + 1:  # columns every row rejected: cropped, never attended again
            crop_to(batch.cache, width + keep)
            new_mask = new_mask[:, :keep]
        batch.mask = torch.cat([batch.mask, new_mask], dim=1)
        if self._holes() >= HOLE_LIMIT:
            self._compact()
        return accepted
