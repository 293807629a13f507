"""What the workload's prompts share, as the engine's prefix-block ids (vLLM's chained block hashes).

A request says what its prompt shares as spans of its own sizes (``RequestSpec.prefix_spans``:
a Mooncake trace's ``hash_ids`` of 512 tokens each, a segment's system prompt, a retrieved
document). The engine caches blocks of ``block_size`` tokens and, like vLLM, hashes each full
block together with everything before it. So engine block ``i`` (tokens ``[i*bs, (i+1)*bs)``) is
named by the chain of span ids up to the span holding its last token, and by ``i``: two requests
get the same id exactly when their prompts agree up to that block's end. Only full engine blocks
inside both the prompt and the spans get an id (vLLM never caches a partial block); tokens past
the spans are taken as unique to the request. Ids are dense (0, 1, …) over the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from sim.workload.workload import RequestSpec


def block_ids(specs: Sequence[RequestSpec], block_size: int) -> list[np.ndarray | None]:
    """Per request, the ids of its prompt's full shareable blocks in order (None: nothing shared).

    Ids are numbered in order of first appearance, as a dict filled request by request and block
    by block would number them; the blocks are keyed in one numpy pass (long resent histories
    hold millions of blocks, which a dict took seconds over)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    chains: dict[tuple[int, int], int] = {}
    nodes_of: list[np.ndarray] = []
    owners: list[int] = []
    for r, s in enumerate(specs):
        spans = s.prefix_spans
        if not spans:
            continue
        ends = np.fromiter(accumulate(t for _, t in spans), np.int64, len(spans))  # token after each span
        n = min(s.prompt_tokens, int(ends[-1])) // block_size
        nodes = np.empty(len(spans), np.int64)
        node = -1
        for j, (h, _) in enumerate(spans):
            node = chains.setdefault((node, h), len(chains))
            nodes[j] = node
        last = np.arange(1, n + 1, dtype=np.int64) * block_size - 1  # each block's last token
        nodes_of.append(nodes[np.searchsorted(ends, last, side="right")])
        owners.append(r)
    out: list[np.ndarray | None] = [None] * len(specs)
    if not owners:
        return out
    counts = np.array([len(x) for x in nodes_of], np.int64)
    node = np.concatenate(nodes_of)
    index = np.arange(len(node), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    key = node * (int(index.max(initial=0)) + 1) + index  # (chain, block position), one int each
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    ids = rank[inverse.ravel()]
    for r, part in zip(owners, np.split(ids, np.cumsum(counts)[:-1]), strict=True):
        out[r] = part
    return out
