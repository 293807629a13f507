"""Real forward passes over the profile's timing grids (docs/profile-format.md, ``timing``).

Every value is a wall time of real work under ``torch.inference_mode`` with a real KV cache
(transformers ``DynamicCache``): a cache of ``context`` tokens is built by one prefill pass, the
next pass is timed, and the cache is cropped back before each repetition so every repetition sees
the same context. Work is split into *tasks* (one prefilled cache each) made of *points* (one grid
cell each), so the runner can checkpoint and resume point by point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from profiler.grids.grid_passes import PassRunner
from profiler.grids.timing_grids import (
    DraftRuntime,
    Measured,
    Point,
    Task,
    TimingGrids,
)
from profiler.passes.clock import time_op
from profiler.passes.kv_cache import crop_to
from profiler.passes.model_types import LoadedModel


def plan_tasks(
    target: LoadedModel,
    proposers: Sequence[DraftRuntime],
    grids: TimingGrids,
    *,
    seed: int = 0,
    free_bytes: int | None = None,
) -> list[Task]:
    """Every timing task of a profile run, in the order they are measured."""
    runner = PassRunner(target, grids, seed, free_bytes)
    tasks = runner.forward_tasks() + runner.prefill_tasks()
    for p in proposers:
        tasks += runner.draft_tasks(p) + runner.overhead_tasks(p)
    return tasks


def _cell_grids(warmup: int, repeats: int) -> TimingGrids:
    """Placeholder grids for a ``PassRunner`` that times given cells, not a grid: only the warm-up
    and repeat counts are read."""
    one = (1,)
    return TimingGrids(batch=one, tokens_per_seq=one, context=(0,), prefill_tokens=one, prefill_context=(0,),
                       draft_batch=one, k_max=1, draft_context=(0,), overhead_batch=one, overhead_k=one,
                       overhead_context=0, warmup=warmup, repeats=repeats, prefill_repeats=repeats)


@torch.inference_mode()
def remeasure(target: LoadedModel, points: Sequence[Point], *, warmup: int = 1, repeats: int = 5,
              seed: int = 0) -> list[Measured]:
    """Time target_forward and target_prefill cells again, by the profile run's own code.

    Why: a profile is one moment of a machine; before trusting a comparison with it (``specplan
    validate``) one wants to know how far this machine's speed has drifted since, cell by cell.
    Under ``inference_mode`` as the profile run is: with autograd recording, the same cells
    re-timed 1.1–2.6× slower on this CPU and read as drift that was not there.
    """
    runner = PassRunner(target, _cell_grids(warmup, repeats), seed, None)
    # points sharing a (batch, context) share one prefilled cache, as in the grid run
    groups: dict[tuple[str, int, int], list[Point]] = {}
    for pt in points:
        d = pt.as_dict()
        if pt.quantity == "target_forward":
            groups.setdefault((pt.quantity, d["batch"], d["context"]), []).append(pt)
        elif pt.quantity == "target_prefill":
            groups.setdefault((pt.quantity, 1, d["context"]), []).append(pt)
        else:
            raise ValueError(f"remeasure: only target_forward and target_prefill cells, got {pt.quantity}")
    got: dict[Point, Measured] = {}
    for (quantity, b, c), todo in groups.items():
        passes = runner.forward_passes(todo, b, c) if quantity == "target_forward" else runner.prefill_passes(todo, c)
        got.update((m.point, m) for m in passes)
    return [got[pt] for pt in points]


class ReferencePasses:
    """Profile cells ready to be timed one pass at a time, in a serving loop's idle gaps.

    Why: ``remeasure`` takes ~15 s for a dozen cells (a cache prefilled per cell, warm-up,
    repeats), so it can only bracket a real run; this prepares the caches once, and then one
    ``time(i)`` is a warm-up and one timed pass of cell ``i`` (its context cropped back after each), short enough to fit
    between requests and so show how the machine's speed moved *during* the run. Built by the
    profile run's own code, under ``inference_mode``.
    """

    WARMUP = 1
    """Untimed passes before the timed one, as the profile and the drift checks do: measured on
    2026-12-01, single cold passes read 5–25 % slower than the checks (batch-1 cells most)."""

    @torch.inference_mode()
    def __init__(self, target: LoadedModel, points: Sequence[Point], *, seed: int = 0) -> None:
        self._runner = runner = PassRunner(target, _cell_grids(self.WARMUP, 1), seed, None)
        self.points = tuple(points)
        caches: dict[tuple[int, int], DynamicCache] = {}
        self._cells: list[tuple[int, DynamicCache | None, torch.Tensor, dict[str, Any]]] = []
        for pt in self.points:
            d = pt.as_dict()
            if pt.quantity == "target_forward":
                b, c, n, kw = d["batch"], d["context"], d["tokens_per_seq"], {}
            elif pt.quantity == "target_prefill":
                b, c, n, kw = 1, d["context"], d["tokens"], {"logits_to_keep": 1}
            else:
                raise ValueError(f"ReferencePasses: only target_forward and target_prefill cells, got {pt.quantity}")
            if c > 0 and (b, c) not in caches:
                caches[(b, c)] = runner.prefill(runner.model, b, c)
            self._cells.append((c, caches.get((b, c)), runner.ids(b, n), kw))
        for i in range(len(self._cells)):  # warm: the first pass of a shape pays allocation
            self.time(i)

    @torch.inference_mode()
    def time(self, i: int) -> float:
        """Seconds one pass of cell ``i`` takes now (after ``WARMUP`` untimed ones)."""
        c, cache, x, kw = self._cells[i]
        model = self._runner.model
        state = {"cache": cache}

        def setup() -> None:  # as the profile run: crop back, or a fresh cache (never timed)
            if cache is not None:
                crop_to(cache, c)
            else:
                state["cache"] = DynamicCache(config=model.config)

        def fn() -> None:
            model(input_ids=x, cache=state["cache"], use_cache=True, **kw).logits.argmax(-1)

        t = time_op(fn, warmup=self.WARMUP, repeats=1, device=self._runner.device, setup=setup)
        if cache is not None:
            crop_to(cache, c)
        return float(t.median)
