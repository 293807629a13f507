"""Predicted speculative speed-up of MoE targets at batch 1 and a few batches, beside published runs.

Why: a MoE verify of k+1 tokens per row reads the distinct experts those tokens touch, so at small
batch it costs several times a decode (docs/profile-format.md, "Routed experts"); the sign of a
method's effect at batch 1 depends on it. For each MoE the kernel database covers, this imports
a profile (aiconfigurator-core, the gpu-data extra) and prints, per method and k, the steady-state
speed-up with every row decoding at a 1024-token context:

    speed-up(b, k) = (1 + sum of survival rates up to k) * (H + T(b)) / (H + V(b, k) + D(b, k) + H_draft(b, k))

from the profile's own grid cells (the ones the simulator interpolates; H the profile's step
overhead). Acceptance is labelled where it comes from (assumed or published, with the source).
Run it against another tree to compare (``PYTHONPATH=<tree> python bench/moe_speedup.py``).

    python bench/moe_speedup.py [--models gpt-oss,deepseek-r1,...] [--context 1024]
"""

from __future__ import annotations

import argparse
import json
import time

from profiler.imported.aiconfigurator_import import ImportRequest, build_profile
from sim.contracts.profile import Profile

BATCHES = (1, 4, 16, 64)
EAGLE_ASSUMED = {"0.7/pos (assumed, the shipped profile's)": 0.7, "0.5/pos (assumed)": 0.5}
# Acceptance lengths for k = 1..5 quoted in /work/shared/REFERENCES.md from InferenceX
# golden_al_distribution (DeepSeek-V4-Pro MTP, vLLM on B300, coding prompts): published for
# another DeepSeek model, used here as the nearest published MTP curve.
MTP_PUBLISHED_AL = (1.79, 2.27, 2.49, 2.54, 2.55)

MODELS = {
    "gpt-oss": ("openai/gpt-oss-120b", "h200_sxm", 1, 1, "eagle3"),
    "qwen3-30b": ("Qwen/Qwen3-30B-A3B", "h200_sxm", 1, 1, "eagle3"),
    "qwen3-235b": ("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", 4, 1, "eagle3"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "h200_sxm", 8, 1, "mtp"),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", "h200_sxm", 8, 8, "mtp"),
}
PUBLISHED = {
    "gpt-oss": "Red Hat Developer 2026-04-16, gpt-oss-120B + EAGLE-3, H200, vLLM: output throughput +10-21 % "
               "(concurrency up to 200), 2-3 draft tokens best -> sign + (docs/fidelity-gpu.md section 4)",
    "deepseek-v3": "DeepSeek-V3 technical report (arXiv 2412.19437, sec. 5.4.3): MTP k=1 accepts the 2nd token "
                   "85-90 % of the time, 1.8x tokens per second -> sign +",
    "deepseek-r1": "same architecture as DeepSeek-V3 (MTP module); DeepSeek-V3 report: 1.8x TPS with MTP k=1 -> sign +",
    "qwen3-30b": "no published batch-1 EAGLE-3 measurement for this model found here",
    "qwen3-235b": "no published batch-1 EAGLE-3 measurement for this model found here",
}
GENERAL = ("Saxena et al., arXiv 2506.20675 (Cascade), five MoEs in vLLM: verification 2-3x a decode, static-K "
           "speculation up to 1.5x slower on some tasks (models and tasks in the paper; none in this database)")


def survival_sets(method: str) -> dict[str, list[float]]:
    if method == "mtp":
        al = (1.0,) + MTP_PUBLISHED_AL
        return {"InferenceX AL 1.79/2.27/2.49 (published, DeepSeek-V4-Pro)": [al[i] - al[i - 1] for i in range(1, 6)]}
    return {name: [r ** i for i in range(1, 6)] for name, r in EAGLE_ASSUMED.items()}


def cell(grid, **at: float) -> float:
    idx = tuple(grid.axes[i].index(at[n]) for i, n in enumerate(grid.axis_names))
    return float(grid.median[idx])


def report(key: str, context: int) -> None:
    model, system, tp, ep, method = MODELS[key]
    t0 = time.perf_counter()
    d = build_profile(ImportRequest(system, "vllm", model, (method,), tp=tp, ep=ep, command="bench/moe_speedup.py"))
    p = Profile.from_dict(json.loads(json.dumps(d)), "bench")
    tf, prop = p.timing.target_forward, p.timing.proposers[method]
    h = p.timing.step_overhead.seconds if p.timing.step_overhead is not None else 0.0
    print(f"\n{model} on {tp}x {system}{f' EP {ep}' if ep > 1 else ''}, vLLM, {method} "
          f"(import {time.perf_counter() - t0:.1f} s, context {context})")
    print("  V(k)/T at batch " + "; ".join(
        f"{b}: " + " ".join(f"{cell(tf, batch=b, tokens_per_seq=k + 1, context=context) / cell(tf, batch=b, tokens_per_seq=1, context=context):.2f}"
                            for k in (1, 2, 3, 4)) for b in (1, 8, 64)) + "  (k = 1..4)")
    for name, surv in survival_sets(method).items():
        for k in (1, 2, 3):
            row = []
            for b in BATCHES:
                base = h + cell(tf, batch=b, tokens_per_seq=1, context=context)
                spec = (h + cell(tf, batch=b, tokens_per_seq=k + 1, context=context)
                        + cell(prop.draft, batch=b, k=k, context=context) + cell(prop.overhead, batch=b, k=k))
                row.append((1 + sum(surv[:k])) * base / spec)
            print(f"  {name:<58} k={k}: " + "  ".join(f"b={b}: {x:.2f}x" for b, x in zip(BATCHES, row, strict=True)))
    print(f"  published: {PUBLISHED[key]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--context", type=int, default=1024)
    args = ap.parse_args()
    print("predicted steady-state speed-up (tokens per step x baseline step / speculative step), from imported grids")
    for key in args.models.split(","):
        report(key.strip(), args.context)
    print(f"\nfor every MoE: {GENERAL}")


if __name__ == "__main__":
    main()
