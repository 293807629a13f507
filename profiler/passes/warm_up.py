"""Before a measured real run: keep freed memory in the process, touch the run's peak passes and
warm the loop's code paths, so first-call costs stay out of the measurement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from profiler.passes.batch_state import ServingRequest
from profiler.passes.kv_cache import cache_from
from profiler.passes.model_types import architecture, count_parameters
from profiler.passes.serving import serve
from profiler.passes.serving_prompts import fit_prompt
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import SchedulerConfig

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
        return cache_from(cfg, [(torch.randn(shape, generator=gen).to(device, dtype),
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
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=96, block_size=16, kv_blocks=64)
    pol = policy or OFF
    serve(reqs, cfg, model, policy=pol, proposer_factory=proposer_factory if pol.speculates else None,
          proposer_name=proposer_name, step_timer=FixedStepTimer(0.001))
    if peak is not None:
        touch_peak(model, peak, seed)
