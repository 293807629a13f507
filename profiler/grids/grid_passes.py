"""The passes themselves: one target or proposer pass per grid cell, on a prefilled KV cache.

``PassRunner`` holds the state for timing one target (and its proposers) on one device;
``profiler.grids.timing`` turns its passes into the tasks of a profile run and the re-timed cells
of a drift check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from profiler.grids.timing_grids import (
    OOM_REASON,
    WINDOW_REASON,
    DraftRuntime,
    Measured,
    Point,
    Task,
    TimingGrids,
    point,
)
from profiler.passes.clock import Timeline, Timing, time_op, time_steps
from profiler.passes.kv_cache import crop_to
from profiler.passes.model_types import LoadedModel, dtype_bytes, max_positions


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory error (host or CUDA): the cell becomes a limit, not a failure."""
    if isinstance(exc, MemoryError | torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def _free_after_oom(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


class PassRunner:
    """Shared state for timing one target (and its proposers) on one device."""

    def __init__(self, target: LoadedModel, grids: TimingGrids, seed: int, free_bytes: int | None):
        self.target = target
        self.model = target.model
        self.device = target.device
        self.grids = grids
        self.vocab = int(target.identity["architecture"]["vocab_size"])
        self.window = max_positions(target.config)
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.free_bytes = free_bytes
        arch = target.identity["architecture"]
        self.kv_per_token = 2 * arch["num_layers"] * arch["num_kv_heads"] * arch["head_dim"] * dtype_bytes(target.dtype)

    def ids(self, batch: int, length: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (batch, length), generator=self.gen).to(self.device)

    def too_long(self, total: int) -> bool:
        return self.window is not None and total > self.window

    def kv_too_big(self, batch: int, tokens: int) -> bool:
        """Skip cells whose KV cache alone would not fit in free device memory (estimated)."""
        return self.free_bytes is not None and batch * tokens * self.kv_per_token > self.free_bytes

    def prefill(self, model: torch.nn.Module, batch: int, context: int, chunk: int = 4096) -> DynamicCache:
        """A cache holding ``context`` random tokens per sequence (chunked to bound activations)."""
        cache = DynamicCache(config=model.config)
        ids = self.ids(batch, context)
        for start in range(0, context, chunk):
            model(input_ids=ids[:, start : start + chunk], cache=cache, use_cache=True, logits_to_keep=1)
        return cache

    # -- target_forward: one task per (batch, context), points over tokens_per_seq
    def forward_tasks(self) -> list[Task]:
        g = self.grids
        tasks = []
        for b in g.batch:
            for c in g.context:
                pts = tuple(point("target_forward", batch=b, tokens_per_seq=s, context=c) for s in g.tokens_per_seq)
                tasks.append(Task(f"target_forward batch={b} context={c}", pts,
                                  lambda todo, b=b, c=c: self.forward_passes(todo, b, c)))
        return tasks

    def forward_passes(self, todo: Sequence[Point], b: int, c: int) -> Iterator[Measured]:
        g = self.grids
        return self._passes_on_context(todo, b, c, "tokens_per_seq", g.repeats,
                                       kv_tokens=c + max(g.tokens_per_seq))

    def _passes_on_context(self, todo: Sequence[Point], b: int, c: int, key: str, repeats: int,
                           kv_tokens: int | None = None, **model_kwargs: Any) -> Iterator[Measured]:
        """Time one target pass of ``b`` sequences × ``point[key]`` new tokens after a ``c``-token
        context (prefilled once, cropped back to ``c`` before every run; empty when ``c`` is 0).

        Running out of memory while prefilling (or an estimated KV cache for ``kv_tokens`` per
        sequence that would not fit) limits every point; a point past the window only itself.
        """
        try:
            if kv_tokens is not None and self.kv_too_big(b, kv_tokens):
                raise MemoryError("estimated KV cache exceeds free device memory")
            cache = self.prefill(self.model, b, c) if c > 0 else None
        except Exception as exc:
            yield from self._out_of_memory(exc, todo)
            return
        for pt in todo:
            n = pt.as_dict()[key]
            if self.too_long(c + n):
                yield Measured.limited(pt, WINDOW_REASON)
                continue
            x = self.ids(b, n)
            state = {"cache": cache}

            def setup(state=state, c=c) -> None:
                if c > 0:
                    crop_to(state["cache"], c)
                else:
                    state["cache"] = DynamicCache(config=self.model.config)

            def fn(state=state, x=x) -> None:
                out = self.model(input_ids=x, cache=state["cache"], use_cache=True, **model_kwargs)
                out.logits.argmax(-1)

            yield self._timed(pt, fn, setup, repeats)
        del cache

    def _timed(self, pt: Point, fn: Callable[[], object], setup: Callable[[], object], repeats: int) -> Measured:
        try:
            return Measured.of(pt, time_op(fn, warmup=self.grids.warmup, repeats=repeats,
                                           device=self.device, setup=setup))
        except Exception as exc:
            return self._out_of_memory(exc, [pt])[0]

    def _out_of_memory(self, exc: Exception, todo: Sequence[Point]) -> list[Measured]:
        """Every point of ``todo`` limited by out-of-memory, the device's cache freed first, so the
        grid goes on with the next cell; any other error is raised (a bug, not a limit)."""
        if not is_oom(exc):
            raise exc
        _free_after_oom(self.device)
        return [Measured.limited(p, OOM_REASON) for p in todo]

    # -- target_prefill: one task per context, points over tokens
    def prefill_tasks(self) -> list[Task]:
        g = self.grids
        tasks = []
        for c in g.prefill_context:
            pts = tuple(point("target_prefill", tokens=n, context=c) for n in g.prefill_tokens)
            tasks.append(Task(f"target_prefill context={c}", pts, lambda todo, c=c: self.prefill_passes(todo, c)))
        return tasks

    def prefill_passes(self, todo: Sequence[Point], c: int) -> Iterator[Measured]:
        return self._passes_on_context(todo, 1, c, "tokens", self.grids.prefill_repeats,
                                       logits_to_keep=1)

    # -- proposers: draft D(k) per (batch, context); overhead H(k) per batch
    def draft_tasks(self, p: DraftRuntime) -> list[Task]:
        g = self.grids
        tasks = []
        for b in g.draft_batch:
            for c in g.draft_context:
                pts = tuple(point(f"draft:{p.name}", batch=b, k=k, context=c) for k in g.draft_k)
                tasks.append(Task(f"{p.name} draft batch={b} context={c}", pts,
                                  lambda todo, b=b, c=c: self._draft(p, todo, b, c)))
        return tasks

    def _draft(self, p: DraftRuntime, todo: Sequence[Point], b: int, c: int) -> Iterator[Measured]:
        g = self.grids
        if p.lookup is not None:
            contexts = [self.ids(1, c).flatten().tolist() for _ in range(b)]
            for pt in todo:
                k = pt.as_dict()["k"]

                def fn(k=k) -> None:
                    for ids in contexts:
                        p.lookup(ids, k)

                yield self._timed(pt, fn, lambda: None, g.repeats)
            return
        model = p.model
        assert model is not None
        if self.too_long(c + g.k_max):
            yield from (Measured.limited(pt, WINDOW_REASON) for pt in todo)
            return
        try:
            cache = self.prefill(model, b, c) if c > 0 else DynamicCache(config=model.config)
            first = self.ids(b, 1)
            state: dict[str, Any] = {}

            def setup() -> None:
                crop_to(cache, c)
                state["x"] = first

            def step(_i: int) -> None:
                out = model(input_ids=state["x"], cache=cache, use_cache=True)
                state["x"] = out.logits[:, -1:].argmax(-1)

            times = time_steps(step, g.k_max, warmup=g.warmup, repeats=g.repeats, device=self.device, setup=setup)
        except Exception as exc:
            yield from self._out_of_memory(exc, todo)
            return
        for pt in todo:
            yield Measured.of(pt, times[pt.as_dict()["k"] - 1])

    def overhead_tasks(self, p: DraftRuntime) -> list[Task]:
        g = self.grids
        tasks = []
        for b in g.overhead_batch:
            pts = tuple(point(f"overhead:{p.name}", batch=b, k=k) for k in g.overhead_k)
            tasks.append(Task(f"{p.name} overhead batch={b} context={g.overhead_context}", pts,
                              lambda todo, b=b: self._overhead(p, todo, b)))
        return tasks

    def _overhead(self, p: DraftRuntime, todo: Sequence[Point], b: int) -> Iterator[Measured]:
        """H(k): whole greedy cycles timed end to end, minus the draft and verify parts of the
        same cycles (marks on one timeline, so the parts partition the cycle exactly).

        Why one method of ~80 lines: the timed cycle (draft, verify, greedy bookkeeping, KV
        rollback) is closures over this cell's prefilled caches and timeline, so what is timed
        is exactly the cycle, with no dispatch or argument passing added inside it."""
        g = self.grids
        c = g.overhead_context
        if self.too_long(c + g.k_max + 1):
            yield from (Measured.limited(pt, WINDOW_REASON) for pt in todo)
            return
        try:
            tcache = self.prefill(self.model, b, c)
            dcache = None
            if p.model is not None:
                dcache = self.prefill(p.model, b, c)
            contexts = [self.ids(1, c).flatten().tolist() for _ in range(b)]
        except Exception as exc:
            yield from self._out_of_memory(exc, todo)
            return
        last = self.ids(b, 1)
        line = Timeline(self.device)

        def reset() -> None:
            crop_to(tcache, c)
            if dcache is not None:
                crop_to(dcache, c)

        def draft(k: int) -> torch.Tensor:
            if p.lookup is not None:
                rows = []
                for ids in contexts:
                    got = p.lookup(ids, k)
                    # verification slots are fixed at k: pad a short or missing proposal
                    rows.append((got + [0] * k)[:k])
                return torch.tensor(rows, dtype=torch.long, device=self.device)
            x, toks = last, []
            for _ in range(k):
                out = p.model(input_ids=x, cache=dcache, use_cache=True)  # type: ignore[misc]
                x = out.logits[:, -1:].argmax(-1)
                toks.append(x)
            return torch.cat(toks, dim=1)

        def cycle(k: int) -> list[float]:
            line.start()
            drafts = draft(k)
            line.mark()
            out = self.model(input_ids=torch.cat([last, drafts], dim=1), cache=tcache, use_cache=True)
            target_tokens = out.logits.argmax(-1)
            line.mark()
            # greedy acceptance bookkeeping: accepted prefix per sequence, bonus token, KV rollback
            matches = (target_tokens[:, :k] == drafts).to(torch.int64).cumprod(dim=1)
            accepted = matches.sum(dim=1)
            bonus = target_tokens.gather(1, accepted.unsqueeze(1))
            n = int(accepted.min().item())
            crop_to(tcache, c + 1 + n)
            if dcache is not None:
                crop_to(dcache, c + n)
            bonus.tolist()
            line.mark()
            return line.elapsed()

        for pt in todo:
            k = pt.as_dict()["k"]
            parts: dict[str, list[float]] = {"cycle": [], "draft": [], "verify": [], "overhead": []}
            try:
                for r in range(g.warmup + g.repeats):
                    reset()
                    t_draft, t_verify, t_cycle = cycle(k)
                    if r >= g.warmup:
                        parts["cycle"].append(t_cycle)
                        parts["draft"].append(t_draft)
                        parts["verify"].append(t_verify - t_draft)
                        parts["overhead"].append(max(0.0, t_cycle - t_draft - (t_verify - t_draft)))
            except Exception as exc:
                yield from self._out_of_memory(exc, [pt])
                continue
            h = Timing.from_samples(parts["overhead"])
            yield Measured.of(pt, h, **{w: float(np.median(parts[w])) for w in ("cycle", "draft", "verify")})
