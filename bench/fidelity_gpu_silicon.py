"""specplan's GPU step-time model against aiconfigurator's own silicon measurements.

aiconfigurator-core ships ``systems/silicon_sample.csv``: TTFT and TPOT that NVIDIA measured on
real GPUs for given (model, system, backend, precision, ISL, OSL, concurrency). This script
imports a profile for the same model/system/backend **at the rows' own weight precision** (bf16,
fp8 or fp4: comparing a bf16 import with FP8 silicon reads as a 30–55 % error that is only the
weights' bytes) and predicts each row's TPOT for a closed loop of ``c`` concurrent requests (what
those benchmarks run): ``TPOT = T(c) + c·Δ(isl)/osl`` at context ``isl + osl/2``, with ``Δ`` what
a fused step pays for adding an ``isl``-token prefill to a decode step. ``--simulate`` also runs
the simulator itself on each row (``c`` closed-loop clients, fixed lengths, the profile's
default engine, its per-step overhead as imported) and prints its mean TPOT. Prints a table and
the error summary of the kernels alone and with the 1 ms per step the import assumed until
2026-12-05, and the residual (silicon − kernels, ms a token) that a per-step host term would have
to explain: the evidence behind the import's per-step overhead (profiler/imported/engine_overhead.py).

``--survey`` prints one line per aggregated (model, system, backend, TP, precision) group the
importer can build, and the residual per engine. Needs the gpu-data extra. Run:
``python bench/fidelity_gpu_silicon.py`` (Llama-3.1-8B-Instruct, h100_sxm, trtllm, TP 1), another
group (``--model meta-llama/Llama-3.1-70B --backend vllm --tp 4``: its rows are FP8), or
``--survey [--backend vllm]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler.imported.aiconfigurator_import import ImportRequest, build_profile  # noqa: E402
from profiler.imported.engine_overhead import ASSUMED  # noqa: E402
from sim.contracts.errors import SpecplanError  # noqa: E402
from sim.contracts.profile import Profile  # noqa: E402
from sim.model.step_time import ProfileStepTimer, StepShape  # noqa: E402

MODEL, SYSTEM, BACKEND = "meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "trtllm"
QUANT_DTYPE = {"": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
"""The csv's ``gemm_quant_mode`` -> the importer's ``--dtype`` ('' is the checkpoint's bf16)."""
UNBUILT_QUANT = {"fp8_block": "block-scaled FP8 (fp8_block) has no --dtype in the importer"}


@cache
def silicon_rows() -> tuple[dict[str, str], ...]:
    """Every aggregated-serving row of the csv (disaggregated rows have no single step to price)."""
    path = Path(resources.files("aiconfigurator_core")) / "systems" / "silicon_sample.csv"
    with path.open() as f:
        return tuple(r for r in csv.DictReader(f) if r["mode"] == "agg" and r["tp_size"])


def rows(model: str = MODEL, system: str = SYSTEM, backend: str = BACKEND, tp: int = 1,
         quant: str | None = None) -> list[dict[str, str]]:
    """The rows of one group; ``quant`` None: every precision (callers then pick one, :func:`one_quant`)."""
    return [r for r in silicon_rows() if r["model_path"] == model and r["system"] == system
            and r["backend"] == backend and r["tp_size"] == str(tp) and (quant is None or r["gemm_quant_mode"] == quant)]


def one_quant(data: list[dict[str, str]], dtype: str | None) -> str:
    """The one precision to compare: ``dtype`` if given, else the rows' only one; never a mix."""
    found = sorted({r["gemm_quant_mode"] for r in data})
    if dtype is not None:
        want = [q for q, d in QUANT_DTYPE.items() if d == dtype]
        if not want or want[0] not in found:
            raise SpecplanError(f"--dtype {dtype}: these rows are {', '.join(QUANT_DTYPE.get(q, q) for q in found)}")
        return want[0]
    if len(found) > 1:
        raise SpecplanError(f"the rows mix precisions ({', '.join(QUANT_DTYPE.get(q, q) for q in found)}): "
                            "pick one with --dtype")
    return found[0]


def _native_fits(label: str, native: dict[str, str]) -> bool:
    """Whether a row's precision label describes the checkpoint's own quantization (the csv labels
    gpt-oss's MXFP4 experts "nvfp4" and Qwen3-235B-A22B-FP8's block-scaled weights "fp8")."""
    kinds = {v for k, v in native.items() if k != "kv_cache"}
    if kinds <= {"bfloat16"}:
        return label == ""
    marks = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "int4_wo": "int4"}
    return label in marks and any(marks[label] in v for v in kinds)


def import_group(model: str, system: str, backend: str, tp: int, quant: str) -> dict:
    """The profile the importer builds for the group, at the rows' precision: the checkpoint's own
    where the label describes it, else the label's ``--dtype`` (a bf16 checkpoint served in FP8)."""
    def build(dtype: str) -> dict:
        return build_profile(ImportRequest(system, backend, model, tp=tp, dtype=dtype,
                                           command="bench/fidelity_gpu_silicon.py"))
    try:
        native = build("auto")
    except SpecplanError:  # a bf16 checkpoint that only fits the GPUs in the rows' lower precision
        if quant == "":
            raise
    else:
        if _native_fits(quant, native["x-aiconfigurator"]["quant_modes"]):
            return native
    if quant in UNBUILT_QUANT or quant not in QUANT_DTYPE:
        raise SpecplanError(UNBUILT_QUANT.get(quant, f"precision {quant!r} has no --dtype in the importer"))
    return build(QUANT_DTYPE[quant])


def predict_tpot_ms(timer: ProfileStepTimer, c: int, isl: int, osl: int, overhead_s: float = 0.0) -> float:
    """The closed-loop TPOT from the profile's kernels (its own per-step overhead taken out), plus
    ``overhead_s`` per step."""
    h = timer.step_overhead_s
    ctx = isl + osl / 2
    dec = timer(StepShape(c, ctx, 0, None)) - h
    mixed = timer(StepShape(max(c - 1, 1), ctx, 0, None, isl, 0.0)) - h
    base = timer(StepShape(max(c - 1, 1), ctx, 0, None)) - h
    return (dec + c * (mixed - base) / osl + overhead_s) * 1e3


def group_keys(backend: str | None = None, systems: tuple[str, ...] | None = None) -> list[tuple[str, str, str, int, str]]:
    """(model, system, backend, TP, precision label) of every aggregated group, optionally filtered."""
    return sorted({(r["model_path"], r["system"], r["backend"], int(r["tp_size"]), r["gemm_quant_mode"])
                   for r in silicon_rows() if (backend is None or r["backend"] == backend)
                   and (systems is None or r["system"] in systems)})


def price_row(timer: ProfileStepTimer, r: dict[str, str]) -> tuple[int, int, int, float, float, float]:
    """``(isl, osl, concurrency, silicon TPOT, kernels' TPOT, kernels' + the former 1 ms a step)``, ms."""
    isl, osl, c, meas = int(r["isl"]), int(r["osl"]), int(r["batch_size"]), float(r["silicon_tpot_ms"])
    return isl, osl, c, meas, predict_tpot_ms(timer, c, isl, osl), predict_tpot_ms(timer, c, isl, osl, ASSUMED.seconds)


def fit_group(key: tuple[str, str, str, int, str]) -> tuple[list[float], list[float], list[float]]:
    """Per row of the group: the kernels' relative error, the error with the formerly assumed 1 ms
    per step, and the residual silicon − kernels (ms a token). SpecplanError when not buildable."""
    timer = ProfileStepTimer(Profile.from_dict(import_group(*key), "import"))
    e0, e1, res = [], [], []
    for r in rows(*key):
        *_, meas, p0, p1 = price_row(timer, r)
        e0.append(p0 / meas - 1)
        e1.append(p1 / meas - 1)
        res.append(meas - p0)
    return e0, e1, res


def simulate_tpot_ms(profile_path: Path, tp: int, c: int, isl: int, osl: int, tpot_guess_ms: float, tmp: Path) -> float:
    """Mean TPOT the simulator gives ``c`` closed-loop clients of fixed lengths (baseline, seed 1),
    over about four request lifetimes after one lifetime of warm-up."""
    from scenario_text import bench_scenario

    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario
    from sim.results.simulation import simulate_once

    life = max(osl * tpot_guess_ms / 1e3, 1.0)
    text = bench_scenario(
        "silicon-row", run={"duration_s": round(5 * life, 3), "warmup_s": round(life, 3), "seeds": [1]},
        workload={"arrival": "concurrency", "concurrency": c, "think_time_s": 0.0},
        segment={"name": "row", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": isl},
                 "output_tokens": {"dist": "fixed", "value": osl}, "temperature": 0.0},
        slo={"ttft_ms": 100000, "tpot_ms": 10000, "percentile": 95},
        fleet={"profile": str(profile_path), "replicas": 1, "tensor_parallel_size": tp}, candidates=[])
    sc_path = tmp / "row.toml"
    sc_path.write_text(text)
    sc = load_scenario(str(sc_path))
    res = simulate_once(sc, load_profile(sc.profile_path), "baseline", 1)
    return float(res.summary.row(0, named=True)["tpot_ms_mean"])


def summary(label: str, errs: list[float]) -> str:
    a = [abs(x) for x in errs]
    return (f"{label}: median |error| {statistics.median(a):.1%}, mean error {statistics.mean(errs):+.1%}, "
            f"within 15%: {sum(x <= 0.15 for x in a)}/{len(a)}")


def compare(args: argparse.Namespace) -> int:
    data = rows(args.model, args.system, args.backend, args.tp)
    if not data:
        raise SpecplanError(f"silicon_sample.csv has no aggregated rows for {args.model} on "
                            f"{args.system}/{args.backend} tp {args.tp}")
    quant = one_quant(data, args.dtype)
    data = [r for r in data if r["gemm_quant_mode"] == quant]
    prof = import_group(args.model, args.system, args.backend, args.tp, quant)
    timer = ProfileStepTimer(Profile.from_dict(prof, "import"))
    print(f"silicon: {args.model} on {args.system}, {args.backend} "
          f"{', '.join(sorted({r['backend_version'] for r in data})) or '(version not recorded)'}, "
          f"{QUANT_DTYPE.get(quant, quant)} (silicon_sample.csv, {len(data)} rows); prediction: database "
          f"{args.backend} {prof['x-aiconfigurator']['backend_version']}, tp {args.tp}, {QUANT_DTYPE.get(quant, quant)}, fused steps")
    print(f"{'isl':>5} {'osl':>4} {'conc':>4} {'silicon':>8} {'kernels':>7} {'err':>7} {'+1 ms':>7} {'err':>7}"
          + (f" {'sim':>7} {'err':>7}" if args.simulate else ""))
    errs: dict[str, list[float]] = {"kernels": [], "with": [], "sim": []}
    resid: list[float] = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        prof_path = tmp / "profile.json"
        prof_path.write_text(json.dumps(prof))
        for r in sorted(data, key=lambda r: (int(r["isl"]), int(r["osl"]), int(r["batch_size"]))):
            isl, osl, c, meas, p0, p1 = price_row(timer, r)
            errs["kernels"].append(p0 / meas - 1)
            errs["with"].append(p1 / meas - 1)
            resid.append(meas - p0)
            line = f"{isl:>5} {osl:>4} {c:>4} {meas:>8.2f} {p0:>7.2f} {p0 / meas - 1:>+7.1%} {p1:>7.2f} {p1 / meas - 1:>+7.1%}"
            if args.simulate:
                s = simulate_tpot_ms(prof_path, args.tp, c, isl, osl, p0 + timer.step_overhead_s * 1e3, tmp)
                errs["sim"].append(s / meas - 1)
                line += f" {s:>7.2f} {s / meas - 1:>+7.1%}"
            print(line, flush=True)
    print(summary("kernels alone", errs["kernels"]))
    print(summary(f"with {ASSUMED.seconds * 1e3:g} ms/step (the import's assumption until 2026-12-05)", errs["with"]))
    if args.simulate:
        print(summary(f"the simulator (closed-loop clients; the profile's own per-step overhead, "
                      f"{timer.step_overhead_s * 1e3:g} ms)", errs["sim"]))
    print(f"residual, silicon - kernels: median {statistics.median(resid):+.2f} ms a token "
          f"(interquartile {_q(resid, 0.25):+.2f} .. {_q(resid, 0.75):+.2f})")
    return 0


def _q(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(int(p * len(s)), len(s) - 1)]


def survey(args: argparse.Namespace) -> int:
    """One line per buildable group; then each engine's residual (median of the groups' medians)."""
    keys = group_keys(args.backend_filter, (args.system_filter,) if args.system_filter else None)
    by_engine: dict[str, list[float]] = {}
    pooled: dict[str, tuple[list[float], list[float]]] = {}
    print(f"{'model':34} {'system':9} {'engine':7} {'tp':>2} {'dtype':5} {'rows':>4} {'kernels |err|':>13} "
          f"{'+1 ms |err|':>11} {'in 15%':>7} {'residual ms':>11}")
    for model, system, backend, tp, quant in keys:
        data = rows(model, system, backend, tp, quant)
        try:
            e0, e1, res = fit_group((model, system, backend, tp, quant))
        except SpecplanError as e:
            print(f"{model:34} {system:9} {backend:7} {tp:>2} {QUANT_DTYPE.get(quant, quant):5} {len(data):>4} "
                  f"left out: {str(e).splitlines()[0][:90]}")
            continue
        e0, e1 = [abs(x) for x in e0], [abs(x) for x in e1]
        by_engine.setdefault(backend, []).append(statistics.median(res))
        pooled.setdefault(backend, ([], []))[0].extend(e0)
        pooled[backend][1].extend(e1)
        print(f"{model:34} {system:9} {backend:7} {tp:>2} {QUANT_DTYPE.get(quant, quant):5} {len(data):>4} "
              f"{statistics.median(e0):>13.1%} {statistics.median(e1):>11.1%} "
              f"{sum(x <= 0.15 for x in e0):>3}/{len(e0):<3} {statistics.median(res):>+11.2f}", flush=True)
    for backend, meds in sorted(by_engine.items()):
        e0, e1 = pooled[backend]
        print(f"{backend}: {len(meds)} groups, {len(e0)} rows: median |error| kernels alone {statistics.median(e0):.1%} "
              f"({sum(x <= 0.15 for x in e0)} rows within 15%), with 1 ms a step {statistics.median(e1):.1%} "
              f"({sum(x <= 0.15 for x in e1)}); residual (silicon - kernels), median of the groups' medians "
              f"{statistics.median(meds):+.2f} ms a token, groups from {min(meds):+.2f} to {max(meds):+.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--system", default=SYSTEM)
    ap.add_argument("--backend", default=BACKEND)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--dtype", choices=sorted(set(QUANT_DTYPE.values())), default=None,
                    help="the rows' weight precision, where a group has several")
    ap.add_argument("--simulate", action="store_true", help="also run the simulator on every row (slower)")
    ap.add_argument("--survey", action="store_true", help="every group the importer can build, one line each")
    ap.add_argument("--survey-backend", dest="backend_filter", default=None)
    ap.add_argument("--survey-system", dest="system_filter", default=None)
    args = ap.parse_args()
    try:
        return survey(args) if args.survey else compare(args)
    except SpecplanError as e:
        print(f"fidelity_gpu_silicon: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
