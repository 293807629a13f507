"""The parts of a speculative step the kernel database does not time: sampling over every scored
position, the padding of a step's tokens to a captured CUDA-graph size, and the engine's host
work per scheduled request.

Why here and not in the grids: both follow from the engine's code and the GPU's datasheet, not
from a kernel measurement, so each is its own ``timing`` key with its own provenance
(docs/profile-format.md, "A speculative step by its parts"), and the simulator adds them the same
way to every imported profile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from profiler.estimates.gpu_specs import match_device_name

SAMPLER_PASSES = 3
"""Passes of one fp32 row of ``vocab`` logits a sampled position costs in vLLM v1 at
temperature 0: the gather of the position's logits row out of the LM head's output
(``logits[spec_decode_metadata.target_logits_indices]`` / ``bonus_logits_indices`` in
``v1/worker/gpu_model_runner.py``: one read, one write), and the argmax over it
(``target_probs.argmax(dim=-1)`` in ``v1/sample/rejection_sampler.py``, the greedy path of
``v1/sample/sampler.py``: one read). Random sampling adds a softmax and more passes; not
counted (a lower estimate at temperature > 0)."""
FP32_BYTES = 4


def sampler_entry(vocab: int, system: str, provenance: Callable[[str], dict[str, Any]]) -> dict[str, Any] | None:
    """``timing.sampler``: ``SAMPLER_PASSES × vocab × 4 B`` per scored position at the GPU's
    datasheet bandwidth (estimated); None for a system without datasheet figures."""
    spec = match_device_name(system.replace("_", " "))
    if spec is None:
        return None
    seconds = SAMPLER_PASSES * vocab * FP32_BYTES / spec.memory_bandwidth
    prov = provenance(
        f"estimated from the engine's code and the datasheet, not a kernel measurement: {SAMPLER_PASSES} "
        f"passes over a {vocab}-entry fp32 logits row per scored position (gather out of the LM head's "
        "output, argmax: vLLM v1 gpu_model_runner.py and sample/rejection_sampler.py, temperature 0) at "
        f"{spec.memory_bandwidth / 1e9:,.0f} GB/s ({spec.source}); a speculative step scores b(k+1) "
        "positions. SpecDecode-Bench (arXiv 2601.11580, Fig. 4) measured rejection sampling at under "
        "1.7 % of step time on vLLM 0.10.1")
    prov["method"] = "estimated"
    return {"seconds_per_position": seconds, "provenance": prov}


def vllm_capture_sizes(version: str, max_size: int = 512) -> tuple[list[int], str]:
    """vLLM's default ``cudagraph_capture_sizes`` and where the rule is written.

    ``max_size`` is ``max_cudagraph_capture_size``: ``min(max_num_seqs × (1 + k) × 2, 512)``, so
    512 for the default ``max_num_seqs`` (1,024 on GPUs of 70 GiB or more, ``get_batch_defaults``).
    """
    major_minor = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    if major_minor and major_minor < (0, 11):
        sizes = [1, 2, 4, *range(8, max_size + 1, 8)]
        rule = ("vLLM 0.10 config: [1, 2, 4] + range(8, max + 1, 8), "
                "max = min(max_num_seqs × 2, 512)")
    else:
        sizes = [1, 2, 4, *range(8, min(max_size + 1, 256), 8), *range(256, max_size + 1, 16)]
        rule = ("vLLM config/compilation.py default: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), "
                "max_cudagraph_capture_size = min(max_num_seqs × (1 + k) × 2, 512)")
    return sizes, rule


def cuda_graph_entry(backend: str, version: str, provenance: Callable[[str], dict[str, Any]]) -> dict[str, Any] | None:
    """``timing.cuda_graphs`` for vLLM (its default capture sizes); None for other engines
    (their padding rules are not checked here, so nothing is claimed)."""
    if backend != "vllm":
        return None
    sizes, rule = vllm_capture_sizes(version)
    prov = provenance(
        f"modelled from vLLM's code: {rule}; a step of t scheduled tokens (prompt chunks plus decode rows "
        "× (k+1)), t ≤ the largest size, runs its graphed ops at the next captured size "
        "(gpu_model_runner.py: pad_for_cudagraph(num_scheduled_tokens)), the sizes of a speculative step first "
        "rounded up to multiples of k+1 as vLLM captures its FULL decode graphs "
        "(compilation.py: adjust_cudagraph_sizes_for_spec_decode); attention runs on the real tokens "
        "(piecewise graphs leave it out) and the LM head on the scored rows only (logits_indices)")
    prov["method"] = "estimated"
    return {"capture_sizes": sizes, "provenance": prov}


FA3_BLOCK_M = 128
"""Query rows of one FlashAttention-3 forward tile on Hopper: ``tile_size_fwd_sm90`` gives 128
for head dims 128-256 (192 for 64 and 96), so 128 is the smallest and never optimistic."""
HOPPER_SYSTEMS = ("h100_sxm", "h200_sxm", "gh200", "h20")


def fa3_pack_gqa_group(backend: str, system: str, cfg: dict[str, Any]) -> int | None:
    """Query heads per KV head when verification attention runs as vLLM's FlashAttention-3 on
    Hopper (``FLASH_ATTN``, the V1 default there; ``flash_attn_varlen_func`` over every scheduled
    token), else None.

    Why it matters: FA3 packs a KV head's query heads into the tile's rows for every varlen call
    (``hopper/heuristics.h`` ``should_pack_gqa``: ``if (varlen_q) return true``), so a row's
    ``s`` queries take ``ceil(s·g / 128)`` tiles per KV head, each loading that head's KV; while
    ``s·g`` fits one tile, verifying ``k+1`` tokens reads and computes what one decode token does
    (``GridBuilder.decode_attention``). Other engines and GPUs: not checked, so not claimed."""
    if backend != "vllm" or system not in HOPPER_SYSTEMS:
        return None
    heads = int(cfg.get("num_attention_heads") or 0)
    kv = int(cfg.get("num_key_value_heads") or heads)
    return max(heads // kv, 1) if heads and kv else None


UPDATE_FROM_OUTPUT_US = ((128, 142.0), (256, 287.0))
"""vLLM ``Scheduler.update_from_output`` per step, µs, by batch (decode only, no speculation):
PR 46112 (2026-06-18), ``benchmarks/overheads/benchmark_scheduler_update_from_output.py``,
medians of 5 at merge-base 55c98e370, before the PR's change; host of an RTX 5090 machine."""
PARSE_OUTPUT_US = ((4, 17.00), (16, 21.70), (64, 34.18), (256, 97.17))
"""vLLM ``RejectionSampler.parse_output`` per verifying step, µs, by batch, on the synchronous
path (a device tensor, so its ``.cpu()`` copy included), before the PR's change: PR 57888
(2026-09-21), micro-benchmark on an MI355X machine's host. The per-row NumPy filter it measured
(``row[valid_mask[i]].tolist()`` per request) is vLLM 0.10.1's ``parse_output`` as written."""
HOST_ROWS_CITATION = (
    "published micro-benchmarks of vLLM's per-request host loops, not a kernel measurement: the scheduler's "
    "update_from_output, {u:.2f} us per scheduled request (vLLM PR 46112: 0.142 ms at batch 128, 0.287 ms at "
    "256, decode only, RTX 5090 host; the slope between them); a verifying step's parse_output, {f:.1f} us + "
    "{r:.3f} us per request (vLLM PR 57888: 17.00, 21.70, 34.18, 97.17 us at batch 4, 16, 64, 256, synchronous "
    "path, MI355X host; least-squares line through them). Both run on the critical path of a synchronous "
    "engine step (vLLM 0.10.1's default); other host loops per request (schedule, _update_states, the "
    "proposer's bookkeeping) have no published per-request figure and are not priced")


def _line(points: tuple[tuple[int, float], ...]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of published ``(batch, value)`` points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def host_rows_values() -> tuple[float, float, float]:
    """``(seconds_per_row, spec_seconds, spec_seconds_per_row)`` from the published points."""
    (b0, t0), (b1, t1) = UPDATE_FROM_OUTPUT_US
    fixed, slope = _line(PARSE_OUTPUT_US)
    return (t1 - t0) / (b1 - b0) * 1e-6, fixed * 1e-6, slope * 1e-6


def host_rows_entry(backend: str, provenance: Callable[[str], dict[str, Any]]) -> dict[str, Any] | None:
    """``timing.host_rows`` for vLLM (the loops measured are vLLM's); None for other engines."""
    if backend != "vllm":
        return None
    row, fixed, spec_row = host_rows_values()
    prov = provenance(HOST_ROWS_CITATION.format(u=row * 1e6, f=fixed * 1e6, r=spec_row * 1e6))
    prov["method"] = "published"
    prov["citation"] = ("github.com/vllm-project/vllm pull 46112 (update_from_output) and pull 57888 "
                        "(parse_output), their descriptions' micro-benchmark tables")
    return {"seconds_per_row": row, "spec_seconds": fixed, "spec_seconds_per_row": spec_row, "provenance": prov}


__all__ = ["FA3_BLOCK_M", "SAMPLER_PASSES", "cuda_graph_entry", "fa3_pack_gqa_group", "host_rows_entry", "host_rows_values", "sampler_entry",
           "vllm_capture_sizes"]
