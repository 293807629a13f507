"""Simulator speed and memory: simulated requests per CPU-second replaying the Azure LLM
conversation trace (19,366 requests) through one replica with a speculative candidate.

Target: >= 5,000 simulated requests per CPU-second; memory growing linearly with requests.
The step times come from a *synthetic* profile (sim.contracts.synthetic, provenance ``assumed``) sized so
one replica keeps up with the trace's ~5.5 req/s: the numbers measure the simulator, not any
hardware. Run: ``.venv/bin/python bench/bench_sim.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023_conv.csv"
sys.path.insert(0, str(REPO))

from sim.contracts.scenario import load_scenario  # noqa: E402
from sim.contracts.synthetic import synthetic_profile  # noqa: E402
from sim.results.simulation import simulate_once  # noqa: E402

SCENARIO = """
name = "bench-azure-conv"
[run]
duration_s = {duration}
warmup_s = 0
seeds = [1]
[workload]
arrival = "trace"
trace = {{path = "{trace}", start_s = 0, window_s = {duration}, rate_scale = 1.0}}
[[workload.segments]]
name = "chat"
share = 1.0
acceptance = {{task = "chat", language = "en"}}
[slo]
ttft_ms = 2000
tpot_ms = 100
[fleet]
replicas = 1
price_per_gpu_hour = 2.0
[fleet.engine]
max_num_seqs = 128
max_num_batched_tokens = 8192
block_size = 16
memory_utilization = 0.9
[[candidates]]
name = "baseline"
speculation = "off"
[[candidates]]
name = "ngram-k3"
proposer = "ngram"
k = 3
"""

# GPU-like linear step times (assumed): a 64-request decode step of k=3 takes ~25 ms
PROFILE = dict(
    name="bench-synthetic",
    base_step_s=0.012,
    per_seq_s=0.0001,
    per_token_s=0.00002,
    per_context_token_s=2e-9,
    prefill_base_s=0.002,
    prefill_per_token_s=0.00002,
    prefill_per_context_token_s=1e-10,
    device_memory_bytes=80 * 1024**3,
    target_weight_bytes=16 * 1024**3,
)
TRACE_SPAN_S = 3600.0


def scenario(tmp: Path, fraction: float):
    path = tmp / f"bench_{fraction}.toml"
    path.write_text(SCENARIO.format(duration=TRACE_SPAN_S * fraction, trace=TRACE), encoding="utf-8")
    return load_scenario(path)


def one(sc, profile, candidate: str) -> tuple[float, int, float]:
    gc.collect()
    t0 = time.process_time()
    res = simulate_once(sc, profile, candidate, 1)
    cpu = time.process_time() - t0
    return cpu, res.requests.height, float(res.summary["tpot_ms_p99"][0] or 0.0)


def _vm_hwm_kib() -> int:
    """Peak resident set of this process (Linux VmHWM; ru_maxrss survives exec from the parent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_one(fraction: float, traced: bool) -> str:
    """Peak memory of one run on ``fraction`` of the trace, in a fresh process so the peak is
    its own: peak RSS growth over the imports, or (``traced``) peak Python allocations
    (tracemalloc, which itself inflates RSS, hence a separate run)."""
    profile = synthetic_profile(**PROFILE)
    with tempfile.TemporaryDirectory() as td:
        sc = scenario(Path(td), fraction)
        gc.collect()
        if traced:
            tracemalloc.start()
        rss0 = _vm_hwm_kib()
        res = simulate_once(sc, profile, "ngram-k3", 1)
        rss1 = _vm_hwm_kib()
        if traced:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    n = res.requests.height
    if traced:
        return f"peak Python allocations {peak / 2**20:.1f} MiB ({peak / n / 1024:.1f} KiB/request)"
    return f"{n} requests, {res.steps.height} steps: peak RSS growth {(rss1 - rss0) / 1024:.1f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-one", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_one is not None:
        print(memory_one(abs(args.memory_one), traced=args.memory_one < 0))
        return 0
    if not TRACE.is_file():
        print(f"skip: trace not found at {TRACE} (shared/traces is not part of the repo)")
        return 0
    profile = synthetic_profile(**PROFILE)
    print("profile: synthetic (assumed step times, sim.contracts.synthetic) — measures the simulator only")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        full = scenario(tmp, 1.0)
        for cand in ("ngram-k3", "baseline"):
            runs = [one(full, profile, cand) for _ in range(args.repeats)]
            cpu = statistics.median(r[0] for r in runs)
            n = runs[0][1]
            print(
                f"{cand:9s}: {n} requests, CPU {cpu:.2f} s (median of {args.repeats}), "
                f"{n / cpu:,.0f} simulated requests per CPU-second "
                f"[tpot p99 {runs[0][2]:.1f} ms]"
            )
        if not args.no_memory:
            for fraction in (0.25, 0.5, 1.0):
                parts = []
                for flag in (fraction, -fraction):  # negative: the tracemalloc run
                    out = subprocess.run(
                        [sys.executable, __file__, "--memory-one", str(flag)],
                        capture_output=True, text=True, check=True,
                    )
                    parts.append(out.stdout.strip())
                print(f"memory {int(fraction * 100):3d}% of trace: {'; '.join(parts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
