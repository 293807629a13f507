"""transformers ``DynamicCache`` helpers: wrap per-layer tensors, read them back, crop, measure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache


def crop_to(cache: DynamicCache, length: int) -> None:
    """Crop a DynamicCache back to ``length`` tokens (transformers 5 takes a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def cache_from(config: Any, kvs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A DynamicCache holding exactly these per-layer (keys, values), without copying them."""
    cache = DynamicCache(config=config)
    if len(cache.layers) != len(kvs):
        raise RuntimeError(f"cache has {len(cache.layers)} layers, got {len(kvs)} tensors")
    for layer, (k, v) in zip(cache.layers, kvs, strict=True):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def kv_of(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The per-layer (keys, values) of a cache, not copied."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_len(cache: DynamicCache | None) -> int:
    """Tokens a cache holds (0 for none)."""
    return 0 if cache is None else int(cache.get_seq_length())
