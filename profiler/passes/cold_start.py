"""Cold start, measured: loading the models, then the first request after the load against the
same request once the process is warm.

Why: a restarted replica serves nothing while it loads, and its first passes are slower than
every later one (lazy allocations, kernel selection, caches filling). The restart window of a
decision (sim/decisions/windows.py) is as long as this cold start; before it was measured it was a
number a person typed. It runs right after loading, before any other pass touches the models:
the first request here is the first request the process ever serves.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from profiler.passes.device import synchronize
from profiler.passes.model_types import LoadedModel

PROMPT_TOKENS = 128
"""The first request's prompt: a short chat turn."""
WARM_REPEATS = 5


def _request(target: LoadedModel, ids: torch.Tensor) -> tuple[float, float]:
    """(prefill to the first token, first decode step) of one request, host clock after a sync."""
    cache = DynamicCache(config=target.model.config)
    with torch.inference_mode():
        synchronize(target.device)
        t0 = time.perf_counter()
        tok = target.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1)
        synchronize(target.device)
        t1 = time.perf_counter()
        target.model(input_ids=tok[:, None], cache=cache, use_cache=True).logits.argmax(-1)
        synchronize(target.device)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def cold_start_s(load_s: float, first: Sequence[float], warm: Sequence[float]) -> float:
    """The replica's time out of service: the load, plus what its first request takes beyond a
    warm one (the simulator serves at warm speed once the replica is back)."""
    return float(load_s + sum(max(0.0, f - w) for f, w in zip(first, warm, strict=True)))


def measure_cold_start(target: LoadedModel, drafts: Sequence[LoadedModel], *, seed: int = 0) -> dict[str, Any]:
    """The profile's ``cold_start`` section (without provenance) and its notes. Call before any
    other pass on ``target``."""
    vocab = int(target.identity["architecture"]["vocab_size"])
    ids = torch.randint(0, vocab, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(seed)).to(target.device)
    first = _request(target, ids)
    warm_runs = [_request(target, ids) for _ in range(WARM_REPEATS)]
    warm = (statistics.median(r[0] for r in warm_runs), statistics.median(r[1] for r in warm_runs))
    loads = [m.load_s for m in (target, *drafts)]
    load = float(sum(x for x in loads if x is not None))
    section = {
        "load_s": load,
        "prompt_tokens": PROMPT_TOKENS,
        "first_request": {"ttft_s": first[0], "first_step_s": first[1]},
        "warm_request": {"ttft_s": warm[0], "first_step_s": warm[1]},
        "cold_start_s": cold_start_s(load, first, warm),
    }
    notes = [
        "load_s: tokenizer and weights read from disk and placed on the device, target"
        + (f" and {len(drafts)} draft model(s)" if drafts else "")
        + " (the weights' hashing for the profile's identity and the interpreter's imports excluded; "
          "the operating system's page cache may already hold the files)",
        f"first_request: the process's first target prefill of {PROMPT_TOKENS} random tokens to its first "
        "token, then one decode step, right after the load; warm_request: the same request's median over "
        f"{WARM_REPEATS} repeats after it (draft models' first passes not measured)",
        "cold_start_s = load_s + (first - warm) of the prefill and of the decode step: the time a restarted "
        "replica serves nothing, as the simulator's restart uses it",
    ]
    return {"section": section, "notes": notes}
