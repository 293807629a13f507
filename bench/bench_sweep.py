"""Sweep throughput: cells per second of a 1,000-cell sweep, process pool vs Dask LocalCluster.

Each cell is a real but tiny simulation (a few simulated seconds of Poisson traffic on the
synthetic profile, baseline + one ngram candidate), so the numbers measure the engines'
overhead per cell as much as the simulator. Both engines get the same workers on this machine
and write every cell to its own Parquet file as in a real sweep.

    .venv/bin/python bench/bench_sweep.py [--cells 1000] [--workers N] [--duration 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.contracts.scenario import Scenario  # noqa: E402
from sim.contracts.synthetic import synthetic_profile  # noqa: E402
from sim.decisions.sweep import sweep  # noqa: E402
from sim.decisions.sweep_grid import Vary  # noqa: E402


def tiny_scenario(duration_s: float) -> Scenario:
    return Scenario.from_dict({
        "name": "bench-sweep",
        "run": {"duration_s": duration_s, "warmup_s": 0.0, "seeds": [0]},
        "workload": {"arrival": "poisson", "rate": 2.0, "segments": [
            {"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 64},
             "output_tokens": {"dist": "fixed", "value": 16},
             "acceptance": {"task": "chat", "language": "en"}}]},
        "slo": {"ttft_ms": 2000, "tpot_ms": 200},
        "fleet": {"price_per_gpu_hour": 1.0, "engine": {"max_num_seqs": 8}},
        "candidates": [{"name": "baseline", "speculation": "off"},
                       {"name": "ngram-k3", "proposer": "ngram", "k": 3}],
    }, "<bench-sweep>")


def grid(cells: int) -> list[Vary]:
    """``rates × seeds`` with about ``cells`` cells (rates 1..4 req/s)."""
    n_rates = 50 if cells >= 100 else max(1, cells // 2)
    n_seeds = max(1, cells // n_rates)
    rates = tuple(round(1.0 + 3.0 * i / max(n_rates - 1, 1), 6) for i in range(n_rates))
    return [Vary("workload.rate", rates), Vary("seed", tuple(range(n_seeds)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--duration", type=float, default=4.0, help="simulated seconds per cell")
    args = ap.parse_args()
    sc, prof = tiny_scenario(args.duration), synthetic_profile()
    varies = grid(args.cells)
    n = len(varies[0].values) * len(varies[1].values)
    print(f"bench_sweep: {n} cells ({args.duration:g} simulated s each, 2 candidates), "
          f"{args.workers} workers, {os.cpu_count()} cores; profile: synthetic (assumed numbers)")
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        for engine in ("processes", "dask"):
            out = Path(tmp) / f"{engine}.parquet"
            t0 = time.perf_counter()
            res = sweep(sc, varies, out, profile=prof, engine=engine, workers=args.workers,
                        progress=False)
            dt = time.perf_counter() - t0
            assert res.computed == n and res.frame.height == 2 * n
            rates[engine] = n / dt
            print(f"  {engine:<10} {dt:7.2f} s  {n / dt:8.1f} cells/s  (start-up and consolidation included)")
    print(f"  ratio dask / processes: {rates['dask'] / rates['processes']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
