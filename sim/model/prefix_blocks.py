"""What the workload's prompts share, as the engine's prefix-block ids (vLLM's chained block hashes).

A request says what its prompt shares in blocks of its own size (``RequestSpec.prefix_hashes``:
a Mooncake trace's ``hash_ids`` of 512 tokens, or one id for a segment's whole system prompt).
The engine caches blocks of ``block_size`` tokens and, like vLLM, hashes each full block together
with everything before it. So engine block ``i`` (tokens ``[i*bs, (i+1)*bs)``) is named by the
chain of hash ids up to the hash block holding its last token, and by ``i``: two requests get the
same id exactly when their prompts agree up to that block's end. Only full engine blocks inside
both the prompt and the hashed span get an id (vLLM never caches a partial block); tokens past
the hashed span are taken as unique to the request. Ids are dense (0, 1, …) over the run.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        hashes, per = s.prefix_hashes, s.prefix_hash_tokens
        if not hashes or per < 1:
            out.append(None)
            continue
        n = min(s.prompt_tokens, len(hashes) * per) // block_size
        nodes = []
        node = -1
        for h in hashes[: -(-n * block_size // per)]:
            node = chains.setdefault((node, h), len(chains))
            nodes.append(node)
        ids = np.empty(n, np.int64)
        for i in range(n):
            key = (nodes[((i + 1) * block_size - 1) // per], i)
            ids[i] = blocks.setdefault(key, len(blocks))
        out.append(ids)
    return out
