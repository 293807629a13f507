"""specplan's GPU step-time model against aiconfigurator's own silicon measurements.

aiconfigurator-core ships ``systems/silicon_sample.csv``: TTFT and TPOT that NVIDIA measured on
real GPUs for given (model, system, backend, ISL, OSL, concurrency). This script imports a
profile for the same model/system/backend from the package's kernel database and predicts each
row's TPOT for a closed loop of ``c`` concurrent requests (what those benchmarks run): every
request's ``osl`` decode steps at batch ``c`` and context ``isl + osl/2``, plus the extra time
of the ``c`` other requests' prefills that land in its lifetime, ``TPOT = T(c) + c·Δ(isl)/osl``
with ``Δ`` what a fused step pays for adding an ``isl``-token prefill to a decode step. Prints
a table and the error summary, with and without the assumed 1 ms per-step overhead.
Needs the gpu-data extra. Run: ``python bench/fidelity_gpu_silicon.py`` (Llama-3.1-8B-Instruct,
h100_sxm, trtllm, TP 1), or another model's rows, e.g. ``--model openai/gpt-oss-120b --system
h200_sxm --backend vllm`` (a MoE: docs/fidelity-gpu.md §6).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.imported.aiconfigurator_import import ImportRequest, build_profile  # noqa: E402
from sim.contracts.profile import Profile  # noqa: E402
from sim.model.step_time import ProfileStepTimer, StepShape  # noqa: E402

MODEL, SYSTEM, BACKEND = "meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "trtllm"


def rows(model: str = MODEL, system: str = SYSTEM, backend: str = BACKEND, tp: int = 1) -> list[dict[str, str]]:
    path = Path(resources.files("aiconfigurator_core")) / "systems" / "silicon_sample.csv"
    with path.open() as f:
        return [r for r in csv.DictReader(f) if r["model_path"] == model and r["system"] == system
                and r["backend"] == backend and r["tp_size"] == str(tp) and r["mode"] == "agg"]


def predict_tpot_ms(timer: ProfileStepTimer, c: int, isl: int, osl: int, overhead: bool) -> float:
    h = 0.0 if overhead else timer.step_overhead_s
    ctx = isl + osl / 2
    dec = timer(StepShape(c, ctx, 0, None)) - h
    mixed = timer(StepShape(max(c - 1, 1), ctx, 0, None, isl, 0.0)) - h
    base = timer(StepShape(max(c - 1, 1), ctx, 0, None)) - h
    return (dec + c * (mixed - base) / osl) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--system", default=SYSTEM)
    ap.add_argument("--backend", default=BACKEND)
    ap.add_argument("--tp", type=int, default=1)
    args = ap.parse_args()
    data = rows(args.model, args.system, args.backend, args.tp)
    if not data:
        sys.exit(f"silicon_sample.csv has no aggregated rows for {args.model} on {args.system}/{args.backend} tp {args.tp}")
    prof = build_profile(ImportRequest(args.system, args.backend, args.model, tp=args.tp,
                                       command="bench/fidelity_gpu_silicon.py"))
    version = prof["x-aiconfigurator"]["backend_version"]
    timer = ProfileStepTimer(Profile.from_dict(prof, "import"))
    print(f"silicon: {args.model} on {args.system}, {args.backend} "
          f"{', '.join(sorted({r['backend_version'] for r in data}))} (silicon_sample.csv, "
          f"{len(data)} rows); prediction: database {args.backend} {version}, tp {args.tp}, fused steps")
    print(f"{'isl':>5} {'osl':>4} {'conc':>4} {'silicon':>8} {'ours':>7} {'err':>7} {'ours+H':>7} {'err':>7}")
    errs: dict[bool, list[float]] = {False: [], True: []}
    for r in sorted(data, key=lambda r: (int(r["isl"]), int(r["osl"]), int(r["batch_size"]))):
        isl, osl, c, meas = int(r["isl"]), int(r["osl"]), int(r["batch_size"]), float(r["silicon_tpot_ms"])
        p0, p1 = (predict_tpot_ms(timer, c, isl, osl, h) for h in (False, True))
        e0, e1 = p0 / meas - 1, p1 / meas - 1
        errs[False].append(e0)
        errs[True].append(e1)
        print(f"{isl:>5} {osl:>4} {c:>4} {meas:>8.2f} {p0:>7.2f} {e0:>+7.1%} {p1:>7.2f} {e1:>+7.1%}")
    for h, e in errs.items():
        a = [abs(x) for x in e]
        print(f"{'with' if h else 'without'} the assumed 1 ms/step: median |error| {statistics.median(a):.1%}, "
              f"mean error {statistics.mean(e):+.1%}, within 15%: {sum(x <= 0.15 for x in a)}/{len(a)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
