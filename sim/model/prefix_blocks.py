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

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from sim.model.workload import RequestSpec


def block_ids(specs: Sequence[RequestSpec], block_size: int) -> list[np.ndarray | None]:
    """Per request, the ids of its prompt's full shareable blocks in order (None: nothing shared)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    chains: dict[tuple[int, int], int] = {}
    blocks: dict[tuple[int, int], int] = {}
    out: list[np.ndarray | None] = []
    for s in specs:
        spans = s.prefix_spans
        if not spans:
            out.append(None)
            continue
        ends = list(accumulate(t for _, t in spans))  # token after each span
        n = min(s.prompt_tokens, ends[-1]) // block_size
        nodes = []
        node = -1
        for h, _ in spans:
            node = chains.setdefault((node, h), len(chains))
            nodes.append(node)
        ids = np.empty(n, np.int64)
        for i in range(n):
            last = (i + 1) * block_size - 1  # the block's last token lies in this span
            ids[i] = blocks.setdefault((nodes[bisect_right(ends, last)], i), len(blocks))
        out.append(ids)
    return out
