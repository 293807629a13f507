"""Host time per step an engine exposes beyond its GPU kernels, by engine (and version).

Why: a per-step overhead is paid once per step, so a speculative step that emits 2–3 tokens pays
it once where plain decoding pays it per token; too large a figure flatters speculation. The
kernel database times kernels, not the host, so the figure comes from measurements of whole
engines: NVIDIA's silicon TPOT (aiconfigurator-core ``systems/silicon_sample.csv``) against the
same kernels (``bench/fidelity_gpu_silicon.py --survey``, docs/fidelity-gpu.md §1), and for the
older vLLM that the published speculative sweeps ran, SpecDecode-Bench's fit of its runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.contracts.errors import SpecplanError


@dataclass(frozen=True)
class EngineOverhead:
    seconds: float
    method: str
    """Provenance method: ``estimated`` (from published measurements) or ``assumed``."""
    note: str
    citation: str | None = None
    """Where a ``published`` figure is printed."""


SILICON = "aiconfigurator-core 0.12.0 systems/silicon_sample.csv against the same database's kernels (bench/fidelity_gpu_silicon.py --survey, 2026-12-05)"

BY_ENGINE: dict[str, EngineOverhead] = {
    "vllm": EngineOverhead(0.0, "estimated", (
        "estimated from published measurements: NVIDIA's measured TPOT of vLLM (0.12.0 to 0.18.0, measured from "
        "2025-10 to 2026-03) exceeds the kernels by +0.01 ms a token, the median of 26 groups on H100/H200 "
        f"(+0.22 ms on H100, -0.07 ms on H200; {SILICON}): such a vLLM (CUDA graphs, its host work overlapped) "
        "shows no per-step host time beyond its kernels. vLLM 0.10.1 did: "
        "SpecDecode-Bench's fit of its H100 runs gives 1.207 ms a step (pass --step-overhead-of vllm-0.10.1 to plan for it)")),
    "sglang": EngineOverhead(0.0, "estimated", (
        "estimated from published measurements: SGLang's overlap scheduler hides host work on plain steps; NVIDIA's "
        f"measured TPOT of SGLang 0.5 (Qwen3-32B, H100, 4 groups) is below the kernels (-6.0 ms a token median; {SILICON}), "
        "and the EAGLE-3 paper's SGLang baseline (Llama-3.1-8B, H100, 158 tok/s) is met by the kernels alone "
        "(docs/fidelity-gpu.md §3)")),
    "trtllm": EngineOverhead(0.0, "estimated", (
        "estimated from published measurements: TensorRT-LLM overlaps host work with the GPU; NVIDIA's measured TPOT "
        f"is within 1.8 % (median) of the kernels alone for Llama-3.1-8B on H100 and below them over 8 groups on "
        f"H100 (-0.81 ms a token median; {SILICON})")),
}
"""The database's engines (every version it holds is a current one: vLLM 0.24/0.27, SGLang 0.5.14+,
TensorRT-LLM 1.3)."""

ASSUMED = EngineOverhead(1.0e-3, "assumed", (
    "assumed default: host time per engine step (scheduling, input preparation, sampling) the GPU kernels do "
    "not show; no measurement of this engine here (docs/fidelity-gpu.md §1)"))


PUBLISHED: dict[str, EngineOverhead] = {
    "vllm-0.10.1": EngineOverhead(1.20683946e-3, "published", (
        "published: vLLM 0.10.1's per-step overhead on one H100, 1.207 ms a step, from SpecDecode-Bench's fit of its "
        "own runs (Liu et al., arXiv 2601.11580; SpecDecode-Bench/simulator predictor.py, class Llama8BH100: "
        "overhead 1.20683946e-3 s per step); for planning that engine, whose host work was not overlapped"),
        "Liu, Yu, Park, Stoica, Cheung, \"Speculative Decoding: Performance or Illusion?\", arXiv 2601.11580; "
        "SpecDecode-Bench/simulator predictor.py, class Llama8BH100"),
}
"""Older engines' per-step overhead where a publication gives it (``--step-overhead-of NAME``)."""


def step_overhead(backend: str, chosen_s: float | None, engine_of: str | None = None) -> EngineOverhead:
    """The per-step overhead to write: the one chosen on the command line, a named older engine's
    published one, else the engine's own estimate."""
    if chosen_s is not None and engine_of is not None:
        raise SpecplanError("--step-overhead-ms and --step-overhead-of: give one of them")
    if chosen_s is not None:
        return EngineOverhead(chosen_s, "assumed", "chosen on the command line (--step-overhead-ms)")
    if engine_of is not None:
        if engine_of not in PUBLISHED:
            raise SpecplanError(f"--step-overhead-of {engine_of!r}: valid: {', '.join(PUBLISHED)} "
                                "(or --step-overhead-ms MS)")
        if not engine_of.startswith(f"{backend}-"):
            raise SpecplanError(f"--step-overhead-of {engine_of}: names another engine than --backend {backend}")
        return PUBLISHED[engine_of]
    return BY_ENGINE.get(backend, ASSUMED)
