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

Then the published small-batch MoE runs where speculation was measured to hurt
(``profiler.imported.published_moe_runs``), each against a profile imported for its model, GPU,
engine and TP at the run's own acceptance length: published and predicted speed-up with their
signs, and the step term by term (the run's speculative step; a plain step over as many tokens
in the same run; the drafting side it implies against the one priced and the most it may cost).

    python bench/moe_speedup.py [--models gpt-oss,deepseek-r1,...] [--context 1024] [--runs-only]
"""

from __future__ import annotations

import argparse
import json
import time

from profiler.imported import published_moe_runs as pub
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
    "qwen3-30b": "SGLang on H100 (not this vLLM/H200 import): EAGLE-3 0.72x at batch 1, 0.79x at 4 (SpecForge #339), "
                 "0.78x at batch 1, TP 4 (AngelSlim #163) -> sign - (the published runs below)",
    "qwen3-235b": "no published batch-1 EAGLE-3 measurement for this model found here",
}
GENERAL = ("Saxena et al., arXiv 2506.20675 (Cascade), five MoEs in vLLM: verification 2-3x a decode, static-K "
           "speculation up to 1.5x slower on some tasks (per-model numbers only in its figures; not used)")


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


def sign(x: float) -> str:
    return "+" if x > 1 else "-"


def published_runs(context: int) -> None:
    """Each published run against its import: the sign, then the step by its parts (ms)."""
    print(f"\npublished small-batch MoE runs (profiler/imported/published_moe_runs.py), context {context}, "
          "at each run's own acceptance length")
    cache: dict[tuple[str, str, str, int], Profile] = {}
    wrong = 0
    for r in pub.RUNS:
        key = (r.model, r.system, r.backend, r.tp)
        if key not in cache:
            cache[key] = pub.import_for(r, "bench/moe_speedup.py")
        p = cache[key]
        pred, bare = pub.predicted(p, r, context), pub.predicted(p, r, context, overheads=False)
        wrong += sign(pred) != sign(r.measured)
        print(f"\n  {r.key}: {r.model}, {r.tp}x {r.system}, {r.backend}, {r.method} k={r.k}, batch {r.batch}, AL {r.acceptance_length}")
        print(f"    published {r.measured:.2f}x ({sign(r.measured)})   predicted {pred:.2f}x ({sign(pred)}"
              f"{', sign WRONG' if sign(pred) != sign(r.measured) else ''}); kernels only (assumed overheads left out) "
              f"{bare:.2f}x")
        tf = p.timing.target_forward
        h = p.timing.step_overhead.seconds if p.timing.step_overhead is not None else 0.0
        v = h + pub.cell(tf, batch=r.batch, tokens_per_seq=r.k + 1, context=context)
        wide = r.wide_step_s
        print(f"    speculative step: run {r.spec_step_s * 1e3:.2f} ms; priced {(v + pub.priced_drafting(p, r, context)) * 1e3:.2f}"
              f" = verify pass + H {v * 1e3:.2f} + drafting {pub.priced_drafting(p, r, context) * 1e3:.2f}")
        if wide is not None:
            print(f"    a plain step over {r.batch * (r.k + 1)} rows in the same run {wide * 1e3:.2f} ms (priced verify + H "
                  f"{v * 1e3:.2f}: {v / wide - 1:+.0%}); drafting side the run implies >= "
                  f"{r.implied_drafting_s * 1e3:.2f} ms, priced {pub.priced_drafting(p, r, context) * 1e3:.2f}, "
                  f"break-even on the priced passes {pub.break_even_drafting(p, r, context) * 1e3:.2f}")
        print(f"    beyond the run's own plain step ({r.batch / r.base_tok_s * 1e3:.2f} ms) and the kernels priced for "
              f"verify over decode and the draft passes, its speculative step spent "
              f"{pub.implied_speculative_host(p, r, context) * 1e3:.2f} ms (implied; priced as assumed host overheads: "
              f"{pub.cell(p.timing.proposers[r.method].overhead, batch=r.batch, k=r.k) * 1e3:.2f} ms)")
        if r.stand_in:
            print(f"    stand-in: {r.stand_in}")
        if r.topk > 1:
            tree, chain = pub.tree_drafting(r, context)
            print(f"    draft passes as SGLang runs the tree (top-{r.topk}, {r.k} steps): {tree * 1e3:.3f} ms; as the "
                  f"import's chain of {r.k}: {chain * 1e3:.3f} ms ({(tree - chain) * 1e3:+.3f} ms; host overheads not in either)")
        print(f"    source: {r.source}; row: {r.row}")
    print(f"\n  signs wrong: {wrong} of {len(pub.RUNS)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--runs-only", action="store_true", help="only the published runs")
    args = ap.parse_args()
    if not args.runs_only:
        print("predicted steady-state speed-up (tokens per step x baseline step / speculative step), from imported grids")
        for key in args.models.split(","):
            report(key.strip(), args.context)
        print(f"\nfor every MoE: {GENERAL}")
    published_runs(args.context)


if __name__ == "__main__":
    main()
