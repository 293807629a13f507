"""A real serving loop: the simulator's own planner, executed with real forward passes.

Why it exists: to measure how far the simulator is from reality, something must serve the
same open-loop arrivals for real. This loop asks ``sim.model.scheduler.Scheduler`` for a plan each
step — exactly the planner the simulator runs — and *executes* it: the plan's prefill chunks
as one packed target pass (each chunk over its own request's KV cache), its decoding requests
as one batched target pass over ``1 + k`` tokens each (the last token plus ``k`` drafts from a real proposer),
verified greedily. The wall clock takes the place of the profile's step times, and the real
proposer's acceptance takes the place of the profile's acceptance draws; everything else
(admission, batching, chunking, preemption, token counting) is shared code, so a difference
between the two runs isolates the step-time and acceptance models.

Arrivals are fed on the wall clock by a thread (open loop: it never waits for completions);
the loop admits what has arrived at every step boundary, as an engine would. Tokens stream at
the end of the step that produced them; the loop records every burst.

KV layout: a prefilling request owns a batch-1 ``DynamicCache``; a step's chunks are packed
into one sequence over the concatenation of their caches with a block-diagonal mask. Decoding requests share one
left-padded batched cache that persists across steps while the decode set is unchanged, so
this is a *padded* engine (``fleet.engine.kv_layout = "padded"``): every row attends over the
longest row's width. After verification the columns every row rejected are cropped; drafts only
some rows rejected stay as masked holes (an attention mask and explicit positions keep the
computation exact) until they add up to ``HOLE_LIMIT`` columns beyond the longest row, when the
batch is compacted. When the decode set changes, leaving rows are dropped and joining rows
appended in place (one op per layer each). Greedy
(temperature 0) verification only: the output is the target's own greedy text.
"""

from __future__ import annotations

import bisect
import math
import queue
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import polars as pl
import torch
from transformers import DynamicCache

from profiler.models import architecture, count_parameters
from profiler.timing import crop_to
from sim.model.scheduler import DONE, Request, Scheduler, SchedulerConfig, StepPlan
from sim.model.speculation import SpeculationPolicy
from sim.model.step_protocol import ROW_WIDTH, FleetRun, StepCycle, StepLog
from sim.model.step_time import StepShape
from sim.results import records

HOLE_LIMIT = 16
"""Rejected-draft columns (beyond the longest row) the batched KV may carry before it is
compacted. Why: a padded engine's step costs the longest row's width, which is what the
simulator charges for ``kv_layout = "padded"``; holes widen it further (measured on a 2-core
CPU, batch 6 × 4 tokens: 171 ms at width 180, 306 ms at 370). Compacting is one gather per
layer, so it pays off once the holes reach about a KV block."""


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


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """A snapshot of one ``StepPlan`` by request id (plans hold live, mutable requests)."""

    decode: tuple[int, ...]
    k: int
    prefill: tuple[tuple[int, int], ...]
    preempted: tuple[int, ...]

    @classmethod
    def of(cls, plan: StepPlan) -> PlanRecord:
        return cls(
            decode=tuple(r.id for r in plan.decode),
            k=plan.k,
            prefill=tuple((r.id, n) for r, n in plan.prefill),
            preempted=tuple(r.id for r in plan.preempted),
        )


@dataclass(frozen=True)
class ServingResult:
    """What the real loop measured, in the simulator's frame layouts (architecture.md)."""

    requests: pl.DataFrame
    """Per-request records (``sim.results.records`` layout, the simulator's own)."""
    steps: pl.DataFrame
    """Per-step records (``sim.results.records`` layout); ``duration_s`` is measured wall time."""
    itl: pl.DataFrame
    """Gaps between consecutive bursts of each request (``sim.results.records`` layout)."""
    bursts: pl.DataFrame
    """Every streamed burst: ``id``, ``t_s`` (seconds from start), ``tokens``."""
    plans: tuple[PlanRecord, ...]
    """Every executed plan, in order."""
    shapes: tuple[StepShape, ...]
    """The step shape of every executed plan (what a step timer would be asked to time)."""
    kv_widths: tuple[int, ...]
    """Per step, the KV width the decode pass attended over (padding and holes included;
    0 without decode): compare with the shape's ``decode_context_max``."""
    outputs: dict[int, tuple[int, ...]]
    """Generated token ids of every request."""
    proposed_tokens: int
    """Draft tokens the real proposer returned (positions it left empty are not counted)."""
    threads: int
    """``torch.get_num_threads()`` during the run."""
    device: str
    wall_s: float
    clock: str
    """``wall`` (real serving) or ``virtual`` (replayed on a step timer)."""
    aborted: bool


# ---------------------------------------------------------------------------------------------
# KV cache helpers


def _cache_from(config: Any, kvs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A DynamicCache holding exactly these per-layer (keys, values), without copying them."""
    cache = DynamicCache(config=config)
    if len(cache.layers) != len(kvs):
        raise RuntimeError(f"cache has {len(cache.layers)} layers, got {len(kvs)} tensors")
    for layer, (k, v) in zip(cache.layers, kvs, strict=True):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def _kv_of(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _cache_len(cache: DynamicCache | None) -> int:
    return 0 if cache is None else int(cache.get_seq_length())


class _Seq:
    """Real state of one request: its tokens and its compact (hole-free) KV when not batched."""

    __slots__ = ("spec", "tokens", "cache", "generated", "proposer", "done")

    def __init__(self, spec: ServingRequest, proposer: Any | None) -> None:
        self.spec = spec
        self.tokens: list[int] = list(spec.prompt_ids)
        self.cache: DynamicCache | None = None
        self.generated: list[int] = []
        self.proposer = proposer
        self.done = False


class _DecodeBatch:
    """The left-padded batched KV of the current decode set; rejected drafts are masked holes."""

    def __init__(self, ids: list[int], cache: DynamicCache, mask: torch.Tensor) -> None:
        self.ids = ids
        self.row = {rid: i for i, rid in enumerate(ids)}
        self.cache = cache
        self.mask = mask  # [b, L] long on the host: 1 = a valid cached token


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
        self.seqs: dict[int, _Seq] = {}
        self.batch: _DecodeBatch | None = None
        self.draft_tokens = 0
        self.proposed_tokens = 0
        self.last_width = 0
        """KV width (cached columns + new tokens) of the last decode pass."""

    def admit(self, spec: ServingRequest) -> None:
        proposer = self.proposer_factory() if self.proposer_factory is not None else None
        if proposer is not None:
            proposer.reset()
        self.seqs[spec.id] = _Seq(spec, proposer)

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
        kvs = _kv_of(b.cache)
        for rid, i in b.row.items():
            seq = self.seqs.get(rid)
            if seq is None or seq.done:
                continue  # finished or expired while batched: its KV is simply dropped
            seq.cache = self._row_cache(b, kvs, i)
        self.batch = None

    def _row_cache(self, b: _DecodeBatch, kvs: list[tuple[torch.Tensor, torch.Tensor]], i: int) -> DynamicCache:
        """Row ``i``'s valid columns as its own compact cache (no holes, no padding)."""
        valid = torch.nonzero(b.mask[i], as_tuple=False).flatten().to(self.device)
        return _cache_from(
            self.config,
            [(k[i : i + 1].index_select(2, valid), v[i : i + 1].index_select(2, valid)) for k, v in kvs],
        )

    def _left_padded(self, ids: list[int], width: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        """``ids``' compact caches as rows right-aligned in ``width`` columns (per-layer KV, mask);
        the batch owns their KV afterwards."""
        seqs = [self.seqs[rid] for rid in ids]
        lens = [_cache_len(s.cache) for s in seqs]
        b = len(ids)
        first = _kv_of(seqs[0].cache)  # type: ignore[arg-type]
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
        width = max(_cache_len(self.seqs[rid].cache) for rid in ids)
        kvs, mask = self._left_padded(ids, width)
        self.batch = _DecodeBatch(list(ids), _cache_from(self.config, kvs), mask)

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

    def _ensure_batch(self, ids: list[int]) -> _DecodeBatch:
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
        kvs = _kv_of(b.cache)
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
        self.batch = _DecodeBatch(order[:n], b.cache, mask[:, lead:].contiguous())

    def _add_rows(self, ids: list[int]) -> None:
        """Append ``ids``' compact caches as new left-padded rows (widening the batch if needed)."""
        if not ids:
            return
        b = self.batch
        assert b is not None
        old = b.mask.shape[1]
        width = max(old, *(_cache_len(self.seqs[rid].cache) for rid in ids))
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
        self.batch = _DecodeBatch([*b.ids, *ids], b.cache, mask)

    # ---------------------------------------------------------------- execution
    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> list[int]:
        """Run one plan's forward passes; ``accepted[i]`` for ``plan.decode[i]`` (0..k)."""
        for r in plan.preempted:
            self._drop_kv(r.id)
        accepted = self._decode(plan) if plan.decode else []
        if plan.prefill:
            self._prefill(plan.prefill)
        return accepted

    def _drop_kv(self, rid: int) -> None:
        seq = self.seqs[rid]
        seq.cache = None
        if self.batch is not None and rid in self.batch.row:
            self._unpack()
            self.seqs[rid].cache = None

    def _prefill(self, chunks: Sequence[tuple[Request, int]]) -> None:
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
            have = _cache_len(seq.cache)
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
            cache = _cache_from(self.config, [
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
        kvs = _kv_of(cache)
        q = c = 0
        for j, (seq, st, n) in enumerate(zip(seqs, starts, sizes, strict=True)):
            seq.cache = _cache_from(self.config, [
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
        k = plan.k
        b = len(ids)
        inp = torch.empty((b, k + 1), dtype=torch.long)
        pos = torch.empty((b, k + 1), dtype=torch.long)
        drafts: list[list[int]] = [[] for _ in range(b)]
        for r in plan.decode:
            i = batch.row[r.id]
            seq = self.seqs[r.id]
            valid = int(batch.mask[i].sum())
            if valid != r.computed:
                raise RuntimeError(f"request {r.id}: KV holds {valid} tokens, scheduler says {r.computed} computed")
            last = seq.tokens[-1]
            d: list[int] = []
            if k:
                d, _ = seq.proposer.propose(seq.tokens, k, 0.0, None)
                d = [int(t) for t in d[:k]]
                self.proposed_tokens += len(d)
                self.draft_tokens += k
            drafts[i] = d
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


# ---------------------------------------------------------------------------------------------
# arrivals on the wall clock


class ArrivalFeeder(threading.Thread):
    """Puts each request on ``out`` at ``t0 + arrival_s`` (wall clock), never waiting for service."""

    def __init__(self, requests: Sequence[ServingRequest], t0: float, out: queue.SimpleQueue) -> None:
        super().__init__(name="specplan-arrivals", daemon=True)
        self.requests = sorted(requests, key=lambda r: (r.arrival_s, r.id))
        self.t0 = t0
        self.out = out
        self.stop = threading.Event()

    def run(self) -> None:
        for req in self.requests:
            delay = self.t0 + req.arrival_s - time.perf_counter()
            if delay > 0 and self.stop.wait(delay):
                return
            self.out.put(req)


# ---------------------------------------------------------------------------------------------
# the loop


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process instead of returning it to the OS.

    Why: on a VM, touching memory the process gave back costs a page fault per 4 KiB page, and
    on this class of machine that was measured to make a batch-8 verification pass 6× slower
    the first time its footprint is reached (1.2 s against 0.18 s once warm). The profile
    times warm passes; the real loop must run warm too, or first-touch costs are blamed on the
    step-time model. Returns False where there is no glibc (then nothing changes).

    Measured 2026-12-01 with the threshold that had wrapped to 0: a batch-9 verification pass in
    the serving loop took 30–50 thousand minor page faults (the heap's top given back after
    every pass and faulted in again) and ran 0.46–0.55 s against 0.25 s for a fault-free pass
    of batch 7 — the "wide passes slow down" that validation runs E, G and H blamed on the machine.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt takes a C int: a larger value (2**62 until 2026-12-01) silently wraps to 0, a trim
    # threshold of 0, which returns the heap's top to the OS at every large free — the opposite
    # of this function. The largest int (2 GiB of free heap top before trimming) is what we mean.
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_trim_threshold, KEEP_FREED_TRIM_THRESHOLD)
                and mallopt(m_mmap_threshold, KEEP_FREED_MMAP_THRESHOLD))


KEEP_FREED_TRIM_THRESHOLD = 2**31 - 1
"""Bytes of free memory at the heap's top before glibc gives it back: the largest C int."""
KEEP_FREED_MMAP_THRESHOLD = 32 * 2**20
"""Allocations from this size up get their own mapping (glibc's maximum, 32 MiB on 64-bit):
below it, KV buffers come from the heap and are reused once freed."""


@dataclass(frozen=True, slots=True)
class PeakShape:
    """The largest passes a run can ask for: warming up at them touches its peak memory once."""

    decode_seqs: int
    context: int
    """Longest sequence (prompt + output) of the run."""
    tokens_per_seq: int
    """``1 + k_max``."""
    prefill_tokens: int
    """The engine's token budget per step."""


@torch.inference_mode()
def touch_peak(model: torch.nn.Module, peak: PeakShape, seed: int = 0) -> None:
    """One decode pass and one prefill pass at ``peak``, over a KV cache of random values (no
    prefill compute needed to build it), so the run never first-touches memory mid-measurement."""
    cfg = model.config
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    arch = architecture(cfg, count_parameters(model))
    kv_heads, head_dim, layers, vocab = arch["num_kv_heads"], arch["head_dim"], arch["num_layers"], arch["vocab_size"]
    gen = torch.Generator().manual_seed(int(seed))

    def cache(b: int, c: int) -> DynamicCache:
        shape = (b, kv_heads, c, head_dim)
        return _cache_from(cfg, [(torch.randn(shape, generator=gen).to(device, dtype),
                                  torch.randn(shape, generator=gen).to(device, dtype)) for _ in range(layers)])

    b, s = peak.decode_seqs, peak.tokens_per_seq
    c = max(1, peak.context - s)
    ids = torch.randint(0, vocab, (b, s), generator=gen).to(device)
    mask = torch.ones((b, c + s), dtype=torch.long, device=device)
    pos = torch.arange(c, c + s, device=device).expand(b, s)
    model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache(b, c), use_cache=True)
    n = peak.prefill_tokens
    c = max(1, peak.context - n)
    ids = torch.randint(0, vocab, (1, n), generator=gen).to(device)
    pos = torch.arange(c, c + n, device=device).unsqueeze(0)
    model(input_ids=ids, position_ids=pos, cache=cache(1, c), use_cache=True, logits_to_keep=1)


def warm_up(
    model: torch.nn.Module,
    vocab: int,
    *,
    policy: SpeculationPolicy | None = None,
    proposer_factory: Callable[[], Any] | None = None,
    proposer_name: str | None = None,
    peak: PeakShape | None = None,
    seed: int = 0,
) -> None:
    """Untimed passes through the real loop's own code paths (prefill, batched decode with
    masks and positions, verification, repacking) so first-call allocations and kernel
    selection stay out of the measured run: a few short requests on a virtual clock; with
    ``peak``, also the largest passes the run can reach (``touch_peak``)."""
    from sim.model.speculation import OFF
    from sim.model.step_time import FixedStepTimer

    gen = torch.Generator().manual_seed(int(seed))
    reqs = []
    for i in range(4):
        motif = torch.randint(0, vocab, (8,), generator=gen).tolist()
        reqs.append(ServingRequest(i, 0.0005 * i, fit_prompt(motif, 24 + 12 * i), 8))
    cfg = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=96, block_size=16, kv_blocks=64)
    pol = policy or OFF
    serve(reqs, cfg, model, policy=pol, proposer_factory=proposer_factory if pol.speculates else None,
          proposer_name=proposer_name, step_timer=FixedStepTimer(0.001))
    if peak is not None:
        touch_peak(model, peak, seed)


def serve(
    requests: Sequence[ServingRequest],
    config: SchedulerConfig,
    model: torch.nn.Module,
    *,
    policy: SpeculationPolicy,
    proposer_factory: Callable[[], Any] | None = None,
    proposer_name: str | None = None,
    candidate: str = "baseline",
    seed: int = 0,
    warmup_s: float = 0.0,
    step_timer: Callable[[StepShape], float] | None = None,
    progress: Callable[[str], None] | None = None,
    max_wall_s: float | None = None,
    idle_work: Callable[[float, float], bool] | None = None,
) -> ServingResult:
    """Serve ``requests`` for real on ``model`` and record what a client would see.

    ``policy`` chooses ``k`` per step exactly as the simulator's engine does;
    ``proposer_factory`` makes one proposer per request (model proposers keep per-sequence
    state) and is required when the policy speculates.

    Clock: by default the wall clock (arrivals fed by a thread at their times). With
    ``step_timer`` the run is *replayed* on a virtual clock instead — every step still executes
    real forward passes and real verification, but time advances by ``step_timer(shape)`` —
    which makes the plan sequence deterministic (tests compare it with the simulator's).
    ``max_wall_s`` aborts a wall-clock run that cannot keep up; requests not ended by then are
    recorded as ``unfinished``.

    ``idle_work(now, until_next_arrival_s)`` is called (wall clock only) whenever the system is
    empty — every request due so far admitted and ended — and returns whether it did something;
    it must finish before the next arrival (``specplan validate`` times reference passes there).
    """
    if policy.speculates and proposer_factory is None:
        raise ValueError("a speculating policy needs a proposer_factory")
    order = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    ids = [r.id for r in order]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique")
    k_max = policy.k_max
    sched = Scheduler(config)
    execu = BatchExecutor(model, proposer_factory=proposer_factory)
    sreqs = [
        Request(idx=i, id=spec.id, arrival_s=spec.arrival_s, prompt_tokens=len(spec.prompt_ids),
                output_tokens=spec.output_tokens, segment=spec.segment, timeout_s=spec.timeout_s)
        for i, spec in enumerate(order)
    ]
    by_id = {r.id: r for r in sreqs}
    rows: array = array("d")
    cycle = StepCycle(0, sched, policy, proposer_name, rows)
    gap_idx: array = array("q")
    gap_s: array = array("d")
    bursts: list[tuple[int, float, int]] = []
    plans: list[PlanRecord] = []
    shapes: list[StepShape] = []
    widths: list[int] = []
    n = len(order)
    say = progress or (lambda _m: None)

    virtual = step_timer is not None
    vnow = 0.0
    pending = deque(order)
    arrivals: queue.SimpleQueue = queue.SimpleQueue()
    t0 = time.perf_counter()
    feeder = None if virtual else ArrivalFeeder(order, t0, arrivals)

    def clock() -> float:
        return vnow if virtual else time.perf_counter() - t0

    arrival_times = [r.arrival_s for r in order]
    admitted = 0

    def admit(spec: ServingRequest, at: float) -> None:
        nonlocal admitted
        admitted += 1
        req = by_id[spec.id]
        req.replica = 0
        execu.admit(spec)
        if not sched.add_request(req, at, k_max):
            execu.release(spec.id)

    def admit_arrived() -> None:
        if virtual:
            while pending and pending[0].arrival_s <= vnow:
                spec = pending.popleft()
                admit(spec, spec.arrival_s)
            return
        while True:
            try:
                spec = arrivals.get_nowait()
            except queue.Empty:
                return
            admit(spec, clock())

    aborted = False
    if feeder is not None:
        feeder.start()
    try:
        while len(sched.finished) < n:
            admit_arrived()
            now = clock()
            if max_wall_s is not None and not virtual and now > max_wall_s:
                aborted = True
                break
            done_before = len(sched.finished)
            plan = cycle.plan(now)
            for r in sched.finished[done_before:]:
                execu.release(r.id)  # expired while waiting or running
            if plan.empty:
                if len(sched.finished) >= n:
                    break
                if virtual:
                    if not pending:
                        raise RuntimeError("work queued but nothing schedulable and no arrivals left")
                    vnow = max(vnow, pending[0].arrival_s)
                    continue
                if idle_work is not None and not sched.has_work:
                    t = clock()
                    due = bisect.bisect_right(arrival_times, t)
                    if admitted == due and idle_work(t, arrival_times[due] - t if due < n else math.inf):
                        continue
                try:
                    nxt = arrivals.get(timeout=0.05 if sched.has_work else 1.0)
                except queue.Empty:
                    continue
                admit(nxt, clock())
                continue
            plans.append(PlanRecord.of(plan))
            gen_before = {r.id: r.generated for r in plan.decode}
            gen_before.update({r.id: r.generated for r, _ in plan.prefill})
            start = clock()
            shape = cycle.shape(plan, start)
            shapes.append(shape)
            execu.last_width = 0
            accepted = execu.execute(plan)
            widths.append(execu.last_width)
            if virtual:
                assert step_timer is not None
                vnow = start + step_timer(shape)
            end = clock()
            done_before = len(sched.finished)
            cycle.finish(plan, accepted, start, end - start, end, gap_idx, gap_s)
            for rid, g in gen_before.items():
                got = by_id[rid].generated - g
                if got > 0:
                    bursts.append((rid, end, got))
            for r in sched.finished[done_before:]:
                execu.release(r.id)
            if len(rows) % (200 * ROW_WIDTH) == 0:
                say(f"{candidate}: {len(sched.finished)}/{n} requests ended, t={end:.1f}s")
    finally:
        if feeder is not None:
            feeder.stop.set()
            feeder.join(timeout=1.0)
    wall = clock()
    for req in sreqs:
        if req.status != DONE:  # only after an abort: as the engine marks them
            req.outcome = "unfinished"
            req.finish_s = None
    if aborted:
        say(f"{candidate}: stopped after {wall:.0f}s (max_wall_s); unfinished requests kept as such")
    run = FleetRun(sreqs, StepLog.from_flat(rows), gap_idx, gap_s, wall)
    outputs = {rid: tuple(sq.generated) for rid, sq in execu.seqs.items()}
    return ServingResult(
        requests=records.requests_frame(run, candidate, seed, warmup_s),
        steps=records.steps_frame(run, candidate, seed),
        itl=records.itl_frame(run, candidate, seed),
        bursts=pl.DataFrame(
            {"id": [b[0] for b in bursts], "t_s": [b[1] for b in bursts], "tokens": [b[2] for b in bursts]},
            schema={"id": pl.Int64, "t_s": pl.Float64, "tokens": pl.Int64},
        ),
        plans=tuple(plans),
        shapes=tuple(shapes),
        kv_widths=tuple(widths),
        outputs={rid: outputs.get(rid, ()) for rid in ids},
        proposed_tokens=execu.proposed_tokens,
        threads=torch.get_num_threads(),
        device=str(execu.device),
        wall_s=wall,
        clock="virtual" if virtual else "wall",
        aborted=aborted,
    )


def fit_prompt(text_ids: Sequence[int], length: int) -> tuple[int, ...]:
    """Cut real text to ``length`` tokens, or repeat it until it is that long."""
    if length < 1:
        raise ValueError(f"prompt length must be >= 1, got {length}")
    base = list(text_ids)
    if not base:
        raise ValueError("no prompt text to fit")
    out: list[int] = []
    while len(out) < length:
        out.extend(base)
    return tuple(out[:length])


def segment_prompts(
    specs: Sequence[Any],
    segment_keys: dict[str, tuple[str, str]],
    tokenizer: Any | None,
    vocab_size: int,
    seed: int = 0,
) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    """Prompt token ids of exactly ``spec.prompt_tokens`` for each request, and notes.

    Real text: the built-in prompt set of the request's segment (task, language), several
    prompts of that set joined until long enough (starting at a different one per request),
    rendered with the chat template, the last ``prompt_tokens`` tokens kept (so the
    generation prompt stays at the end). Without a tokenizer (a config-only model) the prompt
    is random ids from ``seed``: timing only, and the notes say so.
    """
    from profiler.prompt_sets import builtin_prompts, by_segment, encode_prompt

    notes: list[str] = []
    out: dict[int, tuple[int, ...]] = {}
    if tokenizer is None:
        rng = torch.Generator().manual_seed(int(seed))
        for sp in specs:
            out[sp.id] = tuple(torch.randint(0, vocab_size, (sp.prompt_tokens,), generator=rng).tolist())
        notes.append("prompts: random token ids (config-only model without a tokenizer)")
        return out, notes
    groups = by_segment(builtin_prompts())
    for name, (task, lang) in segment_keys.items():
        key = (task, lang)
        if key not in groups:
            alt = next((k for k in groups if k[0] == task), None) or next(iter(groups))
            notes.append(f"prompts: no built-in {task}/{lang} prompts for segment {name}; used {alt[0]}/{alt[1]}")
            groups[key] = groups[alt]
    encoded: dict[tuple[tuple[str, str], int, int], list[int]] = {}
    for sp in specs:
        task, lang = segment_keys.get(sp.segment, next(iter(segment_keys.values())))
        group = groups[(task, lang)]
        start = sp.id % len(group)
        count = 1
        while True:
            cache_key = ((task, lang), start, count)
            if cache_key not in encoded:
                texts = [group[(start + j) % len(group)].prompt for j in range(count)]
                encoded[cache_key] = encode_prompt(tokenizer, "\n\n".join(texts))
            ids = encoded[cache_key]
            if len(ids) >= sp.prompt_tokens or count >= 4 * len(group):
                break
            count += 1
        out[sp.id] = fit_prompt(ids[-sp.prompt_tokens:], sp.prompt_tokens)
    notes.append("prompts: built-in prompt sets (profiler/prompts) by segment task/language, chat template, "
                 "cut to the scheduled length keeping the end")
    return out, notes


__all__ = [
    "HOLE_LIMIT", "ArrivalFeeder", "BatchExecutor", "PeakShape", "PlanRecord", "ServingRequest", "ServingResult",
    "fit_prompt", "keep_freed_memory", "segment_prompts", "serve", "touch_peak", "warm_up",
]
