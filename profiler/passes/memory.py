"""Memory facts of a profile: weights, KV bytes per token (computed and checked), activation
peak, device memory and the KV capacity they leave (docs/profile-format.md, ``memory``).

The activation peak is measured differently per device, and the section's provenance notes say
how: on CUDA it is the allocator's peak minus what was allocated before the pass and the KV the
pass added; on CPU torch has no allocator statistics, so the process RSS is sampled from a thread
during the pass (an estimate that includes allocator slack).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from profiler.passes.device import device_memory_bytes
from profiler.passes.model_types import LoadedModel, architecture, count_parameters, dtype_bytes
from profiler.passes.process_peak import ProcessPeak
from sim.contracts.errors import SpecplanError

UTILIZATIONS = (0.8, 0.9)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of distinct parameters and buffers (tied embeddings counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.is_meta:
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return int(total)


def kv_bytes_per_token(arch: dict[str, Any], dtype: torch.dtype, layers: int | None = None) -> int:
    """``2 · layers · kv_heads · head_dim · bytes(dtype)``: keys and values of every layer."""
    n = arch["num_layers"] if layers is None else layers
    return int(2 * n * arch["num_kv_heads"] * arch["head_dim"] * dtype_bytes(dtype))


def cache_bytes(cache: DynamicCache) -> int:
    """Bytes held by the key and value tensors of a DynamicCache."""
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return int(total)


def measured_kv_bytes_per_token(model: torch.nn.Module, device: torch.device, vocab: int,
                                tokens: int = 32) -> float:
    """Cache tensor bytes per cached token after a real prefill of ``tokens`` tokens."""
    cache = DynamicCache(config=model.config)
    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.inference_mode():
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    return cache_bytes(cache) / tokens


class _RssSampler:
    """Peak resident set size of this process, sampled from a thread while a pass runs."""

    def __init__(self, interval_s: float = 0.002) -> None:
        import psutil

        self.proc = psutil.Process()
        self.interval = interval_s
        self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def activation_peak_bytes(model: torch.nn.Module, device: torch.device, vocab: int,
                          batch: int, tokens: int, peaks: ProcessPeak | None = None) -> tuple[int, str]:
    """Peak transient memory of one forward of ``batch × tokens`` new tokens, and how measured."""
    ids = torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(1)).to(device)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            if peaks is not None:
                peaks.sample()  # the run's peak so far, before this pass resets the counter
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            model(input_ids=ids, cache=cache, use_cache=True).logits.argmax(-1)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
            how = f"CUDA max_memory_allocated delta over a {batch}x{tokens}-token forward, minus its KV"
        else:
            import psutil

            before = psutil.Process().memory_info().rss
            with _RssSampler() as sampler:
                model(input_ids=ids, cache=cache, use_cache=True).logits.argmax(-1)
            peak = sampler.peak
            how = f"CPU RSS sampled every 2 ms during a {batch}x{tokens}-token forward, minus baseline and its KV"
    return max(0, int(peak - before - cache_bytes(cache))), how


@dataclass(frozen=True)
class ProposerMemoryInput:
    """What memory needs to know about one proposer."""

    name: str
    kind: str
    model: torch.nn.Module | None = None
    """The draft module (draft model or early-exit view); None for ngram."""
    shares_target_weights: bool = False
    """Self-draft reuses the target's weights: no extra weight bytes."""
    layers: int | None = None


def kv_capacity_rows(device_bytes: int, target_w: int, target_act: int, target_kv: int,
                     proposers: dict[str, dict[str, int]],
                     utilizations: Sequence[float] = UTILIZATIONS, reserve: int = 0) -> list[dict[str, Any]]:
    """KV tokens left at each utilisation, target alone and with each draft resident, after
    ``reserve`` bytes kept for other applications (the same formula the simulator uses,
    sim/model/kv_capacity.py, so the two can be checked against each other)."""
    rows = []
    for u in utilizations:
        for name in [None, *proposers]:
            p = proposers.get(name, {}) if name else {}
            free = int(u * device_bytes) - reserve - target_w - target_act - p.get("weight_bytes", 0) - p.get("activation_peak_bytes", 0)
            per = target_kv + p.get("kv_bytes_per_token", 0)
            rows.append({"memory_utilization": u, "proposer": name, "kv_tokens": max(0, math.floor(free / per))})
    return rows


def measure_memory(target: LoadedModel, proposers: Sequence[ProposerMemoryInput], *,
                   act_batch: int, act_tokens: int,
                   progress: Callable[[str], None] | None = None,
                   peaks: ProcessPeak | None = None) -> tuple[dict[str, Any], list[str]]:
    """The ``memory`` section (without provenance) and notes saying how each number was got."""
    arch = target.identity["architecture"]
    dev = target.device
    vocab = int(arch["vocab_size"])
    notes: list[str] = []
    tw = weight_bytes(target.model)
    kv = kv_bytes_per_token(arch, target.dtype)
    kv_meas = measured_kv_bytes_per_token(target.model, dev, vocab)
    act, how = activation_peak_bytes(target.model, dev, vocab, 1, act_tokens, peaks)
    if act_batch > 1:
        act_b, _ = activation_peak_bytes(target.model, dev, vocab, act_batch, 1, peaks)
        act = max(act, act_b)
    notes.append(f"activation peak: {how}")
    pm: dict[str, dict[str, int]] = {}
    for p in proposers:
        if progress:
            progress(f"memory {p.name}")
        if p.model is None:
            pm[p.name] = {"weight_bytes": 0, "kv_bytes_per_token": 0, "activation_peak_bytes": 0}
            continue
        p_arch_layers = p.layers if p.shares_target_weights else None
        if p.shares_target_weights:
            pkv = kv_bytes_per_token(arch, target.dtype, layers=p_arch_layers)
            pw = 0
            notes.append(f"{p.name}: shares target weights; keeps its own KV for {p.layers} layers")
        else:
            pw = weight_bytes(p.model)
            parch = architecture(p.model.config, count_parameters(p.model))
            pkv = kv_bytes_per_token(parch, next(p.model.parameters()).dtype)
        pact, _ = activation_peak_bytes(p.model, dev, vocab, act_batch, 1, peaks)
        pm[p.name] = {"weight_bytes": pw, "kv_bytes_per_token": pkv, "activation_peak_bytes": pact}
    total = device_memory_bytes(dev)
    section = {
        "device_memory_bytes": int(total),
        "target_weight_bytes": tw,
        "target_kv_bytes_per_token": kv,
        "activation_peak_bytes": int(act),
        "proposers": pm,
        "kv_capacity": kv_capacity_rows(total, tw, act, kv, pm),
        "kv_check": {
            "target_kv_bytes_per_token_measured": float(kv_meas),
            "relative_error": float(abs(kv_meas - kv) / kv),
        },
    }
    return section, notes


def with_reserve(section: dict[str, Any], reserve: tuple[int, str] | None) -> dict[str, Any]:
    """The memory section with ``reserve`` (bytes, rule) kept for other applications: recorded,
    and taken out of every ``kv_capacity`` row (the simulator subtracts it too)."""
    if reserve is None:
        return section
    n, rule = reserve
    total = int(section["device_memory_bytes"])
    if not 0 <= n < total:
        raise SpecplanError(f"{rule}: reserves {n / 2**30:.2f} GiB of a device with {total / 2**30:.2f} GiB; "
                            "valid: less than the device's memory")
    rows = kv_capacity_rows(total, section["target_weight_bytes"], section["activation_peak_bytes"],
                            section["target_kv_bytes_per_token"], section.get("proposers") or {}, reserve=n)
    return {**section, "kv_capacity": rows, "reserve": {"bytes": int(n), "rule": rule}}


def check_reserve(gb: float | None, fraction: float | None) -> None:
    """The flags' own rules, checked before any model is loaded."""
    if gb is not None and fraction is not None:
        raise SpecplanError("--reserve-gb and --reserve-fraction: give one, not both")
    if gb is not None and not (math.isfinite(gb) and gb >= 0):
        raise SpecplanError(f"--reserve-gb {gb}: must be a number of GiB >= 0")
    if fraction is not None and not (math.isfinite(fraction) and 0 <= fraction < 1):
        raise SpecplanError(f"--reserve-fraction {fraction}: must be in [0, 1)")


def reserve_of(gb: float | None, fraction: float | None, device_bytes: int) -> tuple[int, str] | None:
    """``--reserve-gb`` / ``--reserve-fraction`` as (bytes, rule); None when neither is given."""
    check_reserve(gb, fraction)
    if gb is not None:
        return int(gb * 2**30), f"--reserve-gb {gb:g} (GiB kept for other applications)"
    if fraction is not None:
        return (int(fraction * device_bytes),
                f"--reserve-fraction {fraction:g} of {device_bytes / 2**30:.2f} GiB (kept for other applications)")
    return None
