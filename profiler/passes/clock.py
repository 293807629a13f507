"""The one timing primitive: warm up, synchronise, repeat, keep the median and the spread.

On CUDA the clock is a pair of CUDA events around the work (kernels are asynchronous, the host
clock would read launch time); on CPU it is ``time.perf_counter``. Untimed ``setup`` runs before
every repetition so each one sees the same state (e.g. a KV cache cropped back to its context).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class Timing:
    """Median and 10th/90th percentiles of ``repeats`` timed repetitions, in seconds."""

    median: float
    p10: float
    p90: float
    repeats: int

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"Timing.repeats={self.repeats}: at least one repetition is needed")
        if not self.p10 <= self.median <= self.p90:
            raise ValueError(f"Timing: expected p10 <= median <= p90, got {self.p10}, {self.median}, {self.p90}")

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> Timing:
        arr = np.asarray(samples, dtype=float)
        if arr.size == 0:
            raise ValueError("Timing.from_samples: no samples")
        med = float(np.median(arr))
        return cls(
            median=med,
            p10=min(float(np.percentile(arr, 10)), med),
            p90=max(float(np.percentile(arr, 90)), med),
            repeats=int(arr.size),
        )


class Stopwatch:
    """Elapsed seconds of one span on a device: CUDA events on GPU, perf_counter on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def start(self) -> object:
        if self.cuda:
            torch.cuda.synchronize(self.device)  # nothing queued before the span may leak into it
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, started: object) -> float:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return float(started.elapsed_time(end)) / 1000.0  # type: ignore[attr-defined]
        return time.perf_counter() - float(started)  # type: ignore[arg-type]


def time_op(
    fn: Callable[[], object],
    *,
    warmup: int,
    repeats: int,
    device: torch.device,
    setup: Callable[[], object] | None = None,
) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed runs; ``setup`` is never timed."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"time_op: repeats={repeats} must be >= 1 and warmup={warmup} >= 0")
    watch = Stopwatch(device)
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    samples = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        t0 = watch.start()
        fn()
        samples.append(watch.stop(t0))
    return Timing.from_samples(samples)


def time_steps(
    step: Callable[[int], object],
    steps: int,
    *,
    warmup: int,
    repeats: int,
    device: torch.device,
    setup: Callable[[], object] | None = None,
) -> list[Timing]:
    """Cumulative elapsed time after each of ``steps`` sequential steps: entry ``i`` is the
    time to finish steps ``0..i``. One run of k steps gives D(1..k) without re-running each k;
    the marks are points on one timeline, never summed spans.
    """
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"time_steps: steps={steps}, repeats={repeats} must be >= 1, warmup={warmup} >= 0")
    for _ in range(warmup):
        if setup is not None:
            setup()
        for i in range(steps):
            step(i)
    samples: list[list[float]] = []
    cuda = device.type == "cuda"
    for _ in range(repeats):
        if setup is not None:
            setup()
        if cuda:
            torch.cuda.synchronize(device)
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
            marks[0].record()
            for i in range(steps):
                step(i)
                marks[i + 1].record()
            marks[-1].synchronize()
            samples.append([marks[0].elapsed_time(m) / 1000.0 for m in marks[1:]])
        else:
            t0 = time.perf_counter()
            row = []
            for i in range(steps):
                step(i)
                row.append(time.perf_counter() - t0)
            samples.append(row)
    return [Timing.from_samples([s[i] for s in samples]) for i in range(steps)]


class Timeline:
    """Marks on one clock within a single piece of work (e.g. one speculative cycle).

    Differences between marks partition the elapsed time exactly, so parts of one cycle can be
    subtracted from the whole without adding overlapping spans. CUDA events on GPU (the marks are
    when the stream reaches them, host gaps included), perf_counter on CPU.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._marks: list[object] = []

    def start(self) -> None:
        self._marks = []
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.mark()

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._marks.append(ev)
        else:
            self._marks.append(time.perf_counter())

    def elapsed(self) -> list[float]:
        """Seconds from the start to each later mark."""
        if self.cuda:
            self._marks[-1].synchronize()  # type: ignore[attr-defined]
            first = self._marks[0]
            return [first.elapsed_time(m) / 1000.0 for m in self._marks[1:]]  # type: ignore[attr-defined]
        t0 = float(self._marks[0])  # type: ignore[arg-type]
        return [float(m) - t0 for m in self._marks[1:]]  # type: ignore[arg-type]
